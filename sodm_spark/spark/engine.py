"""The engine a fit runs on, chosen in one place (:func:`context_of`: classic Spark, Spark
Connect or in process, docs/design.md §6), and what the fit asks of any of them besides the
RDD subset each implements: whether records move through DataFrames, reports beside the data
(:func:`map_with_reports`), sums in a fixed order (:func:`ordered_sum`), persisting
(:data:`PERSIST`, :func:`store`) and the errors a failed job raises. Whatever else differs
between the back ends is asked here too, as a capability named for what it gives (accumulators,
files shipped to the executors, the executor list, the driver's JVM and Hadoop file systems,
text read as numbered lines, a Connect server's client, job tags), so that no other module asks
which back end it runs on (tests/test_engine_asks.py holds the package to that). Nothing here
imports Spark at import time: the in-process back end (:mod:`.in_process`) runs where pyspark
is not installed (one machine with a GPU and no Java, docs/design.md §6.2).
"""
from __future__ import annotations

import functools
import os
import pickle
from typing import (TYPE_CHECKING, Any, Callable, Iterable, Mapping, NamedTuple, Protocol,
                    Sequence, Union)

from ..core.errors import InputError

if TYPE_CHECKING:  # annotations only: pyspark is imported where a session is used
    from pyspark.sql import SparkSession as ClassicSession
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    #: A session the jobs run on: a classic one (a SparkContext and its JVM in this process)
    #: or a Spark Connect client's.
    Session = Union[ClassicSession, ConnectSession]


class Engine(Protocol):
    """What a fit asks of the context it runs on (``sc``): a classic SparkContext, a
    :class:`~.frames.FrameContext` over Spark Connect or an
    :class:`~.in_process.InProcessContext`, whichever :func:`context_of` chose. Their records
    (RDD, FrameRDD, InProcessRDD) share the RDD subset of
    :class:`~.frame_rdd.RecordOperations`; what only some of them have (accumulators, files
    shipped to the executors, the executor list, the JVM's Hadoop file systems) is asked of
    this module's capabilities (:func:`has_accumulators`, :func:`distributes_files`,
    :func:`executor_count`, :func:`persisted_rdds`, :func:`driver_hadoop`), never of the
    context's type."""

    @property
    def defaultParallelism(self) -> int: ...  # the cores the plan is made for

    @property
    def master(self) -> Any: ...

    @property
    def applicationId(self) -> Any: ...

    def getConf(self) -> Any: ...

    def setJobDescription(self, value: Any, /) -> None: ...

    def broadcast(self, value: Any, /) -> Any: ...

    def parallelize(self, values: Iterable[Any], slices: Any = None, /) -> Any: ...

    def runJob(self, rdd: Any, fn: Callable[..., Any], /,
               partitions: Sequence[int] | None = None) -> list: ...


def _engine_errors() -> tuple[type[BaseException], ...]:
    """The exceptions a Spark job raises for a failed or cancelled job (classic: Py4J's;
    Spark Connect: PySparkException); () where pyspark is not installed."""
    try:
        from py4j.protocol import Py4JError
        from pyspark.errors import PySparkException
    except ImportError:
        return ()
    return (Py4JError, PySparkException)


#: The exceptions of a failed engine job (see :func:`_engine_errors`).
ENGINE_ERRORS = _engine_errors()


def _disk_only():
    """Spark's ``StorageLevel.DISK_ONLY``; where pyspark is not installed, its name (the
    in-process back end keeps its partitions in memory whatever level it is given)."""
    try:
        from pyspark import StorageLevel
    except ImportError:
        return "DISK_ONLY"
    return StorageLevel.DISK_ONLY


#: Persisted rows (the input, every solved level) go to the executors' local disks, never to the
#: JVM heap: at 10^6 rows they are gigabytes (600,000 × 784 rows killed a 4 GB driver heap cached
#: in memory), and the operating system's page cache serves them as fast as memory while it has
#: room. Solved levels are expensive to recompute, so they are persisted, not dropped.
PERSIST = _disk_only()


