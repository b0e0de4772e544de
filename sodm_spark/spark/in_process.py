"""The in-process back end: the Spark layer's task functions run on one machine without a JVM.

The Spark layer asks its engine for the subset of the RDD API that :class:`~.frame_rdd.FrameRDD`
implements over DataFrames (Spark Connect): narrow maps over partitions, shuffles that place
every record where the RDD API would, persist and release, broadcasts, actions that bring
results to the driver. :class:`InProcessContext` and :class:`InProcessRDD` implement the same
subset over Python lists, one list a partition, so that a fit, its search, its levels and its
global step run unchanged in this process: what a user with one large machine and no Spark runs
(:func:`in_process_context`; :func:`~.train.fit_in_process` fits on it), and what the
tests whose subject is not Spark run.

Partitions are computed when an action or a shuffle reads them (lazily, as Spark computes
them: ``runJob`` on some partitions computes those alone), partition by partition in index
order, on the calling thread: the task functions already spread their own work over the cores (BLAS threads, numba's
threads) as the plan gives them (:attr:`InProcessContext.defaultParallelism` is the cores the
plan is made for), and a fixed order keeps every float sum's bits as a Spark run's, whose
order :func:`~.engine.ordered_sum` fixes. Records are never pickled: a task sees the driver's
objects, so a function must not change the records it is given (none of the Spark layer's
does; on Spark they would be copies).
"""
from __future__ import annotations

import functools
import itertools
import os

from ..core.errors import InputError
from .frame_rdd import RecordOperations


class InProcessBroadcast:
    """A broadcast's stand-in: the value itself, shared by reference."""

    def __init__(self, value):
        self.value = value

    def unpersist(self, blocking: bool = False) -> None:
        self.value = None

    destroy = unpersist


class InProcessConf:
    """What the Spark layer reads of a SparkConf (``get``), from a dict."""

    def __init__(self, settings: dict | None = None):
        self._settings = dict(settings or {})

    def get(self, key, default=None):
        return self._settings.get(key, default)

    def getAll(self):
        return list(self._settings.items())


class InProcessAccumulator:
    """A Spark accumulator's stand-in: ``add`` merges at once (a task runs once here)."""

    def __init__(self, value, param=None):
        self.value, self._param = value, param

    def add(self, term) -> None:
        if self._param is None:
            self.value += term
        else:
            self.value = self._param.addInPlace(self.value, term)


