"""Model directories: replaced atomically (a writer killed between any two steps leaves the
old or the new complete model at the path), and saved / loaded whole through Hadoop's file
systems (a ``file://`` URI handed to the Hadoop store here takes the code path ``hdfs://`` or
``s3a://`` take). The stores of URIs without Spark: tests/test_uri_storage.py."""
import json
import re
import shutil
import time
from collections import namedtuple
from contextlib import suppress

import numpy as np
import pytest

from sodm_spark.core.kernels import Kernel
from sodm_spark.data.storage import LocalStore, replace_versioned, resolve_version
from sodm_spark.models.expansion import MODEL_FILES, KernelExpansion
from sodm_spark.ops.retrain import ModelStore

from conftest import contents, cut_in_half, model_files


class Killed(BaseException):
    """The process dying: not an Exception, so no handler of ours catches it."""


class DyingStore:
    """A store whose process dies before its ``die_at``-th operation: that one and every later
    one raise (a dead process runs no clean-up either)."""

    def __init__(self, inner, die_at):
        self.inner, self.die_at, self.calls = inner, die_at, 0

    def __getattr__(self, name):
        operation = getattr(self.inner, name)
        if not callable(operation):  # what the store declares (atomic_rename, ...)
            return operation

        def call(*args):
            if self.calls >= self.die_at:
                self.calls += 1
                raise Killed(f"killed before {name}{args}")
            self.calls += 1
            return operation(*args)
        return call


def _model(seed, n_sv=5, d=3):
    rng = np.random.default_rng(seed)
    return KernelExpansion(rng.normal(size=(n_sv, d)), rng.normal(size=(n_sv, 1)),
                           Kernel.create("rbf", 0.5), np.array([-1.0, 1.0]))


def _same(a, b):
    return np.array_equal(a.support_vectors, b.support_vectors) and np.array_equal(a.coef, b.coef)


# metadata.json of models written before the kernels were classes, as KernelExpansion.save
# wrote it (and, the poly one, before the kernel offset existed)
SAVED_METADATA = {
    "rbf": """{
  "format": "sodm_spark.KernelExpansion",
  "format_version": 1,
  "kernel": {
    "name": "rbf",
    "gamma": 0.5,
    "degree": 3,
    "coef0": 0.0,
    "offset": 1.5
  },
  "n_support": 4,
  "n_features": 3
}""",
    "poly": """{
  "format": "sodm_spark.KernelExpansion",
  "format_version": 1,
  "kernel": {"name": "poly", "gamma": 0.25, "degree": 2, "coef0": 1.0},
  "n_support": 4,
  "n_features": 3
}""",
}


@pytest.mark.parametrize("name", sorted(SAVED_METADATA))
def test_a_model_folder_written_before_the_kernel_classes_loads_and_scores(tmp_path, name):
    rng = np.random.default_rng(3)
    vectors, coef, X = rng.normal(size=(4, 3)), rng.normal(size=(4, 1)), rng.normal(size=(6, 3))
    (tmp_path / "metadata.json").write_text(SAVED_METADATA[name])
    np.savez(tmp_path / "arrays.npz", support_vectors=vectors, coef=coef,
             classes=np.array([-1.0, 1.0]))
    model = KernelExpansion.load(tmp_path)
    assert model.kernel.name == name
    # the decision values by the kernels' formulas, written out here
    if name == "rbf":
        expected = np.exp(-0.5 * ((X[:, None, :] - vectors[None]) ** 2).sum(axis=2)) + 1.5
    else:
        expected = (0.25 * X @ vectors.T + 1.0) ** 2
    np.testing.assert_allclose(model.decision_function(X), expected @ coef[:, 0], rtol=1e-12)
    model.save(tmp_path / "again")  # and written back as it was read
    assert KernelExpansion.load(tmp_path / "again").kernel == model.kernel


