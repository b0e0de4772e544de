"""The benchmark's outputs: a JSON file, Markdown tables and a region of a Markdown file (between
``<!-- results:start -->`` and ``<!-- results:end -->``, or another region name's markers),
rewritten in place; the project's results regions are in docs/benchmarks.md."""
from __future__ import annotations

import json
import os
import platform
from pathlib import Path

from ..core.errors import SettingsError
from ..data.storage import replace_file
from .budget import OK
from .scaling import speedups

DEFAULT_REGION = "results"


def markers(region: str = DEFAULT_REGION) -> tuple[str, str]:
    """The Markdown lines that open and close ``region``."""
    return f"<!-- {region}:start -->", f"<!-- {region}:end -->"


def machine() -> dict:
    """Cores, RAM, CPU and library versions of this machine."""
    import importlib.util

    import numpy
    import sklearn

    # a machine with no Spark (a GPU machine running the numerics alone) says so
    pyspark = None if importlib.util.find_spec("pyspark") is None else \
        __import__("pyspark")

    cpu = next((line.split(":", 1)[1].strip() for line in _read_lines("/proc/cpuinfo")
                if line.startswith("model name")), platform.processor() or "unknown CPU")
    ram = next((int(line.split()[1]) / 2**20 for line in _read_lines("/proc/meminfo")
                if line.startswith("MemTotal")), None)
    return {"cores": os.cpu_count(), "ram_gib": None if ram is None else round(ram, 1),
            "cpu": cpu, "os": f"{platform.system()} {platform.release()}",
            "python": platform.python_version(), "pyspark": None if pyspark is None else pyspark.__version__,
            "numpy": numpy.__version__, "scikit-learn": sklearn.__version__}


def _read_lines(path):
    try:
        return Path(path).read_text().splitlines()
    except OSError:
        return []


def write_json(path, document: dict) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(document, indent=2, default=str) + "\n")


def _number(value, digits: int) -> str:
    return "" if value is None else f"{value:,.{digits}f}"


def _int(value) -> str:
    return "" if value is None else f"{int(value):,}"


def _na(row: dict, budget) -> str:
    if row["status"] == OK:
        return ""
    budget = row.get("budget_seconds", budget)
    return "N/A" + (f" (> {budget:g} s)" if row["status"] == "not finished" and budget else "")


