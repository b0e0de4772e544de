"""Scheduled retraining: promote / keep / reject, the lock, versions, and crashes mid-run."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import dump_svmlight_file

from sodm_spark.core.errors import EXIT_CODES, INPUT, INTERNAL, SETTINGS
from sodm_spark.models.expansion import KernelExpansion
from sodm_spark.ops.retrain import (KEPT, LOCKED, PROMOTED, LockedError, ModelStore, RetrainLock,
                                    decide, newest_snapshot)

from conftest import make_problem

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "jobs"))
import retrain  # noqa: E402

# gamma "scale": the job scales the features onto [0, 1] first, so a number would not mean what
# it means on the raw rows
TRAIN_FLAGS = ["--", "--levels", "1", "--p", "2", "--strata", "3", "--lam", "100",
               "--gamma", "scale"]


def write_libsvm(path, X, y):
    dump_svmlight_file(X, (y > 0).astype(int), str(path), zero_based=False)
    return path


@pytest.fixture
def setup(tmp_path):
    """Two snapshots (a good one, then one with scrambled labels) and a holdout."""
    snapshots = tmp_path / "snapshots"
    snapshots.mkdir()
    X, y = make_problem(m=300, d=4, seed=51, noise=0.2)
    good = write_libsvm(snapshots / "day1.libsvm", X, y)
    X_h, y_h = make_problem(m=200, d=4, seed=52, noise=0.2)
    holdout = write_libsvm(tmp_path / "holdout.libsvm", X_h, y_h)
    scrambled = np.random.default_rng(3).permutation(y)
    return {"snapshots": snapshots, "holdout": holdout, "models": tmp_path / "models",
            "good": good, "bad": (X, scrambled)}


def run_job(setup, *extra):
    return retrain.main(["--snapshots", str(setup["snapshots"]), "--holdout",
                         str(setup["holdout"]), "--models-dir", str(setup["models"]), *extra,
                         *TRAIN_FLAGS])


def add_snapshot(setup, name, X, y):
    path = write_libsvm(setup["snapshots"] / name, X, y)
    later = time.time() + len(list(setup["snapshots"].iterdir()))
    os.utime(path, (later, later))  # newest by modification time


def test_promote_then_keep_then_promote_again(spark, setup):
    store = ModelStore(setup["models"])
    assert run_job(setup) == PROMOTED
    first = store.latest_version()
    assert first.name.startswith("v0001-day1")
    decision = json.loads((first / "decision.json").read_text())
    assert decision["promoted"] and decision["production_accuracy"] is None
    assert decision["holdout_accuracy"] > 0.8
    # scrambled labels: clearly worse on the holdout, so production is kept
    add_snapshot(setup, "day2.libsvm", *setup["bad"])
    assert run_job(setup) == KEPT
    assert store.latest_version() == first
    rejected = json.loads((store.versions / store.version_names()[-1] / "decision.json")
                          .read_text())
    assert not rejected["promoted"] and rejected["production_version"] == first.name
    # the same good data again is not worse: promoted
    X, y = make_problem(m=300, d=4, seed=51, noise=0.2)
    add_snapshot(setup, "day3.libsvm", X, y)
    assert run_job(setup) == PROMOTED
    assert store.latest_version().name.startswith("v0003-day3")
    model = KernelExpansion.load(store.latest / "model")
    assert model.support_vectors.shape[1] == 4


def test_keep_prunes_old_versions_but_never_latest(spark, setup):
    store = ModelStore(setup["models"])
    assert run_job(setup, "--keep", "1") == PROMOTED
    add_snapshot(setup, "day2.libsvm", *setup["bad"])
    assert run_job(setup, "--keep", "1") == KEPT  # newest version is the rejected one
    names = store.version_names()
    assert store.latest_version().name in names  # production survives pruning
    assert len(names) == 2


def test_bad_snapshot_is_refused_and_latest_stays(spark, setup, capsys):
    assert run_job(setup) == PROMOTED
    store = ModelStore(setup["models"])
    before = store.latest_version()
    bad = setup["snapshots"] / "day2.libsvm"
    bad.write_text("1 1:0.5 2:abc\n")
    later = time.time() + 10
    os.utime(bad, (later, later))
    assert run_job(setup) == EXIT_CODES[INPUT]
    err = capsys.readouterr().err
    assert "day2.libsvm, line 1" in err and "production model is unchanged" in err
    assert store.latest_version() == before
    assert not (setup["models"] / ".retrain.lock").exists()


def test_empty_snapshot_directory_fails_clearly(spark, tmp_path, capsys):
    (tmp_path / "snapshots").mkdir()
    code = retrain.main(["--snapshots", str(tmp_path / "snapshots"), "--holdout", "x",
                         "--models-dir", str(tmp_path / "models")])
    assert code == EXIT_CODES[INPUT]
    assert "is empty: nothing to train on" in capsys.readouterr().err


HOLD_LOCK = """
import sys, time
from sodm_spark.ops.retrain import RetrainLock
with RetrainLock(sys.argv[1]):
    print("holding", flush=True)
    time.sleep(60)
