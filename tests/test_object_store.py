"""Models, metrics, predictions and the retraining registry on a server that speaks the S3
protocol (moto's, on loopback, started and stopped here), reached through pyarrow's S3 file
system with the settings a user gives (docs/operations.md, "Object stores"): written and read
back byte for byte, then with failures injected: the server stopped half way through a version,
a write refused. Readers keep getting the previous model, byte-identical; no unfinished version
is ever read; a command ends with one line and its exit code within a bound.

One server serves the module (its objects live in moto's in-process state); a failure is
injected on a second server over the same state, stopped in the middle of a write, so readers
look through the first one afterwards, as they would once the store is back. In-process writes
are made without retries (the subject is what readers see); the commands run with pyarrow's
defaults, whose retries the bound covers.
"""
import json
import logging
import os
import re
import time
from collections import namedtuple
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from moto.server import ThreadedMotoServer
from pyarrow import fs
from sklearn.datasets import dump_svmlight_file

from sodm_spark import ODMClassifier
from sodm_spark.core.errors import EXIT_CODES, SETTINGS, run_job
from sodm_spark.core.kernels import Kernel
from sodm_spark.data.filesystems import ArrowStore, StoreError
from sodm_spark.data.storage import publish_directory, resolve_version
from sodm_spark.models.expansion import KernelExpansion
from sodm_spark.ops.jobconf import write_outputs
from sodm_spark.ops.retrain import ModelStore, RetrainLock

from conftest import make_problem

BUCKET = "sodm-models"
REGION = "us-east-1"
# how long a command may take to give up once the store is gone: pyarrow's default three
# attempts take about 6 s per operation, and a failing command makes two or three of them
GIVE_UP_SECONDS = 60.0

Server = namedtuple("Server", "endpoint stop")


