"""Train SODM (SODM paper, Algorithm 1) on Spark and report every level.

    spark-submit jobs/train_sodm.py --levels 3
    spark-submit jobs/train_sodm.py --data train.libsvm --test-data test.libsvm --levels 3 \\
        --model-out models/sodm --metrics-out metrics.json

Without --data it trains on a built-in, seeded, generated nonlinear data set
(sodm_spark.data.datasets.make_nonlinear: 60,000 training and 10,000 test rows; with
--kernel linear, sodm_spark.data.datasets.make_linear). With --kernel linear the job runs DSVRG
(SODM Algorithm 2) on the primal instead of the kernel levels. LIBSVM input stays sparse (CSR)
unless at least half its cells hold a value, for DSVRG and for the kernel levels alike (their
kernel blocks are then sparse products; --scale minmax divides each column by its largest
magnitude instead, so zeros stay zeros); only the laplacian kernel needs dense rows. A bad input
or setting ends the job with one `error: ...` line and its kind's exit code (sodm_spark.core.errors;
docs/operations.md, "When a job fails").
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import scipy.sparse

from sodm_spark.core.errors import SETTINGS, reported, run_job
from sodm_spark.core.validation import check_two_classes, shown_classes
from sodm_spark.data.datasets import make_linear, make_nonlinear
from sodm_spark.models import input_projection
from sodm_spark.models.compression import AUTO_ABOVE, AUTO_POINTS, METHODS as COMPRESSION_METHODS
from sodm_spark.ops.jobconf import check_output_paths, gamma_arg, parse_with_defaults, write_outputs
from sodm_spark.selection.tuning import DEFAULT_SEARCH_GRID_TEXT, SEARCH_PARTITION_ROWS, ParamGrid
from sodm_spark.selection.tuning_report import point_line, table, write_report
from sodm_spark.spark.dsvrg.fit import DSVRGParams
from sodm_spark.spark.io import check_blocks, read_blocks, read_libsvm_local
from sodm_spark.spark.memory import check_collectable, check_fit_resources, executor_memory
from sodm_spark.spark.partitioning import PARTITIONERS
from sodm_spark.spark.session import PERSIST, collect_blocks, job_session, numpy_to_blocks
from sodm_spark.spark.sodm.global_step import NEAR_MAJORITY, GlobalPlan
from sodm_spark.spark.sodm.params import GLOBAL_STEPS, INPUT_MAPS, KERNEL_STORAGES, SODMParams
from sodm_spark.spark.sodm.plan import (KERNEL_BOUND_FEATURES, TOP_PARTITION_ROWS, auto_level_count,
                                        check_levels_fit_rows, kernel_mb, storage_itemsize)
from sodm_spark.spark.sodm.prepare import checked_classes
from sodm_spark.spark.train import (Progress, Search, check_classes, fit_params,
                                    train as train_on_spark)

DEFAULT_ROWS, DEFAULT_TEST_ROWS = 60000, 10000


def parse_args(argv=None, prog="train_sodm.py", description=None,
               tune_only=False) -> argparse.Namespace:
    """The job's flags; ``tune_only`` (jobs/tune.py) searches and writes the report, no fit."""
    defaults, linear = SODMParams(), DSVRGParams()
    parser = argparse.ArgumentParser(prog=prog, description=description or
                                     __doc__.split("\n\n")[0])
    parser.add_argument("--data", help="training data (LIBSVM, CSV or Parquet); default: built-in")
    parser.add_argument("--test-data", help="test data in the same format: the final model's "
                        "accuracy (every level's with --test-every-level)")
    parser.add_argument("--test-every-level", action="store_true", default=None,
                        help="score the test rows with every level's model too (costs test rows "
                        "x training rows kernel entries per level; by default only when that "
                        "is cheap)")
    parser.add_argument("--format", choices=("libsvm", "csv", "parquet"), default="libsvm")
    parser.add_argument("--levels", type=levels_arg, default=defaults.levels,
                        help="L: start from K = p^L partitions (default 'auto': partitions of "
                        f"about {TOP_PARTITION_ROWS:,} rows, or for rows of "
                        f"{KERNEL_BOUND_FEATURES}+ features the largest whose kernels are "
                        "cached; automatic stopping decides how far down to go)")
    parser.add_argument("--p", type=int, default=defaults.p, help="partitions merged per level")
    parser.add_argument("--strata", type=int, default=defaults.strata, help="S landmark strata")
    parser.add_argument("--kernel", default=defaults.kernel)
    parser.add_argument("--gamma", type=gamma_arg, help="'scale', 'auto' or a number (default "
                        f"{defaults.gamma!r}; without --gamma, --lam, --theta and --v the job "
                        "searches gamma and lam first (theta 0.1, v 0.2), on a sample of the "
                        "top level's partitions)")
    parser.add_argument("--scale", choices=("minmax", "none"), default=defaults.scale,
                        help="map every column onto [0, 1] before the kernel (default; the "
                        "model stores the map) or use the rows as they are")
    parser.add_argument("--input-map", choices=INPUT_MAPS, default=defaults.input_map,
                        help="auto (default): dense rows of at least "
                        f"{input_projection.MIN_FEATURES} features and the rbf kernel are "
                        "fitted on the principal components that keep "
                        f"{input_projection.VARIANCE_KEPT * 100:.0f}%% of the variance when they are "
                        "at most a third of the features (the model stores the map); none: "
                        "always the features themselves")
    parser.add_argument("--kernel-offset", type=float, default=defaults.kernel_offset,
                        help="kernel ODM: solve with k + c, a penalized bias (default 0)")
    parser.add_argument("--lam", type=float, help=f"λ (default {defaults.lam:g})")
    parser.add_argument("--theta", type=float, help=f"θ (default {defaults.theta:g})")
    parser.add_argument("--v", type=float, help=f"v (default {defaults.v:g})")
    parser.add_argument("--tol", type=float, default=defaults.tol,
                        help="kernel levels: a partition's solve stops when the largest "
                        "projected-gradient violation over its rows is at most this")
    parser.add_argument("--max-iter", type=int, default=defaults.max_iter)
    parser.add_argument("--stop-level", type=int, default=defaults.stop_level)
    parser.add_argument("--partitioner", choices=PARTITIONERS, default=defaults.partitioner)
    parser.add_argument("--warm-start", choices=("scaled", "concat"), default=defaults.warm_start)
    parser.add_argument("--cache-mb", type=float, default=defaults.cache_mb,
                        help="cap on the kernel cache per task (MB; default: what the memory "
                        "budget allows)")
    parser.add_argument("--kernel-storage", choices=KERNEL_STORAGES,
                        default=defaults.kernel_storage,
                        help="dtype of the cached kernel matrices: auto (default) is int16 fixed "
                        "point (half float32's memory, entries within 1.5e-5 of the rbf "
                        "kernel's, faster sweeps) where the kernel's diagonal bounds its "
                        "values, float32 for the others; float32 or int16 always")
    parser.add_argument("--memory-mb", type=float,
                        help="memory one partition's solve may use (default: the executor's "
                        "memory for Python divided by the tasks that run at once); a level that "
                        "cannot fit stops the run (or, with --no-auto-stop, fails naming it)")
    stopping = parser.add_argument_group(
        "automatic stopping", "after every level a validation slice is scored; the run stops "
        "when a merge no longer pays and writes the best level's model")
    stopping.add_argument("--no-auto-stop", dest="auto_stop", action="store_false",
                          help="run every level down to --stop-level; the last level's model")
    stopping.add_argument("--validation-fraction", type=float,
                          default=defaults.validation_fraction,
                          help="share of the training rows held out for validation "
                          f"(at most --validation-max-rows; default {defaults.validation_fraction})")
    stopping.add_argument("--validation-max-rows", type=int,
                          default=defaults.validation_max_rows,
                          help="most rows held out (default %(default)s: every training "
                          "set of 100,000 rows or more gives that many)")
    stopping.add_argument("--validation-data",
                          help="validation rows from a file (same format) instead of held-out rows")
    stopping.add_argument("--min-improvement", type=float, default=defaults.min_improvement,
                          help="stop when the next merge is not expected to raise validation "
                          "accuracy by this much (absolute; default "
                          f"{defaults.min_improvement} = {100 * defaults.min_improvement:g} "
                          "points a level): the last merge's paired gain, --stop-confidence "
                          "standard errors up, times the ratio of the last two merges' gains")
    stopping.add_argument("--stop-confidence", dest="confidence", type=float,
                          default=defaults.confidence,
                          help="standard errors of the paired comparisons between levels "
                          "(default %(default)s): higher runs more levels, and keeps the last "
                          "level's model unless the one before is better by this many")
    stopping.add_argument("--time-budget", type=float, default=defaults.time_budget,
                          help="stop before a level whose predicted seconds would end "
                          "training after this many seconds")
    stopping.add_argument("--global-step", choices=GLOBAL_STEPS, default=defaults.global_step,
                          help="after the levels, one Nyström ODM of every training row on "
                          "--global-centres centres, kept where the validation slice ranks it "
                          "above the level: auto (default) when the chosen level is within "
                          f"{NEAR_MAJORITY * 100:g} points of the majority class or the last "
                          "merge gained nothing; always; none")
    stopping.add_argument("--global-centres", type=int, default=defaults.global_centres,
                          help="centres of the global step (default %(default)s; a pass costs "
                          "rows x centres x (inputs + centres) multiply-adds)")
    tuning = parser.add_argument_group(
        "hyperparameter search", "--tune scores a grid of (gamma, lam, theta, v) on the top "
        "level's partitions against the validation rows, then fits the best point")
    tuning.add_argument("--tune", action="store_true",
                        help="search the grid first; its best point replaces --gamma (as a "
                        "multiple of it), --lam, --theta and --v")
    tuning.add_argument("--grid", type=grid_arg, default=None,
                        help="the grid, e.g. 'gamma=0.5,1,2 lam=1e3,1e4,1e5 theta=0.1,0.3 "
                        "v=0.2,0.8' (these are the defaults; gamma values multiply --gamma)")
    tuning.add_argument("--tune-report", metavar="DIR",
                        help="write tuning.json, tuning.txt and the heat map tuning.png here")
    parser.add_argument("--max-sv", type=max_sv_arg, default="auto", metavar="N|auto|none",
                        help="compress the model to at most N points (reduced-set projection "
                        "of f, before it reaches the driver; reported on the validation and "
                        f"test rows before and after). Default 'auto': above {AUTO_ABOVE:,} "
                        f"support vectors, {AUTO_POINTS:,} points; 'none' keeps every one")
    parser.add_argument("--compress-method", choices=COMPRESSION_METHODS, default="random",
                        help="how --max-sv chooses its points: a random sample of the support "
                        "vectors (default), k-means centres of them, Eqn 8 landmarks, or the "
                        "largest |coefficients|")
    parser.add_argument("--model-out", help="directory for the model (written atomically)")
    parser.add_argument("--metrics-out", help="JSON file for per-level metrics")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--checkpoint-dir",
                        help="record every finished level here (γ and the partition layout)")
    parser.add_argument("--resume", action="store_true",
                        help="continue from the last level recorded in --checkpoint-dir")
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS, help="built-in data: rows")
    parser.add_argument("--master", help="Spark master; default: spark-submit's, else local[*]")
    parser.add_argument("--no-intercept", dest="fit_intercept", action="store_false",
                        help="linear kernel: no bias b (f(x) = wᵀx, the paper's model); by "
                        "default an unpenalized b is fitted, as MLlib's LinearSVC does")
    parser.add_argument("--epochs", type=int, default=linear.epochs,
                        help="linear kernel: DSVRG epochs")
    parser.add_argument("--step", type=float, help="linear kernel: SVRG step (default 1/(2L))")
    parser.add_argument("--epoch-tol", type=float, default=linear.relative_change_tol,
                        help="linear kernel: stop when the objective changes less (relative)")
    parser.add_argument("--partitions", type=int,
                        help="linear kernel: DSVRG partitions (default: the cores Spark has)")
    if tune_only:
        parser.set_defaults(tune=True, tune_report="tuning-report")
    args, args.config = parse_with_defaults(parser, "train_sodm", argv)
    args.tune_only = tune_only
    if isinstance(args.max_sv, int) and args.kernel == "linear":
        parser.error("--max-sv compresses kernel expansions; a linear model is one weight "
                     "vector already")
    if tune_only and args.model_out:
        parser.error("tune.py fits no model: run jobs/train_sodm.py --tune --model-out DIR to "
                     "tune and fit in one run")
    if args.resume and not args.checkpoint_dir:
        parser.error("--resume needs --checkpoint-dir (the directory of the run to continue)")
    if args.tune and args.kernel == "linear":
        parser.error("--tune searches the kernel levels' hyperparameters; the linear kernel "
                     "runs DSVRG (give --lam, --theta and --v, or use a nonlinear --kernel)")
    if args.tune and args.resume:
        parser.error("--tune with --resume: resume with the values the first run chose (its "
                     "metrics JSON 'tuning.best'; --gamma, --lam, --theta, --v) without --tune")
    if (args.grid is not None or args.tune_report) and not args.tune:
        parser.error("--grid and --tune-report go with --tune")
    return args