"""


def test_a_second_run_is_refused_while_the_first_holds_the_lock(setup, capsys):
    setup["models"].mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(setup["models"])],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        assert run_job(setup) == LOCKED
        assert f"pid {holder.pid}" in capsys.readouterr().err
    finally:
        holder.kill()
        holder.wait()
    # the kernel dropped the dead holder's lock: the next run takes it over
    with RetrainLock(setup["models"]) as lock:
        assert lock.taken_over["pid"] == holder.pid


def test_stale_locks_are_taken_over(tmp_path):
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True)
    dead_pid = int(finished.stdout)
    lock_path = tmp_path / ".retrain.lock"
    lock_path.write_text(json.dumps({"pid": dead_pid, "host": os.uname().nodename,
                                     "started": time.time()}))
    with RetrainLock(tmp_path) as lock:
        assert lock.taken_over["pid"] == dead_pid
        assert json.loads(lock_path.read_text())["pid"] == os.getpid()
        with pytest.raises(LockedError, match="holds"):
            RetrainLock(tmp_path).acquire()  # our own live lock (another open file) holds it
    assert not lock_path.exists()
    # a record whose pid now belongs to another process (its start time differs) is stale
    lock_path.write_text(json.dumps({"pid": os.getpid(), "host": os.uname().nodename,
                                     "started": time.time() - 7200, "process_start": "1"}))
    with RetrainLock(tmp_path, stale_seconds=3600) as lock:
        assert lock.taken_over["pid"] == os.getpid()
        with pytest.raises(LockedError, match="wait for it"):
            RetrainLock(tmp_path, stale_seconds=3600).acquire()
        with pytest.raises(LockedError, match="longer than 0 h: if that run hangs"):
            RetrainLock(tmp_path, stale_seconds=0).acquire()
    # a record from another host (a shared disk): its pid cannot be checked, so it is held
    # until it is older than stale_seconds
    lock_path.write_text(json.dumps({"pid": 1, "host": "elsewhere", "started": time.time() - 60}))
    with pytest.raises(LockedError, match="pid 1 on elsewhere.*wait for it"):
        RetrainLock(tmp_path, stale_seconds=3600).acquire()
    with RetrainLock(tmp_path, stale_seconds=30) as lock:
        assert lock.taken_over["host"] == "elsewhere"
    # an unreadable lock file (ours are written whole, so nobody is writing it)
    lock_path.write_text("{")
    with RetrainLock(tmp_path) as lock:
        assert lock.taken_over == {}
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no markers or staging files left


def test_crash_before_the_pointer_moves_leaves_latest_intact(spark, setup, monkeypatch):
    store = ModelStore(setup["models"])
    assert run_job(setup) == PROMOTED
    before = store.latest_version()
    X, y = make_problem(m=300, d=4, seed=51, noise=0.2)
    add_snapshot(setup, "day2.libsvm", X, y)

    def crash(self, version):
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(ModelStore, "point_latest", crash)
    with pytest.raises(KeyboardInterrupt):
        run_job(setup)
    assert store.latest_version() == before
    KernelExpansion.load(store.latest / "model")  # still a complete model

    def crash_while_writing(staging):
        (Path(staging) / "model").mkdir()
        raise KeyboardInterrupt("killed while writing")

    monkeypatch.undo()
    with pytest.raises(KeyboardInterrupt):
        store.write_version("partial", crash_while_writing)
    assert not any("partial" in name for name in store.version_names())
    assert not list(store.versions.glob(".*tmp*"))


def test_decide_and_newest_snapshot(tmp_path):
    assert decide(0.90, None).promote
    assert decide(0.90, 0.90).promote
    assert decide(0.899, 0.90, max_drop=0.002).promote
    assert not decide(0.897, 0.90, max_drop=0.002).promote
    (tmp_path / "a").write_text("x")
    (tmp_path / "b").write_text("x")
    os.utime(tmp_path / "a", (time.time() + 5, time.time() + 5))
    assert newest_snapshot(tmp_path).name == "a"
    with pytest.raises(FileNotFoundError, match="does not exist"):
        newest_snapshot(tmp_path / "missing")


TAKE_OVER = """
import json, sys, time
from sodm_spark.ops.retrain import LockedError, RetrainLock
directory, start = sys.argv[1], float(sys.argv[2])
time.sleep(max(0.0, start - time.time()))  # all contenders wake together
try:
    with RetrainLock(directory) as lock:
        began = time.time()
        time.sleep(0.5)
        print(json.dumps({"held": [began, time.time()], "taken_over": lock.taken_over}))
