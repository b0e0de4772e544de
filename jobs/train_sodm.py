"""Train SODM (SODM paper, Algorithm 1) on Spark and report every level.

    spark-submit jobs/train_sodm.py --levels 3
    spark-submit jobs/train_sodm.py --data train.libsvm --test-data test.libsvm --levels 3 \\
        --model-out models/sodm --metrics-out metrics.json

Without --data it trains on a built-in, seeded, generated nonlinear data set
(sodm_spark.datasets.make_nonlinear: 60,000 training and 10,000 test rows; with
--kernel linear, sodm_spark.datasets.make_linear). With --kernel linear the job runs DSVRG
(SODM Algorithm 2) on the primal instead of the kernel levels, and LIBSVM input stays sparse.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from sodm_spark.datasets import make_linear, make_nonlinear
from sodm_spark.spark.dsvrg import DSVRGParams, fit_dsvrg
from sodm_spark.spark.io import read_blocks, read_libsvm_local
from sodm_spark.spark.session import get_session, numpy_to_blocks, collect_blocks
from sodm_spark.spark.sodm import PARTITIONERS, SODMParams, checked_classes, fit_sodm
from sodm_spark.jobconf import gamma_arg, parse_with_defaults, write_outputs
from sodm_spark.validation import check_finite_rows, check_two_classes

DEFAULT_ROWS, DEFAULT_TEST_ROWS = 60000, 10000


def parse_args(argv=None) -> argparse.Namespace:
    defaults = SODMParams()
    parser = argparse.ArgumentParser(prog="train_sodm.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="training data (LIBSVM, CSV or Parquet); default: built-in")
    parser.add_argument("--test-data", help="test data in the same format, scored after every level")
    parser.add_argument("--format", choices=("libsvm", "csv", "parquet"), default="libsvm")
    parser.add_argument("--levels", type=int, default=defaults.levels, help="L: K = p^L partitions")
    parser.add_argument("--p", type=int, default=defaults.p, help="partitions merged per level")
    parser.add_argument("--strata", type=int, default=defaults.strata, help="S landmark strata")
    parser.add_argument("--kernel", default=defaults.kernel)
    parser.add_argument("--gamma", default=defaults.gamma, type=gamma_arg,
                        help="'scale', 'auto' or a number")
    parser.add_argument("--lam", type=float, default=defaults.lam)
    parser.add_argument("--theta", type=float, default=defaults.theta)
    parser.add_argument("--v", type=float, default=defaults.v)
    parser.add_argument("--tol", type=float, default=defaults.tol)
    parser.add_argument("--max-iter", type=int, default=defaults.max_iter)
    parser.add_argument("--stop-level", type=int, default=defaults.stop_level)
    parser.add_argument("--partitioner", choices=PARTITIONERS, default=defaults.partitioner)
    parser.add_argument("--warm-start", choices=("scaled", "concat"), default=defaults.warm_start)
    parser.add_argument("--cache-mb", type=float, default=defaults.cache_mb,
                        help="kernel cache per task (MB)")
    parser.add_argument("--memory-mb", type=float,
                        help="memory one partition's solve may use (default: "
                        "spark.executor.pyspark.memory, else RAM / cores); a level that cannot "
                        "fit stops with an error naming it")
    parser.add_argument("--model-out", help="directory for the model (written atomically)")
    parser.add_argument("--metrics-out", help="JSON file for per-level metrics")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--checkpoint-dir",
                        help="record every finished level here (γ and the partition layout)")
    parser.add_argument("--resume", action="store_true",
                        help="continue from the last level recorded in --checkpoint-dir")
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS, help="built-in data: rows")
    parser.add_argument("--master", help="Spark master; default: spark-submit's, else local[*]")
    parser.add_argument("--epochs", type=int, default=30, help="linear kernel: DSVRG epochs")
    parser.add_argument("--step", type=float, help="linear kernel: SVRG step (default 1/(2L))")
    parser.add_argument("--epoch-tol", type=float, default=1e-6,
                        help="linear kernel: stop when the objective changes less (relative)")
    parser.add_argument("--partitions", type=int,
                        help="linear kernel: DSVRG partitions (default: the cores Spark has)")
    args, args.config = parse_with_defaults(parser, "train_sodm", argv)
    if args.resume and not args.checkpoint_dir:
        parser.error("--resume needs --checkpoint-dir (the directory of the run to continue)")
    return args


def load_data(spark, args):
    """(training blocks RDD, classes, test (X, y) or None) for the flags given."""
    linear = args.kernel == "linear"
    if args.data is None:
        make = make_linear if linear else make_nonlinear
        X, y = make(args.rows + DEFAULT_TEST_ROWS, seed=args.seed)
        return (numpy_to_blocks(spark.sparkContext, X[:args.rows], y[:args.rows]),
                np.array([-1, 1]), (X[args.rows:], y[args.rows:]), X.shape[1])
    sparse = linear and args.format == "libsvm"
    blocks, n_features = read_blocks(spark, args.data, args.format, sparse=sparse)
    classes = checked_classes(blocks, n_features)
    check_two_classes(classes, f"--data {args.data}", "SODM")
    test = None
    if args.test_data:
        if args.format == "libsvm":
            test = read_libsvm_local(args.test_data, sparse=sparse)
            if test[0].shape[1] < n_features:  # LIBSVM omits trailing zero columns
                test = read_libsvm_local(args.test_data, n_features=n_features, sparse=sparse)
        else:
            test = collect_blocks(read_blocks(spark, args.test_data, args.format)[0])
        if test[0].shape[1] != n_features:
            raise ValueError(
                f"--test-data {args.test_data} has {test[0].shape[1]} features but --data "
                f"{args.data} has {n_features}; both must describe the same columns. Give test "
                "data with the training data's feature columns, in the same order.")
        check_finite_rows(test[0], f"--test-data {args.test_data}")
    return blocks, classes, test, n_features


def run_levels(spark, blocks, classes, test, params, checkpoint_dir=None, resume=False):
    """SODM Algorithm 1: one printed line per level."""
    print(f"{'level':>5} {'partitions':>10} {'seconds':>9} {'objective':>14} "
          f"{'SVs':>8} {'sweeps':>7} {'test acc':>9}", flush=True)

    def show(entry):
        accuracy = "" if entry.test_accuracy is None else f"{entry.test_accuracy:.4f}"
        print(f"{entry.level:>5} {entry.partitions:>10} {entry.seconds:>9.2f} "
              f"{entry.objective:>14.6g} {entry.n_sv:>8} {entry.sweeps_max:>7} "
              f"{accuracy:>9}", flush=True)

    if resume and (Path(checkpoint_dir) / "state.json").exists():
        print(f"resuming from {checkpoint_dir}: the levels it holds are not solved again",
              flush=True)
    fit = fit_sodm(spark.sparkContext, blocks, params, classes, test=test, on_level=show,
                   checkpoint_dir=checkpoint_dir, resume=resume)
    last = fit.levels[-1]
    summary = {"levels": [entry.to_dict() for entry in fit.levels],
               "train_seconds": fit.train_seconds, "partition_seconds": fit.partition_seconds,
               "n_sv": int(fit.model.support_vectors.shape[0]), "rows": fit.n_rows,
               "test_accuracy": last.test_accuracy, "params": vars(params)}
    print(f"trained on {fit.n_rows} rows in {fit.train_seconds:.2f} s "
          f"(partitioning {fit.partition_seconds:.2f} s); {summary['n_sv']} support vectors"
          + ("" if last.test_accuracy is None else f"; test accuracy {last.test_accuracy:.4f}"))
    return fit, summary


def run_dsvrg(spark, blocks, classes, test, n_features, args):
    """SODM Algorithm 2 (linear kernel): one printed line per epoch."""
    params = DSVRGParams(lam=args.lam, theta=args.theta, v=args.v, epochs=args.epochs,
                         tol=args.epoch_tol, step=args.step,
                         n_partitions=args.partitions, strata=args.strata, seed=args.seed)
    print(f"{'epoch':>5} {'seconds':>9} {'objective':>14} {'test acc':>9}", flush=True)

    def show(entry):
        accuracy = "" if entry.test_accuracy is None else f"{entry.test_accuracy:.4f}"
        print(f"{entry.epoch:>5} {entry.seconds:>9.2f} {entry.objective:>14.8g} {accuracy:>9}",
              flush=True)

    fit = fit_dsvrg(spark.sparkContext, blocks, params, classes, n_features, test=test,
                    on_epoch=show)
    last = fit.epochs[-1]
    summary = {"epochs": [entry.to_dict() for entry in fit.epochs],
               "train_seconds": fit.train_seconds, "partition_seconds": fit.partition_seconds,
               "n_sv": 1, "rows": fit.n_rows, "step": fit.step,
               "test_accuracy": last.test_accuracy, "objective": last.objective,
               "layout": fit.layout, "resident_hits": fit.resident_hits,
               "resident_misses": fit.resident_misses, "params": vars(params)}
    print(f"trained on {fit.n_rows} rows in {fit.train_seconds:.2f} s with DSVRG "
          f"({len(fit.epochs)} epochs, step {fit.step:.3g})"
          + ("" if last.test_accuracy is None else f"; test accuracy {last.test_accuracy:.4f}"))
    return fit, summary


def sodm_params(args) -> SODMParams:
    params = SODMParams(kernel=args.kernel, gamma=args.gamma, lam=args.lam, theta=args.theta,
                        v=args.v, tol=args.tol, max_iter=args.max_iter, p=args.p,
                        levels=args.levels, strata=args.strata, stop_level=args.stop_level,
                        partitioner=args.partitioner, warm_start=args.warm_start, seed=args.seed,
                        cache_mb=args.cache_mb, memory_mb=args.memory_mb)
    params.validate()
    return params


def train(spark, args):
    """Load the data the flags name and fit: (fit, metrics summary). Raises ValueError on bad
    input and FileNotFoundError on a missing file (the jobs turn both into messages)."""
    params = sodm_params(args)
    blocks, classes, test, n_features = load_data(spark, args)
    if args.kernel == "linear":
        return run_dsvrg(spark, blocks, classes, test, n_features, args)
    return run_levels(spark, blocks, classes, test, params, args.checkpoint_dir, args.resume)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        sodm_params(args)
    except ValueError as error:
        raise SystemExit(f"error: {error}")
    spark, created = get_session("sodm-spark: train_sodm", args.master)
    try:
        print("config: " + json.dumps({k: v for k, v in vars(args).items()}, default=str),
              flush=True)
        try:
            fit, summary = train(spark, args)
        except (ValueError, FileNotFoundError) as error:
            raise SystemExit(f"error: {error}")
        write_outputs(fit.model, summary, args.model_out, args.metrics_out)
    finally:
        if created:  # leave a session we joined (tests, notebooks) running
            spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
