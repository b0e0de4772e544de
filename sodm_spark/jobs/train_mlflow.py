"""The training job's MLflow run (``--mlflow``): its flags, the check of the tracking store
before any data are read, and the run logged once the model and metrics are written.

Its own module because MLflow is an extra (pip install "sodm-spark[mlflow]"): nothing here
imports MLflow until ``--mlflow`` is given, and a job without it never does. The run holds the
settings as parameters (the fit's resolved ones, a search's choice included, over the flags),
one step per solved level (or DSVRG epoch) of every numeric column of the levels table, the
final numbers of the metrics JSON as metrics, the model through :mod:`sodm_spark.mlflow` and
the metrics JSON as ``metrics.json`` (docs/jobs.md, "MLflow"; docs/design.md §7).

A run that cannot be logged costs no model: the job has written ``--model-out`` already (or,
without it, writes the model to a temporary folder), and its one ``error:`` line says where.
"""
from __future__ import annotations

import json
import math
import os
import re
import sys
import tempfile
import time
from contextlib import contextmanager

from sodm_spark.core.errors import INTERNAL, JobExit, SettingsError, one_line, write_trace

DEFAULT_EXPERIMENT = "sodm-spark"
INSTALL = 'pip install "sodm-spark[mlflow]"'
TRACKING_ENV = "MLFLOW_TRACKING_URI"
#: What the older tracking servers store of a parameter's value
PARAM_CHARS = 500
#: Flags not logged as parameters: the tracking URI may carry a server's credentials
UNLOGGED = ("mlflow_tracking_uri",)
QUICK_REQUESTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
                  "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1", "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}
_CREDENTIALS = re.compile(r"//[^/@\s]+@")  # the user:password@ of a URI
STORES = ("an MLflow server http://HOST:5000, a database sqlite:///mlflow.db (the full mlflow "
          "package), or a folder file:///PATH with MLFLOW_ALLOW_FILE_STORE=true")


def add_mlflow_arguments(parser) -> None:
    """The flags of the MLflow run (a group of ``parser``)."""
    group = parser.add_argument_group(
        "MLflow", f"log the run to an MLflow tracking store (needs {INSTALL})")
    group.add_argument("--mlflow", action="store_true",
                       help="log the settings, every level's row of the levels table, the "
                       "final metrics, the model and the metrics JSON as an MLflow run")
    group.add_argument("--mlflow-tracking-uri", metavar="URI",
                       help=f"the tracking store (default: ${TRACKING_ENV}): {STORES}")
    group.add_argument("--mlflow-experiment", default=DEFAULT_EXPERIMENT, metavar="NAME",
                       help="the experiment of the run, created if missing (default %(default)s)")
    group.add_argument("--mlflow-run-name", metavar="NAME",
                       help="the run's name (default: one MLflow makes up)")


def import_mlflow():
    """MLflow itself, or a SettingsError saying how to install it."""
    try:
        import mlflow
        import mlflow.tracking  # noqa: F401 (MlflowClient)
    except ImportError as error:
        if error.name not in (None, "mlflow"):  # installed, but one of its own imports fails
            raise SettingsError(f"--mlflow: MLflow is installed but cannot be imported "
                                f"({type(error).__name__}: {error}); reinstall it: "
                                f"{INSTALL}.") from error
        raise SettingsError(f"--mlflow needs MLflow, which is not installed: {INSTALL} (or "
                            "leave out --mlflow).") from error
    return mlflow


def check_mlflow(args) -> None:
    """With ``--mlflow``, before any data are read: MLflow importable, a tracking store named
    (:func:`tracking_uri`) that opens, and the experiment not deleted. Raises
    SettingsError."""
    if not getattr(args, "mlflow", False):
        return
    mlflow = import_mlflow()
    uri = tracking_uri(args)
    if not uri:  # MLflow's default is a database in the driver's working directory
        raise SettingsError(f"--mlflow needs a tracking store: --mlflow-tracking-uri URI or "
                            f"${TRACKING_ENV} ({STORES}).")
    try:
        with _quick_requests():
            experiment = mlflow.tracking.MlflowClient(uri).get_experiment_by_name(
                args.mlflow_experiment)
    except Exception as error:  # noqa: BLE001 - whatever the store says, in one line
        raise SettingsError(f"--mlflow: the tracking store {shown(uri)} cannot be used "
                            f"({summary_of(error)}). Give a store that works: {STORES}.") \
            from error
    if experiment is not None and experiment.lifecycle_stage == "deleted":
        raise SettingsError(f"--mlflow-experiment {args.mlflow_experiment} is deleted in "
                            f"{shown(uri)}: restore it (mlflow experiments restore) or name "
                            "another.")


def tracking_uri(args) -> str | None:
    """``--mlflow-tracking-uri``, else $MLFLOW_TRACKING_URI (read, never copied into the
    flags: the job prints those, and a URI may carry a password)."""
    return args.mlflow_tracking_uri or os.environ.get(TRACKING_ENV)


@contextmanager
def _quick_requests():
    """MLflow's HTTP retries cut to two quick ones for the check (its defaults wait about
    four minutes for a server that does not answer); settings of the user's own are kept, and
    the run at the end retries as MLflow does."""
    quick = {name: value for name, value in QUICK_REQUESTS.items() if name not in os.environ}
    os.environ.update(quick)
    try:
        yield
    finally:
        for name in quick:
            os.environ.pop(name, None)


def shown(uri: str) -> str:
    """``uri`` without a password it may carry (http://user:password@host)."""
    return _CREDENTIALS.sub("//…@", uri)


