"""SparkSession set-up (a Spark Connect server's failures: :mod:`.connect`), Spark jobs run
beside the driver's work (:func:`background_job`), and moving numpy arrays in and out of block
RDDs."""
from __future__ import annotations

import os
import sys
import threading
import uuid
import warnings
from contextlib import contextmanager, suppress
from pathlib import Path

import numpy as np
from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

from .connect import (bound_retries, check_connect_session, connect_timeout, lost_server,
                      probe_connect_server, server_address, server_lost)
from .engine import driver_jvm, job_tags, server_client

#: The jobs' logging (conf/log4j2.properties beside the package when it runs from the
#: repository or the image, else the copy the package ships in conf_defaults/): failed tasks'
#: traces to the log file, not the console.
JOBS_LOG_CONFIG = next((path for path in (
    Path(__file__).resolve().parents[2] / "conf" / "log4j2.properties",
    Path(__file__).resolve().parents[1] / "conf_defaults" / "log4j2.properties")
    if path.is_file()), Path(__file__).resolve().parents[1] / "conf_defaults" / "log4j2.properties")


def get_session(app_name: str, master: str | None = None, config: dict | None = None,
                connect_seconds: float | None = None) -> tuple[SparkSession, bool]:
    """(session, created): the active session if there is one, else a new one.

    The master is ``master`` if given, else spark-submit's (its ``--master`` or
    spark-defaults.conf), else ``local[*]``. In local mode the Python workers run this interpreter, the
    one that has sodm_spark installed. A Spark Connect URL (``sc://host:port``, or
    ``connect:local[N]`` for a local server; else the ``SPARK_REMOTE`` environment variable)
    gives a Connect session (:func:`remote_url`): a remote server must answer within
    ``connect_seconds`` (:func:`connect_timeout`) and run a Spark the fit works on
    (:func:`~.connect.check_connect_session`), or a
    :class:`~sodm_spark.core.errors.SettingsError` names its address; the session's client
    gives up on a lost server within as long (:func:`~.connect.bound_retries`).
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    remote = remote_url(master)
    if remote is not None:  # Spark Connect: the server holds the settings and the workers
        seconds = connect_timeout(connect_seconds)
        if not remote.startswith("local"):
            probe_connect_server(remote, seconds)
        builder = SparkSession.builder.remote(remote).appName(app_name)
        if remote.startswith("local"):  # a server of its own: local settings apply
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            for key, value in (config or {}).items():
                builder = builder.config(key, value)
        spark = builder.getOrCreate()
        bound_retries(spark, seconds)
        try:
            check_connect_session(spark, server_address(remote))
        except BaseException:
            stop_session(spark)
            raise
        return spark, True
    if os.environ.get("PYSPARK_GATEWAY_PORT"):
        # Under spark-submit the JVM is already up: connect first, or SparkConf() is empty and
        # spark-submit's --master would be overridden. (Launching a JVM here instead would
        # freeze settings such as spark.driver.memory before ``config`` is applied.)
        SparkContext._ensure_initialized()
    conf = SparkConf()
    builder = SparkSession.builder.appName(app_name)
    if master or not conf.contains("spark.master"):
        builder = builder.master(master or "local[*]")
    for key, value in (config or {}).items():
        builder = builder.config(key, value)
    resolved = master or conf.get("spark.master", "local[*]")
    if resolved.startswith("local"):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark, True


def remote_url(master: str | None = None) -> str | None:
    """The Spark Connect server to use: ``master`` when it is a Connect URL (``sc://host:port``)
    or ``connect:local[N]`` (a local server of this process), else the ``SPARK_REMOTE``
    environment variable that pyspark itself reads; None for a classic session."""
    if master and master.startswith("sc://"):
        return master
    if master and master.startswith("connect:"):
        return master[len("connect:"):]
    return None if master else os.environ.get("SPARK_REMOTE") or None


def use_jobs_logging(spark) -> None:
    """Spark's own default logging prints every failed task's Python and Java traces on the
    console; a job started without ``SPARK_CONF_DIR`` pointing at a log4j2 configuration gets
    :data:`JOBS_LOG_CONFIG` instead (a configuration of the user's own is kept)."""
    conf_dir = os.environ.get("SPARK_CONF_DIR")
    jvm = driver_jvm(spark)
    if jvm is None:  # Spark Connect: the server logs as it is set up
        return
    if (conf_dir and (Path(conf_dir) / "log4j2.properties").is_file()) \
            or not JOBS_LOG_CONFIG.is_file():
        return
    jvm.org.apache.logging.log4j.core.config.Configurator.reconfigure(
        jvm.java.net.URI(JOBS_LOG_CONFIG.as_uri()))
    spark.sparkContext.setLogLevel("WARN")


@contextmanager
def job_session(app_name: str, master: str | None = None, config: dict | None = None,
                connect_seconds: float | None = None):
    """:func:`get_session` for the duration of a job's ``with`` block: a session it created is
    stopped at the end, one it joined (tests, notebooks) is left running. A session it created
    logs as the jobs do (:func:`use_jobs_logging`). On a Spark Connect session, a server that
    stops answering inside the block ends it as :class:`~.connect.ConnectServerLost` (one line
    naming its address); pyspark's warning that its retries ran out stays off the console."""
    remote = remote_url(master)
    if remote is not None:
        warnings.filterwarnings("ignore", message=r"\[RETRIES_EXCEEDED\]")
    spark, created = get_session(app_name, master, config, connect_seconds)
    if created:
        use_jobs_logging(spark)
    try:
        yield spark
    except Exception as error:
        if remote is None or server_client(spark) is None or not server_lost(error):
            raise
        raise lost_server(spark, remote, connect_seconds) from error
    finally:
        if created:
            stop_session(spark)


def stop_session(spark) -> None:
    """Stop ``spark``. A Spark Connect client first waits for the releases of its finished
    operations, which it sends from a thread pool: ``stop`` releases the session first, and the
    server would log every release still in flight as an error on the console. (pyspark 4.0
    and 4.1 wait for them in the pool's ``shutdown``; later versions keep the client's
    futures, waited for here.)"""
    client = server_client(spark)
    if client is not None:
        from concurrent.futures import wait

        from pyspark.sql.connect.client import reattach

        futures = getattr(client, "_release_futures", None)
        if futures:
            wait(list(futures), timeout=10)
        iterator = getattr(reattach, "ExecutePlanResponseReattachableIterator", None)
        shutdown = getattr(iterator, "shutdown", None)
        if shutdown is not None:
            shutdown()
    spark.stop()


# ------------------------------------------------- Spark jobs beside the driver's own work
# Such a job must end before the session does: when the driver's own work fails (a refused
# input, say), the failed job stops the session while the thread still collects, and Python
# prints the thread's Py4J error with the JVM's stack ("Exception in thread ...", "Job 1
# cancelled because SparkContext was shut down") above the job's one ``error:`` line. Its tag
# is a SparkContext job tag on a classic session and an operation tag on a Spark Connect one:
# a classic session's own ``interruptTag`` (pyspark 4.0) finds only tags the calling thread
# added, so from the driver's thread it cancelled nothing and a refused job waited the warm-up
# out (4 s here).

#: Seconds between cancellations while the thread is still running: an operation the thread
#: submits after one cancellation (nothing tells when it has started) is cancelled by the next.
CANCEL_EVERY_SECONDS = 0.2
#: Longest wait for a cancelled thread: a cancelled job ends within a task's kill, and a
#: thread still running after this is left to the session's stop (its error stays quiet).
CANCEL_WAIT_SECONDS = 60.0


class BackgroundJob:
    """``action()`` (Spark operations of ``spark``) in a daemon thread under a tag of its own;
    :meth:`wait` joins it, :meth:`stop` cancels and joins it."""

    def __init__(self, spark, action, name: str):
        self._spark, self._action = spark, action
        self.tag = f"sodm-{name}-{uuid.uuid4().hex[:12]}"  # unique: nothing else is cancelled
        self._stopping = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"sodm {name}", daemon=True)

    def _tags(self):
        """(add, remove, cancel) of the tag (:func:`~.engine.job_tags`): a tag added is the
        adding thread's own, so only this thread's jobs carry it."""
        return job_tags(self._spark)

    def _run(self):
        add, remove, _ = self._tags()
        try:
            add(self.tag)
            if not self._stopping.is_set():
                self._action()
        except Exception as error:  # noqa: BLE001 - never printed: the jobs run beside the
            # driver's work only to save it time, and a real problem of theirs (Python workers
            # that cannot start) fails the driver's own jobs with its message; a cancelled or
            # shut-down one is no problem at all
            self.error = error
        finally:
            with suppress(Exception):  # the session may be gone
                remove(self.tag)

    def start(self) -> BackgroundJob:
        self._thread.start()
        return self

    def wait(self) -> None:
        """Let the job finish (its error, if any, stays in :attr:`error`)."""
        self._thread.join()

    def stop(self) -> None:
        """Cancel the job's operations and join the thread."""
        self._stopping.set()
        cancel, waited = self._tags()[2], 0.0
        while self._thread.is_alive() and waited < CANCEL_WAIT_SECONDS:
            with suppress(Exception):  # the session may be stopping already
                cancel(self.tag)
            self._thread.join(CANCEL_EVERY_SECONDS)
            waited += CANCEL_EVERY_SECONDS


@contextmanager
def background_job(spark, action, name: str):
    """``with background_job(spark, df.collect, "warm-up") as job:`` runs ``action()`` in a
    thread while the block runs (``job.wait()`` where the block needs it done); leaving the
    block, also on an error, cancels what is still running and joins the thread, so no job of
    it outlives the block or prints on the console."""
    job = BackgroundJob(spark, action, name).start()
    try:
        yield job
    finally:
        job.stop()


def collect_checked(spark, path, fmt, where,
                    feature_names=None) -> tuple[np.ndarray, np.ndarray]:
    """All rows of a small CSV or Parquet input on the driver (:func:`collect_blocks`), checked
    first: a NaN, ±inf or too large value is refused naming its file and line (CSV) or its
    partition and row (Parquet), after ``where``. ``feature_names``: a model's columns, taken
    by name (in any order; a missing one refused naming it), else every feature column."""
    from .io import TableColumns, collect_blocks
    from .io import check_blocks, read_blocks

    columns = TableColumns() if feature_names is None else \
        TableColumns(features_col=tuple(feature_names), fit_strings=False)
    blocks, d = read_blocks(spark, path, fmt, columns=columns)
    check_blocks(blocks, d, where=where)
    return collect_blocks(blocks)
