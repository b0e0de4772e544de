"""Train one of the papers' comparators as a single Spark task: CSVRG (coreset SVRG), CVM,
CVR (Core Vector Regression) or the sensitivity-coreset SVM.

    sodm-train-baseline --method csvrg|cvm|cvr|coreset-svm [--data PATH ...]
    spark-submit jobs/train_baseline.py --method csvrg|cvm|cvr|coreset-svm [--data PATH ...]

The data flags and the metrics JSON are those of the training job (sodm-train) (`train_seconds`,
`test_accuracy`, `n_sv`; `test_rmse` and `test_mre` for cvr). Without --data the job trains on
built-in generated data: the nonlinear two-class set of the training job, or Friedman #1 (the CVR
paper's set) for cvr. Method flags left out take the estimator's defaults.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
from sklearn.datasets import make_friedman1

from sodm_spark.core.errors import SETTINGS, InputError, reported, run_job
from sodm_spark.core.kernels import Kernel, gamma_value, kernel_names
from sodm_spark.core.validation import check_two_classes
from sodm_spark.data.datasets import make_nonlinear
from sodm_spark.models.expansion import KernelExpansion
from sodm_spark.ops.jobconf import (check_output_paths, check_store_outputs, gamma_arg,
                                     parse_with_defaults, use_packaged_spark_conf,
                                     write_outputs)
from sodm_spark.spark.io import read_blocks, read_libsvm_local
from sodm_spark.spark.session import collect_checked, job_session
from sodm_spark.spark.io import numpy_to_blocks
from sodm_spark.spark.single import ESTIMATORS, fit_coreset_svm_partitioned, fit_in_one_task
from sodm_spark.spark.sodm.prepare import checked_classes, row_count_and_variance
from sodm_spark.spark.engine import context_of

# flag (argparse dest) -> estimator parameter, per method; flags left at None are not passed
METHOD_PARAMS = {
    "csvrg": {"kernel": "kernel", "gamma": "gamma", "lam": "lam", "theta": "theta", "v": "v",
              "loss": "loss", "delta": "delta", "max_core": "max_core", "epochs": "epochs",
              "seed": "random_state"},
    "cvm": {"kernel": "kernel", "gamma": "gamma", "C": "C", "tol": "tol",
            "max_core": "max_core", "seed": "random_state"},
    "cvr": {"kernel": "kernel", "gamma": "gamma", "C": "C", "mu": "mu", "tol": "tol",
            "max_core": "max_core", "seed": "random_state"},
    "coreset-svm": {"kernel": "kernel", "gamma": "gamma", "C": "C",
                    "coreset_size": "coreset_size", "seed": "random_state"},
}
DEFAULT_ROWS, DEFAULT_TEST_ROWS = 20000, 5000


def parse_args(argv=None, prog="train_baseline.py"):
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("--method", required=True, choices=sorted(ESTIMATORS))
    parser.add_argument("--data", help="training data (LIBSVM, CSV or Parquet); default: built-in")
    parser.add_argument("--test-data", help="test data in the same format")
    parser.add_argument("--format", choices=("libsvm", "csv", "parquet"), default="libsvm")
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS, help="built-in data: rows")
    parser.add_argument("--kernel", help=f"{', '.join(kernel_names())} (coreset-svm: libsvm's "
                        "linear, rbf or poly)")
    parser.add_argument("--gamma", type=gamma_arg, help="'scale', 'auto' or a number")
    parser.add_argument("--lam", type=float, help="csvrg: λ of the ODM/SVM loss")
    parser.add_argument("--theta", type=float, help="csvrg: ODM θ")
    parser.add_argument("--v", type=float, help="csvrg: ODM v")
    parser.add_argument("--loss", choices=("odm", "hinge", "squared_hinge"), help="csvrg loss")
    parser.add_argument("--delta", type=float, help="csvrg: coverage radius δ of the coreset")
    parser.add_argument("--max-core", type=int, help="csvrg/cvm/cvr: most core points")
    parser.add_argument("--epochs", type=int, help="csvrg: SVRG epochs")
    parser.add_argument("--C", type=float, help="cvm/cvr/coreset-svm: C")
    parser.add_argument("--mu", type=float, help="cvr: μ of Eqn 6, the mean slack that sets "
                        "the learned tube width (default 'auto')")
    parser.add_argument("--tol", type=float, help="cvm/cvr: MEB tolerance ε (stop at (1+ε)R)")
    parser.add_argument("--coreset-size", type=int, help="coreset-svm: draws m")
    parser.add_argument("--partitions", type=int, default=1,
                        help="coreset-svm: > 1 runs merge-and-reduce over this many partitions")
    parser.add_argument("--model-out", help="directory for the model (written atomically)")
    parser.add_argument("--metrics-out", help="JSON file for the metrics")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--master", help="Spark master; default: spark-submit's, else local[*]")
    args, args.config = parse_with_defaults(parser, "train_baseline", argv)
    if args.partitions > 1 and args.method != "coreset-svm":
        parser.error("--partitions applies to --method coreset-svm only (the others run as "
                     "one Spark task)")
    return args


def estimator_params(args) -> dict:
    return {param: getattr(args, flag) for flag, param in METHOD_PARAMS[args.method].items()
            if getattr(args, flag) is not None}


def load_data(spark, args):
    """(blocks, test (X, y) or None, regression?)."""
    regression = args.method == "cvr"
    sc = context_of(spark)
    if args.data is None:
        if regression:
            X, y = make_friedman1(args.rows + DEFAULT_TEST_ROWS, noise=1.0,
                                  random_state=args.seed)
        else:
            X, y = make_nonlinear(args.rows + DEFAULT_TEST_ROWS, seed=args.seed)
        return (numpy_to_blocks(sc, X[:args.rows], y[:args.rows]),
                (X[args.rows:], y[args.rows:]), regression)
    blocks, n_features = read_blocks(spark, args.data, args.format)
    if not regression:  # the classifiers here (csvrg, cvm, coreset-svm) are binary
        check_two_classes(checked_classes(blocks, n_features, where=f"--data {args.data}"),
                          f"--data {args.data}", args.method)
    test = None
    if args.test_data:
        if args.format == "libsvm":
            test = read_libsvm_local(args.test_data, check_values=True)
            if test[0].shape[1] < n_features:  # LIBSVM omits trailing zero columns
                test = read_libsvm_local(args.test_data, n_features=n_features)
        else:
            test = collect_checked(spark, args.test_data, args.format,
                                   f"--test-data {args.test_data}")
        if test[0].shape[1] != n_features:
            raise InputError(f"--test-data {args.test_data} has {test[0].shape[1]} features but "
                             f"--data {args.data} has {n_features}; both must describe the same "
                             "columns. Give test data with the training data's feature columns, "
                             "in the same order.")
    return blocks, test, regression


def spread_blocks(blocks, n_partitions: int):
    """Blocks dealt round-robin by their index into ``n_partitions`` partitions. Unlike
    ``repartition``, the layout is the same on every retry, so seeded coresets repeat."""
    return (blocks.zipWithIndex().map(lambda item: (item[1] % n_partitions, item[0]))
            .partitionBy(n_partitions, lambda key: key).values())


def fit(spark, args, blocks):
    """(KernelExpansion, metrics extras) for the chosen method."""
    params = estimator_params(args)
    if args.method == "coreset-svm" and args.partitions > 1:
        _, n_features, variance = row_count_and_variance(blocks)
        kernel = Kernel.create(args.kernel or "linear",
                               gamma_value(args.gamma or "scale", n_features, variance))
        model, coreset = fit_coreset_svm_partitioned(
            spread_blocks(blocks, args.partitions), checked_classes(blocks, n_features), kernel,
            args.coreset_size or 1000, args.C or 1.0, args.seed)
        return model, {"n_coreset": int(len(coreset))}
    estimator, task_seconds, _ = fit_in_one_task(blocks, args.method, params)
    model = estimator.model_
    if getattr(model, "intercept", None) is None and hasattr(estimator, "intercept_"):
        model = KernelExpansion(model.support_vectors, model.coef, model.kernel, model.classes,
                                np.atleast_1d(np.asarray(estimator.intercept_, dtype=float)))
    extras = {"task_seconds": task_seconds}
    for attribute in ("n_core_", "n_coreset_"):
        if hasattr(estimator, attribute):
            extras[attribute.rstrip("_")] = int(getattr(estimator, attribute))
    return model, extras


def test_metrics(model: KernelExpansion, test, regression: bool) -> dict:
    if test is None:
        return {}
    X, y = test
    predictions = model.predict(X)
    if regression:
        from sodm_spark.baselines.cvm import mean_relative_error, rmse_over_max

        return {"test_rmse": float(np.sqrt(np.mean((predictions - y) ** 2))),
                "test_rmse_over_max": float(rmse_over_max(y, predictions)),
                "test_mre": float(mean_relative_error(y, predictions))}
    return {"test_accuracy": float(np.mean(predictions == y))}


def main(argv=None, prog="train_baseline.py") -> int:
    """The job; a failure raises sodm_spark.core.errors.JobExit (its one line and exit code)."""
    args = parse_args(argv, prog)
    with reported(value_errors=SETTINGS):
        check_output_paths({"--model-out": args.model_out}, {"--metrics-out": args.metrics_out})
    with job_session(f"sodm-spark: train_baseline {args.method}", args.master) as spark:
        print("config: " + json.dumps(vars(args), default=str), flush=True)
        with reported(value_errors=SETTINGS):  # outputs on a store: reachable before the work
            check_store_outputs({"--model-out": args.model_out},
                                {"--metrics-out": args.metrics_out})
        with reported():
            blocks, test, regression = load_data(spark, args)
        # the estimator's own refusals arrive from its task (sodm_spark.spark.single)
        with reported(prefix=f"{args.method} refused --data {args.data or '(built-in)'}: "):
            start = time.perf_counter()
            model, extras = fit(spark, args, blocks)
            train_seconds = time.perf_counter() - start
        summary = {"method": args.method, "train_seconds": train_seconds,
                   "n_sv": int(model.support_vectors.shape[0]), **extras,
                   **test_metrics(model, test, regression), "params": estimator_params(args)}
        print(f"{args.method}: trained in {train_seconds:.2f} s; {summary['n_sv']} support "
              "vectors; " + ", ".join(f"{k} {v:.4f}" for k, v in summary.items()
                                      if k.startswith("test_")), flush=True)
        write_outputs(model, summary, args.model_out, args.metrics_out)
    return 0


def command() -> int:
    """``sodm-train-baseline``, the console command (pyproject.toml ``[project.scripts]``)."""
    use_packaged_spark_conf()
    return run_job(lambda argv=None: main(argv, prog="sodm-train-baseline"))


if __name__ == "__main__":  # spark-submit of this file, python -m sodm_spark.jobs.train_baseline
    use_packaged_spark_conf()
    sys.exit(run_job(main))