def levels_arg(text):
    """argparse type of ``--levels``: 'auto' (None) or an integer (SODMParams checks it)."""
    if text in (None, "auto"):
        return None
    try:
        return int(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"--levels must be an integer >= 0 or 'auto', got "
                                         f"{text!r}") from None


def max_sv_arg(text):
    """argparse type of ``--max-sv``: 'auto', 'none' or a positive integer."""
    if text in ("auto", "none"):
        return text
    try:
        value = int(text)
    except (TypeError, ValueError):
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"--max-sv must be 'auto', 'none' or a positive "
                                         f"integer, got {text!r}")
    return value


def grid_arg(text):
    """argparse type of ``--grid``: a checked :class:`ParamGrid`."""
    try:
        grid = ParamGrid.parse(text)
        grid.validate()
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return grid


#: What to do when --kernel laplacian meets LIBSVM rows too wide to be dense.
LAPLACIAN_ADVICE = ("use --kernel rbf or linear, which keep sparse LIBSVM rows sparse (the "
                    "laplacian kernel's L1 distances need dense rows)")


def row_layout(args):
    """(``sparse`` for the readers, what to do when rows are too wide to be dense): LIBSVM rows
    stay CSR unless at least half the cells hold a value, except for the laplacian kernel."""
    if args.format != "libsvm":
        return False, None
    if args.kernel == "laplacian":
        return False, LAPLACIAN_ADVICE
    return "auto", None


