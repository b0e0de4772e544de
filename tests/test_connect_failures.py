"""The jobs against a Spark they cannot use, run as a user runs them: a Spark Connect server
that is not there, one that accepts connections and never answers, one lost in the middle of
a fit (then the fit resumed on a new server), and executors whose Python lacks the package.
Each ends with its exit code and one readable ``error:`` line naming the address or the
executors' interpreter, within its time bound, and the outputs of earlier runs byte-identical.
The servers are the tests' own (the resumed fit's: the run's shared one, conftest.connect_url),
always stopped."""
import importlib.util
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from sodm_spark.core.errors import (EXIT_CODES, INTERNAL, SETTINGS, ExecutorsLackPackage,
                                    SettingsError)
from sodm_spark.core.kernels import Kernel
from sodm_spark.models.expansion import KernelExpansion
from sodm_spark.spark import connect

from conftest import (connect_server_ready, contents, free_port, job_env, kill_connect_server,
                      launch_connect_server, make_problem)

GRPC_MISSING = importlib.util.find_spec("grpc") is None
needs_grpc = pytest.mark.skipif(GRPC_MISSING, reason="pyspark[connect] is not installed")

ROOT = Path(__file__).resolve().parents[1]
#: The bound the issue asks of every failure to reach a server: the command has ended by then
#: (Python's and pyspark's imports included).
ENDED_WITHIN_SECONDS = 30.0
#: The bound on a job whose Python workers cannot start: the JVM, the reading's first JVM jobs
#: and one failed task (Spark does not retry a task in local mode), on a busy machine.
WORKERS_FAIL_WITHIN_SECONDS = 180.0
#: The jobs' --connect-timeout in these tests: short, so that the waits stay cheap.
TIMEOUT = 3.0
#: Settings of a small fit that skips the search and the steps after the levels.
FIT = ["--gamma", "1", "--lam", "1000", "--theta", "0.1", "--v", "0.2", "--strata", "2",
       "--seed", "2", "--global-step", "none", "--calibration", "none"]


@pytest.fixture
def silent_server():
    """A port that accepts connections and holds them without a byte of gRPC: its port;
    closed with every connection it accepted."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.1)  # the accepting thread looks at ``done`` this often
    held: list[socket.socket] = []
    done = threading.Event()

    def accept():
        while not done.is_set():
            try:
                held.append(listener.accept()[0])
            except socket.timeout:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        done.set()
        thread.join(timeout=10)
        listener.close()
        for connection in held:
            connection.close()


def run_job(module: str, argv: list, cwd: Path, env: dict | None = None):
    """(exit code, stdout, stderr, seconds) of ``python -m sodm_spark.jobs.<module>``."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", f"sodm_spark.jobs.{module}", *map(str, argv)],
                          env=env or job_env(), cwd=cwd, capture_output=True, text=True,
                          timeout=600)
    return done.returncode, done.stdout, done.stderr, time.perf_counter() - started


def one_error_line(stderr: str) -> str:
    """The console's one ``error:`` line; no trace, no Java stack, no warning beside it (the
    Java runtime's own ``WARNING:`` lines at its start are not the job's)."""
    lines = [line for line in stderr.splitlines()
             if line.strip() and not line.startswith("WARNING: ")]
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert "Traceback" not in stderr and "\tat " not in stderr, stderr
    return lines[0]


@pytest.fixture
def earlier_outputs(tmp_path):
    """A model, its metrics and predictions of an earlier run, which no failure may touch."""
    folder = tmp_path / "earlier"
    model = KernelExpansion(np.ones((2, 3)), np.ones((2, 1)), Kernel.create("rbf", 0.5),
                            np.array([0.0, 1.0]))
    model.save(folder / "model")
    (folder / "metrics.json").write_text('{"earlier": true}\n')
    (folder / "scores").mkdir()
    (folder / "scores" / "part-0.parquet").write_bytes(b"earlier predictions")
    return folder


