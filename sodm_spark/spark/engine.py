"""The engine a fit runs on, chosen in one place (:func:`context_of`: classic Spark, Spark
Connect or in process, docs/design.md §6), and what the fit asks of any of them besides the
RDD subset each implements: whether records move through DataFrames, reports beside the data
(:func:`map_with_reports`), sums in a fixed order (:func:`ordered_sum`), persisting
(:data:`PERSIST`, :func:`store`) and the errors a failed job raises. Nothing here imports
Spark at import time: the in-process back end (:mod:`.in_process`) runs where pyspark is not
installed (one machine with a GPU and no Java, docs/design.md §6.2).
"""
from __future__ import annotations

import functools
import os
import pickle
from typing import Any, Callable, Iterable, Protocol, Sequence

from ..core.errors import InputError


class Engine(Protocol):
    """What a fit asks of the context it runs on (``sc``): a classic SparkContext, a
    :class:`~.frames.FrameContext` over Spark Connect or an
    :class:`~.in_process.InProcessContext`, whichever :func:`context_of` chose. Their records
    (RDD, FrameRDD, InProcessRDD) share the RDD subset of
    :class:`~.frame_rdd.RecordOperations`; what only a classic context has (reading text
    files, Hadoop's file systems, job tags, accumulators) is asked of it where the fit knows
    it runs on one."""

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


def is_connect(spark) -> bool:
    """Whether ``spark`` is a Spark Connect session (no SparkContext behind it)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def workers_python(spark) -> str | None:
    """The interpreter a classic session's Python workers run (its SparkContext's
    ``pythonExec``: ``PYSPARK_PYTHON`` or ``python3``), for messages; None on Spark Connect,
    whose server's this client cannot see."""
    return None if is_connect(spark) else spark.sparkContext.pythonExec


def context_of(spark=None, cores: int | None = None):
    """What the fit calls ``sc``, chosen here and nowhere else: with no session the in-process
    back end's context (:mod:`.in_process`, planned for ``cores``, all by default); the
    SparkContext of a classic session (unless :data:`RECORDS_ENV` is ``frames``); else a
    :class:`~.frames.FrameContext` (Spark Connect)."""
    if spark is None:
        from .in_process import in_process_context

        return in_process_context(cores)
    if is_connect(spark) or os.environ.get(RECORDS_ENV, "rdd") == "frames":
        from .frames import FrameContext

        return FrameContext(spark)
    return spark.sparkContext


def uses_frames(sc) -> bool:
    """Whether ``sc`` (:func:`context_of`'s) moves records through DataFrames."""
    from .frames import FrameContext

    return isinstance(sc, FrameContext)


def partition_count(df) -> int:
    """How many partitions ``df`` has, empty ones included: one probe job on a Connect
    session, where a DataFrame has no ``rdd`` to ask (every task of ``mapInArrow`` runs, even
    over an empty partition, and answers with its index)."""
    if not is_connect(df.sparkSession):
        return df.rdd.getNumPartitions()
    from .frames import _probed_partitions

    return _probed_partitions(df)




def rows_of(df, sc):
    """The rows of a DataFrame whose first column is binary, each as a 1-tuple of bytes (as
    ``df.rdd`` hands them to Python): ``df.rdd`` on a SparkContext, a :class:`~.frame_rdd.FrameRDD` over
    ``df`` on a :class:`~.frames.FrameContext`."""
    if not uses_frames(sc):
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
    if not uses_frames(sc):
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
