"""Model paths as URIs through one filesystem layer (docs/operations.md, "Where models live"):
which store a path gets, versioned saves on stores with and without atomic renames (an object
store simulated on the local disk), models saved and loaded by ``file:`` URI without a JVM, and
the retraining registry without symlinks or kernel locks (a ``_LATEST`` pointer, a lock file).
Local and fast; only the pyspark.ml test starts Spark."""
import json
import os
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path

import numpy as np
import pytest
from pyarrow.fs import LocalFileSystem

from sodm_spark.core.kernels import Kernel
from sodm_spark.data import filesystems, storage
from sodm_spark.data.filesystems import ArrowStore, LocalStore, is_uri, local_path
from sodm_spark.data.storage import (publish_directory, read_replaced, replace_versioned,
                                     resolve_version, store_for)
from sodm_spark.models.expansion import MODEL_FILES, KernelExpansion
from sodm_spark.ops.retrain import LockedError, ModelStore, RetrainLock, StorePath


class Killed(BaseException):
    """The process dying: not an Exception, so no handler of ours catches it."""


class DyingStore:
    """A store whose process dies before its ``die_at``-th operation (and every later one)."""

    def __init__(self, inner, die_at):
        self.inner, self.die_at, self.calls, self.names = inner, die_at, 0, []

    def __getattr__(self, name):
        operation = getattr(self.inner, name)
        if not callable(operation):
            return operation

        def call(*args):
            self.calls += 1
            self.names.append(name)
            if self.calls > self.die_at:
                raise Killed(name)
            return operation(*args)
        return call


def _model(seed, n_sv=5):
    rng = np.random.default_rng(seed)
    return KernelExpansion(rng.normal(size=(n_sv, 3)), rng.normal(size=(n_sv, 1)),
                           Kernel.create("rbf", 0.5), np.array([-1.0, 1.0]))


def _same(a, b):
    return np.array_equal(a.support_vectors, b.support_vectors) and np.array_equal(a.coef, b.coef)


def _object_store():
    """An object store simulated on the local disk: no atomic rename (writes go in place)."""
    return ArrowStore(LocalFileSystem(), atomic_rename=False)


def _no_symlinks(folder: Path):
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            assert not os.path.islink(os.path.join(root, name)), os.path.join(root, name)


@pytest.fixture
def no_jvm(monkeypatch):
    """Any use of the Hadoop store (the JVM through py4j) fails the test."""
    from sodm_spark.spark.hadoop_store import HadoopStore

    def refuse(*args, **kwargs):
        raise AssertionError("the Hadoop store (a JVM) was used")

    monkeypatch.setattr(HadoopStore, "for_path", staticmethod(refuse))
    monkeypatch.setattr(HadoopStore, "for_session", staticmethod(refuse))


# which store a path gets --------------------------------------------------------------------

def test_plain_paths_and_file_uris_are_the_local_disk(tmp_path, no_jvm):
    for path in (str(tmp_path), f"file://{tmp_path}", f"file:{tmp_path}",
                 f"file://localhost{tmp_path}"):
        assert isinstance(store_for(path), LocalStore), path
        assert local_path(path) == str(tmp_path)
    assert not is_uri("models/m") and not is_uri("C:/models") and is_uri("s3a://b/m")
    with pytest.raises(ValueError, match="names the host 'elsewhere'"):
        local_path("file://elsewhere/tmp/m")


def test_an_unknown_scheme_is_refused_in_one_line(monkeypatch):
    from pyspark import SparkContext

    monkeypatch.setattr(SparkContext, "_active_spark_context", None)
    with pytest.raises(ValueError) as refused:
        store_for("foo://host/models/m")
    message = str(refused.value)
    assert len(message.splitlines()) == 1
    assert message.startswith("foo://host/models/m: no file system reaches the scheme foo: ")
    assert "pyarrow" in message and "Hadoop connector" in message and "local path" in message


def test_precedence_the_classic_sessions_hadoop_store_then_pyarrow(monkeypatch):
    """A classic session's Hadoop file system first (the cluster's configuration and
    credentials); pyarrow when there is no JVM (Spark Connect) or Hadoop cannot reach it."""
    import pyspark  # noqa: F401 - a session needs pyspark loaded

    from sodm_spark.spark.hadoop_store import HadoopStore

    asked = []

    def from_uri(uri):
        asked.append(filesystems.arrow_uri(uri))
        return LocalFileSystem(), "/bucket/m"

    monkeypatch.setattr(filesystems, "_arrow_filesystem", from_uri)
    monkeypatch.setattr(HadoopStore, "for_session", staticmethod(lambda path: None))
    arrow = store_for("s3a://bucket/m")
    assert isinstance(arrow, ArrowStore) and asked == ["s3://bucket/m"]  # s3a is pyarrow's s3
    assert arrow._path("s3a://bucket/m/v-000001/_COMPLETE") == "/bucket/m/v-000001/_COMPLETE"

    hadoop = object()
    monkeypatch.setattr(HadoopStore, "for_session", staticmethod(lambda path: hadoop))
    assert store_for("s3a://bucket/m") is hadoop

    def no_connector(path):
        raise ValueError(f"{path}: no Hadoop file system for it (No FileSystem for scheme)")

    monkeypatch.setattr(HadoopStore, "for_session", staticmethod(no_connector))
    assert isinstance(store_for("gs://bucket/m"), ArrowStore) and asked[-1] == "gs://bucket/m"