def parquet_rows(path: Path, m: int = 600, seed: int = 3) -> Path:
    """``m`` rows of a two-class problem as one Parquet file (label 0/1, columns a, b, c)."""
    import pandas as pd

    X, y = make_problem(m=m, d=3, seed=seed)
    pd.DataFrame(X, columns=["a", "b", "c"]).assign(label=(y > 0).astype(float)) \
        .to_parquet(path)
    return path


# ------------------------------------------------------------------ a server that is not there

def _train_argv(outputs: Path, master: str) -> list:
    return ["--master", master, "--connect-timeout", TIMEOUT, "--levels", "0", *FIT,
            "--model-out", outputs / "model", "--metrics-out", outputs / "metrics.json"]


def _predict_argv(outputs: Path, master: str) -> list:
    return ["--master", master, "--connect-timeout", TIMEOUT, "--model", outputs / "model",
            "--data", outputs / "rows.parquet", "--out", outputs / "scores", "--overwrite"]


@needs_grpc
@pytest.mark.parametrize("module,server", [("train_sodm", "refusing"),
                                           ("train_sodm", "silent"),
                                           ("predict", "refusing")])
def test_a_connect_server_that_is_not_there_ends_the_job_in_one_line_within_the_bound(
        module, server, earlier_outputs, tmp_path, request):
    """Nothing listens at the port (a bound and closed one): refused at once, gRPC's reason
    in the line. Something listens and never answers: refused when --connect-timeout runs
    out. Either way exit code 2, the address named, nothing written."""
    port = request.getfixturevalue("silent_server") if server == "silent" else free_port()
    before = contents(earlier_outputs)
    argv = (_train_argv if module == "train_sodm" else _predict_argv)(
        earlier_outputs, f"sc://127.0.0.1:{port}")
    code, stdout, stderr, seconds = run_job(module, argv, tmp_path,
                                            job_env(SODM_LOG_FILE=str(tmp_path / "log")))
    assert code == EXIT_CODES[SETTINGS], stdout + stderr
    line = one_error_line(stderr)
    assert f"127.0.0.1:{port}" in line and "--master" in line, line
    if server == "silent":
        assert f"did not answer within {TIMEOUT:g} s" in line and "--connect-timeout" in line
        assert seconds >= TIMEOUT  # the bound ended it, not a refusal
    else:
        assert "Connection refused" in line, line
    assert seconds < ENDED_WITHIN_SECONDS, f"{seconds:.1f} s: {line}"
    assert not stdout  # refused before the job printed its config: no data were read
    assert contents(earlier_outputs) == before


# ------------------------------------------------------------- a server lost in the middle of a fit

@pytest.fixture
def lost_server():
    """A Spark Connect server of the test's own (:func:`conftest.launch_connect_server`),
    starting while the test does its other work, to be lost with
    :func:`conftest.kill_connect_server` as a crash would: (process, port); killed at the end
    if it still runs."""
    server, port = launch_connect_server()
    try:
        yield server, port
    finally:
        kill_connect_server(server)


