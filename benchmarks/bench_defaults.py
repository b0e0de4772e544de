"""Are the job's default hyperparameters good enough? The whole job with no ODM hyperparameters
against the same job with `--tune` (its grid search on the top level's partitions), on every
real data set here. A benchmark, not a test.

    python benchmarks/bench_defaults.py [--datasets fashion-mnist,letter,...] \\
        [--point "--lam 1e5 --theta 0.1 --v 0.5"] [--repeats 1] [--record out.json]

Each data set is written as LIBSVM into --work-dir once; every run is `spark-submit --master
local[2] jobs/train_sodm.py --data F --test-data F` (levels and stopping automatic), with the
hyperparameters of --point (default: none, i.e. the job's defaults) or `--tune` with --grid.
The table gives the test accuracy of both, the gap in points, and the seconds of each command.
``--record PATH`` (or ``--json PATH``) writes the run's result record: every run's figures,
each file's identity and a stage a data set's runs (sodm_spark.benchmarking.records).
"""
from __future__ import annotations

import argparse
import shlex
import statistics
import sys
from pathlib import Path

from sklearn.datasets import dump_svmlight_file

sys.path.insert(0, str(Path(__file__).parent))
from job_runs import submit  # noqa: E402

from sodm_spark.benchmarking.records import add_record_flag, start_record  # noqa: E402
from sodm_spark.data.datasets import DatasetUnavailable, load_dataset  # noqa: E402

DATASETS = ("fashion-mnist", "fashion-mnist-10", "letter", "satellite", "shuttle", "nonlinear")
TUNE_GRID = "gamma=0.5,1,2 lam=1e3,1e4,1e5,1e6 theta=0.1,0.3 v=0.2,0.8"


def files_for(name: str, work_dir: Path, seed: int, train_rows: int | None = None,
              ) -> tuple[Path, Path]:
    """(train, test) LIBSVM files of a named data set (written once), ``train_rows`` of its
    training rows (None: all; 60,000 of the generated sets)."""
    stem = name if train_rows is None else f"{name}-{train_rows}"
    train, test = work_dir / f"{stem}_train.libsvm", work_dir / f"{stem}_test.libsvm"
    if not (train.exists() and test.exists()):
        if train_rows is None and name == "nonlinear":
            train_rows = 60000
        data = load_dataset(name, train_rows=train_rows, seed=seed)
        dump_svmlight_file(data.X_train, data.y_train, str(train), zero_based=False)
        dump_svmlight_file(data.X_test, data.y_test, str(test), zero_based=False)
    return train, test


def run(train: Path, test: Path, extra: list[str], master: str) -> dict:
    metrics, wall, _ = submit("train_sodm.py", ["--data", str(train), "--test-data", str(test),
                                                *extra], master)
    return {"test_accuracy": metrics["test_accuracy"], "wall_seconds": wall,
            "train_seconds": metrics["train_seconds"], "levels": [
                (e["level"], e.get("validation_accuracy")) for e in metrics["levels"]],
            "best": metrics.get("tuning", {}).get("best")}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--point", default="", help="hyperparameter flags of the 'default' "
                        "runs (empty: the job's own defaults)")
    parser.add_argument("--gamma-scale", type=float, help="give --gamma this multiple of "
                        "'scale' (1 / (d · Var X) of the training file) in the default runs")
    parser.add_argument("--grid", default=TUNE_GRID, help="--grid of the tuned runs")
    parser.add_argument("--no-tune", action="store_true", help="only the default runs")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work-dir", type=Path, default=Path.home() / ".cache" / "sodm_spark")
    add_record_flag(parser, "--json")
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    record = start_record(parser, args, __file__, argv)
    args.work_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    print(f"{'data set':<18} {'default acc':>11} {'tuned acc':>9} {'gap (pt)':>8} "
          f"{'default s':>9} {'tuned s':>8}  tuned point", flush=True)
    for name in args.datasets.split(","):
        try:
            train, test = files_for(name, args.work_dir, args.seed)
        except DatasetUnavailable as error:
            print(f"{name:<18} skipped: {error}", flush=True)
            continue
        record.add_data(name, train, test)
        record.lap(f"{name}: files")
        point = shlex.split(args.point)
        if args.gamma_scale:
            from sklearn.datasets import load_svmlight_file
            X = load_svmlight_file(str(train))[0].toarray()
            point += ["--gamma", repr(float(args.gamma_scale / (X.shape[1] * X.var())))]
        default = [run(train, test, point, args.master) for _ in range(args.repeats)]
        record.lap(f"{name}: default")
        tuned = [] if args.no_tune else [
            run(train, test, ["--tune", "--grid", args.grid], args.master)
            for _ in range(args.repeats)]
        if tuned:
            record.lap(f"{name}: tuned")
        row = {"dataset": name, "point": args.point or "job defaults", "default": default,
               "tuned": tuned,
               "default_accuracy": statistics.median(r["test_accuracy"] for r in default),
               "default_seconds": statistics.median(r["wall_seconds"] for r in default)}
        if tuned:
            row["tuned_accuracy"] = statistics.median(r["test_accuracy"] for r in tuned)
            row["tuned_seconds"] = statistics.median(r["wall_seconds"] for r in tuned)
            row["gap_points"] = 100 * (row["tuned_accuracy"] - row["default_accuracy"])
        rows.append(row)
        best = tuned[0]["best"] if tuned else None
        print(f"{name:<18} {row['default_accuracy']:>11.4f} "
              f"{row.get('tuned_accuracy', float('nan')):>9.4f} "
              f"{row.get('gap_points', float('nan')):>8.2f} {row['default_seconds']:>9.1f} "
              f"{row.get('tuned_seconds', float('nan')):>8.1f}  "
              + ("" if best is None else " ".join(f"{k}={best[k]:.4g}" for k in
                                                  ("gamma", "lam", "theta", "v"))), flush=True)
    record.write(results=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