# versioned saves on every store --------------------------------------------------------------

@pytest.mark.parametrize("atomic_rename", [True, False], ids=["renames", "object-store"])
def test_versions_through_the_arrow_store_on_file_uris(tmp_path, atomic_rename, no_jvm):
    uri = f"file://{tmp_path}/m"
    store = ArrowStore.for_path(uri) if atomic_rename else ArrowStore(
        LocalFileSystem(), uri, str(tmp_path / "m"), atomic_rename=False)
    assert store.atomic_rename is atomic_rename and store.atomic_replace
    for seed in (1, 2, 3):
        _model(seed).save(uri, store=store)
    assert store.list(uri) == ["v-000002", "v-000003"]
    assert resolve_version(store, uri, "metadata.json") == f"{uri}/v-000003"
    assert _same(KernelExpansion.load(uri, store=store), _model(3))
    assert _same(KernelExpansion.load(uri), _model(3))  # the same files, by the local store


def test_a_save_killed_at_any_step_on_an_object_store_leaves_the_old_or_new_model(tmp_path):
    """No rename: the files go straight under v-<n>, _COMPLETE last; a writer killed before the
    marker leaves the previous complete version the one readers get."""
    old, new = _model(1), _model(2, n_sv=7)
    counter = DyingStore(_object_store(), die_at=10**9)
    old.save(str(tmp_path / "count"), store=_object_store())
    replace_versioned(str(tmp_path / "count"), new.write_files, MODEL_FILES, store=counter)
    assert "rename" not in counter.names
    steps, outcomes = counter.calls, []
    for die_at in range(steps + 1):
        path = str(tmp_path / f"m-{die_at}")
        old.save(path, store=_object_store())
        with suppress(Killed):
            replace_versioned(path, new.write_files, MODEL_FILES,
                              store=DyingStore(_object_store(), die_at))
        loaded = KernelExpansion.load(path, store=_object_store())
        assert _same(loaded, old) or _same(loaded, new), die_at
        outcomes.append(_same(loaded, new))
        # the next save works, and deletes what the killed writer left (v-000002 incomplete)
        _model(3).save(path, store=_object_store())
        assert _same(KernelExpansion.load(path), _model(3))
        complete = [n for n in os.listdir(path) if os.path.exists(f"{path}/{n}/_COMPLETE")]
        assert sorted(os.listdir(path)) == sorted(complete), die_at
    switch = outcomes.index(True)
    assert outcomes == [False] * switch + [True] * (steps + 1 - switch)
    assert counter.names[switch - 1:switch + 1] == ["write_bytes", "list"]  # _COMPLETE switches


def test_an_incomplete_version_is_never_read_and_the_previous_one_is_kept(tmp_path):
    store, path = _object_store(), str(tmp_path / "m")
    _model(1).save(path, store=store)
    _model(2).write_files(store, f"{path}/v-000002")  # a writer killed before _COMPLETE
    assert _same(KernelExpansion.load(path, store=store), _model(1))
    _model(3).save(path, store=store)  # v-000003; v-000001 stays as the previous complete one
    assert sorted(os.listdir(path)) == ["v-000001", "v-000003"]


def test_pointer_files_are_replaced_whole_on_every_store(tmp_path):
    for number, store in enumerate((LocalStore(), ArrowStore(LocalFileSystem()),
                                    _object_store())):
        pointer = str(tmp_path / str(number) / "_LATEST")
        assert read_replaced(store, pointer) is None
        store.replace_bytes(pointer, b"v0001-a\n")
        store.replace_bytes(pointer, b"v0002-b\n")
        assert read_replaced(store, pointer) == b"v0002-b\n"
        assert os.listdir(os.path.dirname(pointer)) == ["_LATEST"]


