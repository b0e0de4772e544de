"""What each level of SODM costs against what the plan predicted before it ran (docs/design.md
§2.7: ``plan.prior_seconds`` before the first level, ``stopping.predict_seconds`` after). A
benchmark, not a test.

    python benchmarks/bench_level_costs.py [--cases satellite,tabular-100k-L3,...] \\
        [--record docs/results/level_costs.json]
    python benchmarks/bench_level_costs.py --table docs/results/level_costs.json

Each case is one in-process run of the job (jobs/train_sodm.py, local[2], the settings of
conf/) with ``--no-auto-stop``, so that every level it asks for is solved whatever the stop rule
would say: the data sets of ``benchmarks/bench_stopping.py`` with its flags (the default
search, its level counts, ``--test-every-level``, seed 0), and seeded 12-column tables
(``benchmarks/make_big_data.py --dataset tabular``) of 50,000-200,000 rows with fixed
hyperparameters and ``--levels L --stop-level S`` (the top level alone from scratch, as
docs/jobs.md "The top partition size, measured" did, or every level). For every level the
record holds the shape the plan saw (``plan.LevelShape``: partitions, rows, width, tasks,
threads, kernel mode, storage, scored rows, classes), the plan's predicted seconds, the prior
alone for that shape (from scratch), the measured seconds and ``ratio`` = predicted /
measured; with the command, the commit, the machine, the GEMM speed each fit measured and the
load average (the machine is shared: a loaded machine makes every level slower, and its
measured GEMM speed lower). ``claims``: the cases within a factor of 1.5, and the worst
factors (tests/test_level_costs.py recomputes every prediction from the record). The record
(``--record PATH``, or ``--json PATH``; sodm_spark.benchmarking.records) is rewritten after
every case, with each case's data files and a stage a case; ``--table`` writes none.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(ROOT / "jobs"))
from bench_defaults import files_for  # noqa: E402
from bench_stopping import LEVELS, TRAIN_ROWS  # noqa: E402
from make_big_data import main as write_big_data  # noqa: E402
import train_sodm  # noqa: E402

from sodm_spark.benchmarking.records import add_record_flag, start_record  # noqa: E402
from sodm_spark.spark.session import get_session  # noqa: E402
from sodm_spark.spark.sodm import levels as levels_module  # noqa: E402
from sodm_spark.spark.sodm import plan  # noqa: E402

NAMED = ("satellite", "letter", "shuttle", "nonlinear", "fashion-mnist-10", "fashion-mnist")
#: The tables: (rows, levels, stop level). The top level alone at three partition sizes of
#: 100,000 rows and at 22,222 rows of 200,000; every level of 50,000 rows down to level 0.
TABLES = ((100_000, 4, 4), (100_000, 3, 3), (100_000, 2, 2), (200_000, 2, 2), (50_000, 3, 0))
#: The default search's default point (docs/jobs.md, "Default hyperparameters"): γ = 2 × scale
#: is not a flag, so the tables take γ = scale at λ = 1e6.
TABLE_POINT = ["--gamma", "scale", "--lam", "1e6", "--theta", "0.1", "--v", "0.2"]
FILE_ROWS = 50_000


def table_case(rows: int, levels: int, stop: int) -> str:
    return f"tabular-{rows // 1000}k-L{levels}" + (f"-to{stop}" if stop != levels else "")


CASES = NAMED + tuple(table_case(*table) for table in TABLES)


def table_dir(work_dir: Path, rows: int) -> Path:
    """``rows`` rows of the seeded table as Parquet (written on first use)."""
    folder = work_dir / f"tabular-{rows}"
    write_big_data(["--dataset", "tabular", "--rows", str(rows), "--out", str(folder),
                    "--file-rows", str(FILE_ROWS)])
    return folder


def case_flags(case: str, work_dir: Path) -> tuple[str, int | None, list[str]]:
    """(data set, training rows or None, the job's flags) of a case."""
    if case in NAMED:
        train, test = files_for(case, work_dir, 0, TRAIN_ROWS.get(case))
        levels = ["--levels", str(LEVELS[case])] if case in LEVELS else []
        return case, TRAIN_ROWS.get(case), levels + [
            "--data", str(train), "--test-data", str(test), "--test-every-level",
            "--max-sv", "none", "--seed", "0"]
    rows, levels, stop = next(t for t in TABLES if table_case(*t) == case)
    folder = table_dir(work_dir, rows)
    return "tabular", rows, ["--data", str(folder / "train"), "--format", "parquet",
                             "--levels", str(levels), "--stop-level", str(stop),
                             "--max-sv", "none", *TABLE_POINT]


class PlanRecorder:
    """Wraps the levels' ``plan_level``: the shape of every level planned (by level)."""

    def __init__(self):
        self.shapes: dict[int, dict] = {}
        self.original = levels_module.plan_level

    def __enter__(self):
        def recorded(level, sizes, n_features, params, memory, done, cores, scored_rows=0,
                     classes=0):
            made = self.original(level, sizes, n_features, params, memory, done, cores,
                                 scored_rows, classes)
            running = max(1, min(made.partitions, memory.cores))
            shape = plan.LevelShape(made.partitions, made.rows, float(n_features),
                                    made.tasks or running,
                                    max(1, memory.cores // running), made.kernel,
                                    made.cache_mb, made.storage, scored_rows, classes)
            self.shapes[level] = dataclasses.asdict(shape)
            return made

        levels_module.plan_level = recorded
        return self

    def __exit__(self, *_):
        levels_module.plan_level = self.original


def run_case(spark, case: str, work_dir: Path) -> dict:
    """One run of the job: every level's shape, prediction, prior and measured seconds."""
    dataset, rows, flags = case_flags(case, work_dir)
    args = train_sodm.parse_args(flags + ["--no-auto-stop"])
    load, begun = os.getloadavg()[0], time.perf_counter()
    with PlanRecorder() as recorder:
        _, summary = train_sodm.train(spark, args)
    levels = []
    for entry in summary["levels"]:
        shape = recorder.shapes[entry["level"]]
        predicted, seconds = entry["predicted_seconds"], entry["seconds"]
        prior = plan.prior_seconds(plan.LevelShape(**shape))
        levels.append({"level": entry["level"], "shape": shape,
                       "sweeps_max": entry["sweeps_max"], "sweeps_total": entry["sweeps_total"],
                       "scoring_seconds": entry.get("scoring_seconds"), "kernel": entry["kernel"],
                       "storage": entry.get("storage"), "predicted_seconds": predicted,
                       "prior_seconds": prior, "seconds": seconds,
                       "ratio": predicted / seconds, "prior_ratio": prior / seconds})
    return {"case": case, "dataset": dataset, "rows": rows or summary.get("n_rows"),
            # the GEMM speed the fit's plans read (measured before its first level)
            "gemm_gflops_per_core": plan.gemm_flops_per_second() / 1e9,
            "flags": flags + ["--no-auto-stop"], "train_seconds": summary["train_seconds"],
            "tuning_seconds": summary.get("tuning_seconds", 0.0),
            "load_before": load, "load_after": os.getloadavg()[0],
            "wall_seconds": time.perf_counter() - begun, "levels": levels}


def print_table(runs: list[dict]) -> None:
    print(f"{'case':<24} {'level':>5} {'parts x rows':>14} {'width':>6} {'scored':>7} "
          f"{'predicted':>9} {'prior':>7} {'seconds':>8} {'ratio':>6} {'load':>5}")
    for run in runs:
        for entry in run["levels"]:
            shape = entry["shape"]
            print(f"{run['case']:<24} {entry['level']:>5} "
                  f"{shape['partitions']:>5} x {shape['rows']:>6} {shape['n_features']:>6.0f} "
                  f"{shape['scored_rows']:>7} {entry['predicted_seconds']:>9.2f} "
                  f"{entry['prior_seconds']:>7.2f} {entry['seconds']:>8.2f} "
                  f"{entry['ratio']:>6.2f} {run['load_before']:>5.1f}")


def claims(runs: list[dict], factor: float = 1.5) -> dict:
    """What the record shows of the predictions (ratio = predicted / measured): the cases whose
    first level's prior, and those whose every later level, came within ``factor``, and the
    worst factor of each kind (rounded up to 0.01)."""
    def within(ratio):
        return abs(math.log(ratio)) <= math.log(factor)

    def worst(ratios):
        return math.ceil(100 * max(math.exp(abs(math.log(r))) for r in ratios)) / 100

    later = [e["ratio"] for run in runs for e in run["levels"][1:]]
    return {"first_level_within_1.5": [run["case"] for run in runs
                                       if within(run["levels"][0]["ratio"])],
            "first_level_worst_factor": worst([run["levels"][0]["ratio"] for run in runs]),
            "later_levels_within_1.5": [run["case"] for run in runs if len(run["levels"]) > 1
                                        and all(within(e["ratio"]) for e in run["levels"][1:])],
            "later_levels_worst_factor": worst(later) if later else None,
            "later_levels_share_within_1.5": (sum(within(r) for r in later) / len(later)
                                              if later else None)}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--work-dir", type=Path, default=Path.home() / ".cache" / "sodm_spark")
    add_record_flag(parser, "--json")
    parser.add_argument("--table", help="print the table of a record instead of running")
    return parser


def case_data(run: dict) -> tuple[str, str | None]:
    """The training data (a file or a folder) and the test file of a case's run, by its flags."""
    flags = run["flags"]
    test = flags[flags.index("--test-data") + 1] if "--test-data" in flags else None
    return flags[flags.index("--data") + 1], test


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.table:
        print_table(json.loads(Path(args.table).read_text())["runs"])
        return 0
    record = start_record(parser, args, __file__, argv)
    spark, _ = get_session("sodm-spark: bench_level_costs", args.master)
    spark.sparkContext.setLogLevel("ERROR")
    record.lap("Spark session")
    runs: list[dict] = []
    for case in args.cases.split(","):
        runs.append(run_case(spark, case, args.work_dir))
        record.add_data(case, *case_data(runs[-1]))
        record.lap(case)
        print_table(runs[-1:])
        # after every run: nothing lost if a later one fails
        record.write(finished=False, machine={"master": args.master}, runs=runs,
                     claims=claims(runs))
    print_table(runs)
    print(json.dumps(claims(runs), indent=1))
    record.write(machine={"master": args.master}, runs=runs, claims=claims(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
