"""The training job's flags (``sodm-train``, ``jobs/train_sodm.py``; the tuning job's too).

Its own module because the flags are most of the job's text: each help line says what the
setting does and its default, and the checks between flags that argparse cannot express end the
job with one line and exit code 2 before Spark starts (sodm_spark.ops.jobconf). Scheduled
retraining (``sodm-retrain``) parses its training flags here too, before it takes its lock.
"""
from __future__ import annotations

import argparse

from sodm_spark.core.array_namespace import DEVICE_CHOICES
from sodm_spark.core import defaults
from sodm_spark.core.defaults import FIT_INTERCEPT
from sodm_spark.core.kernels import kernel_names
from sodm_spark.core.weights import canonical_class_weight, parse_class_weight
from sodm_spark.jobs.train_mlflow import add_mlflow_arguments
from sodm_spark.models import input_projection
from sodm_spark.models.calibration import CALIBRATIONS
from sodm_spark.models.compression import AUTO_ABOVE, AUTO_POINTS, METHODS as COMPRESSION_METHODS
from sodm_spark.ops.jobconf import add_master_arguments, gamma_arg, parse_with_defaults
from sodm_spark.selection.metrics import METRICS
from sodm_spark.selection.tuning import ParamGrid
from sodm_spark.spark.dsvrg.fit import DSVRGParams
from sodm_spark.spark.partitioning import PARTITIONERS
from sodm_spark.spark.sodm.global_step import NEAR_MAJORITY
from sodm_spark.spark.sodm.params import (GLOBAL_STEPS, INPUT_MAPS, KERNEL_STORAGES, WARM_STARTS,
                                          SODMParams)
from sodm_spark.spark.sodm.plan import KERNEL_BOUND_FEATURES, TOP_PARTITION_ROWS

DESCRIPTION = "Train SODM (SODM paper, Algorithm 1) on Spark and report every level."
DEFAULT_ROWS, DEFAULT_TEST_ROWS = 60000, 10000
#: Where the flags shared with the fit take their defaults: the fit's own parameters.
DEFAULTS = SODMParams()


def parse_args(argv=None, prog="train_sodm.py", description=None,
               tune_only=False) -> argparse.Namespace:
    """The job's flags; ``tune_only`` (the tuning job) searches and writes the report, no fit.
    ``prog`` names the command in messages: ``train_sodm.py`` under spark-submit,
    ``sodm-train`` as the console command. Every default is read from where the fit reads it
    (SODMParams, sodm_spark.core.defaults, DSVRGParams), never repeated here."""
    parser = argparse.ArgumentParser(prog=prog, description=description or DESCRIPTION)
    for add in (_data_arguments, _problem_arguments, _level_arguments, _stopping_arguments,
                _tuning_arguments, _output_arguments, _linear_arguments, add_mlflow_arguments):
        add(parser)
    if tune_only:
        parser.set_defaults(tune=True, tune_report="tuning-report")
    args, args.config = parse_with_defaults(parser, "train_sodm", argv)
    args.tune_only = tune_only
    _check_combinations(parser, args, prog)
    return args


def _data_arguments(parser) -> None:
    """Where the rows come from."""
    parser.add_argument("--data", help="training data (LIBSVM, CSV or Parquet); default: built-in")
    parser.add_argument("--test-data", help="test data in the same format: the final model's "
                        "accuracy (every level's with --test-every-level)")
    parser.add_argument("--test-every-level", action="store_true", default=None,
                        help="score the test rows with every level's model too (costs test rows "
                        "x training rows kernel entries per level; by default only when that "
                        "is cheap)")
    parser.add_argument("--format", choices=("libsvm", "csv", "parquet"), default="libsvm")
    parser.add_argument("--features-col", metavar="COLUMN|NAMES",
                        help="CSV or Parquet: the vector or array column of the features "
                        "(default 'features' where the table has it), or the feature columns' "
                        "names separated by commas; otherwise every column other than "
                        "--label-col and --weight-col is a feature. The model keeps the names, "
                        "and scores other tables by them (--test-data, sodm-predict)")
    parser.add_argument("--label-col", metavar="COLUMN",
                        help="CSV or Parquet: the label column (default 'label'; a CSV without "
                        "a header: its first column, or a 0-based position)")
    parser.add_argument("--weight-col", metavar="COLUMN",
                        help="CSV or Parquet: the column of each row's weight (a number >= 0; "
                        "rows of weight 0 are left out; a CSV without a header names it by "
                        "0-based position), times --class-weight's; the test and "
                        "--validation-data rows are not weighted")
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS, help="built-in data: rows")
    parser.add_argument("--class-weight", type=class_weight_arg, default=DEFAULTS.class_weight,
                        metavar="balanced|LABEL:W,...",
                        help="weight each class's rows in every solve, the global step and the "
                        "validation scores: 'balanced' (n / (classes x rows of the class): "
                        "each class the same total weight) or pairs such as '0:1,1:5' "
                        "(unnamed classes weigh 1); default: every row weighs 1")