def read_driver_side(spark, path, args, n_features, sparse, flag):
    """(X, y) of a test or validation file on the driver, checked against the training data."""
    if args.format == "libsvm":  # a NaN or too large value is refused naming its line
        advice = row_layout(args)[1]
        pair = read_libsvm_local(path, sparse=sparse, check_values=True, dense_advice=advice)
        if pair[0].shape[1] < n_features:  # LIBSVM omits trailing zero columns
            pair = read_libsvm_local(path, n_features=n_features, sparse=sparse,
                                     dense_advice=advice)
        elif pair[0].shape[1] > n_features and scipy.sparse.issparse(pair[0]):
            # terms no training row has (text: new words): no support vector has them, so
            # they change no prediction (rbf: every kernel value by one factor, unless a
            # --kernel-offset is added; linear and poly: no inner product)
            beyond = int(pair[0].nnz - pair[0][:, :n_features].nnz)
            print(f"{flag} {path}: left out {beyond:,} value{'s' if beyond != 1 else ''} in "
                  f"columns beyond the training data's {n_features:,} (features no training "
                  "row has)", flush=True)
            pair = (pair[0][:, :n_features].tocsr(), pair[1])
    else:  # and CSV lines by the reader, Parquet rows by partition and row
        blocks, d = read_blocks(spark, path, args.format)
        stats = check_blocks(blocks, d, where=f"{flag} {path}")
        check_collectable(spark.sparkContext, 8.0 * d * stats.n_rows, f"{flag} {path}",
                          "score such a table with jobs/predict.py instead")
        pair = collect_blocks(blocks)
    if pair[0].shape[1] != n_features:
        raise ValueError(
            f"{flag} {path} has {pair[0].shape[1]} features but --data "
            f"{args.data} has {n_features}; both must describe the same columns. Give {flag[2:]} "
            "with the training data's feature columns, in the same order.")
    return pair