def _steps_of_a_save(tmp_path, model):
    counter = DyingStore(LocalStore(), die_at=10**9)
    replace_versioned(str(tmp_path / "count"), model.write_files, MODEL_FILES, store=counter)
    return counter.calls


@pytest.mark.parametrize("old_layout", ["versioned", "flat"])
def test_a_save_killed_between_any_two_steps_leaves_the_old_or_the_new_model(tmp_path,
                                                                             old_layout):
    old, new = _model(1), _model(2, n_sv=7)
    steps = _steps_of_a_save(tmp_path, new)
    assert steps >= 6
    outcomes = []
    for die_at in range(steps + 1):
        path = tmp_path / f"{old_layout}-{die_at}"
        if old_layout == "flat":  # a directory an earlier version wrote: files at the top
            old.write_files(LocalStore(), str(path))
        else:
            old.save(path)
            old.save(path)  # a second version, so the oldest is pruned by the new save
        with suppress(Killed):
            replace_versioned(str(path), new.write_files, MODEL_FILES,
                              store=DyingStore(LocalStore(), die_at))
        loaded = KernelExpansion.load(path)
        assert _same(loaded, old) or _same(loaded, new), die_at
        outcomes.append("new" if _same(loaded, new) else "old")
        # the next save after a death works and tidies up what the dead writer left
        _model(3).save(path)
        assert _same(KernelExpansion.load(path), _model(3))
        assert not [p for p in path.iterdir() if p.name.startswith(".v-")]
    # old until the new version is marked complete, new from then on
    switch = outcomes.index("new")
    assert outcomes == ["old"] * switch + ["new"] * (steps + 1 - switch)
    assert 0 < switch <= steps


def test_versions_are_kept_two_deep_and_flat_files_are_replaced(tmp_path):
    path = tmp_path / "m"
    _model(1).write_files(LocalStore(), str(path))  # the layout before versions
    assert _same(KernelExpansion.load(path), _model(1))
    for seed in (2, 3, 4):
        _model(seed).save(path)
    assert sorted(p.name for p in path.iterdir()) == ["v-000002", "v-000003"]
    assert model_files(path).name == "v-000003"
    assert _same(KernelExpansion.load(path), _model(4))
    # a version without its completion marker (a writer that died) is not read
    (path / "v-000004").mkdir()
    _model(5).write_files(LocalStore(), str(path / "v-000004"))
    assert _same(KernelExpansion.load(path), _model(4))
    assert resolve_version(LocalStore(), str(path), "metadata.json").endswith("v-000003")


def test_the_retraining_store_moves_latest_atomically_at_every_step(tmp_path):
    """The retraining store: a version written (staging + renames), then the _LATEST pointer
    replaced (staging file + os.replace). Dying before any of those file operations leaves
    _LATEST on a complete model: the previous one, or the new one once the pointer moved."""
    import os

    store = ModelStore(tmp_path / "models")
    first = store.write_version("one", lambda staging: _model(1).save(staging / "model"))
    store.point_latest(first)

    def promote(die_before):
        calls = []

        def dying(real):
            def call(*args, **kwargs):
                calls.append(real.__name__)
                if len(calls) > die_before:
                    raise Killed(real.__name__)
                return real(*args, **kwargs)
            return call

        with pytest.MonkeyPatch.context() as patch:
            for name in ("rename", "symlink", "replace"):
                patch.setattr(os, name, dying(getattr(os, name)))
            with suppress(Killed):
                store.point_latest(store.write_version(
                    "two", lambda staging: _model(2).save(staging / "model")))
        return calls

    steps = len(promote(10**9))
    assert steps >= 3  # the model's own version rename, the store's rename, _LATEST's replace
    seen = []
    for die_before in range(steps + 1):
        store.point_latest(first)
        promote(die_before)
        current = KernelExpansion.load(store.latest / "model")
        assert _same(current, _model(1)) or _same(current, _model(2)), die_before
        seen.append(_same(current, _model(2)))
    assert seen == [False] * steps + [True]  # only the last operation (replace) promotes
    assert not [p for p in (tmp_path / "models").rglob("*") if p.is_symlink()]


