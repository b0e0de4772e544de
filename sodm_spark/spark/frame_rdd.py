"""The records of :mod:`sodm_spark.spark.frames` over a DataFrame: :class:`FrameRDD`, the RDD
operations the Spark layer uses, each narrow one composed into the next stage's one
``mapInArrow`` pass, the shuffles placing every record exactly where the RDD API would
(the module docstring of :mod:`.frames` says how and why)."""
from __future__ import annotations

import functools
import itertools
import pickle
from collections import deque
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from pyspark import StorageLevel

from ..core.errors import InputError
from .task import task_partition

#: One record a row: ``part`` the partition it belongs to after an exact shuffle (``salt`` the
#: value hashed to reach it), ``src`` and ``seq`` where it came from (the order kept within),
#: ``payload`` the pickled record. Columns named here are 64-bit integers but the last, bytes.
SCHEMA = ("part", "salt", "src", "seq", "payload")


@functools.lru_cache(maxsize=None)
def schema_struct():
    """:data:`SCHEMA` as a StructType: a DDL string is parsed by the server (a Connect round
    trip each ``mapInArrow``), a StructType is not, and a DataFrame given it by ``to`` knows its
    columns without asking the server for them."""
    from pyspark.sql.types import BinaryType, LongType, StructField, StructType

    return StructType([StructField(name, LongType()) for name in SCHEMA[:-1]]
                      + [StructField(SCHEMA[-1], BinaryType())])


def _arrow_schema():
    """:data:`SCHEMA` as the Arrow schema of a task's output batches."""
    import pyarrow as pa

    return pa.schema([(name, pa.int64()) for name in SCHEMA[:-1]]
                     + [(SCHEMA[-1], pa.binary())])


def _records(batches, raw=False, placed_in=None):
    """The records of a task's Arrow batches, unpickled one at a time (``raw``: each payload
    as a 1-tuple of bytes, a DataFrame's own binary column). ``placed_in``: the partition an
    exact shuffle placed these rows in, checked against each row's ``part``."""
    for batch in batches:
        if placed_in is not None:
            _check_placed(batch, placed_in)
        payloads = batch.column(batch.schema.get_field_index("payload"))
        for i in range(batch.num_rows):
            yield (payloads[i].as_py(),) if raw else \
                pickle.loads(memoryview(payloads[i].as_buffer()))


def _check_placed(batch, partition: int) -> None:
    """Refuse rows an exact shuffle sent elsewhere than their ``part``: the salts
    (:meth:`~.frames.FrameContext.salts`) assume Spark's own hash partitioning, and a server
    that hashes otherwise would put records in the wrong partitions without this check."""
    import pyarrow.compute as pc

    parts = batch.column(batch.schema.get_field_index("part"))
    if batch.num_rows and not pc.all(pc.equal(parts, partition)).as_py():
        wrong = next(int(v) for v in parts.to_pylist() if v != partition)
        raise RuntimeError(
            f"a row meant for partition {wrong} arrived in partition {partition}: this Spark "
            "server does not place rows by Spark's hash partitioning (Murmur3, seed 42), which "
            "the DataFrame path relies on; run the fit on classic Spark or on a Spark Connect "
            "server of Apache Spark")


def _task(pending, assign=None, salts=None, raw=False, placed=False):
    """The ``mapInArrow`` function of a stage: the pending record functions over this
    partition's records, each output record one row (its ``part`` from ``assign``);
    ``placed``: the input rows were placed by an exact shuffle (checked)."""
    def run(batches):
        import pyarrow as pa

        batches = iter(batches)
        index = task_partition()
        schema = _arrow_schema()
        records = _records(batches, raw, index if placed else None)
        out = records if pending is None else pending(index, records)
        for position, record in enumerate(out):
            if isinstance(record, Report):  # beside the data, read back without it
                part, record = REPORT_PART, record.value
            else:
                part = index if assign is None else assign(index, position, record)
            yield pa.RecordBatch.from_pydict(
                {"part": [part], "salt": [part if salts is None else salts[part]],
                 "src": [index], "seq": [position],
                 "payload": [pickle.dumps(record, protocol=5)]}, schema=schema)
        # The input read to its end, also where the functions stopped early (a partition
        # runJob does not ask for, take): a Python worker that leaves input unread exits
        # instead of returning to Spark's pool, and the stage's next task starts an
        # interpreter that imports the package and loads its numba kernels again (a second a
        # task, half a 60,000-row search over Spark Connect).
        deque(batches, maxlen=0)
    return run


