"""Markdown of the at-scale result records (``benchmarks/bench_at_scale.py --record``): the
tables of docs/benchmarks.md and the README's summary are rendered from the records by
``benchmarks/render_results.py``, never typed, and ``tests/test_rendered_results.py`` fails when
a rendered region differs from what its record gives.

A record holds, for one data set and size, every run of every method (the runs of a repeat
were paired: one after the other on the same machine) and their medians; :func:`peers_table`
renders the methods side by side (medians, and the job's whole command over each peer's fit,
the median of the pairs' ratios), :func:`levels_table` and :func:`timeline_table` the job's
run of median wall time, :func:`compression_lines` the candidates its compression judged.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

def load(root, path) -> dict:
    """The record at ``path`` (relative to ``root``)."""
    return json.loads((Path(root) / path).read_text())


def _size(record: dict) -> dict:
    return record["sizes"][0]


def _cell(value, digits: int = 4) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.{digits}f}" if digits else f"{value:,.0f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _values(size: dict, method: str, field: str) -> list:
    return [run[method][field] for run in size["runs"]
            if method in run and isinstance(run[method].get(field), (int, float))]


def spread(values: list, digits: int) -> str:
    """The median, and the range when the runs differ."""
    if not values:
        return ""
    median = _cell(float(statistics.median(values)), digits)
    low, high = min(values), max(values)
    return median if low == high else \
        f"{median} ({_cell(float(low), digits)}-{_cell(float(high), digits)})"


def median_run(size: dict, method: str = "job") -> dict | None:
    """The run of ``method`` whose whole command took the median seconds (the lower middle one
    for an even count)."""
    runs = [run[method] for run in size["runs"] if method in run]
    if not runs:
        return None
    ordered = sorted(runs, key=lambda r: r.get("wall_seconds") or 0.0)
    return ordered[(len(ordered) - 1) // 2]


def _pair_ratios(size: dict, job: str, peer: str) -> list:
    """The job's whole command over the peer's fit, a paired run each."""
    return [pair["wall_over_fit"] for pair in size.get("ratios", [])
            if pair["job"] == job and pair["peer"] == peer]


def pair_ratio(size: dict, job: str, peer: str) -> str:
    """The median over the paired runs of the job's whole command over the peer's fit."""
    ratios = _pair_ratios(size, job, peer)
    return spread(ratios, 2) + ("×" if ratios else "")


def peers_table(record: dict, reference: str | None = None) -> str:
    """Every method of the record: runs, test accuracy and seconds (medians, ranges), and for
    the jobs their whole command over ``reference``'s fit (the median of the pairs)."""
    size = _size(record)
    methods = list(dict.fromkeys(name for run in size["runs"] for name in run))
    lines = ["| method | runs | test accuracy | fit / train s | whole s | whole / "
             f"{reference or 'peer'}'s fit |", "| --- | --- | --- | --- | --- | --- |"]
    for method in methods:
        runs = sum(method in run for run in size["runs"])
        seconds = _values(size, method, "fit_seconds") or _values(size, method, "train_seconds")
        ratio = pair_ratio(size, method, reference) if reference and method.startswith("job") \
            else ""
        lines.append(f"| {method} | {runs} | {spread(_values(size, method, 'test_accuracy'), 4)} "
                     f"| {spread(seconds, 1)} | {spread(_values(size, method, 'wall_seconds'), 1)} "
                     f"| {ratio} |")
    lines.append(f"| the majority class | | {size['majority_class']:.4f} | | | |")
    return "\n".join(lines)


