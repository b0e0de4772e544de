import contextlib
import os

# The suite runs on as many workers as the machine has cores (pyproject.toml: ``-n 2``), so a
# worker's BLAS gets its share of them, not all: OpenBLAS threads that wait for a core the other
# worker holds spin, and on 2 cores they cost a fifth of the in-process modules' CPU (their
# machine-wide CPU seconds: 242 with 2 threads per worker, 210 with 1). Set before numpy loads
# here; the jobs, Connect servers and child pytests a test starts inherit it. A test that asks
# for more threads (threadpool_limits, a Spark task's cores) still gets them.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // _WORKERS)))
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from sodm_spark.ops.cluster import LIGHT_DAEMON_JAVA_OPTS

# Every JVM the suite starts lives for seconds: the ``spark`` fixture's, each job's spark-submit,
# the Spark Connect servers (spark-submit reads SPARK_SUBMIT_OPTS; the processes a test starts
# inherit this environment). The client JIT alone and the serial GC start and run them with
# about a third less CPU than the server JIT's tiers (a 3,000-row training job: 21 s of CPU
# against 34 s), on a 2-core machine where the suite's time is its CPU time. What a JVM
# computes does not depend on its JIT tier; users' JVMs keep the defaults.
os.environ.setdefault("SPARK_SUBMIT_OPTS", LIGHT_DAEMON_JAVA_OPTS)


#: The modules that hold a worker longest (a standalone cluster, Connect servers, spark-submit
#: runs, child pytests), longest first (`--durations` of a whole run). The suite's two workers
#: take whole modules in collection order (pyproject.toml: ``--dist loadfile``), so these go
#: first: a run that reached one of them last would end on one busy worker and one idle.
LONGEST_MODULES = ("test_loopback_cluster.py", "test_back_ends.py", "test_benchmark_job.py",
                   "test_spark_connect.py", "test_bad_inputs.py", "test_ml.py",
                   "test_blas_kernels.py", "test_connect_failures.py", "test_majority_rule.py",
                   "test_global_step.py", "test_determinism.py")


def pytest_collection_modifyitems(items):
    """Mark the tests that take the ``spark`` fixture, so that the rerun of the numerical tests
    under other BLAS kernels (tests/test_blas_kernels.py) leaves them out; and move the
    :data:`LONGEST_MODULES` to the front, in their order (the rest keep theirs)."""
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.uses_spark)
    rank = {name: number for number, name in enumerate(LONGEST_MODULES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable


def make_problem(m=60, d=5, seed=0, noise=0.5):
    """A small, not linearly separable two-class problem with labels ±1."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(m, d))
    y = np.where(X[:, 0] + X[:, 1] ** 2 - 1.0 + noise * rng.normal(size=m) > 0, 1.0, -1.0)
    return X, y


@pytest.fixture(scope="session", autouse=True)
def jobs_log_file(tmp_path_factory):
    """Jobs a test starts log (sodm_spark.core.errors.log_file, conf/log4j2.properties) into a
    temporary directory, not into logs/ of the working directory."""
    os.environ.setdefault("SODM_LOG_FILE",
                          str(tmp_path_factory.mktemp("jobs-log") / "sodm-spark.log"))


@pytest.fixture(scope="module")
def no_config(tmp_path_factory):
    """An empty job config: the flags' own defaults, not conf/sodm-jobs.toml's values."""
    path = tmp_path_factory.mktemp("conf") / "empty.toml"
    path.write_text("")
    return ["--config", str(path)]


@pytest.fixture
def problem():
    return make_problem()


@pytest.fixture(scope="session")
def spark():
    """One local[2] SparkSession for the whole test run, stopped at the end."""
    from pyspark.sql import SparkSession

    # Python workers must run this interpreter (the one with sodm_spark and its dependencies).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    session = (SparkSession.builder.master("local[2]").appName("sodm-spark-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.sql.execution.arrow.pyspark.enabled", "true")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


ROOT = Path(__file__).resolve().parents[1]


def job_env(**extra) -> dict:
    """The environment of a job (or a test's Spark Connect server) run from this checkout:
    its Python workers run this interpreter and import this checkout's package, Spark reads
    conf/."""
    return {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_CONF_DIR": str(ROOT / "conf"),
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
            **extra}


def free_port() -> int:
    """A port nothing listens on: bound, read, closed."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def launch_connect_server() -> tuple[subprocess.Popen, int]:
    """A Spark Connect server (tests/connect_server.py: local[2]) starting on a free port, in
    a process group of its own so that :func:`kill_connect_server` takes its JVM with it:
    (process, port) at once, for :func:`connect_server_ready` to wait for. Closing its
    standard input stops it."""
    port = free_port()
    return subprocess.Popen([sys.executable, str(ROOT / "tests" / "connect_server.py"),
                             str(port)], env=job_env(), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            start_new_session=True), port


def connect_server_ready(server: subprocess.Popen) -> None:
    """Wait until a :func:`launch_connect_server` server listens (killed if it failed)."""
    try:
        assert server.stdout.readline().strip() == "ready", "the Connect server did not start"
    except BaseException:
        kill_connect_server(server)
        raise
    # what its JVM or Python workers print later must not fill the pipe and stall it
    threading.Thread(target=server.stdout.read, daemon=True).start()


def kill_connect_server(server: subprocess.Popen) -> None:
    """Lose ``server`` as a crash would: its Python process and its JVM, at once."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.pid, signal.SIGKILL)
    server.wait(timeout=60)


@pytest.fixture(scope="session")
def connect_url():
    """``sc://127.0.0.1:PORT`` of one Spark Connect server (:func:`launch_connect_server`)
    shared by the tests that need a live server and do not lose it: started by the first
    test that asks for it, stopped at the end of the run (its standard input closed, killed
    if it does not end). Each client of it has a session of its own (its confs, temporary
    views and cached data are the session's), released when the client stops."""
    server, port = launch_connect_server()
    try:
        connect_server_ready(server)
        yield f"sc://127.0.0.1:{port}"
    finally:
        server.stdin.close()  # the server stops its session; its JVM exits with it
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(timeout=60)
        kill_connect_server(server)  # whatever of its process group is left


@pytest.fixture
def engine():
    """The in-process back end (sodm_spark.spark.in_process) planned for the 2 cores of the
    ``spark`` fixture's local[2]: what tests whose subject is not Spark fit on, with no JVM
    and no Python worker between the driver and the numerics (tests/test_back_ends.py checks
    that its fits are the classic fits, bit for bit)."""
    from sodm_spark.spark.in_process import InProcessContext

    return InProcessContext(2)


def model_files(path):
    """The folder holding a saved model directory's current files (its newest version)."""
    from sodm_spark.data.storage import LocalStore, resolve_version

    folder = resolve_version(LocalStore(), str(path), "metadata.json") or \
        resolve_version(LocalStore(), str(path), "metadata")
    assert folder is not None, f"{path} holds no saved model"
    return Path(folder)


def contents(path):
    """Every file under ``path`` (or ``path`` itself) with its bytes: what a failed job or a
    refused read must leave as it was."""
    path = Path(path)
    if path.is_file():
        return path.read_bytes()
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file()}


def cut_in_half(path):
    """A file cut short, as a copy that stopped half way leaves it."""
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])