def test_the_hadoop_store_saves_and_loads_whole_models(spark, tmp_path):
    """HadoopStore on ``file://``: the code path of hdfs:// and s3a:// (store_for gives it
    those schemes while a classic session runs; a file: URI is the local disk)."""
    from sodm_spark.spark.hadoop_store import HadoopStore

    uri = f"file://{tmp_path}/remote-model"
    store = HadoopStore.for_path(uri)
    assert store.atomic_rename and not store.exclusive_create
    model = _model(6)
    model.save(uri, store=store)
    model.save(uri, store=store)
    assert _same(KernelExpansion.load(uri, store=store), model)
    # every file is where the URI says, written through Hadoop (its .crc files beside them)
    files = sorted(p.name for p in (tmp_path / "remote-model" / "v-000002").iterdir())
    assert {"arrays.npz", "metadata.json", "_COMPLETE"} <= set(files)
    assert any(name.endswith(".crc") for name in files)  # Hadoop's local file system wrote it
    assert store.list(uri) == ["v-000001", "v-000002"]
    with pytest.raises(ValueError, match="no such directory"):
        KernelExpansion.load(f"file://{tmp_path}/nothing", store=store)
    # the pointer files of the retraining registry, and its create-if-absent
    pointer = f"{uri}/_LATEST"
    store.replace_bytes(pointer, b"v0001-a\n")
    store.replace_bytes(pointer, b"v0002-b\n")
    assert store.read_bytes(pointer) == b"v0002-b\n"
    assert not [n for n in store.list(uri) if ".tmp-" in n]
    assert store.create_new(f"{uri}/lock", b"mine") and not store.create_new(f"{uri}/lock", b"x")
    assert store.read_bytes(f"{uri}/lock") == b"mine"
    # a Spark Connect client has no JVM: no Hadoop store, and store_for goes to pyarrow
    from pyspark import SparkContext

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SparkContext, "_active_spark_context", None)
        assert HadoopStore.for_session(uri) is None


def test_a_file_uri_model_without_spark_is_read_from_the_local_disk(tmp_path, monkeypatch):
    from pyspark import SparkContext

    monkeypatch.setattr(SparkContext, "_active_spark_context", None)
    _model(7).save(f"file://{tmp_path}/m")
    assert _same(KernelExpansion.load(f"file:{tmp_path}/m"), _model(7))
    # a scheme only a Hadoop connector reaches: the one line says so
    with pytest.raises(ValueError, match=r"^wasbs://c@a/m: no file system reaches the scheme "
                       r"wasbs: \(no classic Spark session .*Hadoop connector"):
        KernelExpansion.load("wasbs://c@a/m")


def test_the_pyspark_ml_writer_replaces_a_model_atomically_on_any_file_system(spark, tmp_path,
                                                                             monkeypatch):
    from sodm_spark import SODMClassificationModel
    from sodm_spark.spark.hadoop_store import HadoopStore

    old, new = SODMClassificationModel(_model(1)), SODMClassificationModel(_model(2, n_sv=7))
    real = HadoopStore.for_path
    counter = {}

    def counted(path):
        counter["store"] = DyingStore(real(path), die_at=10**9)
        return counter["store"]

    monkeypatch.setattr(HadoopStore, "for_path", staticmethod(counted))
    # a plain path: Spark's default file system, through the session's Hadoop store
    new.write().overwrite().save(f"{tmp_path}/count")
    steps = counter["store"].calls
    outcomes = []
    for die_at in range(steps + 1):
        uri = f"{tmp_path}/ml-{die_at}"
        monkeypatch.setattr(HadoopStore, "for_path", staticmethod(real))
        old.write().save(uri)
        monkeypatch.setattr(HadoopStore, "for_path",
                            staticmethod(lambda path, n=die_at: DyingStore(real(path), n)))
        with suppress(Killed):
            new.write().overwrite().save(uri)
        monkeypatch.setattr(HadoopStore, "for_path", staticmethod(real))
        loaded = SODMClassificationModel.load(uri).expansion
        assert _same(loaded, old.expansion) or _same(loaded, new.expansion), die_at
        outcomes.append(_same(loaded, new.expansion))
    switch = outcomes.index(True)
    assert outcomes == [False] * switch + [True] * (steps + 1 - switch)
    # without overwrite() an existing model is refused, and stays
    with pytest.raises(OSError, match="already exists"):
        old.write().save(f"{tmp_path}/ml-{steps}")
    assert _same(SODMClassificationModel.load(f"{tmp_path}/ml-{steps}").expansion,
                 new.expansion)