def test_where_a_replace_deletes_first_readers_take_the_staged_pointer(tmp_path):
    """HDFS renames over nothing: the old pointer is deleted, then the staging file renamed. A
    reader in between reads the staging file (empty: still being written, so none yet)."""
    class Hdfs(ArrowStore):
        def __init__(self):
            super().__init__(LocalFileSystem())
            self.atomic_replace = False

    store, pointer = Hdfs(), str(tmp_path / "_LATEST")
    store.replace_bytes(pointer, b"v0001-a\n")
    store.replace_bytes(pointer, b"v0002-b\n")
    assert read_replaced(store, pointer) == b"v0002-b\n"
    os.remove(pointer)  # the moment between the delete and the rename
    (tmp_path / "._LATEST.tmp-00000000000000000001-aaaa").write_bytes(b"v0002-b\n")
    (tmp_path / "._LATEST.tmp-00000000000000000002-bbbb").write_bytes(b"v0003-c\n")
    assert read_replaced(store, pointer) == b"v0003-c\n"
    (tmp_path / "._LATEST.tmp-00000000000000000003-cccc").write_bytes(b"")
    assert read_replaced(store, pointer) is None
    assert read_replaced(LocalStore(), pointer) is None  # atomic replaces never need it


@pytest.mark.parametrize("store_kind", ["local", "object-store"])
def test_publish_directory_replaces_an_output(tmp_path, store_kind):
    store = LocalStore() if store_kind == "local" else _object_store()
    out = str(tmp_path / "predictions")

    def writer(rows):
        def write(target):
            os.makedirs(target)
            Path(target, "part-0").write_text(rows)
            Path(target, "_SUCCESS").write_text("")
        return write

    publish_directory(out, writer("one"), store=store)
    with pytest.raises(FileExistsError, match="pass overwrite"):
        publish_directory(out, writer("two"), store=store)
    publish_directory(out, writer("two"), overwrite=True, store=store)
    assert Path(out, "part-0").read_text() == "two"
    assert os.listdir(tmp_path) == ["predictions"]  # no staging or retired folders left


def test_a_bare_relative_name_stays_in_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    publish_directory("predictions", lambda target: os.makedirs(f"{target}/part"))
    LocalStore().replace_bytes("_LATEST", b"v0001-a\n")
    assert read_replaced(LocalStore(), "_LATEST") == b"v0001-a\n"
    assert sorted(os.listdir(tmp_path)) == ["_LATEST", "predictions"]


# models by file: URI without a JVM -------------------------------------------------------------

def test_a_kernel_expansion_by_file_uri_needs_no_jvm(tmp_path, no_jvm):
    uri = f"file://{tmp_path}/model"
    _model(1).save(uri)
    _model(2).save(uri)
    assert _same(KernelExpansion.load(uri), _model(2))
    assert _same(KernelExpansion.load(f"file:{tmp_path}/model"), _model(2))
    assert sorted(os.listdir(tmp_path / "model")) == ["v-000001", "v-000002"]


def test_a_pyspark_ml_model_by_file_uri_needs_no_hadoop_store(spark, tmp_path, no_jvm):
    from sodm_spark import SODMClassificationModel

    uri = f"file://{tmp_path}/ml-model"
    SODMClassificationModel(_model(1)).write().save(uri)
    SODMClassificationModel(_model(2, n_sv=7)).write().overwrite().save(uri)
    assert _same(SODMClassificationModel.load(uri).expansion, _model(2, n_sv=7))
    versions = [n for n in os.listdir(tmp_path / "ml-model") if n.startswith("v-")]
    assert sorted(versions) == ["v-000001", "v-000002"]
    with pytest.raises(OSError, match="already exists"):
        SODMClassificationModel(_model(3)).write().save(uri)


# the retraining registry --------------------------------------------------------------------

def _version(store, label, seed):
    return store.write_version(label, lambda folder: _model(seed).save(folder / "model"))


@pytest.mark.parametrize("store_kind", ["local", "arrow", "object-store"])
def test_the_registry_names_production_by_a_pointer_file(tmp_path, store_kind):
    directory = tmp_path / "models"
    store = {"local": None, "arrow": ArrowStore(LocalFileSystem()),
             "object-store": _object_store()}[store_kind]
    registry = ModelStore(str(directory), store=store)
    assert registry.latest_version() is None and registry.latest is None
    first = _version(registry, "day1", 1)
    registry.point_latest(first)
    kept = _version(registry, "day2", 2)  # written, not promoted
    assert registry.latest_version() == first
    third = _version(registry, "day 3", 3)
    registry.point_latest(third)
    assert (directory / "_LATEST").read_text() == "v0003-day_3\n"
    assert registry.latest_version() == third and registry.latest_version().name == third.name
    assert _same(KernelExpansion.load(registry.latest / "model"), _model(3))
    assert registry.version_names() == ["v0001-day1", "v0002-day2", "v0003-day_3"]
    assert registry.prune(1) == ["v0001-day1", "v0002-day2"] and kept.name == "v0002-day2"
    assert sorted(os.listdir(directory)) == ["_LATEST", "versions"]
    _no_symlinks(directory)
    if store_kind == "local":
        assert isinstance(first, Path)
    else:
        assert isinstance(first, StorePath) and first == f"{directory}/versions/v0001-day1"


