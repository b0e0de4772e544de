"""DSVRG (SODM Algorithm 2) side by side with Spark MLlib's LinearSVC, single-node SVRG and
the exact optimum, in one Spark session. A benchmark, not a test.

    python benchmarks/bench_dsvrg.py --problem dense    # 1,000,000 x 50 generated rows
    python benchmarks/bench_dsvrg.py --problem sparse   # LIBSVM file, 100,000+ feature columns

The data are generated (sodm_spark.data.datasets.make_linear) and written once to --work-dir: dense
as Parquet (an array column), sparse as a LIBSVM text file, read back by Spark (MLlib through
its own libsvm/parquet readers, DSVRG through sodm_spark.spark.io, sparse rows staying CSR).
"Time to LinearSVC's accuracy" is DSVRG's elapsed time (partitioning included, test scoring
excluded) at the first epoch whose test accuracy reaches LinearSVC's. ``--record PATH`` writes
the run's result record: each method's figures, the rows' identity and a stage a method
(sodm_spark.benchmarking.records).
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from sklearn.datasets import dump_svmlight_file

from sodm_spark.benchmarking.records import add_record_flag, start_record
from sodm_spark.data.datasets import make_linear
from sodm_spark.solvers.odm_primal import newton_primal
from sodm_spark.solvers.dcd_settings import ODMHyperparameters
from sodm_spark.solvers.svrg import SVRGSchedule, primal_objective, svrg
from sodm_spark.spark.dsvrg.fit import DSVRGParams, fit_dsvrg
from sodm_spark.spark.io import dataframe_to_blocks, read_blocks, read_libsvm_local
from sodm_spark.spark.session import get_session


def write_data(problem, work_dir: Path, rows: int, features: int, density: float, seed: int):
    """Write train/test files once; returns their paths and the test set on the driver."""
    work_dir.mkdir(parents=True, exist_ok=True)
    stem = work_dir / f"linear_{problem}_{rows}x{features}_s{seed}"
    test_rows = max(10000, rows // 10)
    if problem == "dense":
        train, test = Path(f"{stem}_train.parquet"), Path(f"{stem}_test.parquet")
        if not train.exists():
            X, y = make_linear(rows + test_rows, features, seed=seed)
            for path, part in ((train, slice(0, rows)), (test, slice(rows, None))):
                table = pa.table({"label": (y[part] > 0).astype(np.float64),
                                  "features": pa.array(list(X[part]),
                                                       type=pa.list_(pa.float64()))})
                pq.write_table(table, path, row_group_size=50000)
        return train, test
    train, test = Path(f"{stem}_train.libsvm"), Path(f"{stem}_test.libsvm")
    if not train.exists():
        X, y = make_linear(rows + test_rows, features, seed=seed, density=density)
        dump_svmlight_file(X[:rows], (y[:rows] > 0).astype(int), str(train), zero_based=False)
        dump_svmlight_file(X[rows:], (y[rows:] > 0).astype(int), str(test), zero_based=False)
    return train, test


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problem", choices=("dense", "sparse"), default="dense")
    parser.add_argument("--rows", type=int)
    parser.add_argument("--features", type=int)
    parser.add_argument("--density", type=float, default=4e-4, help="sparse: nonzeros per cell")
    parser.add_argument("--work-dir", type=Path, default=Path.home() / ".cache" / "sodm_spark")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="8g")
    # defaults: the λ with the best accuracy on a validation split (the last fifth of the
    # training rows, exact primal Newton fits): dense 10 (10..1000 tie), sparse 3000
    parser.add_argument("--lam", type=float, help="default: 10 (dense), 3000 (sparse)")
    parser.add_argument("--theta", type=float, default=0.1)
    parser.add_argument("--v", type=float, default=0.5)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    add_record_flag(parser)
    return parser


def main(argv=None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    record = start_record(parser, args, __file__, argv)
    rows = args.rows or (1_000_000 if args.problem == "dense" else 200_000)
    args.lam = args.lam or (10.0 if args.problem == "dense" else 3000.0)
    features = args.features or (50 if args.problem == "dense" else 100_000)
    train, test = write_data(args.problem, args.work_dir, rows, features, args.density, args.seed)

    spark, _ = get_session("sodm-spark: bench_dsvrg", args.master,
                           {"spark.driver.memory": args.driver_memory,
                            "spark.ui.showConsoleProgress": "false"})
    sc = spark.sparkContext
    from pyspark.ml.classification import LinearSVC
    from pyspark.ml.functions import array_to_vector
    from pyspark.sql import functions as F

    if args.problem == "dense":
        frame = spark.read.parquet(str(train)).select(
            "label", array_to_vector("features").alias("features"))
        test_frame = spark.read.parquet(str(test)).select(
            "label", array_to_vector("features").alias("features"))
        blocks, d = dataframe_to_blocks(spark.read.parquet(str(train)))
        test_table = pq.read_table(test)
        X_test = np.stack(test_table.column("features").to_numpy(zero_copy_only=False))
        y_test = test_table.column("label").to_numpy()
    else:
        frame = spark.read.format("libsvm").option("numFeatures", features).load(str(train)) \
            .withColumn("label", F.when(F.col("label") > 0, 1.0).otherwise(0.0))
        test_frame = spark.read.format("libsvm").option("numFeatures", features) \
            .load(str(test)).withColumn("label", F.when(F.col("label") > 0, 1.0).otherwise(0.0))
        blocks, d = read_blocks(spark, str(train), "libsvm", n_features=features, sparse=True)
        X_test, y_test = read_libsvm_local(str(test), n_features=features, sparse=True)
    frame, test_frame, blocks = frame.cache(), test_frame.cache(), blocks.cache()
    n_rows = frame.count(), test_frame.count(), blocks.count()
    y_test_pm = np.where(y_test > 0, 1.0, -1.0)
    print(f"{args.problem}: {rows} x {d} train, {len(y_test)} test; lam={args.lam} "
          f"theta={args.theta} v={args.v}; Spark {args.master}; median of {args.repeats}",
          flush=True)
    record.lap("data: written, read and cached")

    # MLlib LinearSVC, default settings
    svc_times, svc_model = [], None
    for _ in range(args.repeats):
        start = time.perf_counter()
        svc_model = LinearSVC().fit(frame)
        svc_times.append(time.perf_counter() - start)
    predictions = svc_model.transform(test_frame)
    svc_accuracy = predictions.filter(F.col("prediction") == F.col("label")).count() / n_rows[1]
    svc_seconds = statistics.median(svc_times)
    record.lap("MLlib LinearSVC")

    # DSVRG
    runs = []
    for _ in range(args.repeats):
        fit = fit_dsvrg(sc, blocks, DSVRGParams(args.lam, args.theta, args.v, epochs=args.epochs,
                                                relative_change_tol=1e-9, seed=args.seed),
                        classes=[0.0, 1.0], n_features=d, test=(X_test, y_test))
        runs.append(fit)
    fit = runs[0]
    reached = [next((e for e in run.epochs if e.test_accuracy >= svc_accuracy), None)
               for run in runs]
    reach = [None if e is None else e.elapsed for e in reached]
    dsvrg_seconds = statistics.median(run.train_seconds for run in runs)
    record.lap("DSVRG")

    # exact optimum and single-node SVRG on the driver
    if args.problem == "dense":
        table = pq.read_table(train)
        X = np.stack(table.column("features").to_numpy(zero_copy_only=False))
        y = np.where(table.column("label").to_numpy() > 0, 1.0, -1.0)
    else:
        X, y01 = read_libsvm_local(str(train), n_features=features, sparse=True)
        y = np.where(y01 > 0, 1.0, -1.0)
    record.add_data(f"make_linear, {args.problem}", (X, y), (X_test, y_test))
    record.lap("the rows on the driver")
    start = time.perf_counter()
    exact = newton_primal(X, y, args.lam, args.theta, args.v)
    exact_seconds = time.perf_counter() - start
    record.lap("exact (primal Newton)")
    start = time.perf_counter()
    single = svrg(X, y, ODMHyperparameters(args.lam, args.theta, args.v),
                  SVRGSchedule(epochs=args.epochs, relative_change_tol=1e-9))
    single_seconds = time.perf_counter() - start
    record.lap("SVRG, one process")

    def accuracy(w, b=0.0):
        return float(np.mean(np.where(X_test @ w + b > 0, 1.0, -1.0) == y_test_pm))

    gap = lambda value: (value - exact.objective) / abs(exact.objective)
    print(f"{'method':<34}{'fit s':>9}{'accuracy':>10}{'objective':>14}{'rel. gap':>11}")
    print(f"{'MLlib LinearSVC (defaults)':<34}{svc_seconds:>9.2f}{svc_accuracy:>10.4f}"
          f"{'':>14}{'':>11}")
    wb = np.append(fit.w, fit.intercept)
    print(f"{'DSVRG (' + str(len(fit.epochs)) + ' epochs)':<34}{dsvrg_seconds:>9.2f}"
          f"{accuracy(fit.w, fit.intercept):>10.4f}{fit.epochs[-1].objective:>14.8g}"
          f"{gap(primal_objective(wb, X, y, args.lam, args.theta, args.v, True)):>11.2e}")
    print(f"{'SVRG, one process (' + str(single.epochs) + ' epochs)':<34}{single_seconds:>9.2f}"
          f"{accuracy(single.w, single.intercept):>10.4f}{single.objective:>14.8g}"
          f"{gap(single.objective):>11.2e}")
    print(f"{'exact (primal Newton, one process)':<34}{exact_seconds:>9.2f}"
          f"{accuracy(exact.w, exact.intercept):>10.4f}{exact.objective:>14.8g}{0.0:>11.2e}")
    print(f"DSVRG time to LinearSVC's accuracy {svc_accuracy:.4f}: "
          + ", ".join("not reached" if r is None else f"{r:.2f} s" for r in reach)
          + f" (median {statistics.median([r for r in reach if r is not None] or [np.nan]):.2f} s)"
          f" vs LinearSVC fit {svc_seconds:.2f} s (runs {', '.join(f'{t:.1f}' for t in svc_times)})")
    ratio = statistics.median([r for r in reach if r is not None] or [np.nan]) / svc_seconds
    print(f"ratio DSVRG time to accuracy / LinearSVC fit: {ratio:.2f}; reached at epoch "
          + ", ".join("-" if e is None else str(e.epoch) for e in reached))
    print(f"DSVRG layout: {fit.layout}; partitioning "
          f"{statistics.median(r.partition_seconds for r in runs):.2f} s (median; runs "
          f"{', '.join(f'{r.partition_seconds:.2f}' for r in runs)}); seconds per epoch "
          f"{statistics.median(e.seconds for r in runs for e in r.epochs):.2f} (median); "
          f"resident block hits/misses {fit.resident_hits}/{fit.resident_misses}")
    for number, run in enumerate(runs):
        print(f"DSVRG per epoch (run {number + 1}): " + "; ".join(
            f"{e.epoch}: {e.elapsed:.2f} s acc {e.test_accuracy:.4f} gap {gap(e.objective):.1e}"
            for e in run.epochs))
    spark.stop()
    record.write(exact_objective=exact.objective, methods={
        "MLlib LinearSVC (defaults)": {"fit_seconds": svc_seconds, "runs_seconds": svc_times,
                                       "accuracy": svc_accuracy},
        "DSVRG": {"fit_seconds": dsvrg_seconds, "accuracy": accuracy(fit.w, fit.intercept),
                  "objective": fit.epochs[-1].objective,
                  "relative_gap": gap(primal_objective(wb, X, y, args.lam, args.theta, args.v,
                                                       True)),
                  "seconds_to_linearsvc_accuracy": reach,
                  "epoch_reaching_it": [None if e is None else e.epoch for e in reached],
                  "time_to_accuracy_over_linearsvc_fit": ratio, "layout": fit.layout,
                  "partition_seconds": [r.partition_seconds for r in runs],
                  "epochs": [[e.to_dict() for e in run.epochs] for run in runs]},
        "SVRG, one process": {"fit_seconds": single_seconds, "epochs": single.epochs,
                              "accuracy": accuracy(single.w, single.intercept),
                              "objective": single.objective,
                              "relative_gap": gap(single.objective)},
        "exact (primal Newton, one process)": {
            "fit_seconds": exact_seconds, "accuracy": accuracy(exact.w, exact.intercept),
            "objective": exact.objective}})


if __name__ == "__main__":
    main()