# every reader of a model folder refuses a damaged one ---------------------------------------
# The one validation of a saved model (sodm_spark.models.expansion.read_model_files) is what
# each reader goes through; here each reader meets each damage, and must refuse it in one line
# naming the file and the fault, within the bound, writing nothing (the folder and any earlier
# output byte-identical afterwards).

REFUSAL_SECONDS = 30.0  # a refusal reads two small files; far less, even on a loaded machine


def _edit_metadata(path, edit):
    metadata = json.loads(path.read_text())
    edit(metadata)
    path.write_text(json.dumps(metadata))  # NaN is written as JSON's NaN token, as Python does


def _not_a_zip(path):
    """An .npy where the .npz belongs: a copy of the wrong file."""
    import io

    buffer = io.BytesIO()
    np.save(buffer, np.ones(3))
    path.write_bytes(buffer.getvalue())


Damage = namedtuple("Damage", "apply damaged named fault")
"""``apply(files, version)`` damages the files folder (arrays.npz, metadata.json) or its
version folder; ``damaged`` is the file it changes, ``named`` the one the refusal must name
(``_COMPLETE``: the version folder's), ``fault`` a regex of what the refusal says is wrong."""

DAMAGES = {
    "arrays-truncated": Damage(
        lambda files, version: cut_in_half(files / "arrays.npz"), "arrays.npz", "arrays.npz",
        r"arrays\.npz is truncated or corrupt \(BadZipFile"),
    "arrays-not-a-zip": Damage(
        lambda files, version: _not_a_zip(files / "arrays.npz"), "arrays.npz", "arrays.npz",
        r"arrays\.npz is not a NumPy \.npz archive .*not a zip"),
    "metadata-truncated": Damage(
        lambda files, version: cut_in_half(files / "metadata.json"), "metadata.json",
        "metadata.json", r"metadata\.json is truncated or corrupt, not valid JSON"),
    "metadata-without-kernel": Damage(
        lambda files, version: _edit_metadata(files / "metadata.json",
                                              lambda m: m.pop("kernel")),
        "metadata.json", "metadata.json", r"metadata\.json is corrupt: it has no kernel"),
    "complete-marker-missing": Damage(
        lambda files, version: (version / "_COMPLETE").unlink(), None, "_COMPLETE",
        r"v-000001/_COMPLETE is missing: no version of .* is complete"),
    "shapes-disagree-with-metadata": Damage(
        lambda files, version: _edit_metadata(
            files / "metadata.json", lambda m: m.update(n_support=m["n_support"] + 1)),
        "metadata.json", "arrays.npz",
        r"the support vectors have shape \(5, 3\) but metadata\.json says \(6, 3\)"),
    "calibration-not-finite": Damage(
        lambda files, version: _edit_metadata(files / "metadata.json", lambda m: m.update(
            calibration={"method": "sigmoid", "slopes": [float("nan")],
                         "intercepts": [0.5]})),
        "metadata.json", "metadata.json",
        r"metadata\.json: its calibration cannot be read \(ValueError: slopes holds NaN or "
        r"infinite numbers"),
}