@needs_grpc
def test_a_server_lost_mid_fit_ends_in_one_line_and_resume_continues_on_a_new_server(
        spark, tmp_path, earlier_outputs, lost_server, connect_url):
    """sodm-train on a Connect server killed once level 1 is checkpointed: exit code 4 and
    one line naming the server within the bound, the earlier model byte-identical; then
    --resume on a new server writes the model an undisturbed run writes, bit for bit."""
    from sodm_spark.jobs import train_sodm

    server, port = lost_server
    data = parquet_rows(tmp_path / "rows.parquet")
    fit = ["--data", data, "--format", "parquet", "--levels", "1", "--p", "3",
           "--no-auto-stop", *FIT]
    assert train_sodm.main([*map(str, fit), "--model-out", str(tmp_path / "undisturbed")]) == 0
    expected = KernelExpansion.load(tmp_path / "undisturbed")

    connect_server_ready(server)  # it started during the undisturbed fit
    before = contents(earlier_outputs)
    checkpoint = tmp_path / "checkpoint"
    outputs = ["--checkpoint-dir", checkpoint, "--model-out", earlier_outputs / "model"]
    job = subprocess.Popen([sys.executable, "-m", "sodm_spark.jobs.train_sodm", "--master",
                            f"sc://127.0.0.1:{port}", "--connect-timeout", str(TIMEOUT),
                            *map(str, fit + outputs)], env=job_env(), cwd=tmp_path,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed = None
    try:
        for line in job.stdout:
            if line.split()[:2] == ["1", "3"]:  # level 1's row: checkpointed, level 0 next
                kill_connect_server(server)
                killed = time.perf_counter()
                break
        stderr = job.communicate(timeout=300)[1]
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    assert killed is not None, f"the job never printed level 1: {stderr[-2000:]}"
    seconds = time.perf_counter() - killed
    assert job.returncode == EXIT_CODES[INTERNAL], stderr
    line = one_error_line(stderr)
    assert f"127.0.0.1:{port} stopped answering" in line and "--resume" in line, line
    assert seconds < ENDED_WITHIN_SECONDS, f"{seconds:.1f} s after the server was lost"
    assert contents(earlier_outputs) == before

    # the run's shared server (conftest.connect_url), not connect:local, whose fixed port
    # another run may hold
    code, stdout, stderr, _ = run_job(
        "train_sodm", ["--master", connect_url, *fit, *outputs, "--resume"], tmp_path)
    assert code == 0, (stdout + stderr)[-3000:]
    assert "resum" in stdout.lower(), stdout[-2000:]
    resumed = KernelExpansion.load(earlier_outputs / "model")
    np.testing.assert_array_equal(resumed.support_vectors, expected.support_vectors)
    np.testing.assert_array_equal(resumed.coef, expected.coef)


# ------------------------------------------------------------------- the settings of the bound

def test_the_bound_is_the_flag_else_the_environment_else_the_default(monkeypatch):
    monkeypatch.delenv(connect.CONNECT_TIMEOUT_ENV, raising=False)
    assert connect.connect_timeout() == connect.DEFAULT_CONNECT_TIMEOUT <= 30
    monkeypatch.setenv(connect.CONNECT_TIMEOUT_ENV, "7.5")
    assert connect.connect_timeout() == 7.5 and connect.connect_timeout(2) == 2.0
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(SettingsError, match="--connect-timeout must be a positive"):
            connect.connect_timeout(bad)
    monkeypatch.setenv(connect.CONNECT_TIMEOUT_ENV, "soon")
    with pytest.raises(SettingsError, match=r"\$SODM_CONNECT_TIMEOUT='soon'"):
        connect.connect_timeout()


@needs_grpc
@pytest.mark.parametrize("seconds", [1.0, 3.0, 20.0, 600.0])
def test_a_lost_server_is_retried_for_at_most_the_bound(seconds):
    """The client's retry policy within the bound: the waits pyspark's own policy state draws
    (random jitter included) add up to at most ``seconds``, and it then gives up."""
    policy = connect.bounded_policy(seconds)
    for _ in range(20):  # jitter is random: several draws
        state, waited = policy.to_state(), 0
        while (wait := state.next_attempt()) is not None:
            waited += wait
        assert waited <= seconds * 1000
    assert policy.max_retries >= 1 and policy.max_server_retry_delay <= seconds * 1000


def test_a_server_older_than_spark_4_is_refused_naming_it():
    for version in ("4.0.0", "4.3.0", "4.1.0-SNAPSHOT", "5.0.1", "unknown-vendor"):
        connect.check_server_version(version, "host:15002")
    with pytest.raises(SettingsError,
                       match=r"server at host:15002 runs Spark 3\.5\.1; sodm-spark needs Spark "
                             r"4\.0 or later"):
        connect.check_server_version("3.5.1", "host:15002")


@needs_grpc
def test_the_address_in_messages_leaves_the_token_out():
    assert connect.server_address("sc://example.com:443/;use_ssl=true;token=SECRET") == \
        "example.com:443"


# ------------------------------------------------------ executors whose Python lacks the package

@pytest.fixture(scope="module")
def python_without_the_package(tmp_path_factory):
    """A virtual environment's Python with nothing installed (no numpy, no sodm_spark): what
    a worker runs when PYSPARK_PYTHON is not set and python3 on its PATH is not the driver's."""
    folder = tmp_path_factory.mktemp("bare-venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True,
                   timeout=120)
    python = folder / "bin" / "python"
    lacks = subprocess.run([str(python), "-I", "-c", "import numpy"], capture_output=True)
    assert lacks.returncode != 0, "the bare environment sees numpy: the test proves nothing"
    return python


def test_a_job_whose_executors_cannot_import_the_package_says_so_in_one_line(
        python_without_the_package, tmp_path, earlier_outputs):
    """sodm-train with PYSPARK_PYTHON at a Python without the package (the driver imports
    sodm_spark from the working directory, the workers cannot): exit code 2, one line naming
    that Python and the remedies, the earlier model byte-identical."""
    data = parquet_rows(tmp_path / "rows.parquet", m=60)
    before = contents(earlier_outputs)
    env = job_env(PYSPARK_PYTHON=str(python_without_the_package),
                  SODM_LOG_FILE=str(tmp_path / "log"))
    env.pop("PYTHONPATH")  # the workers would find the checkout's sodm_spark through it
    code, stdout, stderr, seconds = run_job(
        "train_sodm", ["--master", "local[1]", "--data", data, "--format", "parquet",
                       "--levels", "0", *FIT, "--model-out", earlier_outputs / "model",
                       "--metrics-out", earlier_outputs / "metrics.json"], ROOT, env)
    assert code == EXIT_CODES[SETTINGS], (stdout + stderr)[-3000:]
    # the first Python task failed it (reading the rows), without retries: no level began
    assert "level partitions" not in stdout and seconds < WORKERS_FAIL_WITHIN_SECONDS
    line = one_error_line(stderr)
    assert re.search(r"the executors' Python cannot import (sodm_spark|numpy|numba|scipy) ",
                     line), line
    assert f"they run {python_without_the_package} (PYSPARK_PYTHON" in line, line
    for remedy in ("PYSPARK_PYTHON", "--archives", "--py-files", "docs/cluster.md"):
        assert remedy in line, remedy
    assert contents(earlier_outputs) == before


def test_the_estimator_raises_one_line_naming_the_executors_python(
        spark, python_without_the_package, monkeypatch):
    """SODMClassifier.fit on a session whose workers run a Python without the package: an
    ExecutorsLackPackage whose text is one line (no worker trace) naming that Python."""
    from sodm_spark.estimators.ml import SODMClassifier

    X, y = make_problem(m=40, d=3, seed=1)
    frame = spark.createDataFrame([(row.tolist(), float(label > 0)) for row, label in zip(X, y)],
                                  ["features", "label"])
    # the workers this SparkContext starts from now on run that Python (restored after)
    monkeypatch.setattr(spark.sparkContext, "pythonExec", str(python_without_the_package))
    with pytest.raises(ExecutorsLackPackage) as raised:
        SODMClassifier(levels=0, gamma=1.0, lam=100.0, theta=0.1, v=0.2).fit(frame)
    text = str(raised.value)
    assert "\n" not in text and "Traceback" not in text, text
    assert f"they run {python_without_the_package} (PYSPARK_PYTHON" in text, text
    assert "cannot import" in text and "docs/cluster.md" in text


def test_the_executors_python_is_named_as_spark_chooses_it(monkeypatch):
    """A SparkContext's workers run its ``pythonExec``: PYSPARK_PYTHON, else ``python3``
    found on each executor's PATH; a Connect server's are the server's own."""
    from sodm_spark.core.errors import executors_python

    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    for python in (None, "python3"):
        assert executors_python(python) == \
            "python3 from the executors' PATH (PYSPARK_PYTHON is not set)"
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/env/bin/python")
    assert executors_python() == "/opt/env/bin/python (PYSPARK_PYTHON, spark.pyspark.python)"
    assert executors_python(connect=True).startswith("the Spark Connect server's Python")
