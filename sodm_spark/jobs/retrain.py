"""Scheduled batch retraining: train SODM on the newest data snapshot, compare it with the
production model on a holdout set, and promote it only if it is not worse.

    sodm-retrain --snapshots /data/snapshots --holdout /data/holdout.libsvm \
        --models-dir /models [--max-drop 0.002] [--keep 5] [-- --levels 3 --lam 1000 ...]
    spark-submit jobs/retrain.py --snapshots ... (the same flags)

Flags after ``--`` are the training job's flags (sodm-train; defaults from the job config,
conf/sodm-jobs.toml).
Every version is written to models/versions/ (a temporary directory renamed into place, or
written in place with its completion marker last on an object store) and the pointer file
`_LATEST` is replaced last, so a crash at any point leaves the previous model current
(docs/operations.md, "Where models live"; --models-dir may be a URI). Exit codes:
0 promoted (the only code after which `_LATEST` changed); 1 kept the production model (the new
one was worse by more than --max-drop); 3 another retrain holds the lock; a failure leaves
`_LATEST` as it was, prints a one-line reason on stderr and exits with its kind's code
(sodm_spark.core.errors): 2 bad settings (flags, also the training flags after --; a --models-dir
that is a file; levels the rows cannot fill), 4 unexpected (a bug or Spark failing; the trace
goes to the log file), 5 bad input (no snapshot, malformed or non-finite data, a holdout with
other features), 6 resources (memory, disk). A failure after `_LATEST` moved (pruning old
versions, say) is a warning: the run still exits 0.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from sodm_spark.core.feature_names import columns_by_name
from sodm_spark.core.errors import (EXIT_CODES, INPUT, InputError, JobExit, describe_failure,
                                    full_trace, reported)
from sodm_spark.jobs import train_sodm
from sodm_spark.models.expansion import KernelExpansion
from sodm_spark.ops.jobconf import (add_master_arguments, add_verbose, check_output_paths,
                                     refuse_in_one_line, use_packaged_spark_conf)
from sodm_spark.ops.retrain import (KEPT, LOCKED, PROMOTED, USAGE, LockedError, ModelStore,
                                    RetrainLock, decide, newest_snapshot)
from sodm_spark.spark.io import error_text, read_libsvm_local
from sodm_spark.spark.session import collect_checked, job_session


def parse_args(argv=None, prog="retrain.py"):
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0],
                                     epilog="exit codes: 0 promoted, 1 kept production, "
                                     "2 bad settings, 3 locked, 4 unexpected failure, 5 bad "
                                     "input, 6 out of memory or disk")
    parser.add_argument("--snapshots", required=True,
                        help="directory of data snapshots; the newest entry is trained on")
    parser.add_argument("--holdout", required=True, help="holdout data, same format")
    parser.add_argument("--models-dir", required=True,
                        help="versions/ and the _LATEST pointer file (a path or a URI)")
    parser.add_argument("--format", choices=("libsvm", "csv", "parquet"), default="libsvm")
    parser.add_argument("--max-drop", type=float, default=0.0,
                        help="promote when new accuracy >= production - this (default 0)")
    parser.add_argument("--keep", type=int, default=5, help="versions to keep (>= 1)")
    parser.add_argument("--stale-hours", type=float, default=6.0,
                        help="a lock older than this, held from another host, is taken over "
                        "(one on this host is taken over as soon as its process is gone)")
    add_master_arguments(parser)
    add_verbose(parser)
    refuse_in_one_line(parser)
    args = parser.parse_args(argv[:split])
    if args.keep < 1:
        parser.error("--keep must be at least 1 (the production model is always kept)")
    args.train_args = argv[split + 1:]
    try:  # the training flags are checked now, before any lock or data: exit 2, not 4
        train_sodm.parse_args(["--data", "snapshot", "--format", args.format] + args.train_args)
    except SystemExit as error:
        if error.code not in (0, None):
            parser.exit(USAGE, f"{prog}: the training flags after -- are refused (see "
                        "above).\n")
        raise
    return args


def read_holdout(spark, path, data_format, n_features, feature_names=None):
    """The --holdout rows on the driver: a model's named columns taken by name (any order),
    LIBSVM rows and rows without names by position."""
    if data_format == "libsvm":
        X, y = read_libsvm_local(path, n_features=n_features, check_values=True)
    else:
        X, y = collect_checked(spark, path, data_format, f"--holdout {path}", feature_names)
    return X, y


def holdout_accuracy(model: KernelExpansion, X, y, names=None) -> float:
    """The accuracy of ``model`` on the holdout rows ``X`` (whose columns are ``names``, the
    new model's, when it has them): a production model with names of its own takes them by
    name."""
    if names is not None and model.feature_names is not None and \
            tuple(names) != model.feature_names:
        positions, _ = columns_by_name(model.feature_names, list(names), "--holdout")
        X = X[:, positions]
    if model.n_features_in != X.shape[1]:
        raise InputError(f"the holdout has {X.shape[1]} features but the model expects "
                         f"{model.n_features_in}.")
    return float(np.mean(model.predict(X) == y))


def run(args, store: ModelStore, outcome: dict) -> int:
    """Train, compare, write the version, point ``_LATEST`` at it if promoted
    (``outcome["promoted"]`` is set the moment it moves), prune; returns the exit code."""
    snapshot = newest_snapshot(args.snapshots)
    print(f"newest snapshot: {snapshot}", flush=True)
    train_args = train_sodm.parse_args(
        ["--data", str(snapshot), "--format", args.format] + args.train_args)
    # a failure is described while Spark still runs (its errors ask the JVM for their text)
    with job_session("sodm-spark: retrain", args.master,
                     connect_seconds=args.connect_timeout) as spark, reported():
        print("config: " + json.dumps(vars(train_args), default=str), flush=True)
        fit, summary = train_sodm.train(spark, train_args)
        n_features = fit.model.n_features_in
        X, y = read_holdout(spark, args.holdout, args.format, n_features,
                            fit.model.feature_names)
    new_accuracy = holdout_accuracy(fit.model, X, y)
    current = store.latest_version()
    production_accuracy = None
    if current is not None:
        production_accuracy = holdout_accuracy(KernelExpansion.load(current / "model"), X, y,
                                               fit.model.feature_names)
    decision = decide(new_accuracy, production_accuracy, args.max_drop)
    record = {"snapshot": str(snapshot), "finished": time.time(), "promoted": decision.promote,
              "reason": decision.reason, "holdout_accuracy": new_accuracy,
              "production_accuracy": production_accuracy,
              "production_version": None if current is None else current.name}

    def write(staging: Path):
        fit.model.save(staging / "model")
        (staging / "metrics.json").write_text(json.dumps(summary, indent=2, default=str))
        (staging / "decision.json").write_text(json.dumps(record, indent=2))

    version = store.write_version(snapshot.stem, write)
    if decision.promote:
        store.point_latest(version)
        outcome["promoted"] = version
    print(f"{'promoted' if decision.promote else 'kept production'}: {decision.reason}; "
          f"version {version.name}", flush=True)
    try:
        removed = store.prune(args.keep)
    except Exception as error:  # noqa: BLE001 - old versions left over are not a failed run
        print(f"warning: pruning old versions failed ({one_line(error)}); they stay in "
              f"{store.versions}", file=sys.stderr, flush=True)
    else:
        if removed:
            print(f"removed {', '.join(removed)}", flush=True)
    return PROMOTED if decision.promote else KEPT


def one_line(error: BaseException) -> str:
    """``Type: line`` of an error (the root Java cause of a Py4J error, not its stack)."""
    return f"{type(error).__name__}: {error_text(error)}"


def release(lock: RetrainLock | None) -> str:
    """Release ``lock`` (None: nothing held); "" when done, else what the user needs to know: a
    store that cannot be reached any more leaves the lock file behind."""
    if lock is None:
        return ""
    try:
        lock.release()
    except Exception as error:  # noqa: BLE001 - the run's own outcome stands; say what is left
        return (f"the lock {lock.path} could not be released ({one_line(error)}); the next "
                "run takes it over once this process has ended")
    return ""


def main(argv=None, prog="retrain.py") -> int:
    """The job: its exit code (0 promoted, 1 kept, 3 locked, or a failure's code). A failure
    prints one line, which also says whether the lock was left behind."""
    args = parse_args(argv, prog)
    outcome = {"promoted": None}
    lock = None
    try:
        check_output_paths({"--models-dir": args.models_dir}, {})
        store = ModelStore(args.models_dir)
        lock = RetrainLock(args.models_dir, stale_seconds=args.stale_hours * 3600.0)
        try:
            lock.acquire()
        except LockedError as error:
            lock = None
            print(f"error: {error}", file=sys.stderr)
            return LOCKED
        if lock.taken_over:
            print(f"took over the lock of pid {lock.taken_over.get('pid')}, which ended "
                  "without releasing it", flush=True)
        return run(args, store, outcome)
    except (Exception, SystemExit) as error:  # noqa: BLE001 - every failure: one line, a code
        if isinstance(error, SystemExit) and error.code in (0, None):
            raise
        if args.verbose:
            cause = error.__cause__ if isinstance(error, JobExit) else error
            print(full_trace(cause or error), file=sys.stderr)
        kind, reason = describe_failure(error, [prog, *sys.argv[1:]], INPUT)
        reason = reason.rstrip(".")  # more follows
        left = release(lock)  # now, so that the one line can say so
        lock = None
        left = f"; {left}" if left else ""
        if outcome["promoted"] is not None:  # latest moved: the promotion stands
            print(f"warning: {reason}; {outcome['promoted'].name} is the production model"
                  f"{left}", file=sys.stderr, flush=True)
            return PROMOTED
        print(f"error: {reason}; the production model is unchanged{left}",
              file=sys.stderr, flush=True)
        return EXIT_CODES[kind]
    finally:
        left = release(lock)
        if left:
            print(f"warning: {left}", file=sys.stderr, flush=True)


def command() -> int:
    """``sodm-retrain``, the console command (pyproject.toml ``[project.scripts]``)."""
    use_packaged_spark_conf()
    return main(prog="sodm-retrain")


if __name__ == "__main__":  # spark-submit of this file, python -m sodm_spark.jobs.retrain
    use_packaged_spark_conf()
    sys.exit(main())