def _calibrated_model():
    rng = np.random.default_rng(11)
    return _model(11).calibrated(rng.normal(size=(40, 3)), rng.choice([-1.0, 1.0], 40))


def _expansion_layout(root):
    _calibrated_model().save(root / "model")
    version = root / "model" / "v-000001"
    return root / "model", version, version


def _mlflow_layout(root):
    flavor = pytest.importorskip("sodm_spark.mlflow")
    flavor.save_model(_calibrated_model(), root / "mlflow-model")
    version = root / "mlflow-model" / flavor.MODEL_DATA / "v-000001"
    return root / "mlflow-model", version, version


def _load_expansion(path):
    return KernelExpansion.load(path)


def _load_classifier(path):
    from sodm_spark import ODMClassifier

    return ODMClassifier.load(path)


def _load_mlflow(path):
    from sodm_spark import mlflow as flavor

    return flavor.load_model(str(path))


def _load_pyfunc(path):
    import mlflow.pyfunc

    return mlflow.pyfunc.load_model(str(path))


LIBRARY_READERS = {  # reader -> (layout, call)
    "KernelExpansion.load": (_expansion_layout, _load_expansion),
    "ODMClassifier.load": (_expansion_layout, _load_classifier),
    "sodm_spark.mlflow.load_model": (_mlflow_layout, _load_mlflow),
    "mlflow.pyfunc.load_model": (_mlflow_layout, _load_pyfunc),
}


def _refused_in_one_line(message, damage, files, version):
    named, fault = DAMAGES[damage].named, DAMAGES[damage].fault
    assert len(message.splitlines()) == 1, message
    assert re.search(fault, message), message
    assert str((version if named == "_COMPLETE" else files) / named) in message, message
    assert "Copy the whole" in message, message  # and what to do


@pytest.mark.parametrize("damage", DAMAGES)
@pytest.mark.parametrize("reader", LIBRARY_READERS)
def test_every_library_reader_refuses_a_damaged_model_folder(tmp_path, reader, damage,
                                                             monkeypatch):
    from sodm_spark.core.errors import InputError

    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())  # not ./mlruns
    layout, load = LIBRARY_READERS[reader]
    path, files, version = layout(tmp_path)
    DAMAGES[damage].apply(files, version)
    before = contents(tmp_path)
    started = time.perf_counter()
    with pytest.raises(InputError) as refused:
        load(path)
    assert time.perf_counter() - started < REFUSAL_SECONDS
    _refused_in_one_line(str(refused.value), damage, files, version)
    assert contents(tmp_path) == before  # a reader writes nothing