def load_data(spark, args, params=None):
    """(training blocks RDD, classes, test (X, y) or None, n_features) for the flags given
    (``params``: the fit's, :func:`check_settings`'; None: built from ``args``)."""
    linear = args.kernel == "linear"
    if args.data is None:
        make = make_linear if linear else make_nonlinear
        X, y = make(args.rows + DEFAULT_TEST_ROWS, seed=args.seed)
        return (numpy_to_blocks(spark.sparkContext, X[:args.rows], y[:args.rows]),
                np.array([-1, 1]), (X[args.rows:], y[args.rows:]), X.shape[1])
    sparse, advice = row_layout(args)
    # the kernel path computes its kernel blocks in float32: its dense rows are stored so
    blocks, n_features = read_blocks(spark, args.data, args.format, sparse=sparse,
                                     dtype=np.float64 if linear else np.float32,
                                     dense_advice=advice)
    # parsed once, by the checking job; the fit's passes (SODM levels, DSVRG epochs) read the
    # rows from here (DSVRG then keeps no second copy), on local disk, not the JVM heap
    blocks = blocks.persist(PERSIST)
    classes, stats = checked_classes(blocks, n_features, with_stats=True,
                                     where=f"--data {args.data}")
    # up front: labels no fit takes are refused before the resource checks and the test rows
    check_classes(classes, linear, lambda found: refuse_classes(found, args))
    if not linear:  # the levels must fit the rows, their top partitions and the resources
        params = fit_params(vars(args)) if params is None else params
        n_rows, dense = stats.n_rows, isinstance(stats.row_width, int)
        check_levels_fit_rows(n_rows, params.p, params.levels)
        memory = executor_memory(spark.sparkContext, args.memory_mb)
        levels = params.levels if params.levels is not None else \
            auto_level_count(n_rows, params.p, stats.row_width, memory, params)
        # dense rows are float32; a sparse row's memory width counts float64 columns
        check_fit_resources(spark.sparkContext, n_rows, stats.row_width, 4 if dense else 8,
                            params.p ** levels, levels, memory, params)
    test = None if not args.test_data else read_driver_side(
        spark, args.test_data, args, n_features, sparse, "--test-data")
    return blocks, classes, test, n_features