def _table(header: list[str], lines: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    out += ["| " + " | ".join(str(cell).replace("|", "/") for cell in line) + " |"
            for line in lines]
    return "\n".join(out)


def methods_table(rows: list[dict], budget=None) -> str:
    """Method, level, accuracy, fit seconds, predict seconds, support vectors, model size."""
    header = ["method", "level", "partitions", "runs on", "accuracy", "fit s", "predict s",
              "SVs", "model size (floats)", "note"]
    lines = []
    for row in rows:
        failed = _na(row, budget)
        lines.append([row["name"], _int(row.get("level")), _int(row.get("partitions")),
                      row.get("runs_on", ""),
                      failed or _number(row["accuracy"], 4),
                      failed or _number(row["fit_seconds"], 1),
                      "" if failed else _number(row.get("predict_seconds"), 2),
                      "" if failed else (_int(row["n_sv"]) if row.get("n_sv") is not None
                                         else row.get("sv_label", "linear")),
                      "" if failed else _int(row.get("model_floats")), row.get("note", "")])
    return _table(header, lines)


def rows_table(rows: list[dict], budget=None) -> str:
    """Scaling with M: seconds per SODM level and the exact methods' fit seconds."""
    header = ["M (rows)", "method", "level", "partitions", "rows / partition", "level s",
              "cumulative s", "accuracy", "note"]
    lines = []
    for row in rows:
        failed = _na(row, budget)
        lines.append([_int(row["rows"]), row["name"], _int(row.get("level")),
                      _int(row.get("partitions")), _int(row.get("rows_per_partition")),
                      failed or _number(row.get("level_seconds", row["fit_seconds"]), 1),
                      failed or _number(row["fit_seconds"], 1),
                      failed or _number(row["accuracy"], 4), row.get("note", "")])
    return _table(header, lines)


def cores_table(rows: list[dict]) -> str:
    header = ["cores", "level", "partitions", "seconds", "speed-up"]
    lines = [[_int(r["cores"]), "whole fit" if r["depth"] is None else _int(r["level"]),
              _int(r["partitions"]), _number(r["seconds"], 1), f"{r['speedup']:.2f}×"]
             for r in speedups(rows)]
    return _table(header, lines)


def markdown_report(document: dict, image_prefix: str = "",
                    region: str = DEFAULT_REGION) -> str:
    """The results section: command, machine, tables and plots (``image_prefix`` is the folder
    of the PNGs relative to the Markdown file). A region other than the default one is a
    sub-section titled by its data."""
    m, s = document["machine"], document["settings"]
    budget = document["budget_seconds"]
    data = document.get("data") or {}
    n_classes = data.get("n_classes", 2)
    classes = f", {n_classes} classes" if n_classes > 2 else ""
    title = "## Results" if region == DEFAULT_REGION else \
        f"### More results: {data.get('name', region)}{classes}"
    sub = "###" if region == DEFAULT_REGION else "####"
    parts = [title, "",
             "Produced by this command (it rewrites this section; expect about "
             f"{document['total_seconds'] / 60:.0f} minutes here):", "", "```bash",
             document["command"], "```", "",
             f"Machine: {m['cores']} cores ({m['cpu']}), {m['ram_gib']} GiB RAM, {m['os']}; "
             f"Python {m['python']}, pyspark {m['pyspark']} (`{document['master']}`), numpy "
             f"{m['numpy']}, scikit-learn {m['scikit-learn']}. Run on {document['date']}. "
             "Timings on a shared 2-core machine are noisy: read ratios, not absolutes.", ""]
    images = document.get("images", {})
    if document.get("results"):
        d = document["data"]
        parts += [f"{sub} Methods side by side: {d['name']}", "",
                  f"{d['train_rows']:,} training rows × {d['features']} features, "
                  f"{d['test_rows']:,} test rows ({d['source']}; "
                  + (f"{n_classes} classes: {d['positive_class']}" if n_classes > 2
                     else f"+1 = {d['positive_class']}") + "). "
                  f"Shared: RBF gamma = {document['gamma']:.4g} for every RBF method; ODM λ = "
                  f"{s['lam']:g}, θ = {s['theta']:g}, v = {s['v']:g}, tol = {s['tol']:g}; "
                  f"linear ODM λ = {s['linear_lam']:g}; SVC / coreset SVM / CVM C = "
                  f"{s['svc_C']:g}; LinearSVC C = {s['linear_C']:g} (MLlib regParam = "
                  "1/(C·M)); XGBoost (hist) "
                  f"{s.get('xgb_trees', 100)} trees of depth {s.get('xgb_depth', 6)}; Nyström "
                  f"{s.get('nystroem_components', 2000):,} landmarks, linear SVM C = "
                  f"{s.get('nystroem_C', 1.0):g}. SODM: p = "
                  f"{s['p']}, {s['levels']} levels, {s['strata']} strata. Kernel cache of the "
                  "ODM solvers: " + (f"{s['cache_mb']:,.0f} MB per task" if s.get("cache_mb")
                                     else "the job's memory plan") + ". Budget per method "
                  + f"{budget:g} s: N/A = not finished within it. Fit s of a SODM level = time "
                  "from the start of the fit to that level's model.", "",
                  methods_table(document["results"], budget), ""]
        if "accuracy" in images:
            parts += [f"![accuracy against fit seconds]({image_prefix}{images['accuracy']})", ""]
    if document.get("scaling_rows"):
        parts += [f"{sub} Scaling with the number of rows M", "",
                  document.get("scaling_rows_note", ""), "",
                  rows_table(document["scaling_rows"], document.get("scaling_budget")), ""]
        if "rows" in images:
            parts += [f"![seconds against rows]({image_prefix}{images['rows']})", ""]
    if document.get("scaling_cores"):
        parts += [f"{sub} Scaling with cores", "", document.get("scaling_cores_note", ""), "",
                  cores_table(document["scaling_cores"]), ""]
        if "cores" in images:
            parts += [f"![speed-up against cores]({image_prefix}{images['cores']})", ""]
    return "\n".join(parts).rstrip() + "\n"


def check_readme(path, region: str = DEFAULT_REGION) -> str:
    """The text of ``path``, which must hold ``region``'s start line and then its end line,
    once each (else a ValueError saying what to add)."""
    text = Path(path).read_text()
    start_marker, end_marker = markers(region)
    start, end = text.find(start_marker), text.find(end_marker)
    if start < 0 or end < start or text.count(start_marker) != 1 \
            or text.count(end_marker) != 1:
        raise SettingsError(f"{path} needs exactly one {start_marker} line followed by one "
                            f"{end_marker} line; add them where the results should go.")
    return text


def rewrite_readme(path, section: str, region: str = DEFAULT_REGION) -> None:
    """Replace what lies between ``region``'s markers in ``path`` with ``section``; the rest
    of the file is kept byte for byte. Missing or misordered markers are a ValueError."""
    text = check_readme(path, region)
    start_marker, end_marker = markers(region)
    start, end = text.find(start_marker), text.find(end_marker)
    head = text[:start + len(start_marker)]
    new = head + "\n" + section.rstrip("\n") + "\n" + text[end:]
    replace_file(path, lambda staging: staging.write_text(new))