def test_the_readers_read_the_undamaged_folders(tmp_path, monkeypatch):
    """The same layouts, undamaged: every reader gets the saved model (so the refusals above
    are the damage's, not the layout's)."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())
    X = np.random.default_rng(12).normal(size=(6, 3))
    expected = _calibrated_model().predict_proba(X)
    for reader, (layout, load) in LIBRARY_READERS.items():
        root = tmp_path / reader
        root.mkdir()
        loaded = load(layout(root)[0])
        if reader == "mlflow.pyfunc.load_model":  # MLflow's wrapper of the flavor's model
            loaded = loaded.get_raw_model()
        np.testing.assert_array_equal(loaded.predict_proba(X), expected, err_msg=reader)


@pytest.fixture(scope="module")
def saved_ml_model(spark, tmp_path_factory):
    """A pyspark.ml SODMClassificationModel saved by its writer (Spark writes its metadata)."""
    from sodm_spark import SODMClassificationModel

    path = tmp_path_factory.mktemp("ml") / "ml-model"
    SODMClassificationModel(_calibrated_model()).write().save(str(path))
    return path


HADOOP_CHECKSUM = r"is truncated or corrupt \(its bytes do not match the checksum Hadoop"


@pytest.mark.parametrize("checksums", ["kept", "dropped"])
@pytest.mark.parametrize("damage", [*DAMAGES, "spark-metadata-truncated"])
def test_the_pyspark_ml_reader_refuses_a_damaged_model_folder(saved_ml_model, tmp_path,
                                                             damage, checksums):
    """A plain path is Spark's default file system (the session's Hadoop store), whose .crc
    files catch a changed file before its contents are read; a copy without them (checksums
    dropped) meets the contents' checks."""
    from sodm_spark import SODMClassificationModel
    from sodm_spark.core.errors import InputError

    path = tmp_path / "ml-model"
    shutil.copytree(saved_ml_model, path)
    version = path / "v-000001"
    assert _same(SODMClassificationModel.load(str(path)).expansion, _calibrated_model())
    if damage == "spark-metadata-truncated":
        damaged = next((version / "metadata").glob("part-*"))
        cut_in_half(damaged)
    else:
        DAMAGES[damage].apply(version / "data", version)
        damaged = DAMAGES[damage].damaged and version / "data" / DAMAGES[damage].damaged
    if checksums == "dropped":
        for crc in path.rglob(".*.crc"):
            crc.unlink()
    before = contents(path)
    started = time.perf_counter()
    with pytest.raises(InputError) as refused:
        SODMClassificationModel.load(str(path))
    assert time.perf_counter() - started < REFUSAL_SECONDS
    message = str(refused.value)
    assert len(message.splitlines()) == 1, message
    if damaged is not None and checksums == "kept":
        assert re.search(HADOOP_CHECKSUM, message) and str(damaged) in message, message
    elif damage == "spark-metadata-truncated":
        assert re.search(r"metadata/part-\S+ is truncated or corrupt, not valid JSON", message)
        assert str(damaged) in message, message
    else:
        _refused_in_one_line(message, damage, version / "data", version)
    assert contents(path) == before


def _run_job(main, argv, capfd):
    from sodm_spark.core.errors import run_job

    started = time.perf_counter()
    code = run_job(main, [str(arg) for arg in argv])
    return code, time.perf_counter() - started, "".join(capfd.readouterr())


@pytest.mark.parametrize("damage", DAMAGES)
@pytest.mark.parametrize("job", ["predict", "export_onnx"])
def test_the_jobs_refuse_a_damaged_model_folder_in_one_line_writing_nothing(tmp_path, capfd,
                                                                            job, damage):
    """The predict job and sodm-export-onnx: exit code 5 (bad input), one ``error:`` line and
    no trace on the console, within the bound; the output of an earlier run, which --overwrite
    would replace, is byte-identical afterwards."""
    from sodm_spark.core.errors import EXIT_CODES, INPUT
    from sodm_spark.jobs import export_onnx, predict

    if job == "export_onnx":
        pytest.importorskip("onnx")
    path, files, version = _expansion_layout(tmp_path)
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    if job == "predict":
        (earlier / "part-00000.parquet").write_bytes(b"earlier predictions")
        (earlier / "_SUCCESS").write_bytes(b"")
        main, argv = predict.main, ["--model", path, "--data", tmp_path / "rows.parquet",
                                    "--out", earlier, "--overwrite"]
    else:
        (earlier / "model.onnx").write_bytes(b"an earlier export")
        main, argv = export_onnx.main, [path, earlier / "model.onnx", "--overwrite"]
    DAMAGES[damage].apply(files, version)
    before = contents(tmp_path)
    code, seconds, console = _run_job(main, argv, capfd)
    assert code == EXIT_CODES[INPUT], console
    assert seconds < REFUSAL_SECONDS
    assert console.count("\n") == 1 and console.startswith("error: "), console
    assert "Traceback" not in console
    _refused_in_one_line(console.strip(), damage, files, version)
    assert contents(tmp_path) == before