#: The ``part`` of a report row (:func:`map_with_reports`): no partition has it.
REPORT_PART = -1


class Report:
    """A value a task returns beside its records (:func:`map_with_reports`)."""

    def __init__(self, value):
        self.value = value


def _compose(first, then):
    if first is None:
        return then
    return lambda index, records: then(index, first(index, records))


class RecordOperations:
    """The RDD operations that are compositions of two others, shared by the back ends that
    stand in for a SparkContext (:class:`FrameRDD`, :class:`~.in_process.InProcessRDD`): each
    implements ``mapPartitionsWithIndex`` and ``exact_shuffle``, the rest follows."""

    mapPartitionsWithIndex: Callable  # (fn(index, records), preservesPartitioning) -> records
    exact_shuffle: Callable  # (n, assign(index, position, record)) -> records in n partitions

    def mapPartitions(self, fn, preservesPartitioning=False):
        return self.mapPartitionsWithIndex(lambda _, records: fn(records))

    def map(self, fn):
        return self.mapPartitions(lambda records: map(fn, records))

    def flatMap(self, fn):
        return self.mapPartitions(lambda records: itertools.chain.from_iterable(
            map(fn, records)))

    def filter(self, fn):
        return self.mapPartitions(lambda records: filter(fn, records))

    def values(self):
        return self.map(lambda pair: pair[1])

    def keys(self):
        return self.map(lambda pair: pair[0])

    def partitionBy(self, n: int, partition_func=hash):
        return self.exact_shuffle(n, lambda index, position, pair: partition_func(pair[0]) % n)

    def repartition(self, n: int):
        return self.exact_shuffle(n, lambda index, position, record: (index + position) % n)


