"""The linear job as a user runs it, side by side with Spark MLlib's LinearSVC, on a generated
non-centred LIBSVM file. A benchmark, not a test.

    python benchmarks/bench_linear_job.py --repeats 3          # 1,000,000 x 50 train, 100,000 test

The data (sodm_spark.data.datasets.make_linear(centred=False): features uniform in [0, 1], classes
split at the cube's centre, 5% labels flipped; labels 0/1) are written once to --work-dir.
"job" is ``spark-submit --master local[2] jobs/train_sodm.py --kernel linear --data F
--test-data F`` with every default (intercept on); "job-no-intercept" adds ``--no-intercept``
(the paper's model f(x) = wᵀx). "mllib" is ``LinearSVC()`` with its defaults (fitIntercept,
regParam 0, 100 iterations) in a Spark session with the same master and driver memory, fitted
on the LIBSVM file as read (parsing inside the fit, as in the job's train_seconds) and, as
"mllib-cached", on the same rows cached and counted before the clock. Medians of --repeats.
``--record PATH`` (or ``--json-out PATH``) writes the run's result record: every run's figures
and the medians, the files' identity and a stage a method (sodm_spark.benchmarking.records).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from job_runs import medians, submit  # noqa: E402

from sodm_spark.benchmarking.records import add_record_flag, start_record  # noqa: E402

METHODS = ("mllib", "mllib-cached", "job", "job-no-intercept")


def write_files(work_dir: Path, rows: int, test_rows: int, features: int, seed: int):
    """Train and test LIBSVM files (written once; labels 0/1)."""
    from sklearn.datasets import dump_svmlight_file

    from sodm_spark.data.datasets import make_linear

    work_dir.mkdir(parents=True, exist_ok=True)
    stem = work_dir / f"linear_uncentred_{rows}x{features}_s{seed}"
    train, test = Path(f"{stem}_train.libsvm"), Path(f"{stem}_test.libsvm")
    if not (train.exists() and test.exists()):
        X, y = make_linear(rows + test_rows, features, seed=seed, centred=False)
        labels = (y > 0).astype(int)
        for path, part in ((train, slice(0, rows)), (test, slice(rows, None))):
            partial = path.with_suffix(".partial")
            dump_svmlight_file(X[part], labels[part], str(partial), zero_based=False)
            os.replace(partial, path)
    return train, test


def run_job(train: Path, test: Path, args, extra: list[str]) -> dict:
    """The job through spark-submit: its metrics JSON plus the command's wall time."""
    metrics, wall, output = submit(
        "train_sodm.py", ["--kernel", "linear", "--data", str(train), "--test-data", str(test)]
        + extra, args.master, ["--driver-memory", args.driver_memory])
    print("\n".join(output), flush=True)
    return {"train_seconds": metrics["train_seconds"], "wall_seconds": wall,
            "test_accuracy": metrics["test_accuracy"], "epochs": len(metrics["epochs"]),
            "lam": metrics["params"]["lam"], "intercept": metrics.get("intercept")}


def run_mllib(spark, train: Path, test: Path, features: int, cached: bool) -> dict:
    """MLlib LinearSVC with its defaults: fit seconds and test accuracy."""
    from pyspark.ml.classification import LinearSVC
    from pyspark.sql import functions as F

    def read(path):
        return spark.read.format("libsvm").option("numFeatures", features).load(str(path))

    frame = read(train)
    if cached:
        frame = frame.cache()
        frame.count()
    start = time.perf_counter()
    model = LinearSVC().fit(frame)
    seconds = time.perf_counter() - start
    test_frame = read(test)
    scored = model.transform(test_frame)
    accuracy = scored.filter(F.col("prediction") == F.col("label")).count() / test_frame.count()
    if cached:
        frame.unpersist()
    return {"train_seconds": seconds, "wall_seconds": seconds, "test_accuracy": accuracy,
            "iterations": model.summary().totalIterations, "intercept": model.intercept}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--test-rows", type=int, default=100_000)
    parser.add_argument("--features", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work-dir", type=Path, default=Path.home() / ".cache" / "sodm_spark")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="8g")
    parser.add_argument("--job-args", default="", help="more flags for the job runs")
    add_record_flag(parser, "--json-out")
    return parser


def main(argv=None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    methods = args.methods.split(",")
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        raise SystemExit(f"unknown methods {unknown}; known: {', '.join(METHODS)}")
    record = start_record(parser, args, __file__, argv)
    start = time.perf_counter()
    train, test = write_files(args.work_dir, args.rows, args.test_rows, args.features, args.seed)
    print(f"data: {train} ({time.perf_counter() - start:.0f} s to have it)", flush=True)
    record.add_data(train.name, train, test)
    record.lap("data")
    spark = None
    if any(method.startswith("mllib") for method in methods):
        from sodm_spark.spark.session import get_session

        spark, _ = get_session("sodm-spark: bench_linear_job (MLlib LinearSVC)", args.master,
                               {"spark.driver.memory": args.driver_memory,
                                "spark.ui.showConsoleProgress": "false"})
    results = {}
    for method in methods:
        for repeat in range(args.repeats):
            if method.startswith("job"):
                extra = args.job_args.split() + (["--no-intercept"] if "no-intercept" in method
                                                 else [])
                run = run_job(train, test, args, extra)
            else:
                run = run_mllib(spark, train, test, args.features, cached=method.endswith("cached"))
            print(f"{method} run {repeat + 1}: {json.dumps(run)}", flush=True)
            results.setdefault(method, []).append(run)
        record.lap(method)
    if spark is not None:
        spark.stop()
    reference = results.get("mllib")
    mllib_seconds = statistics.median(r["train_seconds"] for r in reference) if reference else None
    mllib_accuracy = statistics.median(r["test_accuracy"] for r in reference) if reference else None
    print(f"\n{train.name}: {args.rows} x {args.features} train, {args.test_rows} test; "
          f"{args.master}; medians of {args.repeats} runs")
    print(f"{'method':<18}{'train s':>9}{'wall s':>9}{'test acc':>10}{'vs MLlib time':>15}"
          f"{'vs MLlib acc':>14}  runs (train s)")
    table = {}
    for method, runs in results.items():
        train_s, wall_s, accuracy, each = medians(runs)
        ratio = f"{train_s / mllib_seconds:.3f}" if mllib_seconds else ""
        gap = f"{100 * (accuracy - mllib_accuracy):+.2f} pt" if mllib_accuracy else ""
        print(f"{method:<18}{train_s:>9.1f}{wall_s:>9.1f}{accuracy:>10.4f}{ratio:>15}{gap:>14}"
              f"  {each}")
        table[method] = {"train_seconds": train_s, "wall_seconds": wall_s,
                         "test_accuracy": accuracy,
                         "train_over_mllib_fit": train_s / mllib_seconds if mllib_seconds
                         else None,
                         "accuracy_minus_mllib": accuracy - mllib_accuracy if mllib_accuracy
                         else None}
    record.write(train=str(train), test=str(test), results=results, medians=table)


if __name__ == "__main__":
    main()