def _problem_arguments(parser) -> None:
    """The kernel and the ODM problem each partition solves."""
    parser.add_argument("--kernel", default=DEFAULTS.kernel,
                        help=f"{', '.join(kernel_names())} (default {DEFAULTS.kernel}; "
                        "matern: the Matérn kernel of ν = 3/2, gamma = 1/length scale²)")
    parser.add_argument("--gamma", type=gamma_arg, help="'scale', 'auto' or a number (default "
                        f"{DEFAULTS.gamma!r}; without --gamma, --lam, --theta and --v the job "
                        "searches gamma and lam first (theta 0.1, v 0.2), on a sample of the "
                        "top level's partitions)")
    parser.add_argument("--scale", choices=("minmax", "none"), default=DEFAULTS.scale,
                        help="map every column onto [0, 1] before the kernel (default; the "
                        "model stores the map) or use the rows as they are")
    parser.add_argument("--input-map", choices=INPUT_MAPS, default=DEFAULTS.input_map,
                        help="auto (default): dense rows of at least "
                        f"{input_projection.MIN_FEATURES} features and a radial kernel (rbf, "
                        "matern) are fitted on the principal components that keep "
                        f"{input_projection.VARIANCE_KEPT * 100:.0f}%% of the variance when they are "
                        "at most a third of the features (the model stores the map); none: "
                        "always the features themselves")
    parser.add_argument("--kernel-offset", type=float, default=DEFAULTS.kernel_offset,
                        help="kernel ODM: solve with k + c, a penalized bias (default "
                        f"{DEFAULTS.kernel_offset:g})")
    # no default: unset, the job searches (none given) or takes SODMParams' (some given)
    parser.add_argument("--lam", type=float, help=f"λ (default {DEFAULTS.lam:g})")
    parser.add_argument("--theta", type=float, help=f"θ (default {DEFAULTS.theta:g})")
    parser.add_argument("--v", type=float, help=f"v (default {DEFAULTS.v:g})")
    parser.add_argument("--tol", type=float, default=DEFAULTS.tol,
                        help="kernel levels: a partition's solve stops when the largest "
                        "projected-gradient violation over its rows is at most this "
                        "(default %(default)g)")
    parser.add_argument("--max-iter", type=int, default=DEFAULTS.max_iter)
    parser.add_argument("--seed", type=int, default=DEFAULTS.seed)


