"""Benchmark SODM, its comparators and their peers side by side, in one Spark session.

    sodm-benchmark --dataset fashion-mnist --train-rows 20000 \\
        --methods sodm,exact-odm,svc,mllib-linearsvc --partitioners stratified,random \\
        --budget-seconds 600 --out-dir docs/results
    sodm-benchmark --data train.libsvm --test-data test.libsvm --methods sodm,svc
    python jobs/benchmark.py --methods none --scaling rows,cores --rows 10000,100000,1000000

Every method gets the same train/test split and the same hyperparameters where they mean the
same thing: one numeric RBF gamma (resolved once from the training rows) for every RBF method;
λ, θ, v for every ODM method. SVC's C is its own flag (--svc-C): C (hinge loss) and λ (the ODM
loss) are different things and neither is derived from the other; --linear-C is LinearSVC's C
and MLlib's regParam = 1/(C·M). A method still running after --budget-seconds is stopped and
reported as not finished (N/A): Spark methods by cancelling their job group, driver-side
methods (exact ODM, SVRG, SVC, LinearSVC) by killing their child process.

Outputs in --out-dir: benchmark.json, benchmark.md and PNGs (accuracy vs fit seconds, one
point per SODM level; speed-up vs cores; seconds vs rows). --readme FILE rewrites the region
between <!-- results:start --> and <!-- results:end --> of the Markdown file FILE with the same
section (--readme-region NAME: between <!-- NAME:start --> and <!-- NAME:end -->); the project's
results live in docs/benchmarks.md (--readme docs/benchmarks.md).

Two classes are mapped to ±1; with more (--dataset fashion-mnist-10, or files with 3+ labels)
the methods that fit several classes run (SODM, exact ODM, SVC, LinearSVC, MLlib LinearSVC and
Nyström + MLlib LinearSVC through OneVsRest, XGBoost) and the others are reported as skipped.
"""
from __future__ import annotations

import argparse
import sys

from sodm_spark.core.errors import SETTINGS, SettingsError, reported, run_job
from sodm_spark.ops.jobconf import check_output_paths, parse_with_defaults, use_packaged_spark_conf
from sodm_spark.spark.session import remote_url


def _names(text):
    return [part.strip() for part in str(text).split(",") if part.strip()]


def _ints(text):
    try:
        return [int(float(part)) for part in _names(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}") from None


def _cache_mb(text):
    if str(text).strip().lower() == "auto":
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected megabytes or 'auto', got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"--cache-mb must be positive, got {text!r}")
    return value


def parse_args(argv=None, prog="benchmark.py") -> argparse.Namespace:
    """The job's flags, one function per group of them (the help lists them so), then the
    checks between them argparse cannot express (one line, exit code 2)."""
    from sodm_spark.benchmarking.methods import describe_methods

    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0],
                                     epilog="methods: " + describe_methods())
    for add in (_data_arguments, _method_arguments, _hyperparameter_arguments,
                _scaling_arguments, _output_arguments):
        add(parser)
    args, args.config = parse_with_defaults(parser, "benchmark", argv)
    _check_arguments(parser, args)
    return args


def _data_arguments(parser) -> None:
    from sodm_spark.data.datasets import DATASETS

    data = parser.add_argument_group("data")
    data.add_argument("--data", help="training data file (LIBSVM, CSV or Parquet)")
    data.add_argument("--test-data", help="test data in the same format")
    data.add_argument("--format", choices=("libsvm", "csv", "parquet"), default="libsvm")
    data.add_argument("--test-fraction", type=float, default=0.2,
                      help="--data without --test-data: hold out this share (seeded)")
    data.add_argument("--dataset", choices=DATASETS,
                      help="a named data set (default without --data: nonlinear, generated): "
                      "fashion-mnist ships in Debian's dataset-fashion-mnist; letter, satellite "
                      "and shuttle in Debian's r-cran-mlbench (read with PyPI rdata); nonlinear "
                      "and linear are seeded generators (up to 10^6 rows and more)")
    data.add_argument("--dataset-root", help="folder of the named data set's files "
                      "(default: where its Debian package installs them)")
    data.add_argument("--train-rows", type=int, help="keep this many training rows (seeded); "
                      "generated sets: rows to generate (default 20000)")
    data.add_argument("--test-rows", type=int, help="keep this many test rows (seeded)")


