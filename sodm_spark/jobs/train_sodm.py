"""Train SODM (SODM paper, Algorithm 1) on Spark and report every level.

    sodm-train --levels 3
    spark-submit jobs/train_sodm.py --data train.libsvm --test-data test.libsvm --levels 3 \\
        --model-out models/sodm --metrics-out metrics.json
    spark-submit "$(python -c 'import sodm_spark.jobs.train_sodm as m; print(m.__file__)')" ...

Without --data it trains on a built-in, seeded, generated nonlinear data set
(sodm_spark.data.datasets.make_nonlinear: 60,000 training and 10,000 test rows; with
--kernel linear, sodm_spark.data.datasets.make_linear). With --kernel linear the job runs DSVRG
(SODM Algorithm 2) on the primal instead of the kernel levels. LIBSVM input stays sparse (CSR)
unless at least half its cells hold a value, for DSVRG and for the kernel levels alike (their
kernel blocks are then sparse products; --scale minmax divides each column by its largest
magnitude instead, so zeros stay zeros); only the laplacian kernel needs dense rows. A bad input
or setting ends the job with one `error: ...` line and its kind's exit code (sodm_spark.core.errors;
docs/operations.md, "When a job fails").

The job in five modules: its flags (train_args.py), its data and the checks before the fit
(train_data.py), its printed lines and metrics (train_report.py), its MLflow run with --mlflow
(train_mlflow.py), and this one, which runs them. At the end it prints where the command's
seconds went, from its start (Python's imports, the JVM) to the outputs written, and records
that timeline in the metrics JSON (sodm_spark.core.timeline; docs/design.md §6).
"""
from __future__ import annotations

import json
import sys
import time

from sodm_spark.core.errors import SETTINGS, reported, run_job
from sodm_spark.core.timeline import Timeline, command_started, timed
from sodm_spark.jobs.train_args import parse_args
from sodm_spark.jobs.train_data import check_column_flags, load_data, read_driver_side, row_layout
from sodm_spark.jobs.train_mlflow import check_mlflow, log_run
from sodm_spark.jobs.train_report import (dsvrg_summary, levels_summary, printed_progress,
                                          rewrite_metrics, show_timeline)
from sodm_spark.ops.jobconf import (check_output_paths, check_store_outputs,
                                     use_packaged_spark_conf, write_outputs)
from sodm_spark.selection.tuning import ParamGrid
from sodm_spark.spark.dsvrg.fit import DSVRGParams
from sodm_spark.spark.session import job_session
from sodm_spark.spark.sodm.fit import FitOptions
from sodm_spark.spark.sodm.plan import check_levels_fit_rows
from sodm_spark.spark.train import (ScoredRows, Search, check_request, fit_params,
                                    train as train_on_spark)
from sodm_spark.spark.engine import context_of

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


def train(spark, args, params=None, timeline: Timeline | None = None):
    """Load the data the flags name and fit: (fit, metrics summary). ``params``: the fit's, as
    :func:`check_settings` built them (None: built from ``args`` here, before any data is
    read); ``timeline``: where the reading's and the fit's stages are recorded (None: not
    timed). Raises ValueError on bad input and FileNotFoundError on a missing file (the jobs
    turn both into messages)."""
    params = fit_params(vars(args)) if params is None else params
    linear = isinstance(params, DSVRGParams)
    # --device gpu with no GPU on the driver nor asked of Spark: refused before the data are read
    check_request(context_of(spark), params)
    blocks, n_features, checked, test = load_data(spark, args, params, timeline)
    with timed(None if linear or not args.validation_data else timeline, "validation rows"):
        validation = None if linear or not args.validation_data else read_driver_side(
            spark, args.validation_data, args, n_features, row_layout(args)[0],
            "--validation-data", args.feature_columns)
    options = {"timeline": timeline} if linear else {
        "checkpoint_dir": args.checkpoint_dir, "resume": args.resume, "max_sv": args.max_sv,
        "compress_method": args.compress_method, "test_every_level": args.test_every_level,
        "timeline": timeline}
    # the rows were checked (and the level count resolved) by load_data: ``checked`` says so
    trained = train_on_spark(context_of(spark), blocks, n_features, checked,
                             rows=ScoredRows(test, validation), search=requested_search(args),
                             progress=printed_progress(args),
                             level_options=FitOptions(**options))
    tuning = {} if trained.search is None else {"tuning": trained.search.to_dict(),
                                                "tuning_seconds": trained.search.seconds}
    if trained.fit is None:  # the tuning job: the search alone
        return None, {**tuning, "partition_seconds": trained.search_partition_seconds}
    # the model scores named rows by these names wherever it goes (core/feature_names.py)
    trained.fit.model = trained.fit.model.with_features(args.feature_columns.names,
                                                        args.feature_columns.types,
                                                        args.feature_columns.categories)
    summary = (dsvrg_summary if linear else levels_summary)(trained.fit, trained.params)
    return trained.fit, {**summary, **tuning}