def levels_table(record: dict, method: str = "job") -> str:
    """The levels of ``method``'s median run: partitions, predicted and measured seconds and
    their ratio, validation and test accuracy, the points its model was written with."""
    run = median_run(_size(record), method)
    if run is None or not run.get("levels"):
        return f"({method}: no level was solved)"
    lines = ["| level | partitions | predicted s | seconds | measured / predicted | val acc "
             "| test acc | points written |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for entry in run["levels"]:
        predicted, seconds = entry.get("predicted_seconds"), entry.get("seconds")
        ratio = "" if not predicted else f"{seconds / predicted:.2f}"
        lines.append(f"| {entry['level']} | {_cell(entry.get('partitions'))} | "
                     f"{_cell(predicted, 1)} | {_cell(seconds, 1)} | {ratio} | "
                     f"{_cell(entry.get('validation_accuracy'))} | "
                     f"{_cell(entry.get('test_accuracy'))} | "
                     f"{_cell(entry.get('written_points'))} |")
    return "\n".join(lines)


def timeline_table(record: dict, method: str = "job") -> str:
    """Where the whole command of ``method``'s median run went, stage by stage."""
    run = median_run(_size(record), method)
    timeline = None if run is None else run.get("timeline")
    if not timeline:
        return f"({method}: no timeline recorded)"
    whole = timeline["whole"]
    lines = ["| stage | start s | seconds | share |", "| --- | --- | --- | --- |"]
    for stage in timeline["stages"]:
        lines.append(f"| {stage['stage']} | {stage['start']:.1f} | {stage['seconds']:.1f} | "
                     f"{100 * stage['seconds'] / whole:.1f}% |")
    lines.append(f"| other | | {timeline['other']:.1f} | {100 * timeline['other'] / whole:.1f}% |")
    lines.append(f"| whole (in the job) | | {whole:.1f} | 100% |")
    return "\n".join(lines)


def compression_lines(record: dict, method: str = "job") -> str:
    """The candidates the compression of ``method``'s median run judged, and its choice."""
    run = median_run(_size(record), method)
    report = None if run is None else run.get("compression")
    if not report or not report.get("candidates"):
        return f"({method}: no compression)"
    lines = ["| candidate | points | val acc | whole − candidate | standard error | accepted "
             "| validation rows/s | seconds |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for candidate in report["candidates"]:
        rate = candidate.get("rows_per_second")
        rate_text = "" if rate is None else f"{rate:,.0f}" + \
            (" (estimated)" if candidate.get("estimated") else "")
        lines.append(f"| {'compressed' if candidate.get('compressed') else 'whole model'} | "
                     f"{_cell(candidate.get('points'))} | {_cell(candidate.get('accuracy'))} | "
                     f"{_cell(candidate.get('difference'))} | "
                     f"{_cell(candidate.get('standard_error'))} | "
                     f"{'yes' if candidate.get('accepted') else 'no'} | {rate_text} | "
                     f"{_cell(candidate.get('seconds'), 1)} |")
    chosen = report.get("chosen") or {}
    lines.append(f"\nWritten: {chosen.get('points', '?'):,} points "
                 f"({'compressed' if chosen.get('compressed') else 'the whole level'}): "
                 f"{chosen.get('reason', '')}.")
    return "\n".join(lines)


def global_step_lines(record: dict, method: str = "job") -> str:
    """The global step of ``method``'s median run, if it ran: its form, centres, passes, and
    how the slice judged it."""
    run = median_run(_size(record), method)
    report = None if run is None else run.get("global_step")
    if not report or not report.get("ran"):
        return f"({method}: the global step did not run)"
    against = report.get("level_validation_accuracy", report.get("majority_validation_accuracy"))
    return (f"{report['reason']}: {report.get('form', 'normal')}, {report['centres']:,} centres "
            f"on {report['rows']:,} rows, {report['passes']} passes "
            f"({report['newton_steps']} Newton steps{_at_lam(report)}), {report['seconds']:.1f} s "
            f"against {report['predicted_seconds']:.1f} s predicted{_lam_path(report)}; "
            "validation "
            f"{report['validation_accuracy']:.4f} against {against:.4f}, test "
            f"{_cell(report.get('test_accuracy'))}: {'kept' if report['kept'] else 'not kept'}.")


def _at_lam(report: dict) -> str:
    return "" if len(report.get("path") or []) < 2 else " at the λ kept"


def _lam_path(report: dict) -> str:
    """The λ path of a matrix-free step (each λ's validation accuracy), if it walked one."""
    path = report.get("path") or []
    if len(path) < 2:
        return ""
    steps = ", ".join(f"λ = {step['lam']:g}: {step['validation_accuracy']:.4f} "
                      f"({step['passes']} passes)" for step in path)
    return f"; λ's path on the validation slice {steps}, λ = {report['lam']:g} kept"


def source_line(record: dict, path: str) -> str:
    """Where the figures come from: the record, its command, commit and machine."""
    machine = record.get("machine", {})
    git = record.get("git", {})
    return (f"Rendered from `{path}` (`{record['command']}`; commit "
            f"{(git.get('commit') or '?')[:10]}{' with changes' if git.get('dirty') else ''}; "
            f"{machine.get('cores', '?')} cores, {machine.get('ram_gib', '?')} GiB, "
            f"{machine.get('cpu', '?')}; started {record.get('started_utc', '?')})"
            + "".join(f"; continued by `{more['command']}` (commit "
                      f"{(more['git'].get('commit') or '?')[:10]}"
                      f"{' with changes' if more['git'].get('dirty') else ''}; started "
                      f"{more['started_utc']})" for more in record.get("continuations", []))
            + ".")


def _median(size: dict, method: str, field: str) -> float | None:
    values = _values(size, method, field)
    return float(statistics.median(values)) if values else None


def summary_row(record: dict, label: str, peer: str, job: str = "job") -> str:
    """One data set's row of the README's summary: the job's and ``peer``'s median test
    accuracy, the job's whole command and the peer's fit, their ratio (the median of the
    pairs), and who wins on accuracy and on time."""
    size = _size(record)
    job_accuracy, peer_accuracy = (_median(size, job, "test_accuracy"),
                                   _median(size, peer, "test_accuracy"))
    whole, fit = _median(size, job, "wall_seconds"), _median(size, peer, "fit_seconds")
    ratios = _pair_ratios(size, job, peer)
    ratio = float(statistics.median(ratios)) if ratios else None
    verdict = []
    if job_accuracy is not None and peer_accuracy is not None:
        points = 100 * (job_accuracy - peer_accuracy)
        verdict.append("tie on accuracy" if abs(points) < 0.005 else
                       f"{'SODM' if points > 0 else peer} on accuracy ({abs(points):.2f} points)")
    if ratio is not None:
        verdict.append(f"{'SODM' if ratio < 1 else peer} on time")
    return (f"| {label} | {_cell(job_accuracy)} | {_cell(whole, 1)} | {peer} | "
            f"{_cell(peer_accuracy)} | {_cell(fit, 1)} | "
            f"{'' if ratio is None else f'{ratio:.2f}×'} | {'; '.join(verdict)} |")


SUMMARY_HEADER = ("| data | SODM job: test accuracy | whole s | peer | peer: test accuracy | "
                  "fit s | job whole / peer fit | wins |\n| --- | --- | --- | --- | --- | --- "
                  "| --- | --- |")


def input_map_values(record: dict, prefix: str, method: str = "job") -> dict[str, str]:
    """The input map of ``method``'s median run: the features it read, the principal
    components it kept, their share of the variance and how far the projected kernel was from
    the raw one on sample pairs (``PREFIX.features``, ``.components``, ``.variance``,
    ``.difference``); none where the run had no map."""
    run = median_run(_size(record), method)
    mapped = None if run is None else run.get("input_map")
    if not mapped:
        return {}
    return {f"{prefix}.rows": f"{_size(record)['rows']:,}",
            f"{prefix}.features": f"{mapped['features']:,}",
            f"{prefix}.components": f"{mapped['components']:,}",
            f"{prefix}.variance": f"{100 * mapped['variance_kept']:.1f}%",
            f"{prefix}.difference": f"{100 * mapped['mean_relative_difference']:.1f}%"}