def refuse_classes(classes, args):
    """The job's words for label values its fit cannot take (check_classes decides which)."""
    where = f"--data {args.data}"
    if args.kernel == "linear":  # DSVRG is binary; the kernel levels take any number of classes
        check_two_classes(classes, where, "--kernel linear (DSVRG)",
                          "use a nonlinear --kernel: its levels fit every class at once")
    raise ValueError(f"{where}: the labels hold 1 class ({shown_classes(classes)}); SODM needs "
                     "at least two. Check that the label column is the right one.")


def _accuracy_text(value):
    return "" if value is None else f"{value:.4f}"


def printed_progress(args) -> Progress:
    """The job's lines as the fit goes: the search's points, table and choice (and its report
    files), then the levels table with each level's plan, or one line per DSVRG epoch."""
    base = {}  # the resolved gamma the search's multiples apply to

    def search_started(prepared, grid, keys, pieces):
        if not args.tune:  # no hyperparameters given: a small search on a sample of partitions
            print("no ODM hyperparameters given (--gamma, --lam, --theta, --v): searching "
                  f"{DEFAULT_SEARCH_GRID_TEXT} first", flush=True)
        n_parts = prepared.parts.getNumPartitions()
        rows = -(-prepared.n_rows // n_parts)
        where = (f"{n_parts:,} partitions" if keys is None else
                 f"{len(keys)} of the {n_parts:,} partitions") + (
            f" ({pieces} × {SEARCH_PARTITION_ROWS:,} of their ~{rows:,} rows each)"
            if rows > SEARCH_PARTITION_ROWS else "")
        base["gamma"] = prepared.kernel.gamma
        print(f"tuning {len(grid)} grid points on {where} of the top level, scored on "
              f"{len(prepared.validation_pair[1])} validation rows (base gamma "
              f"{prepared.kernel.gamma:.4g})", flush=True)

    def point_scored(entry, index, total):
        print(point_line(entry.to_dict(), index, total, base["gamma"]), flush=True)

    def levels_started(params):
        print(f"{'level':>5} {'partitions':>10} {'seconds':>9} {'predicted':>9} {'kernel':>8} "
              f"{'objective':>14} {'SVs':>8} {'sweeps':>7} {'scoring':>8} {'val acc':>8} "
              f"{'test acc':>9}", flush=True)
        checkpoint_dir = args.checkpoint_dir  # a search before is seeded: it chose the same point
        if args.resume and (Path(checkpoint_dir) / "state.json").exists():
            print(f"resuming from {checkpoint_dir}: the levels it holds are not solved again",
                  flush=True)

    def dsvrg_started(params):
        print(f"{'epoch':>5} {'seconds':>9} {'objective':>14} {'test acc':>9}", flush=True)

    return Progress(on_search=search_started, on_point=point_scored,
                    on_searched=lambda result: show_search(result, args.tune_report),
                    on_fit=dsvrg_started if args.kernel == "linear" else levels_started,
                    on_plan=show_plan, on_level=show_level, on_epoch=show_epoch)


def show_search(result, report_dir=None):
    """The search's table best first, the point chosen, the report files."""
    report = result.to_dict()
    print(table(report), flush=True)
    final = report["final_round"]
    if final:
        print(f"second round: the {len(final['points'])} finalists on {final['pieces']} "
              f"pieces of {final['piece_rows']:,} rows of the same sample", flush=True)
        for index, point in enumerate(final["points"], 1):
            print(point_line(point, index, len(final["points"]), report["base_gamma"]),
                  flush=True)
    best = report["best"]
    default = result.default
    kept = default is not None and result.best.point == default
    accuracy = f"{best['validation_accuracy']:.4f}" + (
        "" if best["final_validation_accuracy"] is None else
        f" on pieces of {SEARCH_PARTITION_ROWS:,} rows, {best['final_validation_accuracy']:.4f} "
        f"on pieces of {final['piece_rows']:,}")
    print(f"{'chosen' if default is not None else 'best'}: --gamma {best['gamma']:.6g} --lam "
          f"{best['lam']:g} --theta {best['theta']:g} --v {best['v']:g} (validation accuracy "
          f"{accuracy}"
          + ("; the default point, no other beats it significantly" if kept else "")
          + f"; tuning took {result.seconds:.2f} s)", flush=True)
    if report_dir:
        paths = write_report(report, report_dir)
        print(f"tuning report: {', '.join(paths.values())}", flush=True)


def show_plan(plan):
    """A level's plan, before it runs (SODM Algorithm 1), or the global step's."""
    if isinstance(plan, GlobalPlan):
        print(f"  -> {plan.describe()}", flush=True)
        return
    predicted = (f"estimated {plan.predicted_seconds:,.1f} s from this machine's GEMM speed"
                 if plan.estimated else f"predicted {plan.predicted_seconds:,.1f} s")
    stored = f" in {plan.storage}" if plan.storage != "float32" else ""
    print(f"  -> level {plan.level}: {plan.partitions:,} partitions of up to {plan.rows:,} "
          f"rows, kernel {plan.kernel}{stored} "
          f"({kernel_mb(plan.rows, storage_itemsize(plan.storage)):,.1f} MB of the "
          f"{plan.memory_mb:,.0f} MB a task may use), {predicted}"
          + (f"; {plan.advice}" if plan.advice else ""), flush=True)


def show_level(entry):
    """A solved level's row of the levels table."""
    predicted = "" if entry.predicted_seconds is None else f"{entry.predicted_seconds:.2f}"
    scoring = entry.scoring_seconds / max(1, entry.tasks or 1)  # of the level's seconds
    print(f"{entry.level:>5} {entry.partitions:>10} {entry.seconds:>9.2f} {predicted:>9} "
          f"{entry.kernel:>8} {entry.objective:>14.6g} {entry.n_sv:>8} "
          f"{entry.sweeps_max:>7} {scoring:>8.2f} "
          f"{_accuracy_text(entry.validation_accuracy):>8} "
          f"{_accuracy_text(entry.test_accuracy):>9}", flush=True)


def show_epoch(entry):
    """A DSVRG epoch's line (SODM Algorithm 2)."""
    accuracy = "" if entry.test_accuracy is None else f"{entry.test_accuracy:.4f}"
    print(f"{entry.epoch:>5} {entry.seconds:>9.2f} {entry.objective:>14.8g} {accuracy:>9}",
          flush=True)


def levels_summary(fit, params):
    """The metrics of a levels fit, and its closing lines."""
    best = next(entry for entry in fit.levels if entry.level == fit.best_level)
    summary = {"levels": [entry.to_dict() for entry in fit.levels],
               "train_seconds": fit.train_seconds, "partition_seconds": fit.partition_seconds,
               "n_sv": int(fit.model.support_vectors.shape[0]), "rows": fit.n_rows,
               "validation_rows": fit.validation_rows, "stopped_at": fit.stopped_at,
               "stop_reason": fit.stop_reason, "best_level": fit.best_level,
               "validation_accuracy": best.validation_accuracy,
               "test_accuracy": fit.test_accuracy, "params": vars(params)}
    if fit.input_map is not None:
        summary["input_map"] = fit.input_map
        show_input_map(fit.input_map)
    if fit.compression is not None:
        summary["compression"] = fit.compression
        summary["test_accuracy_uncompressed"] = best.test_accuracy
        show_compression(fit.compression)
    if fit.global_step is not None:
        summary["global_step"] = fit.global_step
        show_global_step(fit.global_step)
    kept_global = bool(fit.global_step and fit.global_step.get("kept"))
    print(f"stopped after level {fit.stopped_at}: {fit.stop_reason}; the model is "
          + ("the global step's, not " if kept_global else "")
          + f"level {fit.best_level}'s" + ("" if best.validation_accuracy is None else
                                   f" (validation accuracy {best.validation_accuracy:.4f} on "
                                   f"{fit.validation_rows:,} rows{_slice_reason(fit, params)})"),
          flush=True)
    print(f"trained on {fit.n_rows:,} rows in {fit.train_seconds:.2f} s "
          f"(partitioning {fit.partition_seconds:.2f} s); {summary['n_sv']:,} support vectors"
          + ("" if fit.test_accuracy is None else f"; test accuracy {fit.test_accuracy:.4f}"))
    return summary


def _slice_reason(fit, params) -> str:
    """Why the held-out slice has fewer than --validation-max-rows rows, if it has."""
    most = getattr(params, "validation_max_rows", None)
    if most is None or fit.validation_rows >= most or getattr(params, "validation_data", None):
        return ""
    return (f": --validation-fraction {params.validation_fraction:g} of the rows; "
            f"{most:,} from {most / params.validation_fraction:,.0f} rows on")


def show_global_step(report):
    """The global step's line: its fit, and whether the validation slice kept it."""
    if not report.get("ran"):
        print(f"global step {report['reason']}", flush=True)
        return
    test = "" if "test_accuracy" not in report else f", test {report['test_accuracy']:.4f}"
    print(f"global step: {report['centres']:,} centres, from {report['start']}, "
          f"{report['newton_steps']} Newton steps in {report['passes']} passes, "
          f"{report['seconds']:.1f} s ({report['stopped']}); "
          f"validation {report['validation_accuracy']:.4f} against the level's "
          f"{report['level_validation_accuracy']:.4f}{test}: "
          + ("kept" if report["kept"] else "the level's model kept"), flush=True)


def show_input_map(report):
    """The input map's line: the components the kernel took, or why it took the features."""
    if "reason" in report:
        print(f"input map: the {report['features']:,} features themselves ({report['reason']})",
              flush=True)
        return
    print(f"input map: {report['features']:,} features -> {report['components']:,} principal "
          f"components ({report['variance_kept']:.1%} of the variance; on pairs of the sample "
          f"the projected kernel is {report['mean_relative_difference']:.1%} from the raw one "
          "on average)", flush=True)


TARGETS_SHOWN = {"partitions": "their own partitions' models", "model": "the whole model"}
PASSES_SHOWN = {0: "no pass over the level, ", 2: "two passes over the level, "}


def show_compression(report):
    """One line per row set the compression was checked on (validation, test)."""
    print(f"compressed {report['support_vectors_before']:,} -> "
          f"{report['support_vectors_after']:,} points ({report['method']}, fitted on "
          f"{report['fit_rows']:,} rows scored by {TARGETS_SHOWN[report['fit_targets']]}, "
          f"{PASSES_SHOWN.get(report.get('passes_over_level'), '')}"
          f"{report['seconds']:.2f} s)", flush=True)
    for name in ("validation", "test"):
        r = report.get(name)
        if r is None:
            continue
        if "accuracy_before" not in r:
            print(f"  {name}: accuracy {r['accuracy_after']:.4f} compressed (the whole model "
                  "was not scored on these rows: --test-every-level does)", flush=True)
            continue
        print(f"  {name}: accuracy {r['accuracy_before']:.4f} -> {r['accuracy_after']:.4f}, "
              f"decision function relative RMS error {r['relative_rms_error']:.3g}, "
              f"{100 * r['predictions_changed']:.2f}% of predictions changed", flush=True)


def dsvrg_summary(fit, params):
    """The metrics of a DSVRG fit, and its closing line."""
    last = fit.epochs[-1]
    summary = {"epochs": [entry.to_dict() for entry in fit.epochs],
               "train_seconds": fit.train_seconds, "partition_seconds": fit.partition_seconds,
               "n_sv": 1, "rows": fit.n_rows, "step": fit.step, "intercept": fit.intercept,
               "test_accuracy": last.test_accuracy, "objective": last.objective,
               "layout": fit.layout, "resident_hits": fit.resident_hits,
               "resident_misses": fit.resident_misses, "params": vars(params)}
    print(f"trained on {fit.n_rows} rows in {fit.train_seconds:.2f} s with DSVRG "
          f"({len(fit.epochs)} epochs, step {fit.step:.3g})"
          + ("" if last.test_accuracy is None else f"; test accuracy {last.test_accuracy:.4f}"))
    return summary


HYPERPARAMETERS = ("gamma", "lam", "theta", "v")


def hyperparameters_given(args) -> bool:
    """Whether any ODM hyperparameter came from the command line or the job config."""
    return any(getattr(args, name) is not None for name in HYPERPARAMETERS)


def requested_search(args) -> Search | None:
    """The search before the fit: the grid with --tune, a small default one when no ODM
    hyperparameter is given, none otherwise (or for the linear kernel, which has no levels)."""
    if args.kernel == "linear" or not (args.tune or not hyperparameters_given(args)):
        return None
    then_fit = not args.tune_only
    if args.tune:
        return Search(args.grid or ParamGrid(), then_fit=then_fit)
    return Search.of_defaults(then_fit)


def train(spark, args, params=None):
    """Load the data the flags name and fit: (fit, metrics summary). ``params``: the fit's, as
    :func:`check_settings` built them (None: built from ``args`` here, before any data is
    read). Raises ValueError on bad input and FileNotFoundError on a missing file (the jobs
    turn both into messages)."""
    params = fit_params(vars(args)) if params is None else params
    blocks, classes, test, n_features = load_data(spark, args, params)
    linear = isinstance(params, DSVRGParams)
    validation = None if linear or not args.validation_data else read_driver_side(
        spark, args.validation_data, args, n_features, row_layout(args)[0], "--validation-data")
    options = {} if linear else {
        "checkpoint_dir": args.checkpoint_dir, "resume": args.resume, "max_sv": args.max_sv,
        "compress_method": args.compress_method, "test_every_level": args.test_every_level}
    trained = train_on_spark(spark.sparkContext, blocks, n_features, params, classes,
                             test=test, validation=validation, search=requested_search(args),
                             progress=printed_progress(args), **options)
    tuning = {} if trained.search is None else {"tuning": trained.search.to_dict(),
                                                "tuning_seconds": trained.search.seconds}
    if trained.fit is None:  # jobs/tune.py: the search alone
        return None, {**tuning, "partition_seconds": trained.search_partition_seconds}
    summary = (dsvrg_summary if linear else levels_summary)(trained.fit, trained.params)
    return trained.fit, {**summary, **tuning}


def check_settings(args):
    """Everything that can be refused before Spark starts: the parameters (built and checked
    here, once: the fit's SODMParams or DSVRGParams are returned), the output paths, and the
    levels the built-in data's rows allow (a SettingsError)."""
    params = fit_params(vars(args))
    check_output_paths({"--model-out": args.model_out, "--checkpoint-dir": args.checkpoint_dir,
                        "--tune-report": args.tune_report}, {"--metrics-out": args.metrics_out})
    if args.data is None and args.kernel != "linear":
        check_levels_fit_rows(args.rows, params.p, params.levels)
    return params


def main(argv=None, prog="train_sodm.py", description=None, tune_only=False) -> int:
    """The job; a failure raises sodm_spark.core.errors.JobExit (its one line and exit code)."""
    args = parse_args(argv, prog, description, tune_only)
    with reported(value_errors=SETTINGS):
        params = check_settings(args)
    with job_session("sodm-spark: train_sodm", args.master) as spark:
        print("config: " + json.dumps({k: v for k, v in vars(args).items()}, default=str),
              flush=True)
        with reported():
            fit, summary = train(spark, args, params)
        with reported(value_errors=SETTINGS):  # the outputs were checked before the work
            write_outputs(None if fit is None else fit.model, summary, args.model_out,
                          args.metrics_out)
    return 0


if __name__ == "__main__":
    sys.exit(run_job(main))