def check_settings(args):
    """Everything that can be refused before Spark starts: the parameters (built and checked
    here, once: the fit's SODMParams or DSVRGParams are returned), the output paths, and the
    levels the built-in data's rows allow (a SettingsError; --rows says how many there are,
    while the user's rows are counted once Spark runs, spark.train.check_rows)."""
    params = fit_params(vars(args))
    check_output_paths({"--model-out": args.model_out, "--checkpoint-dir": args.checkpoint_dir,
                        "--tune-report": args.tune_report}, {"--metrics-out": args.metrics_out})
    if args.data is None and args.kernel != "linear":
        check_levels_fit_rows(args.rows, params.p, params.levels)
    check_column_flags(args)
    check_mlflow(args)  # MLflow installed, its store opens (--mlflow)
    return params


def main(argv=None, prog="train_sodm.py", description=None, tune_only=False,
         started: float | None = None) -> int:
    """The job; a failure raises sodm_spark.core.errors.JobExit (its one line and exit code).

    Its timeline starts at ``started`` (a perf_counter value), by default at the command's start
    (:func:`~sodm_spark.core.timeline.command_started`) when the flags are the command line's
    (``argv`` None), else at this call (a caller in a running process: a test, a notebook)."""
    if started is None:
        started = command_started() if argv is None else time.perf_counter()
    timeline = Timeline(started)
    args = parse_args(argv, prog, description, tune_only)
    with reported(value_errors=SETTINGS):
        params = check_settings(args)
    with job_session("sodm-spark: train_sodm", args.master,
                     connect_seconds=args.connect_timeout) as spark:
        # Python's imports, the flags' checks, the JVM and the session
        timeline.add("start-up", time.perf_counter() - started, started)
        print("config: " + json.dumps({k: v for k, v in vars(args).items()}, default=str),
              flush=True)
        with reported(value_errors=SETTINGS):  # outputs on a store: reachable before the work
            check_store_outputs({"--model-out": args.model_out},
                                {"--metrics-out": args.metrics_out})
        with reported():
            fit, summary = train(spark, args, params, timeline)
        model = None if fit is None else fit.model
        with reported(value_errors=SETTINGS):  # the outputs were checked before the work
            with timeline.stage("writing"):
                write_outputs(model, summary, args.model_out, args.metrics_out)
            with timed(timeline if getattr(args, "mlflow", False) else None, "mlflow"):
                log_run(args, model, summary)  # --mlflow
            summary["timeline"] = show_timeline(timeline)
            if args.metrics_out:  # again, with the timeline: a few milliseconds after its end
                rewrite_metrics(summary, args.metrics_out)
    return 0


def command() -> int:
    """``sodm-train``, the console command (pyproject.toml ``[project.scripts]``)."""
    use_packaged_spark_conf()
    return run_job(lambda argv=None: main(argv, prog="sodm-train"))


if __name__ == "__main__":  # spark-submit of this file, python -m sodm_spark.jobs.train_sodm
    use_packaged_spark_conf()
    sys.exit(run_job(main))