except LockedError:
    print(json.dumps({"held": None}))
"""


def test_concurrent_takeovers_of_a_stale_lock_never_hold_it_twice(tmp_path):
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True)
    for attempt in range(4):
        directory = tmp_path / f"round{attempt}"
        directory.mkdir()
        (directory / ".retrain.lock").write_text(json.dumps(
            {"pid": int(finished.stdout), "host": os.uname().nodename, "started": 0}))
        start = time.time() + 1.5  # every contender is running and waiting by then
        contenders = [subprocess.Popen([sys.executable, "-c", TAKE_OVER, str(directory),
                                        repr(start)], stdout=subprocess.PIPE, text=True)
                      for _ in range(3)]
        results = [json.loads(c.communicate(timeout=60)[0]) for c in contenders]
        held = sorted(r["held"] for r in results if r["held"])
        assert held, results
        for (_, first_end), (second_start, _) in zip(held, held[1:]):
            assert second_start >= first_end, f"two runs held the lock at once: {results}"
        # the dead run's record is reported by exactly the first holder
        assert sum(r.get("taken_over") is not None for r in results) == 1


def _retrain_flags(setup, *extra, train=TRAIN_FLAGS):
    return ["--snapshots", str(setup["snapshots"]), "--holdout", str(setup["holdout"]),
            "--models-dir", str(setup["models"]), *extra, *train]


def test_bad_training_flags_after_the_separator_exit_2_before_anything_else(tmp_path, capsys):
    (tmp_path / "snapshots").mkdir()  # empty: the flags are refused before this is noticed
    with pytest.raises(SystemExit) as refused:
        retrain.main(["--snapshots", str(tmp_path / "snapshots"), "--holdout", "x",
                      "--models-dir", str(tmp_path / "models"), "--", "--levels", "many"])
    assert refused.value.code == 2
    assert "--levels" in capsys.readouterr().err
    assert not (tmp_path / "models").exists()


def test_a_models_dir_that_is_a_file_exits_2_with_one_line(setup, capsys):
    setup["models"].write_text("not a directory")
    assert run_job(setup) == EXIT_CODES[SETTINGS]
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --models-dir ") and "unchanged" in err[0]
    assert setup["models"].read_text() == "not a directory"


def test_an_unexpected_spark_error_exits_4_and_keeps_production(spark, setup, monkeypatch,
                                                                 capsys, tmp_path):
    store = ModelStore(setup["models"])
    assert run_job(setup) == PROMOTED
    before = store.latest_version()
    capsys.readouterr()

    def broken(spark, args):
        raise RuntimeError("An error occurred while calling o123.collect.\n"
                           ": org.apache.spark.SparkException: Job aborted\n\tat ...")

    monkeypatch.setattr(retrain.train_sodm, "train", broken)
    log = tmp_path / "jobs.log"
    monkeypatch.setenv("SODM_LOG_FILE", str(log))
    assert run_job(setup) == EXIT_CODES[INTERNAL]
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: an unexpected failure stopped the job (RuntimeError: An error "
                   "occurred while calling o123.collect.): a bug or Spark itself, not a check "
                   f"of your flags or data; the full trace is in {log}; the production model "
                   "is unchanged"]
    assert "in broken" in log.read_text() and "Job aborted" in log.read_text()
    assert store.latest_version() == before
    assert not (setup["models"] / ".retrain.lock").exists()


def test_a_failure_after_promotion_still_exits_0(spark, setup, monkeypatch, capsys):
    def broken_prune(self, keep):
        raise PermissionError("[Errno 13] Permission denied: 'versions/v0001'")

    monkeypatch.setattr(ModelStore, "prune", broken_prune)
    assert run_job(setup) == PROMOTED
    store = ModelStore(setup["models"])
    assert store.latest_version().name.startswith("v0001")
    assert "pruning old versions failed" in capsys.readouterr().err