@contextmanager
def moto_server():
    """A moto S3 server on a free loopback port; ``stop()`` may be called early (and again).
    Always stopped on leaving."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    stopped = []

    def stop():
        if not stopped:
            stopped.append(time.perf_counter())
            server.stop()

    try:
        host, port = server.get_host_and_port()
        yield Server(f"http://{host}:{port}", stop), stopped
    finally:
        stop()


def s3_filesystem(endpoint, retries=True, **options):
    return fs.S3FileSystem(endpoint_override=endpoint, access_key="testing",
                           secret_key="testing", region=REGION, **options,
                           **({} if retries else {"retry_strategy":
                                                  fs.AwsStandardS3RetryStrategy(1)}))


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """The module's server with a bucket, named to pyarrow by the environment variables a user
    sets (AWS_ENDPOINT_URL for a server other than AWS's); put back as they were after."""
    quiet = logging.getLogger("werkzeug")  # moto's web server logs every request
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    none = str(tmp_path_factory.mktemp("aws") / "none")  # no user's AWS files are read
    with moto_server() as (server, _), pytest.MonkeyPatch.context() as patch:
        for name, value in {"AWS_ENDPOINT_URL": server.endpoint, "AWS_REGION": REGION,
                            "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                            "AWS_CONFIG_FILE": none, "AWS_SHARED_CREDENTIALS_FILE": none,
                            "AWS_EC2_METADATA_DISABLED": "true"}.items():
            patch.setenv(name, value)
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION"):
            patch.delenv(name, raising=False)
        s3_filesystem(server.endpoint, allow_bucket_creation=True).create_dir(BUCKET)
        try:
            yield server
        finally:
            quiet.setLevel(level)


@pytest.fixture
def doomed(s3):
    """A second server over the same objects, to be stopped in the middle of a write."""
    with moto_server() as (server, stopped):
        yield server, stopped


def objects(server, prefix):
    """Every object under ``s3://BUCKET/prefix`` with its bytes, as the server holds them."""
    filesystem = s3_filesystem(server.endpoint)
    infos = filesystem.get_file_info(fs.FileSelector(f"{BUCKET}/{prefix}", recursive=True,
                                                     allow_not_found=True))
    found = {}
    for info in infos:
        if info.type == fs.FileType.File:
            with filesystem.open_input_stream(info.path) as stream:
                found[info.path.removeprefix(f"{BUCKET}/{prefix}/")] = stream.read()
    return found


def uri(prefix):
    return f"s3://{BUCKET}/{prefix}"


class StoppingStore:
    """A store that stops ``server`` just before the first write of a file named ``name``,
    then lets that write (and the rest) meet the stopped server."""

    def __init__(self, inner, server, name):
        self.inner, self.server, self.name = inner, server, name

    def __getattr__(self, attribute):
        operation = getattr(self.inner, attribute)
        if attribute not in ("write_bytes", "replace_bytes"):
            return operation

        def write(path, data):
            if str(path).rsplit("/", 1)[-1] == self.name:
                self.server.stop()
            return operation(path, data)
        return write


def writer_store(server, prefix, stop_before=None):
    """What a writer reaches ``uri(prefix)`` through on ``server``: pyarrow's S3 file system
    without retries, stopping the server before the file ``stop_before``."""
    store = ArrowStore(s3_filesystem(server.endpoint, retries=False), uri(prefix),
                       f"{BUCKET}/{prefix}")
    return store if stop_before is None else StoppingStore(store, server, stop_before)


def _model(seed, n_sv=5, features=3):
    rng = np.random.default_rng(seed)
    model = KernelExpansion(rng.normal(size=(n_sv, features)), rng.normal(size=(n_sv, 1)),
                            Kernel.create("rbf", 0.5), np.array([0, 1]))
    return model.calibrated(rng.normal(size=(30, features)), rng.choice([0, 1], 30))


def _same(a, b):
    return np.array_equal(a.support_vectors, b.support_vectors) and \
        np.array_equal(a.coef, b.coef)


def _assert_saved(saved: dict, model):
    """``saved`` (a version's objects by name) holds what a save of ``model`` writes: the
    metadata a save to the local disk writes, byte for byte, the same arrays (a zip archive's
    bytes carry the time of writing), and the empty completion marker."""
    import io
    import tempfile

    with tempfile.TemporaryDirectory() as local:
        model.save(local)
        folder = Path(local) / "v-000001"
        assert sorted(saved) == sorted(p.name for p in folder.iterdir())
        assert saved["metadata.json"] == (folder / "metadata.json").read_bytes()
        assert saved["_COMPLETE"] == b""
        with np.load(io.BytesIO(saved["arrays.npz"])) as ours, \
                np.load(folder / "arrays.npz") as theirs:
            assert sorted(ours.files) == sorted(theirs.files)
            for name in ours.files:
                np.testing.assert_array_equal(ours[name], theirs[name])


# written and read back ------------------------------------------------------------------------

def test_models_metrics_predictions_and_a_registry_round_trip_through_s3(s3, tmp_path,
                                                                         monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing may land in a local folder named after the URI
    model_uri = uri("round-trip/model")
    for seed in (1, 2, 3):
        _model(seed).save(model_uri)
    saved = objects(s3, "round-trip/model")
    assert sorted({name.split("/")[0] for name in saved}) == ["v-000002", "v-000003"]
    _assert_saved({name.removeprefix("v-000003/"): data for name, data in saved.items()
                   if name.startswith("v-000003/")}, _model(3))
    assert _same(KernelExpansion.load(model_uri), _model(3))
    rows = np.random.default_rng(4).normal(size=(7, 3))
    np.testing.assert_array_equal(ODMClassifier.load(model_uri).predict_proba(rows),
                                  _model(3).predict_proba(rows))

    metrics_uri = uri("round-trip/metrics.json")
    for accuracy in (0.5, 0.75):
        write_outputs(None, {"test_accuracy": accuracy}, None, metrics_uri)
    assert objects(s3, "round-trip")["metrics.json"] == json.dumps(
        {"test_accuracy": 0.75}, indent=2).encode()

    predictions_uri, s3fs = uri("round-trip/predictions"), s3_filesystem(s3.endpoint)

    def predictions(values):
        def write(target):  # as Spark's writer: part files, then its _SUCCESS marker
            path = target.removeprefix("s3://")
            pq.write_table(pa.table({"prediction": values}), f"{path}/part-00000.parquet",
                           filesystem=s3fs)
            with s3fs.open_output_stream(f"{path}/_SUCCESS") as stream:
                stream.write(b"")
        return write

    publish_directory(predictions_uri, predictions([1.0, -1.0]))
    with pytest.raises(FileExistsError, match="pass overwrite"):
        publish_directory(predictions_uri, predictions([0.0]))
    publish_directory(predictions_uri, predictions([-1.0, -1.0, 1.0]), overwrite=True)
    assert sorted(objects(s3, "round-trip/predictions")) == ["_SUCCESS", "part-00000.parquet"]
    assert pq.read_table(f"{BUCKET}/round-trip/predictions/part-00000.parquet",
                         filesystem=s3fs)["prediction"].to_pylist() == [-1.0, -1.0, 1.0]

    registry = ModelStore(uri("round-trip/registry"))
    with RetrainLock(uri("round-trip/registry"), settle_seconds=0.0):
        first = registry.write_version("day1", lambda folder: _model(1).save(folder / "model"))
        registry.point_latest(first)
        registry.point_latest(registry.write_version(
            "day2", lambda folder: _model(2).save(folder / "model")))
        assert ".retrain.lock" in objects(s3, "round-trip/registry")
    assert registry.latest_version().name == "v0002-day2"
    assert _same(KernelExpansion.load(registry.latest / "model"), _model(2))
    assert objects(s3, "round-trip/registry")["_LATEST"] == b"v0002-day2\n"
    assert registry.prune(1) == ["v0001-day1"]
    assert sorted(objects(s3, "round-trip/registry")) == [
        "_LATEST", *(f"versions/v0002-day2/model/v-000001/{name}"
                     for name in ("_COMPLETE", "arrays.npz", "metadata.json"))]
    assert os.listdir(tmp_path) == []


# the server stopped half way ------------------------------------------------------------------

@pytest.mark.parametrize("stop_before", ["metadata.json", "_COMPLETE"])
def test_a_save_cut_off_by_the_server_stopping_leaves_the_previous_model(s3, doomed,
                                                                         stop_before):
    server, _ = doomed
    prefix = f"cut-off-{stop_before}"
    old, new = _model(1), _model(2, n_sv=7)
    old.save(uri(prefix))
    before = objects(s3, prefix)
    with pytest.raises(StoreError) as refused:
        new.save(uri(prefix), store=writer_store(server, prefix, stop_before))
    message = str(refused.value)
    assert len(message.splitlines()) == 1
    assert message.startswith(f"{uri(prefix)}/v-000002/{stop_before}: the store could not "
                              "write it (")
    assert f"readers of {uri(prefix)} still get the model they got before" in message
    # readers, through the store once it is back: the previous model, byte for byte
    after = objects(s3, prefix)
    assert {name: after[name] for name in before} == before
    unfinished = sorted(set(after) - set(before))
    assert unfinished and all(name.startswith("v-000002/") for name in unfinished)
    assert "v-000002/_COMPLETE" not in after
    assert resolve_version(ArrowStore.for_path(uri(prefix)), uri(prefix),
                           "metadata.json") == f"{uri(prefix)}/v-000001"
    assert _same(KernelExpansion.load(uri(prefix)), old)
    # the next save completes, and deletes what the cut-off one left
    new.save(uri(prefix))
    assert _same(KernelExpansion.load(uri(prefix)), new)
    assert sorted({name.split("/")[0] for name in objects(s3, prefix)}) == ["v-000001",
                                                                           "v-000003"]


def test_a_registry_version_cut_off_by_the_server_stopping_keeps_production(s3, doomed):
    server, _ = doomed
    prefix = "registry-cut-off"
    production = ModelStore(uri(prefix))
    production.point_latest(production.write_version(
        "day1", lambda folder: _model(1).save(folder / "model")))
    before = objects(s3, prefix)
    writer = ModelStore(uri(prefix), store=writer_store(server, prefix, "_COMPLETE"))
    with pytest.raises(StoreError, match=r"v0002-day2/model/v-000001/_COMPLETE: the store "
                       r"could not write it"):
        writer.write_version("day2", lambda folder: _model(2).save(folder / "model"))
    after = objects(s3, prefix)
    assert {name: after[name] for name in before} == before  # _LATEST and production
    assert production.latest_version().name == "v0001-day1"
    assert _same(KernelExpansion.load(production.latest / "model"), _model(1))
    # the unfinished version is never production, and no reader takes its model
    assert all(name.startswith("versions/v0002-day2/") for name in set(after) - set(before))
    with pytest.raises(ValueError, match=r"v0002-day2/model/v-000001/_COMPLETE is missing"):
        KernelExpansion.load(uri(f"{prefix}/versions/v0002-day2/model"))


def test_a_metrics_file_cut_off_keeps_the_previous_one(s3, doomed):
    server, _ = doomed
    path = uri("metrics-cut-off/metrics.json")
    write_outputs(None, {"test_accuracy": 0.5}, None, path)
    before = objects(s3, "metrics-cut-off")
    store = writer_store(server, "metrics-cut-off", "metrics.json")
    with pytest.raises(StoreError, match=r"metrics\.json: the store could not write it"):
        store.replace_bytes(path, b'{"test_accuracy": 0.75}')
    assert objects(s3, "metrics-cut-off") == before


# the commands ---------------------------------------------------------------------------------

def _libsvm(tmp_path, name="train.libsvm", seed=51):
    X, y = make_problem(m=100, d=4, seed=seed, noise=0.2)
    path = tmp_path / name
    dump_svmlight_file(X, (y > 0).astype(int), str(path), zero_based=False)
    return path


TRAIN_FLAGS = ["--levels", "0", "--lam", "100", "--gamma", "scale", "--calibration", "none"]


def _one_line(code, console, kind=SETTINGS):
    errors = [line for line in console.splitlines() if "error:" in line]
    assert code == EXIT_CODES[kind], console
    assert len(errors) == 1 and errors[0].startswith("error: "), console
    assert "Traceback" not in console and "\tat org.apache" not in console, console
    return errors[0]


def _stop_while_writing(monkeypatch, server, name):
    """Stop ``server`` just before the command writes a file named ``name`` (through
    pyarrow's store, however the command reaches it)."""
    write = ArrowStore.write_bytes

    def stopping(self, path, data):
        if str(path).rsplit("/", 1)[-1] == name:
            server.stop()
        return write(self, path, data)

    monkeypatch.setattr(ArrowStore, "write_bytes", stopping)


def test_sodm_train_cut_off_while_writing_its_model_ends_in_one_line(spark, s3, doomed,
                                                                      tmp_path, capfd,
                                                                      monkeypatch):
    from sodm_spark.jobs import train_sodm

    server, stopped = doomed
    model_out, metrics_out = uri("train/model"), uri("train/metrics.json")
    _model(1).save(model_out)
    write_outputs(None, {"test_accuracy": 0.5}, None, metrics_out)
    before = objects(s3, "train")
    monkeypatch.setenv("AWS_ENDPOINT_URL", server.endpoint)  # the command's way to the store
    _stop_while_writing(monkeypatch, server, "metadata.json")
    code = run_job(train_sodm.main, ["--data", str(_libsvm(tmp_path)), *TRAIN_FLAGS,
                                     "--model-out", model_out, "--metrics-out", metrics_out])
    gave_up = time.perf_counter() - stopped[0]
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)  # readers, once the store is back
    line = _one_line(code, "".join(capfd.readouterr()))
    assert re.search(rf"error: {model_out}/v-000002/metadata\.json: the store could not "
                     r"write it \(.*Could not connect.*\); .*readers of .* still get the model "
                     r"they got before\. Check that the store is reachable", line), line
    assert gave_up < GIVE_UP_SECONDS
    after = objects(s3, "train")
    assert {name: after[name] for name in before} == before  # the model and the metrics
    assert "model/v-000002/_COMPLETE" not in after
    assert _same(KernelExpansion.load(model_out), _model(1))


def test_the_retraining_job_cut_off_while_uploading_a_version_ends_in_one_line(
        spark, s3, doomed, tmp_path, capfd, monkeypatch):
    from sodm_spark.jobs import retrain

    server, stopped = doomed
    prefix = "retrain"
    production = ModelStore(uri(prefix))
    production.point_latest(production.write_version(  # a model of the snapshots' features
        "day0", lambda folder: _model(1, features=4).save(folder / "model")))
    before = objects(s3, prefix)
    snapshots = tmp_path / "snapshots"
    snapshots.mkdir()
    _libsvm(snapshots, "day1.libsvm")
    holdout = _libsvm(tmp_path, "holdout.libsvm", seed=52)
    monkeypatch.setenv("AWS_ENDPOINT_URL", server.endpoint)
    _stop_while_writing(monkeypatch, server, "metrics.json")
    code = retrain.main(["--snapshots", str(snapshots), "--holdout", str(holdout),
                         "--models-dir", uri(prefix), "--", *TRAIN_FLAGS])
    gave_up = time.perf_counter() - stopped[0]
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
    line = _one_line(code, "".join(capfd.readouterr()))
    assert re.search(r"error: s3://\S+/versions/v0002-day1/metrics\.json: the store could not "
                     r"write it .*; the production model is unchanged; the lock \S+"
                     r"\.retrain\.lock could not be released .*takes it over", line), line
    assert gave_up < GIVE_UP_SECONDS
    after = objects(s3, prefix)
    assert {name: after[name] for name in before} == before  # _LATEST and production
    assert ModelStore(uri(prefix)).latest_version().name == "v0001-day0"


def test_refused_writes_end_the_commands_before_any_work(spark, s3, tmp_path, capfd):
    """A bucket that does not exist (sodm-train, the retraining job) and a scheme Spark's own
    writer has no connector for (the predict job's --out): refused in one line before the data
    is read, the earlier predictions byte-identical."""
    from sodm_spark.jobs import predict, retrain, train_sodm

    missing = "s3://no-such-bucket/models"
    started = time.perf_counter()
    code = run_job(train_sodm.main, ["--data", str(_libsvm(tmp_path)), *TRAIN_FLAGS,
                                     "--model-out", f"{missing}/sodm"])
    line = _one_line(code, "".join(capfd.readouterr()))
    assert line == (f"error: --model-out {missing}/sodm: s3://no-such-bucket/ does not exist "
                    "on its store (no such bucket or container); create it, or check the URI "
                    "and the store's endpoint."), line
    assert "level" not in line and time.perf_counter() - started < GIVE_UP_SECONDS

    code = retrain.main(["--snapshots", str(tmp_path), "--holdout", str(tmp_path / "h"),
                         "--models-dir", missing])
    line = _one_line(code, "".join(capfd.readouterr()))
    assert re.search(rf"error: {missing}: the store could not create it as a directory "
                     r"\(Bucket 'no-such-bucket' not found.*; the production model is "
                     r"unchanged$", line), line

    _model(1).save(uri("predict/model"))
    s3fs = s3_filesystem(s3.endpoint)
    pq.write_table(pa.table({"prediction": [1.0]}),
                   f"{BUCKET}/predict/out/part-00000.parquet", filesystem=s3fs)
    with s3fs.open_output_stream(f"{BUCKET}/predict/out/_SUCCESS") as stream:
        stream.write(b"")
    before = objects(s3, "predict")
    # rows the model scores: refused for the output alone, before any is read
    pq.write_table(pa.table({name: [0.5, -1.0] for name in "abc"}), tmp_path / "rows.parquet")
    code = run_job(predict.main, ["--model", uri("predict/model"), "--data",
                                  str(tmp_path / "rows.parquet"), "--out", uri("predict/out"),
                                  "--overwrite"])
    line = _one_line(code, "".join(capfd.readouterr()))
    assert re.search(rf"error: --out {uri('predict/out')}: no Hadoop file system for it "
                     r"\(.*No FileSystem for scheme .s3.*\)\. Check the scheme and that its "
                     r"connector is on the classpath\.", line), line
    assert objects(s3, "predict") == before


def _train(argv, cwd):
    """``sodm-train`` as a user runs it (its Python workers inherit the store's settings)."""
    import subprocess
    import sys

    from conftest import job_env

    done = subprocess.run([sys.executable, "-m", "sodm_spark.jobs.train_sodm", "--master",
                           "local[2]", *argv], env=job_env(), cwd=cwd, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


def test_training_rows_in_s3_are_read_by_the_tasks_as_the_same_rows_on_disk(s3, tmp_path):
    """A column per feature on S3 (which this Spark has no Hadoop connector for: only pyarrow
    reaches it) is read by the tasks, a row group a task; the same rows on the local disk
    as one array column, in row groups alike, are numbered alike: the same model."""
    filesystem = s3_filesystem(s3.endpoint)
    X, y = make_problem(m=400, d=4, seed=17)
    local = tmp_path / "arrays"
    local.mkdir()
    for number, rows in enumerate((slice(0, 250), slice(250, 400))):
        columns = pa.table({"label": y[rows], **{f"x{j}": X[rows, j] for j in range(4)}})
        with filesystem.open_output_stream(f"{BUCKET}/rows/part-{number}.parquet") as out:
            pq.write_table(columns, out, row_group_size=100)
        arrays = pa.table({"label": y[rows], "features": pa.array(list(X[rows]))})
        pq.write_table(arrays, local / f"part-{number}.parquet", row_group_size=100)
    X_test, y_test = make_problem(m=120, d=4, seed=18)
    with filesystem.open_output_stream(f"{BUCKET}/test/part-0.parquet") as out:
        pq.write_table(pa.table({**{f"x{j}": X_test[:, j] for j in (3, 1, 0, 2)},
                                 "label": y_test}), out)  # its columns taken by name
    outputs = {}
    for name, data in (("s3", uri("rows")), ("disk", str(local))):
        scored = ["--test-data", uri("test"), "--metrics-out", str(tmp_path / "metrics.json")] \
            if name == "s3" else []
        _train(["--data", data, "--format", "parquet", "--model-out", str(tmp_path / name),
                "--seed", "3", *scored], tmp_path)
        outputs[name] = KernelExpansion.load(str(tmp_path / name))
    from_s3, from_disk = outputs["s3"], outputs["disk"]
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    # the job's float32 scoring may turn one borderline row of the 120; columns taken by
    # position instead of by name would turn dozens
    assert metrics["test_accuracy"] == pytest.approx(
        np.mean(from_s3.predict(X_test) == y_test), abs=1.01 / 120)
    assert from_s3.feature_names == ("x0", "x1", "x2", "x3") and from_disk.feature_names is None
    np.testing.assert_array_equal(from_s3.support_vectors, from_disk.support_vectors)
    np.testing.assert_array_equal(from_s3.decision_function(X), from_disk.decision_function(X))