def store(rdd) -> None:
    """Compute a persisted RDD and keep it, counted by the JVM alone: PySpark's ``count``
    would read every record back into a Python worker, a pass over all the rows (8-10 s at
    600,000 × 784) just to count them. Records over DataFrames
    (:class:`~sodm_spark.spark.frames.FrameRDD`) are checkpointed instead."""
    materialize = getattr(rdd, "materialize", None)
    if materialize is not None:
        materialize()
    else:
        rdd._jrdd.count()


#: The environment variable that sends a classic session through DataFrames too.
RECORDS_ENV = "SODM_SPARK_RECORDS"


def _is_connect(spark) -> bool:
    """Whether ``spark`` is a Spark Connect session (no SparkContext behind it): the question
    the capabilities below answer for the rest of the package."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def workers_python(spark: Session) -> str | None:
    """The interpreter a classic session's Python workers run (its SparkContext's
    ``pythonExec``: ``PYSPARK_PYTHON`` or ``python3``), for messages; None on Spark Connect,
    whose server's this client cannot see."""
    return None if _is_connect(spark) else spark.sparkContext.pythonExec


def context_of(spark=None, cores: int | None = None):
    """What the fit calls ``sc``, chosen here and nowhere else: with no session the in-process
    back end's context (:mod:`.in_process`, planned for ``cores``, all by default); the
    SparkContext of a classic session (unless :data:`RECORDS_ENV` is ``frames``); else a
    :class:`~.frames.FrameContext` (Spark Connect)."""
    if spark is None:
        from .in_process import in_process_context

        return in_process_context(cores)
    if _is_connect(spark) or os.environ.get(RECORDS_ENV, "rdd") == "frames":
        from .frames import FrameContext

        return FrameContext(spark)
    return spark.sparkContext


def _uses_frames(sc) -> bool:
    """Whether ``sc`` (:func:`context_of`'s) moves records through DataFrames."""
    from .frames import FrameContext

    return isinstance(sc, FrameContext)


def _is_in_process(sc) -> bool:
    """Whether ``sc`` is the in-process back end's context."""
    from .in_process import InProcessContext

    return isinstance(sc, InProcessContext)


# ---------------------------------------------------------- what only some engines can do
# Each question the package would otherwise answer by asking which back end it runs on, named
# for what it gives; every docstring says what each back end answers.

def has_accumulators(sc: Engine) -> bool:
    """Whether ``sc.accumulator`` gives counters that tasks add to and the driver reads: yes
    on a SparkContext (added as tasks finish) and on the in-process context (added at once);
    no on a :class:`~.frames.FrameContext` (Spark Connect has none: reports travel as rows
    beside the data, :func:`map_with_reports`, and progress is not counted)."""
    return not _uses_frames(sc)


def distributes_files(sc: Engine) -> bool:
    """Whether ``sc.addFile`` puts a file on every executor for the tasks to open
    (``SparkFiles``): yes on a SparkContext; no on a :class:`~.frames.FrameContext` (Spark
    Connect has no ``addFile``: files travel in the tasks' closure,
    :func:`~.frames.inline_file`) nor on the in-process context (none either)."""
    return not (_uses_frames(sc) or _is_in_process(sc))


def executor_count(sc: Engine) -> int | None:
    """How many executors the application has now, the driver not counted (0 before any has
    registered), as the driver's JVM lists them: on a SparkContext; None where the engine has
    no executor list (a :class:`~.frames.FrameContext`: a Spark Connect client sees none; the
    in-process context, which has no executors)."""
    jvm_context = getattr(sc, "_jsc", None)
    if jvm_context is None:
        return None
    return jvm_context.sc().getExecutorMemoryStatus().size() - 1  # its list holds the driver


def persisted_rdds(sc: Engine) -> Mapping[int, Any]:
    """The RDDs the engine keeps persisted, by id, each with ``unpersist(blocking)``: on a
    SparkContext its JVM's (``getPersistentRDDs``: those of every thread's jobs); {} where the
    engine lists none (a :class:`~.frames.FrameContext`'s checkpoints and the in-process
    context's lists are released with the records that hold them)."""
    jvm_context = getattr(sc, "_jsc", None)
    return {} if jvm_context is None else jvm_context.getPersistentRDDs()