def summary_of(error: BaseException, chars: int = 400) -> str:
    """``Type: first line`` of ``error``, at most about ``chars`` long, without a password
    (MLflow's errors repeat the URI they failed on)."""
    lines = str(error).strip().splitlines()
    text = _CREDENTIALS.sub("//…@", one_line(lines[0])) if lines else ""
    if len(text) > chars:
        text = text[:chars].rsplit(" ", 1)[0] + " …"
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def run_params(args, summary: dict) -> dict:
    """The run's parameters: the flags given or defaulted, the fit's resolved settings over
    them (a search's gamma, lam, theta, v; the levels chosen), values as text."""
    flags = {k: v for k, v in vars(args).items() if v is not None and k not in UNLOGGED}
    resolved = {k: v for k, v in (summary.get("params") or {}).items() if v is not None}
    return {key: str(value)[:PARAM_CHARS] for key, value in {**flags, **resolved}.items()}


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def step_metrics(summary: dict) -> list[tuple[str, float, int]]:
    """(key, value, step) of every numeric column of each solved level, ``level/<column>``
    (the level's own number as ``level/number``), or each DSVRG epoch (``epoch/<column>``);
    the step is the solve order (0: the first level, the top one)."""
    rows, prefix = (summary.get("levels"), "level") if "levels" in summary else \
        (summary.get("epochs"), "epoch")
    found = []
    for step, entry in enumerate(rows or []):
        for key, value in entry.items():
            number = _number(value)
            if number is not None:
                name = "number" if key == prefix else key
                found.append((f"{prefix}/{name}", number, step))
    return found


def final_metrics(summary: dict) -> dict:
    """The metrics JSON's top-level numbers (test_accuracy, train_seconds, n_sv, ...)."""
    return {key: number for key, value in summary.items()
            if (number := _number(value)) is not None}


def log_run(args, model, summary: dict) -> str | None:
    """With ``--mlflow``: log the finished job as one MLflow run (``model``: the fit's
    KernelExpansion, None for a search alone) and print its id; returns the run id. A failure
    ends the job with one line naming where the model is (settings, exit code 2, for the
    store; internal, 4, with its trace in the log file, for anything else)."""
    if not getattr(args, "mlflow", False):
        return None
    mlflow = import_mlflow()
    uri = tracking_uri(args)
    assert uri is not None  # check_mlflow refused --mlflow without a tracking store
    try:
        return _log(mlflow, args, model, summary)
    except Exception as error:  # noqa: BLE001 - the model is kept whatever failed
        kept = _model_kept(args, model)
        message = (f"--mlflow: logging the run to {shown(uri)} failed ({summary_of(error)}); "
                   f"{kept} Check the tracking store (--mlflow-tracking-uri, "
                   f"${TRACKING_ENV}) and rerun to log it.")
        if isinstance(error, (mlflow.exceptions.MlflowException, OSError)):
            raise SettingsError(message) from error
        path = write_trace(error, sys.argv)
        raise JobExit(INTERNAL, message + ("" if path is None else
                                           f" The full trace is in {path}.")) from error


def _log(mlflow, args, model, summary) -> str:
    from mlflow.entities import Metric, Param, RunTag

    from sodm_spark import mlflow as flavor  # the flavor imports MLflow: only with --mlflow

    uri = tracking_uri(args)
    assert uri is not None  # check_mlflow refused --mlflow without a tracking store
    client = mlflow.tracking.MlflowClient(uri)
    experiment = client.get_experiment_by_name(args.mlflow_experiment)
    experiment_id = experiment.experiment_id if experiment is not None else \
        client.create_experiment(args.mlflow_experiment)
    params = [Param(key, value) for key, value in run_params(args, summary).items()]
    tags = [RunTag(f"sodm.{key}", str(summary[key])[:PARAM_CHARS])
            for key in ("stop_reason",) if summary.get(key) is not None]
    previous = mlflow.get_tracking_uri() if mlflow.tracking.is_tracking_uri_set() else None
    mlflow.set_tracking_uri(uri)  # log_model reads MLflow's process-wide URI
    try:
        with mlflow.start_run(experiment_id=experiment_id, run_name=args.mlflow_run_name,
                              nested=mlflow.active_run() is not None) as run:
            run_id = run.info.run_id
            client.log_batch(run_id, params=params, tags=tags)  # the model takes them over
            # the model before the metrics: MLflow would copy the step-0 ones already logged
            # to it, a second entry in each history; the final ones name it instead
            info = None if model is None else flavor.log_model(model, name="model")
            now, model_id = int(time.time() * 1000), None if info is None else info.model_id
            metrics = [Metric(key, value, now, step)
                       for key, value, step in step_metrics(summary)]
            metrics += [Metric(key, value, now, 0, model_id=model_id)
                        for key, value in final_metrics(summary).items()]
            client.log_batch(run_id, metrics=metrics)
            client.log_text(run_id, json.dumps(summary, indent=2, default=str),
                            "metrics.json")
    finally:
        mlflow.set_tracking_uri(previous)  # a job run inside a notebook leaves its URI be
    print(f"MLflow run {run_id} in experiment {args.mlflow_experiment!r} at {shown(uri)}: "
          f"{len(params)} parameters, {len(metrics)} metric values, metrics.json"
          + ("" if info is None else f", the model {info.model_uri}"), flush=True)
    return run_id


def _model_kept(args, model) -> str:
    """Where the model is after a failed run (written to a temporary folder if the job had no
    --model-out), as a sentence."""
    if model is None:
        return "the job fitted no model."
    if args.model_out:
        return f"the model is saved in --model-out {args.model_out}."
    try:
        folder = tempfile.mkdtemp(prefix="sodm-model-")
        model.save(folder)
    except Exception as error:  # noqa: BLE001 - the message says so rather than hide the first
        return f"the model could not be kept either ({summary_of(error)})."
    return f"the model is saved in {folder} (no --model-out was given)."