class InProcessContext:
    """A SparkContext's stand-in on one machine (module docstring): ``cores`` the plan is made
    for (``master`` reads ``local[cores]``, as the session of the same cores would), ``conf``
    the settings a SparkConf would hold; none by default, so the memory plan is a local
    session's with none (``spark.memory``: the machine's memory less a driver heap of 1g)."""

    def __init__(self, cores: int | None = None, conf: dict | None = None,
                 task_blas_threads: int | None = None):
        self.cores = max(1, int(cores or os.cpu_count() or 1))
        self._conf = InProcessConf(conf)
        self.description: str | None = None
        # the BLAS threads a task function runs with (None: the process's): 1 is what a
        # Spark task has (its Python worker's OMP_NUM_THREADS is spark.task.cpus), and a
        # GEMM's last bits can follow its threads
        self.task_blas_threads = task_blas_threads

    # --- what the fit reads of its engine ---------------------------------------------------
    @property
    def defaultParallelism(self) -> int:
        return self.cores

    @property
    def master(self) -> str:
        return f"local[{self.cores}]"

    @property
    def applicationId(self) -> str:
        return f"in-process-{os.getpid()}"

    def getConf(self) -> InProcessConf:
        return self._conf

    def setJobDescription(self, description) -> None:
        self.description = description

    def broadcast(self, value) -> InProcessBroadcast:
        return InProcessBroadcast(value)

    def accumulator(self, value, accum_param=None) -> InProcessAccumulator:
        return InProcessAccumulator(value, accum_param)

    def parallelize(self, values, n_slices: int | None = None) -> "InProcessRDD":
        """``values`` in ``n_slices`` partitions, cut as ``SparkContext.parallelize`` cuts
        them (batches of ⌊len/n⌋ values, at most 1,024, in ranges of batches per slice)."""
        values = list(values)
        n = max(1, n_slices or self.defaultParallelism)
        size = max(1, min(len(values) // n, 1024))
        batches = [values[j:j + size] for j in range(0, len(values), size)]
        return InProcessRDD(self, [
            [value for batch in batches[i * len(batches) // n:(i + 1) * len(batches) // n]
             for value in batch] for i in range(n)])

    def runJob(self, rdd, fn, partitions=None):
        """``fn`` over the records of ``partitions`` (all when None), the results in partition
        order, as ``SparkContext.runJob``."""
        wanted = range(rdd.getNumPartitions()) if partitions is None else partitions
        return [result for index in wanted for result in fn(iter(rdd._partition(index)))]


class InProcessRDD(RecordOperations):
    """The RDD subset of :class:`~.frame_rdd.FrameRDD` over partitions held as lists, for
    ``ctx`` (the compositions from :class:`~.frame_rdd.RecordOperations`); every method as the
    RDD API defines it. Narrow transformations are lazy, as
    Spark's: a partition is computed when an action or a shuffle reads it (``runJob`` on some
    partitions computes only those), again at each read unless persisted; ``partitions``: the
    source lists (None: ``parent``'s partitions through ``fn(index, records)``)."""

    def __init__(self, ctx: InProcessContext, partitions: list | None, parent=None, fn=None):
        self.ctx, self._source, self._parent, self._fn = ctx, partitions, parent, fn
        self._n = len(partitions) if partitions is not None else parent.getNumPartitions()
        self._cache: dict[int, list] | None = None  # computed partitions, when persisted

    @property
    def context(self) -> InProcessContext:
        return self.ctx

    @property
    def is_cached(self) -> bool:
        return self._cache is not None

    def _partition(self, index: int) -> list:
        """Partition ``index``'s records: the source list, the cached list, or computed."""
        if self._source is not None:
            return self._source[index]
        if self._cache is not None and index in self._cache:
            return self._cache[index]
        records = self._computed(index)
        if self._cache is not None:
            self._cache[index] = records
        return records

    def _computed(self, index: int) -> list:
        """Partition ``index`` computed from its parent's, with the context's task BLAS
        threads."""
        parent = self._parent._partition(index)
        if self.ctx.task_blas_threads is None:
            return list(self._fn(index, iter(parent)))
        from threadpoolctl import threadpool_limits

        with threadpool_limits(self.ctx.task_blas_threads, user_api="blas"):
            return list(self._fn(index, iter(parent)))

    def _all(self) -> list:
        return [self._partition(index) for index in range(self._n)]

    # --- narrow transformations (lazy) ------------------------------------------------------
    def mapPartitionsWithIndex(self, fn, preservesPartitioning=False) -> "InProcessRDD":
        return InProcessRDD(self.ctx, None, self, fn)

    def getNumPartitions(self) -> int:
        return self._n

    # --- shuffles (every partition read, as a Spark shuffle's map side) ---------------------
    def exact_shuffle(self, n: int, assign) -> "InProcessRDD":
        """The records in ``n`` partitions, record r of partition i at position j going to
        ``assign(i, j, r)``, kept in (source partition, position) order within each."""
        out: list[list] = [[] for _ in range(n)]
        for index in range(self._n):
            for position, record in enumerate(self._partition(index)):
                out[assign(index, position, record)].append(record)
        return InProcessRDD(self.ctx, out)

    def coalesce(self, n: int, shuffle: bool = False) -> "InProcessRDD":
        previous = self._n
        if n >= previous:
            return self
        # Spark's coalescer without locality: ranges of consecutive partitions
        return InProcessRDD(self.ctx, [
            [record for j in range(i * previous // n, (i + 1) * previous // n)
             for record in self._partition(j)] for i in range(n)])

    # --- persistence -------------------------------------------------------------------------
    def persist(self, storage_level=None) -> "InProcessRDD":
        if self._cache is None:
            self._cache = {}
        return self

    cache = persist

    def materialize(self) -> None:
        """Compute every partition and keep it (``engine.store``)."""
        self.persist()
        self._all()

    def unpersist(self, blocking: bool = False) -> "InProcessRDD":
        self._cache = None
        return self

    # --- actions ----------------------------------------------------------------------------
    def collect(self) -> list:
        return [record for records in self._all() for record in records]

    def toLocalIterator(self):
        for index in range(self._n):
            yield from self._partition(index)

    def count(self) -> int:
        return sum(len(records) for records in self._all())

    def sum(self):
        return sum(self.collect())

    def reduce(self, fn):
        parts = [functools.reduce(fn, records) for records in self._all() if records]
        if not parts:
            raise InputError("Can not reduce() empty RDD")
        return functools.reduce(fn, parts)

    treeReduce = reduce

    def first(self):
        found = self.take(1)
        if not found:
            raise InputError("RDD is empty")
        return found[0]

    def take(self, n: int) -> list:
        return list(itertools.islice(self.toLocalIterator(), n))

    def zipWithIndex(self) -> "InProcessRDD":
        offsets = list(itertools.accumulate((len(r) for r in self._all()), initial=0))
        return self.mapPartitionsWithIndex(
            lambda index, records: ((r, offsets[index] + j) for j, r in enumerate(records)))


def in_process_context(cores: int | None = None, **conf) -> InProcessContext:
    """The in-process back end's context for a fit on this machine (``cores``: the cores the
    plan is made for, all of them by default)."""
    return InProcessContext(cores, conf)