def _method_arguments(parser) -> None:
    from sodm_spark.benchmarking.methods import METHODS, PARTITIONERS

    run = parser.add_argument_group("methods")
    run.add_argument("--methods", default="sodm,exact-odm,svc,mllib-linearsvc",
                     help=f"comma-separated, or 'none': {', '.join(METHODS)}")
    run.add_argument("--partitioners", default="stratified",
                     help=f"SODM runs, comma-separated: {', '.join(PARTITIONERS)}")
    run.add_argument("--budget-seconds", type=float, default=600.0,
                     help="per method; after it the method is reported as not finished")


def _hyperparameter_arguments(parser) -> None:
    """The settings the methods share; those the ODM fits share with the estimators and the
    training job default to the fits' own (SODMParams, DSVRGParams), never to numbers of
    this job's (conf/sodm-jobs.toml's [benchmark] table sets the comparison's)."""
    from sodm_spark.spark.dsvrg.fit import DSVRGParams
    from sodm_spark.spark.sodm.params import WARM_STARTS, SODMParams

    odm, linear = SODMParams(), DSVRGParams()
    hyper = parser.add_argument_group("hyperparameters")
    hyper.add_argument("--gamma", default=odm.gamma,
                       help="RBF gamma: 'scale', 'auto' or a number (default %(default)s)")
    hyper.add_argument("--lam", type=float, default=odm.lam,
                       help="ODM λ (every ODM method; default %(default)g)")
    hyper.add_argument("--theta", type=float, default=odm.theta)
    hyper.add_argument("--v", type=float, default=odm.v)
    hyper.add_argument("--tol", type=float, default=odm.tol)
    hyper.add_argument("--max-iter", type=int, default=odm.max_iter, help="ODM sweeps")
    hyper.add_argument("--linear-lam", type=float, help="λ of the linear ODM (dsvrg, svrg); "
                       "default --lam")
    hyper.add_argument("--epochs", type=int, default=linear.epochs,
                       help="dsvrg/svrg/csvrg epochs")
    hyper.add_argument("--svc-C", type=float, default=10.0, help="C of svc, coreset-svm, cvm")
    hyper.add_argument("--linear-C", type=float, default=1.0,
                       help="C of linearsvc; mllib-linearsvc gets regParam = 1/(C·M)")
    hyper.add_argument("--max-core", type=int, default=1000, help="csvrg/cvm core points")
    hyper.add_argument("--coreset-size", type=int, default=2000, help="coreset-svm draws")
    hyper.add_argument("--xgb-trees", type=int, default=100, help="xgboost(-spark) trees")
    hyper.add_argument("--xgb-depth", type=int, default=6, help="xgboost(-spark) tree depth")
    hyper.add_argument("--nystroem-components", type=int, default=2000,
                       help="nystroem-linear/-spark landmarks (features)")
    hyper.add_argument("--nystroem-C", type=float, default=1.0,
                       help="C of the linear SVM on the Nyström features (MLlib: regParam = "
                       "1/(C·M))")
    # a fixed L, not the job's 'auto': every level is a row of the comparison
    hyper.add_argument("--levels", type=int, default=3, help="SODM L: K = p^L partitions")
    hyper.add_argument("--p", type=int, default=odm.p)
    hyper.add_argument("--strata", type=int, default=odm.strata)
    hyper.add_argument("--stop-level", type=int, default=odm.stop_level)
    hyper.add_argument("--warm-start", choices=WARM_STARTS, default=odm.warm_start)
    hyper.add_argument("--cache-mb", type=_cache_mb, default=odm.cache_mb,
                       help="kernel cache (MB) of the ODM solvers, or 'auto' (the default): "
                       "what the jobs use (SODM: the memory a task may use at each level; "
                       "exact ODM: the memory available)")
    hyper.add_argument("--seed", type=int, default=odm.seed)


def _scaling_arguments(parser) -> None:
    scale = parser.add_argument_group("scaling")
    scale.add_argument("--scaling", default="", help="'rows', 'cores' or 'rows,cores'")
    scale.add_argument("--rows", type=_ints, default=[10000, 100000, 1000000],
                       help="rows scaling: the sizes M (generated data)")
    scale.add_argument("--scaling-dataset", choices=("nonlinear", "linear"), default="nonlinear")
    scale.add_argument("--scaling-methods", default="exact-odm,svc",
                       help="methods beside SODM in the rows scaling, or 'none'")
    scale.add_argument("--scaling-budget-seconds", type=float,
                       help="budget per method beside SODM in the rows scaling (default "
                       "--budget-seconds)")
    scale.add_argument("--scaling-sodm-budget-seconds", type=float, default=3600.0,
                       help="budget per SODM run in the scaling runs")
    scale.add_argument("--scaling-test-rows", type=int, default=2000,
                       help="scaling: test rows (scored after every level)")
    scale.add_argument("--partition-rows", type=int, default=2000,
                       help="scaling: most rows per top-level partition (levels grow with M)")
    scale.add_argument("--solved-levels", type=int, default=2,
                       help="scaling: SODM levels solved per run (the rest are stopped)")
    scale.add_argument("--cores", type=_ints, default=[1, 2], help="cores scaling: core counts")
    scale.add_argument("--cores-rows", type=int, default=50000,
                       help="cores scaling: generated training rows")