def test_a_registry_by_file_uri_is_the_local_one(tmp_path, no_jvm):
    registry = ModelStore(f"file://{tmp_path}/models")
    registry.point_latest(_version(registry, "day1", 1))
    assert registry.latest_version() == tmp_path / "models" / "versions" / "v0001-day1"
    _no_symlinks(tmp_path)


def test_a_registry_with_a_latest_symlink_is_still_read_and_kept_in_step(tmp_path):
    directory = tmp_path / "models"
    registry = ModelStore(directory)
    first = _version(registry, "day1", 1)
    os.symlink("versions/v0001-day1", directory / "latest")  # the layout written before
    assert registry.latest_version() == first
    assert _same(KernelExpansion.load(directory / "latest" / "model"), _model(1))
    second = _version(registry, "day2", 2)
    registry.point_latest(second)
    assert registry.latest_version() == second
    assert (directory / "_LATEST").read_text() == "v0002-day2\n"
    # readers of the old layout follow the symlink, moved after _LATEST
    assert _same(KernelExpansion.load(directory / "latest" / "model"), _model(2))
    assert registry.prune(1) == ["v0001-day1"]
    assert not [n for n in os.listdir(directory) if n.startswith(".")]


def test_a_pointer_naming_no_version_is_refused_in_one_line(tmp_path):
    registry = ModelStore(tmp_path)
    (tmp_path / "_LATEST").write_text("../elsewhere\n")
    with pytest.raises(ValueError, match=r"_LATEST names '\.\./elsewhere', not a folder of"):
        registry.latest_version()
    (tmp_path / "_LATEST").write_text("v0009-gone\n")
    assert registry.latest_version() is None  # pruned by hand: no production model


# the lock ----------------------------------------------------------------------------------

HOLD = """
import sys, time
from sodm_spark.ops.retrain import RetrainLock
with RetrainLock(sys.argv[1]):
    print("holding", flush=True)
    time.sleep(60)
"""


def test_a_held_lock_refuses_a_second_run_and_a_dead_ones_is_taken_over(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        with pytest.raises(LockedError) as refused:
            RetrainLock(tmp_path).acquire()
        message = str(refused.value)
        assert len(message.splitlines()) == 1
        assert f"pid {holder.pid} on " in message and "wait for it to finish" in message
    finally:
        holder.kill()
        holder.wait()
    with RetrainLock(tmp_path) as lock:  # killed: its pid is gone, the lock is stale
        assert lock.taken_over["pid"] == holder.pid
        record = json.loads((tmp_path / ".retrain.lock").read_text())
        assert record["pid"] == os.getpid() and record["token"]
    assert os.listdir(tmp_path) == []
    _no_symlinks(tmp_path)


def test_a_lock_in_a_store_without_exclusive_create(tmp_path, no_jvm):
    """Written, read back after the settle time, held only while it carries this run's token;
    a stale one (its pid gone on this host) is taken over; release deletes only our own."""
    def lock():
        return RetrainLock(str(tmp_path), store=_object_store(), settle_seconds=0.0)

    with lock() as first:
        assert first.taken_over is None
        with pytest.raises(LockedError, match="wait for it to finish") as refused:
            lock().acquire()
        assert len(str(refused.value).splitlines()) == 1
    assert not (tmp_path / ".retrain.lock").exists()
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True)
    (tmp_path / ".retrain.lock").write_text(json.dumps(
        {"pid": int(finished.stdout), "host": os.uname().nodename, "started": time.time()}))
    with lock() as second:
        assert second.taken_over["pid"] == int(finished.stdout)


def test_a_store_lock_lost_to_a_run_writing_at_the_same_moment_is_refused(tmp_path, monkeypatch):
    store = _object_store()
    real = store.write_bytes

    def and_another_run(path, data):
        real(path, data)
        real(path, json.dumps({"pid": 1, "host": "other", "started": time.time(),
                               "token": "f" * 32}).encode())

    monkeypatch.setattr(store, "write_bytes", and_another_run)
    contender = RetrainLock(str(tmp_path), store=store, settle_seconds=0.0)
    with pytest.raises(LockedError, match="pid 1 on other.*at the same moment"):
        contender.acquire()
    contender.release()  # not held: the other run's lock stays
    assert json.loads((tmp_path / ".retrain.lock").read_text())["pid"] == 1


def test_storage_keeps_its_names(tmp_path):
    """What other modules import from sodm_spark.data.storage is still there."""
    for name in ("LocalStore", "is_uri", "join", "store_for", "replace_file", "move_into_place",
                 "replace_versioned", "resolve_version", "COMPLETE_MARKER", "version_number"):
        assert hasattr(storage, name), name