def reads_text_lines(spark: Session) -> bool:
    """Whether the session reads text files as lines in order (``SparkContext.textFile``), so
    that a check of text input names a bad line's file and 1-based line (:mod:`.io.text_lines`):
    yes on a classic session; no on a Spark Connect client's, which has no text RDD: its text is
    read by Spark's own readers (``libsvm``, ``csv``), whose checks name a file and a cell but
    no line."""
    return not _is_connect(spark)


def _jvm_context(spark: Session | None):
    """The SparkContext whose JVM the driver reaches (:func:`driver_jvm`), or None."""
    if spark is not None:
        return None if _is_connect(spark) else spark.sparkContext
    try:
        from pyspark import SparkContext
    except ImportError:  # a Connect-only client (pyspark-client) has no SparkContext
        return None
    running = SparkContext._active_spark_context
    return None if running is None or getattr(running, "_jvm", None) is None else running


def driver_jvm(spark: Session | None = None) -> Any | None:
    """The py4j view of the JVM this driver runs Spark in (log4j's and Hadoop's classes): a
    classic session's (``spark``); with no session, that of the SparkContext running in this
    process if one does (a classic session's, or a local Spark Connect server's own). None
    where there is none: a Spark Connect client's session (the JVM is the server's), no
    SparkContext running, pyspark not installed."""
    context = _jvm_context(spark)
    return None if context is None else context._jvm


class HadoopFiles(NamedTuple):
    """Hadoop's file systems as a JVM reaches them through py4j (:func:`driver_hadoop`):
    ``jvm``, its view, and ``configuration``, its SparkContext's Hadoop Configuration (the
    cluster's connectors, settings and credentials)."""

    jvm: Any
    configuration: Any

    def path(self, path) -> Any:
        """``path`` (a plain path, a glob or a URI) as a Hadoop ``Path``; its file system is
        ``.getFileSystem(configuration)``."""
        return self.jvm.org.apache.hadoop.fs.Path(str(path))


def driver_hadoop(spark: Session | None = None) -> HadoopFiles | None:
    """Hadoop's file systems as this driver's JVM reaches them (:func:`driver_jvm`'s JVM, with
    its SparkContext's Hadoop configuration), so the driver lists, reads and writes the paths
    the session's own readers and writers reach: a classic session's; with no session, the
    SparkContext's running in this process if one does. None where the driver has no JVM: on
    a Spark Connect client's session only the server reaches the paths (the driver lists them
    through pyarrow.fs), and with no session when no SparkContext runs."""
    context = _jvm_context(spark)
    if context is None:
        return None
    return HadoopFiles(context._jvm, context._jsc.hadoopConfiguration())


def server_client(spark: Session) -> Any | None:
    """The client of the Spark Connect server the session talks to (over gRPC: its retry
    policies, its endpoint, the releases of finished operations; :mod:`.connect`); None on a
    classic session, whose JVM runs in this process with no server between."""
    return getattr(spark, "client", None) if _is_connect(spark) else None


def job_tags(spark: Session) -> tuple[Callable[[str], Any], Callable[[str], Any],
                                      Callable[[str], Any]]:
    """(add, remove, cancel) of a tag on the jobs the calling thread submits: a classic
    session's SparkContext job tags (``addJobTag``, ``removeJobTag``, ``cancelJobsWithTag``), a
    Spark Connect session's operation tags (``addTag``, ``removeTag``, ``interruptTag``). A tag
    added is the adding thread's own (its pinned JVM thread, or the Connect client's thread
    local); cancelling works from any thread. (A classic session's own ``interruptTag`` finds
    only the tags the calling thread added.)"""
    if _is_connect(spark):
        return spark.addTag, spark.removeTag, spark.interruptTag
    sc = spark.sparkContext
    return sc.addJobTag, sc.removeJobTag, sc.cancelJobsWithTag


def partition_count(df) -> int:
    """How many partitions ``df`` has, empty ones included: one probe job on a Connect
    session, where a DataFrame has no ``rdd`` to ask (every task of ``mapInArrow`` runs, even
    over an empty partition, and answers with its index)."""
    if not _is_connect(df.sparkSession):
        return df.rdd.getNumPartitions()
    from .frames import _probed_partitions

    return _probed_partitions(df)