def _level_arguments(parser) -> None:
    """SODM's levels: the partitions, how rows are dealt, where and in what memory they run."""
    parser.add_argument("--levels", type=levels_arg, default=DEFAULTS.levels,
                        help="L: start from K = p^L partitions (default 'auto': partitions of "
                        f"about {TOP_PARTITION_ROWS:,} rows, or for rows of "
                        f"{KERNEL_BOUND_FEATURES}+ features the largest whose kernels are "
                        "cached; automatic stopping decides how far down to go)")
    parser.add_argument("--p", type=int, default=DEFAULTS.p, help="partitions merged per level")
    parser.add_argument("--strata", type=int, default=DEFAULTS.strata, help="S landmark strata")
    parser.add_argument("--stop-level", type=int, default=DEFAULTS.stop_level)
    parser.add_argument("--partitioner", choices=PARTITIONERS, default=DEFAULTS.partitioner)
    parser.add_argument("--warm-start", choices=WARM_STARTS, default=DEFAULTS.warm_start)
    parser.add_argument("--cache-mb", type=float, default=DEFAULTS.cache_mb,
                        help="cap on the kernel cache per task (MB; default: what the memory "
                        "budget allows)")
    parser.add_argument("--kernel-storage", choices=KERNEL_STORAGES,
                        default=DEFAULTS.kernel_storage,
                        help="dtype of the cached kernel matrices: auto (default) is int16 fixed "
                        "point (half float32's memory, entries within 1.5e-5 of the rbf "
                        "kernel's, faster sweeps) where the kernel's diagonal bounds its "
                        "values, float32 for the others; float32 or int16 always")
    parser.add_argument("--device", choices=DEVICE_CHOICES, default=DEFAULTS.device,
                        help="where each partition's solve runs: auto (default) a GPU the task "
                        "sees, else the CPU's numba solvers; cpu the array solver on numpy; gpu "
                        "a CUDA GPU (pip install \"sodm-spark[gpu]\"; on a cluster "
                        "spark.executor.resource.gpu.amount), refused before any data are read "
                        "where there is none. The linear kernel (DSVRG) runs on the CPU")
    parser.add_argument("--memory-mb", type=float, default=DEFAULTS.memory_mb,
                        help="memory one partition's solve may use (default: the executor's "
                        "memory for Python divided by the tasks that run at once); a level that "
                        "cannot fit stops the run (or, with --no-auto-stop, fails naming it)")
    parser.add_argument("--checkpoint-dir",
                        help="record every finished level here (γ and the partition layout)")
    parser.add_argument("--resume", action="store_true",
                        help="continue from the last level recorded in --checkpoint-dir")


def _stopping_arguments(parser) -> None:
    """Automatic stopping, the global step and the calibration: what the validation slice
    decides."""
    stopping = parser.add_argument_group(
        "automatic stopping", "after every level a validation slice is scored; the run stops "
        "when a merge no longer pays and writes the best level's model")
    stopping.add_argument("--no-auto-stop", dest="auto_stop", action="store_false",
                          default=DEFAULTS.auto_stop,
                          help="run every level down to --stop-level; the last level's model")
    stopping.add_argument("--validation-fraction", type=float,
                          default=DEFAULTS.validation_fraction,
                          help="share of the training rows held out for validation "
                          "(at most --validation-max-rows; default %(default)s)")
    stopping.add_argument("--validation-max-rows", type=int,
                          default=DEFAULTS.validation_max_rows,
                          help="most rows held out (default %(default)s: every training "
                          "set of 100,000 rows or more gives that many)")
    stopping.add_argument("--validation-data",
                          help="validation rows from a file (same format) instead of held-out rows")
    stopping.add_argument("--min-improvement", type=float, default=DEFAULTS.min_improvement,
                          help="stop when the next merge is not expected to raise validation "
                          "accuracy by this much (absolute; default "
                          f"{DEFAULTS.min_improvement} = {100 * DEFAULTS.min_improvement:g} "
                          "points a level): the last merge's paired gain, --stop-confidence "
                          "standard errors up, times the ratio of the last two merges' gains")
    stopping.add_argument("--metric", choices=METRICS, default=DEFAULTS.metric,
                          help="what the stop rule, the level kept, --tune and the global step "
                          "judge by on the validation rows: accuracy (default), auc, logloss, "
                          "f1 or balanced_accuracy; --min-improvement is in its units")
    stopping.add_argument("--stop-confidence", dest="confidence", type=float,
                          default=DEFAULTS.confidence,
                          help="standard errors of the paired comparisons between levels "
                          "(default %(default)s): higher runs more levels, and keeps the last "
                          "level's model unless the one before is better by this many")
    stopping.add_argument("--time-budget", type=float, default=DEFAULTS.time_budget,
                          help="stop before a level whose predicted seconds would end "
                          "training after this many seconds")
    stopping.add_argument("--global-step", choices=GLOBAL_STEPS, default=DEFAULTS.global_step,
                          help="after the levels, one Nyström ODM of every training row on "
                          "--global-centres centres, kept where the validation slice ranks it "
                          "above the level: auto (default) when the chosen level is within "
                          f"{NEAR_MAJORITY * 100:g} points of the majority class or the last "
                          "merge gained nothing; always; none")
    stopping.add_argument("--global-centres", type=_centres, default=DEFAULTS.global_centres,
                          help="centres of the global step: auto (default: the most whose "
                          "predicted passes fit the step's time budget, up to 20,000) or N")
    stopping.add_argument("--calibration", choices=CALIBRATIONS, default=DEFAULTS.calibration,
                          help="class probabilities saved with the model, fitted on the "
                          "validation slice (the linear kernel holds one out too): sigmoid "
                          "(default, Platt's), isotonic (a monotone map; wants a few thousand "
                          "rows) or none (the linear kernel then trains on every row)")


