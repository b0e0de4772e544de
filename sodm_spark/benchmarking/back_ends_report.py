"""The back-end records (``benchmarks/bench_back_ends.py``): the training command, whole, from
its start to its exit, run as a user runs it through a classic session, through a local Spark
Connect server, and as another version of the code (``before``), in rounds (every variant once a
round, one after the other), so that a ratio is taken pair by pair within a round.

:func:`summarize` gives a record's summary from its runs (the bench script writes it, and
:func:`back_ends_table` renders from the same runs): the medians of each variant, the ratios
``connect/classic`` and ``classic/before`` of every round and their median, whether every
run wrote the same model files, and each variant's median seconds of each stage of the job's
timeline. :func:`back_ends_region` is the region ``back-ends`` of
docs/benchmarks.md (``benchmarks/render_results.py``): the newest record of each data set.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

from .at_scale_report import source_line, spread
from .records import paired_ratios, run_medians

#: The variants, in the order of a round: the other version's classic command, this checkout's
#: classic command, and the same through Spark Connect
VARIANTS = ("before", "classic", "connect")
#: The ratios of the summary: (numerator, denominator), each a variant's whole command
RATIOS = (("connect", "classic"), ("classic", "before"))
#: Where the records go, under the checkout (records.default_record_path's ``kind``)
RECORDS = "docs/results/back_ends"
LABELS = {"before": "before", "classic": "classic", "connect": "Connect"}


def finished_runs(runs: list[dict]) -> list[dict]:
    """The runs that exited 0 (the ones with figures)."""
    return [run for run in runs if run.get("exit_code") == 0]


def rounds_of(runs: list[dict]) -> list[dict]:
    """The finished runs as rounds: one dict of variant → run a round, in round order."""
    rounds: dict[int, dict] = {}
    for run in finished_runs(runs):
        rounds.setdefault(run["round"], {})[run["variant"]] = run
    return [rounds[number] for number in sorted(rounds)]


def summarize(runs: list[dict]) -> dict:
    """The summary of ``runs`` (each: variant, round, wall_seconds, train_seconds,
    test_accuracy, model: {sha256, files}, exit_code): each variant's medians and finished runs
    (:func:`~.records.run_medians`); each ratio of :data:`RATIOS` whose variants ran, round by
    round and its median (:func:`~.records.paired_ratios`), and the same over the rounds
    whose two runs wrote the same model files (``same_model``: the time of the same work, where
    a version's fit is not deterministic); each variant's model digests and whether every
    finished run wrote the same model files, byte for byte (None: no run finished); the
    medians of the job's stages (:func:`stage_medians`)."""
    rounds = rounds_of(runs)
    ratios = {}
    for top, bottom in RATIOS:
        pairs = paired_ratios(rounds, top, bottom)
        if pairs:
            same = [pair for pair in pairs if _digest(rounds[pair["round"]][top])
                    == _digest(rounds[pair["round"]][bottom])]
            ratios[f"{top}/{bottom}"] = {
                "rounds": pairs, "median": statistics.median(p["ratio"] for p in pairs),
                "same_model": {"rounds": same, "median": statistics.median(
                    p["ratio"] for p in same) if same else None}}
    digests = {variant: sorted({run["model"]["sha256"] for run in finished_runs(runs)
                                if run["variant"] == variant})
               for variant in dict.fromkeys(run["variant"] for run in finished_runs(runs))}
    every = {digest for found in digests.values() for digest in found}
    return {"medians": run_medians(rounds), "ratios": ratios, "model_sha256": digests,
            "models_identical": len(every) == 1 if every else None,
            "stage_medians": stage_medians(finished_runs(runs))}


def _digest(run: dict) -> str | None:
    return (run.get("model") or {}).get("sha256")


def stage_medians(runs: list[dict]) -> dict:
    """For each variant whose runs recorded the job's timeline (``stages``), the median
    seconds of each stage over those runs: where one variant's command spends its extra
    time."""
    medians: dict = {}
    for variant in dict.fromkeys(run["variant"] for run in runs):
        timed = [run["stages"] for run in runs
                 if run["variant"] == variant and isinstance(run.get("stages"), dict)]
        if timed:
            names = dict.fromkeys(name for stages in timed for name in stages)
            medians[variant] = {name: statistics.median(stages[name] for stages in timed
                                                        if name in stages) for name in names}
    return medians


def newest_records(root) -> list[str]:
    """The newest record of each data set and size under :data:`RECORDS` (by its start), as
    paths relative to ``root``, the smallest data first; none when there is none yet."""
    newest: dict[tuple, tuple[str, str]] = {}
    for path in sorted((Path(root) / RECORDS).glob("*.json")):
        record = json.loads(path.read_text())
        data = record.get("data") or {}
        key = (data.get("rows") or 0, data.get("name") or path.stem, data.get("job_args", ""))
        started = record.get("started_utc") or ""
        if key not in newest or started > newest[key][0]:
            newest[key] = (started, str(path.relative_to(root)))
    return [newest[key][1] for key in sorted(newest)]


def _models(summary: dict) -> str:
    """Whether the runs wrote the same model files: identical bytes, or which variants agree."""
    if summary["models_identical"] is None:
        return ""
    if summary["models_identical"]:
        return "identical bytes"
    digests = summary["model_sha256"]
    groups: dict[tuple, list[str]] = {}
    for variant, found in digests.items():
        groups.setdefault(tuple(found), []).append(LABELS.get(variant, variant))
    varying = [LABELS.get(variant, variant) for variant, found in digests.items()
               if len(found) > 1]
    return "differ: " + " ≠ ".join(" = ".join(group) for group in groups.values()) + \
        ("" if not varying else f" ({', '.join(varying)} from run to run)")


def _accuracy(record: dict, variants: list[str]) -> str:
    """The test accuracy: one figure when every finished run scored the same, else each
    variant's median."""
    runs = finished_runs(record["runs"])
    scores = {run.get("test_accuracy") for run in runs}
    if len(scores) == 1:
        return spread([score for score in scores if score is not None], 4)
    return ", ".join(
        f"{LABELS.get(variant, variant)} "
        + spread([r["test_accuracy"] for r in runs if r["variant"] == variant
                  and r.get("test_accuracy") is not None], 4)
        for variant in variants)


def _data(record: dict) -> str:
    data = record.get("data") or {}
    rows = data.get("rows")
    extra = f" (`{data['job_args']}`)" if data.get("job_args") else ""
    return (f"{data.get('name', '?')}, {rows:,} rows" if isinstance(rows, int) else
            str(data.get("name", "?"))) + extra


def back_ends_row(record: dict) -> str:
    """A record's row: the data, the rounds, each variant's whole command (median and range of
    its runs), the ratios (the median and range of the rounds'), the test accuracy and whether
    the model files were the same."""
    summary = summarize(record["runs"])
    rounds = rounds_of(record["runs"])
    variants = list(summary["medians"])

    def seconds(variant: str) -> str:
        return spread([run[variant]["wall_seconds"] for run in rounds if variant in run], 1)

    def ratio(name: str) -> str:
        found = summary["ratios"].get(name, {})
        pairs, same = found.get("rounds", []), found.get("same_model", {}).get("rounds", [])
        text = spread([pair["ratio"] for pair in pairs], 2) + ("×" if pairs else "")
        if len(same) < len(pairs):  # some rounds' two runs fitted different models
            text += (f"; {spread([pair['ratio'] for pair in same], 2)}× in the "
                     f"{len(same)} round{'s' * (len(same) > 1)} of the same model" if same
                     else "; no round of the same model")
        return text

    return (f"| {_data(record)} | {len(rounds)} | {seconds('classic')} | {seconds('connect')} | "
            f"{ratio('connect/classic')} | {seconds('before')} | {ratio('classic/before')} | "
            f"{_accuracy(record, variants)} | {_models(summary)} |")


HEADER = ("| data | rounds | classic: whole command s | Connect s | Connect / classic | "
          "before s | classic / before | test accuracy | model files |\n"
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- |")


def _launches(record: dict) -> str:
    """How each variant was started, as the record's settings say."""
    settings = record.get("settings") or {}
    launches = [f"{LABELS[variant]} `{settings[f'launch_{variant}']}`"
                + (f" of a worktree of {settings.get('before')}" if variant == "before" else "")
                for variant in VARIANTS if settings.get(f"launch_{variant}")]
    return "; ".join(launches)


def back_ends_table(records: list[tuple[str, dict]]) -> str:
    """The region's Markdown for ``records`` ((path, record), one a data set): where each comes
    from and how its variants were started, then a row each; medians of the rounds, ranges in
    brackets."""
    blocks = []
    for path, record in records:
        blocks.append(source_line(record, path) + f" Started as: {_launches(record)}.")
    rows = [back_ends_row(record) for _, record in records]
    return "\n\n".join(blocks + [HEADER + "\n" + "\n".join(rows)]) + "\n"


def back_ends_region(root) -> str:
    """The region from the newest records under ``root``; without any, a line that says how
    to make one."""
    paths = newest_records(root)
    if not paths:
        return ("No record yet: `python benchmarks/bench_back_ends.py` writes one under\n"
                f"`{RECORDS}/`, and `python benchmarks/render_results.py` renders it here.\n")
    return back_ends_table([(path, json.loads((Path(root) / path).read_text()))
                            for path in paths])