def rows_of(df, sc):
    """The rows of a DataFrame whose first column is binary, each as a 1-tuple of bytes (as
    ``df.rdd`` hands them to Python): ``df.rdd`` on a SparkContext, a :class:`~.frame_rdd.FrameRDD` over
    ``df`` on a :class:`~.frames.FrameContext`."""
    if not _uses_frames(sc):
        return df.rdd
    from .frame_rdd import FrameRDD

    return FrameRDD(sc, df.select(df.columns[0]).withColumnRenamed(df.columns[0], "payload"),
                    partition_count(df), raw=True)




class ReportsParam:
    """An accumulator of ``{key: report}``: a retried task's reports replace its first
    attempt's (what ``SparkContext.accumulator`` calls of an ``AccumulatorParam``, without
    importing pyspark: :mod:`.engine`)."""

    def zero(self, value):
        return {}

    def addInPlace(self, value1, value2):
        value1.update(value2)
        return value1


def map_with_reports(sc, rdd, fn):
    """``rdd.mapPartitions(lambda records: fn(records, report))``, persisted and computed, and
    everything the tasks passed to ``report`` (dicts, merged; a retried task's replace its
    first attempt's): an accumulator's work on a SparkContext; on DataFrames, the reports
    are rows beside the data (``part`` :data:`REPORT_PART`), read back by a filter in the JVM
    that leaves the data where it is stored."""
    if has_accumulators(sc):
        sink = sc.accumulator({}, ReportsParam())
        out = rdd.mapPartitions(lambda records: fn(records, sink.add),
                                preservesPartitioning=True).persist(PERSIST)
        store(out)
        return out, dict(sink.value)

    from .frame_rdd import REPORT_PART, FrameRDD, Report

    def with_reports(records):
        reports: list = []
        yield from fn(records, reports.append)
        yield from map(Report, reports)

    from pyspark import StorageLevel

    both = rdd.mapPartitions(with_reports).persist(StorageLevel.DISK_ONLY)
    both.materialize()
    merged: dict = {}
    for row in both.base.where(f"part = {REPORT_PART}").select("payload").collect():
        merged.update(pickle.loads(row["payload"]))
    data = FrameRDD(sc, both.base.where(f"part <> {REPORT_PART}"), both.n)
    data._persist, data._stored = StorageLevel.DISK_ONLY, True
    return data, merged


#: Partial results combined on the driver at once; more are first combined in groups of this
#: many by tasks (a tree, as ``treeReduce``'s, but in a fixed order).
TREE_FAN_IN = 16


def ordered_sum(rdd, value, op, order=None):
    """``op`` over ``value(record)`` of every record of ``rdd``, always in the same order:
    within a partition by ``order(record)`` (as stored when None), then partitions by index,
    in groups of :data:`TREE_FAN_IN`. ``treeReduce`` combines partitions in the order a
    shuffle delivers them, so float sums differed in their last bits from run to run, and
    between a SparkContext and a :class:`~.frames.FrameContext`; this gives the same bits on both."""
    def partial(index, records):
        pairs = [(None if order is None else order(r), value(r)) for r in records]
        if order is not None:
            pairs.sort(key=lambda pair: pair[0])  # type: ignore[arg-type,return-value]
        if pairs:
            yield index, functools.reduce(op, (v for _, v in pairs))

    def group(records):
        records = sorted(records, key=lambda pair: pair[1][0])
        if records:
            yield records[0][1][0], functools.reduce(op, (v for _, (_, v) in records))

    partials = rdd.mapPartitionsWithIndex(partial)
    n = rdd.getNumPartitions()
    if n > TREE_FAN_IN:
        groups = -(-n // TREE_FAN_IN)
        partials = partials.map(lambda pair: (pair[0] // TREE_FAN_IN, pair)) \
            .partitionBy(groups, lambda key: key).mapPartitions(group)
    found = sorted(partials.collect(), key=lambda pair: pair[0])
    if not found:
        raise InputError("ordered_sum of no records")
    return functools.reduce(op, (v for _, v in found))