def _tuning_arguments(parser) -> None:
    """--tune: a grid searched before the fit."""
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
                        help="write tuning.json, tuning.txt and the heat map tuning.png here "
                        "(the heat map needs matplotlib: pip install \"sodm-spark[plots]\")")


def _output_arguments(parser) -> None:
    """What the job writes, and where it runs."""
    parser.add_argument("--max-sv", type=max_sv_arg, default=defaults.MAX_SV, metavar="N|auto|none",
                        help="compress the model to at most N points (reduced-set projection "
                        "of f, before it reaches the driver; reported on the validation and "
                        f"test rows before and after). Default 'auto': above {AUTO_ABOVE:,} "
                        f"support vectors, {AUTO_POINTS:,} points; 'none' keeps every one")
    parser.add_argument("--compress-method", choices=COMPRESSION_METHODS,
                        default=defaults.COMPRESS_METHOD,
                        help="how --max-sv chooses its points: a random sample of the support "
                        "vectors (default), k-means centres of them, Eqn 8 landmarks, or the "
                        "largest |coefficients|")
    parser.add_argument("--model-out", help="directory for the model (written atomically)")
    parser.add_argument("--metrics-out", help="JSON file for per-level metrics")
    add_master_arguments(parser)


def _linear_arguments(parser) -> None:
    """The linear kernel's DSVRG (SODM Algorithm 2): its defaults are DSVRGParams'."""
    linear = DSVRGParams()
    parser.add_argument("--no-intercept", dest="fit_intercept", action="store_false",
                        default=FIT_INTERCEPT,
                        help="linear kernel: no bias b (f(x) = wᵀx, the paper's model); by "
                        "default an unpenalized b is fitted, as MLlib's LinearSVC does")
    parser.add_argument("--epochs", type=int, default=linear.epochs,
                        help="linear kernel: DSVRG epochs (default %(default)s)")
    parser.add_argument("--step", type=float, help="linear kernel: SVRG step (default 1/(2L))")
    parser.add_argument("--epoch-tol", type=float, default=linear.relative_change_tol,
                        help="linear kernel: stop when the objective changes less (relative; "
                        "default %(default)g)")
    parser.add_argument("--partitions", type=int,
                        help="linear kernel: DSVRG partitions (default: the cores Spark has)")


def _check_combinations(parser, args, prog) -> None:
    """The checks between flags that argparse cannot express (parser.error: one line, exit
    code 2)."""
    if isinstance(args.max_sv, int) and args.kernel == "linear":
        parser.error("--max-sv compresses kernel expansions; a linear model is one weight "
                     "vector already")
    if args.tune_only and args.model_out:
        parser.error(f"{prog} fits no model: run the training job (sodm-train or "
                     "jobs/train_sodm.py) with --tune --model-out DIR to tune and fit in one run")
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


def levels_arg(text):
    """argparse type of ``--levels``: 'auto' (None) or an integer (SODMParams checks it)."""
    if text in (None, "auto"):
        return None
    try:
        return int(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"--levels must be an integer >= 0 or 'auto', got "
                                         f"{text!r}") from None


def _centres(text):
    """argparse type of ``--global-centres``: 'auto' (None) or a positive integer."""
    if text in (None, "auto"):
        return None
    try:
        value = int(text)
    except (TypeError, ValueError):
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"--global-centres must be 'auto' or a positive "
                                         f"integer, got {text!r}")
    return value


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


def class_weight_arg(text):
    """argparse type of ``--class-weight``: None, 'balanced' or (label, weight) pairs."""
    try:
        return canonical_class_weight(parse_class_weight(text))
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def grid_arg(text):
    """argparse type of ``--grid``: a checked :class:`ParamGrid`."""
    try:
        grid = ParamGrid.parse(text)
        grid.validate()
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return grid