def consecutive_groups(partitions: int, groups: int) -> list[int]:
    """The group of each of ``partitions`` partitions among ``groups`` ranges of consecutive
    ones, as Spark's coalescer makes them without locality: partition j in group i when
    i·N/n ≤ j < (i+1)·N/n."""
    group = [0] * partitions
    for i in range(groups):
        for j in range(i * partitions // groups, (i + 1) * partitions // groups):
            group[j] = i
    return group


def _disk_only():
    """Spark's ``StorageLevel.DISK_ONLY``, imported where a DataFrame is (the in-process back
    end shares this module's :class:`RecordOperations` without pyspark: :mod:`.engine`)."""
    from pyspark import StorageLevel

    return StorageLevel.DISK_ONLY


class FrameRDD(RecordOperations):
    """The subset of the RDD API the Spark layer uses, over a DataFrame of :data:`SCHEMA`
    (docstring of :mod:`.frames`), for a :class:`~.frames.FrameContext` ``ctx``. ``pending``: record functions (index, iterator) → iterator
    still to run over ``base``, all in the next stage's one Python pass."""

    def __init__(self, ctx, base, n_partitions: int, pending=None, raw=False, placed=False):
        self.ctx, self.base, self.n, self.pending = ctx, base, n_partitions, pending
        self.raw = raw  # base's payloads are a DataFrame's bytes, not pickled records
        self.placed = placed  # base's rows were placed by an exact shuffle (its part column)
        self._persist: StorageLevel | None = None  # the storage level asked for
        self._stored = False  # base holds this RDD's records, checkpointed

    # --- narrow transformations (lazy, composed into one stage) ----------------------------
    def _base(self):
        """The DataFrame the next stage reads, checkpointed first when persisted."""
        if self.base is None:
            raise RuntimeError("these records were unpersisted and cannot be read again")
        if self._persist is not None and not self._stored:
            # ``to``: the checkpoint's columns known here, not asked of the server
            self.base = self._stage().localCheckpoint(
                eager=True, storageLevel=self._persist).to(schema_struct())
            self.pending, self._stored, self.raw = None, True, False
        return self.base

    def mapPartitionsWithIndex(self, fn, preservesPartitioning=False) -> "FrameRDD":
        base = self._base()
        return FrameRDD(self.ctx, base, self.n, _compose(self.pending, fn), self.raw,
                        self.placed)

    def getNumPartitions(self) -> int:
        return self.n

    # --- shuffles that place records exactly -----------------------------------------------
    def exact_shuffle(self, n: int, assign) -> "FrameRDD":
        """The records in ``n`` partitions, record r of partition i at position j going to
        ``assign(i, j, r)``, kept in (source partition, position) order within each."""
        salts = self.ctx.salts(n)
        stage = self._frame(assign=assign, salts=salts)
        shuffled = stage.repartition(n, "salt").sortWithinPartitions("part", "src", "seq")
        return FrameRDD(self.ctx, shuffled, n, placed=True)

    def coalesce(self, n: int, shuffle: bool = False) -> "FrameRDD":
        if n >= self.n:
            return self
        # Spark's coalescer without locality: ranges of consecutive partitions
        group = consecutive_groups(self.n, n)
        return self.exact_shuffle(n, lambda index, position, record: group[index])

    # --- persistence -------------------------------------------------------------------------
    def persist(self, storage_level=None) -> "FrameRDD":
        """Keep the records once computed (None: ``DISK_ONLY``, what a checkpoint is)."""
        self._persist = _disk_only() if storage_level is None else storage_level
        return self

    @property
    def is_cached(self) -> bool:
        return self._persist is not None

    def materialize(self) -> None:
        """Compute and keep a persisted DataFrame of records (``store``)."""
        if self._persist is None:
            self._persist = _disk_only()
        self._base()

    def unpersist(self, blocking: bool = False) -> "FrameRDD":
        """Drop the checkpoint: its rows go when the last reference to its DataFrame does."""
        if self._stored:
            self.base = None
        self._persist = None
        return self

    # --- actions ----------------------------------------------------------------------------
    def _frame(self, assign=None, salts=None, partitions=None):
        """The DataFrame of this RDD's records (of ``partitions`` only, when given), placed by
        ``assign`` for an exact shuffle; a persisted RDD is stored first."""
        self._base()
        return self._stage(assign, salts, partitions)

    def _stage(self, assign=None, salts=None, partitions=None):
        if self.base is None:
            raise RuntimeError("these records were unpersisted and cannot be read again")
        base = self.base
        if partitions is not None:
            from pyspark.sql import functions as F
            base = base.where(F.spark_partition_id().isin([int(p) for p in partitions]))
        if self.pending is None and assign is None and not self.raw:
            return base
        return base.mapInArrow(_task(self.pending, assign, salts, self.raw, self.placed),
                               schema_struct())

    def collect(self, partitions=None) -> list:
        rows = self._frame(partitions=partitions).select("payload").collect()
        return [pickle.loads(row["payload"]) for row in rows]

    def toLocalIterator(self):
        for row in self._frame().select("payload").toLocalIterator():
            yield pickle.loads(row["payload"])

    def count(self) -> int:
        return int(sum(self.mapPartitions(lambda records: [sum(1 for _ in records)])
                       .collect()))

    def sum(self):
        return sum(self.mapPartitions(lambda records: [sum(records)]).collect())

    def reduce(self, fn):
        def local(records):
            records = iter(records)
            first = next(records, _EMPTY)
            if first is not _EMPTY:
                yield functools.reduce(fn, records, first)
        parts = self.mapPartitions(local).collect()
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
        """The first ``n`` records, the partitions scanned in order as ``RDD.take`` scans
        them (one, then four times as many as scanned so far), each task reading its whole
        input: a ``limit`` stops reading a Python stage's output, and Spark ends that stage's
        Python workers instead of reusing them."""
        found: list = []
        scanned = 0
        while len(found) < n and scanned < self.n:
            wanted = range(scanned, min(self.n, scanned + max(1, 4 * scanned)))
            left = n - len(found)
            found += self.mapPartitions(
                functools.partial(_first_records, left)).collect(partitions=wanted)
            scanned = wanted.stop
        return found[:n]

    def zipWithIndex(self) -> "FrameRDD":
        counts = self.mapPartitionsWithIndex(
            lambda index, records: [(index, sum(1 for _ in records))]).collect()
        offsets = dict.fromkeys(range(self.n), 0)
        total = 0
        for index, count in sorted(counts):
            offsets[index], total = total, total + count
        return self.mapPartitionsWithIndex(
            lambda index, records: ((r, offsets[index] + j) for j, r in enumerate(records)))


_EMPTY = object()


def _first_records(n: int, records):
    return itertools.islice(records, n)