def _output_arguments(parser) -> None:
    out = parser.add_argument_group("output and Spark")
    out.add_argument("--out-dir", default="benchmark-results", help="JSON, Markdown, PNGs")
    out.add_argument("--readme", metavar="FILE",
                     help="rewrite this Markdown file's results region (the project keeps its "
                     "results in docs/benchmarks.md)")
    out.add_argument("--readme-region", default="results",
                     help="the region of --readme to rewrite: the lines <!-- NAME:start --> "
                     "and <!-- NAME:end --> (one region per data set, e.g. a multi-class run)")
    out.add_argument("--report-only", action="store_true",
                     help="run nothing: rewrite the Markdown, PNGs (and --readme region) from "
                     "--out-dir's benchmark.json, e.g. after changing the report's code")
    out.add_argument("--master", help="Spark master; default: spark-submit's, else local[*]")
    out.add_argument("--driver-memory", default="6g", help="JVM heap in local mode")


def _check_arguments(parser, args) -> None:
    """The method and partitioner names resolved, and the checks between flags (parser.error:
    one line, exit code 2)."""
    from sodm_spark.benchmarking.methods import METHODS, PARTITIONERS, parse_names

    try:
        args.methods = [] if args.methods.strip() == "none" else \
            parse_names(args.methods, METHODS, "method")
        args.partitioners = parse_names(args.partitioners, PARTITIONERS, "partitioner")
        args.scaling = parse_names(args.scaling, ("rows", "cores"), "scaling") \
            if args.scaling.strip() else []
        args.scaling_methods = [] if args.scaling_methods.strip() == "none" else \
            parse_names(args.scaling_methods, METHODS, "scaling method")
    except ValueError as error:
        parser.error(str(error))
    if "sodm" in args.scaling_methods:
        parser.error("--scaling-methods lists the methods beside SODM; SODM always runs.")
    if not args.readme_region.replace("-", "").replace("_", "").isalnum():
        parser.error("--readme-region takes letters, digits, '-' and '_' (it names the "
                     f"--readme file's <!-- NAME:start --> line), got {args.readme_region!r}.")
    if args.data and args.dataset:
        parser.error("give --data (your files) or --dataset (a named set), not both.")
    if args.test_data and not args.data:
        parser.error("--test-data needs --data.")
    if not args.methods and not args.scaling and not args.report_only:
        parser.error("nothing to do: --methods none and no --scaling.")
    if min(args.budget_seconds, args.scaling_budget_seconds or 1,
           args.scaling_sodm_budget_seconds) <= 0:
        parser.error("budgets must be positive seconds.")
    try:
        args.gamma = float(args.gamma)
    except ValueError:
        pass


def main(argv=None, prog="benchmark.py") -> int:
    """The job; a failure raises sodm_spark.core.errors.JobExit (its one line and exit code)."""
    from sodm_spark.benchmarking.plots import require_matplotlib
    from sodm_spark.benchmarking.run import rewrite_reports, run_benchmark

    args = parse_args(argv, prog)
    argv = sys.argv[1:] if argv is None else list(argv)
    with reported(value_errors=SETTINGS):
        check_output_paths({"--out-dir": args.out_dir}, {})
        if remote_url(args.master) is not None:  # the budgets need the classic session's API
            raise SettingsError("the benchmark job needs a classic Spark session: it cancels a "
                                "method over its time budget by job group and frees the RDDs "
                                "it left, which a Spark Connect session cannot; run it without "
                                "--master sc://... (or connect:...) and with SPARK_REMOTE unset.")
        require_matplotlib()  # the plots come at the end: refused now, not after the methods
    with reported():
        if args.report_only:
            rewrite_reports(args.out_dir, args.readme, args.readme_region)
        else:
            run_benchmark(args, argv)
    return 0


def command() -> int:
    """``sodm-benchmark``, the console command (pyproject.toml ``[project.scripts]``)."""
    use_packaged_spark_conf()
    return run_job(lambda argv=None: main(argv, prog="sodm-benchmark"))


if __name__ == "__main__":  # spark-submit of this file, python -m sodm_spark.jobs.benchmark
    use_packaged_spark_conf()
    sys.exit(run_job(main))
