"""The few RDD operations the Spark layer uses, over DataFrames: the same fit on a session
without the RDD API (Spark Connect: Spark 4's thin client, Databricks shared and serverless
compute), which has no SparkContext, broadcast variables, accumulators or py4j gateway.

:func:`~.engine.context_of` hands the Spark layer what it calls ``sc``: a classic session's
SparkContext, or a :class:`FrameContext` over a Connect session. A :class:`FrameRDD` holds its
records as pickled payloads in a DataFrame of :data:`SCHEMA` (one row per record: a chunk of a
partition, a block of input rows, a partial sum), so every function the layer ships to its
tasks (``mapPartitions``, ``map``, ``treeReduce``...) runs unchanged inside one ``mapInArrow``
per stage. What the RDD API promised and a DataFrame does not by itself is kept:

* **Partition k holds key k.** ``partitionBy(n, f)`` hashes a column whose value is chosen so
  that Spark's own partitioning (``pmod(hash(salt), n)``) sends the record to partition
  ``f(key) % n`` exactly (:meth:`FrameContext.salts`), then sorts within partitions by
  (partition, source partition, position): the order ``itertools.groupby`` and the chunks'
  ``order`` rely on (:mod:`sodm_spark.spark.partitioning`).
* **coalesce keeps consecutive partitions together**, as Spark's coalescer does without
  locality: the same exact shuffle, to ranges of partitions.
* **persist** is a local checkpoint taken at the first use (``localCheckpoint`` on the
  executors' disks, as the RDDs' ``DISK_ONLY``): the plan of the next level starts from it, so
  a Connect plan never grows with the levels' closures.
* **Broadcasts** are values shipped in the task's closure; **accumulators** are replaced by
  records returned beside the data (:func:`~.engine.map_with_reports`); ``runJob`` on some partitions
  filters the others out in the JVM before any row reaches Python.

A classic session takes this path too when asked (``SODM_SPARK_RECORDS=frames``,
:data:`~.engine.RECORDS_ENV`), which is how
the tests hold both paths to the same models; it keeps RDDs by default.
"""
from __future__ import annotations

import atexit
import os
import pickle
import re
import tempfile
import uuid
from contextlib import suppress

import numpy as np

from .task import task_partition
from .frame_rdd import FrameRDD, schema_struct


def _probed_partitions(df) -> int:
    def index(batches):
        import pyarrow as pa

        for _ in batches:
            pass
        yield pa.RecordBatch.from_pydict({"index": [task_partition()]})

    return 1 + int(df.mapInArrow(index, "index long").agg({"index": "max"}).first()[0])


def local_cores(master: str) -> int | None:
    """The task slots of a local master that names them (``local``: 1, ``local[N]`` and
    ``local[N,F]``: N), which Spark's local scheduler takes as its default parallelism; None
    for any other master (``local[*]`` counts the server's cores, a cluster its executors')."""
    if master == "local":
        return 1
    found = re.fullmatch(r"local\[(\d+)(?:,\d+)?\]", master.strip())
    return int(found.group(1)) if found else None


class Shared:
    """A broadcast's stand-in: the value travels in the closure of the task that reads it."""

    def __init__(self, value):
        self.value = value

    def unpersist(self, blocking: bool = False) -> None:
        self.value = None


class FrameContext:
    """A SparkContext's stand-in over any session (docstring of the module)."""

    _parallelism: dict = {}  # per application: one probe job per application
    _salts: dict = {}  # per partition count: the same in every session (:meth:`salts`)

    def __init__(self, spark):
        self.spark = spark

    def __reduce__(self):
        raise TypeError("a FrameContext belongs to the driver; ship plain values to tasks")

    @property
    def applicationId(self) -> str:
        return self.spark.conf.get("spark.app.id", "connect")

    @property
    def master(self) -> str:
        return self.spark.conf.get("spark.master", "") or ""

    @property
    def defaultParallelism(self) -> int:
        app = self.applicationId
        if app not in self._parallelism:
            configured = self.spark.conf.get("spark.default.parallelism", None)
            cores = local_cores(self.master)
            if configured:
                self._parallelism[app] = int(configured)
            elif cores is not None:  # local[N]: N task slots, Spark's default parallelism
                self._parallelism[app] = cores
            else:  # a range without a partition count is cut into the default parallelism
                self._parallelism[app] = _probed_partitions(self.spark.range(0, 1 << 16))
        return self._parallelism[app]

    def getConf(self):
        return self

    def get(self, key, default=None):
        value = self.spark.conf.get(key, None)
        return default if value is None else value

    def setJobDescription(self, description) -> None:
        """Job descriptions are a SparkContext's; a Connect client has operation tags only."""

    def broadcast(self, value) -> Shared:
        return Shared(value)

    def parallelize(self, values, n_slices: int | None = None) -> "FrameRDD":
        """``values`` in ``n_slices`` partitions, cut as ``SparkContext.parallelize`` cuts
        them (batches of ⌊len/n⌋ values, at most 1,024, in ranges of batches per slice)."""
        values = list(values)
        n = max(1, n_slices or self.defaultParallelism)
        size = max(1, min(len(values) // n, 1024))
        n_batches = -(-len(values) // size)
        slice_of_batch = [i for i in range(n) for _ in range(i * n_batches // n,
                                                              (i + 1) * n_batches // n)]
        # each row's partition is known here: the exact shuffle's placement (part, salt) is
        # written by the driver, and no Python stage reads the records before their first use
        salts = self.salts(n)
        rows = []
        for j, value in enumerate(values):
            part = slice_of_batch[j // size]
            rows.append((part, salts[part], 0, j, pickle.dumps(value, protocol=5)))
        frame = self.spark.createDataFrame(rows, schema_struct()).to(schema_struct())
        placed = frame.repartition(n, "salt").sortWithinPartitions("part", "src", "seq")
        return FrameRDD(self, placed, n, placed=True)

    def runJob(self, rdd, fn, partitions=None):
        """``fn`` over the records of ``partitions`` (all when None), their results in
        partition order; the other partitions' rows never reach Python."""
        if partitions is None:
            return rdd.mapPartitions(fn).collect()
        wanted = frozenset(int(p) for p in partitions)
        return rdd.mapPartitionsWithIndex(
            lambda index, records: fn(records) if index in wanted else ()).collect(wanted)

    def salts(self, n: int) -> list[int]:
        """For each partition k < n a value v with pmod(hash(v), n) = k: hashing v is how
        ``repartition(n, column)`` places a row, so a column of v sends its rows to k. The
        smallest such v, from :func:`spark_long_hashes` computed here: no query (a query cost
        a Connect job 0.3-0.6 s, and its first one the most)."""
        if n not in self._salts:
            top = max(4096, 8 * n)
            while True:
                # Spark's pmod of an int hash by n > 0 is numpy's mod
                residues = np.mod(spark_long_hashes(np.arange(top, dtype=np.int64)), n)
                found, first = np.unique(residues, return_index=True)
                if found.size == n:  # every residue 0..n-1, in order: first[k] has k
                    break
                top *= 2
            self._salts[n] = [int(value) for value in first]
        return self._salts[n]


_MURMUR3_SEED = 42  # the seed of Spark's hash() and of its hash partitioning (HashPartitioning)


def _rotate_left(values: np.ndarray, bits: int) -> np.ndarray:
    return (values << np.uint32(bits)) | (values >> np.uint32(32 - bits))


def _mix_word(h: np.ndarray, word: np.ndarray) -> np.ndarray:
    k = _rotate_left(word * np.uint32(0xCC9E2D51), 15) * np.uint32(0x1B873593)
    h = _rotate_left(h ^ k, 13)
    return h * np.uint32(5) + np.uint32(0xE6546B64)


def spark_long_hashes(values: np.ndarray) -> np.ndarray:
    """Spark's ``hash`` of 64-bit integers (int32, as ``F.hash`` of a long column gives it):
    Murmur3 x86 32-bit with seed 42 over the low then the high 32-bit word, as
    ``Murmur3_x86_32.hashLong`` computes it; the partition of a row that
    ``repartition(n, column)`` places is ``pmod`` of it by n. Unsigned 32-bit numpy
    arithmetic wraps as Java's int arithmetic does."""
    bits = np.asarray(values, dtype=np.int64).view(np.uint64)
    with np.errstate(over="ignore"):
        h = np.full(bits.shape, _MURMUR3_SEED, dtype=np.uint32)
        h = _mix_word(h, (bits & np.uint64(0xFFFFFFFF)).astype(np.uint32))
        h = _mix_word(h, (bits >> np.uint64(32)).astype(np.uint32))
        h ^= np.uint32(8)  # the length in bytes
        h ^= h >> np.uint32(16)
        h *= np.uint32(0x85EBCA6B)
        h ^= h >> np.uint32(13)
        h *= np.uint32(0xC2B2AE35)
        h ^= h >> np.uint32(16)
    return h.view(np.int32)


def inline_file(files: dict, name: str) -> str:
    """A model file shipped in the task's closure (no ``addFile`` on Spark Connect), written
    once per worker process to its temporary directory: its path, as ``SparkFiles.get``."""
    path = os.path.join(tempfile.gettempdir(), f"sodm-inline-{os.getpid()}-{name}")
    if not os.path.exists(path):
        staging = f"{path}.{uuid.uuid4().hex}"
        with open(staging, "wb") as out:
            out.write(files[name])
        os.replace(staging, path)
        atexit.register(_remove_quietly, path)
    return path


def _remove_quietly(path: str) -> None:
    with suppress(OSError):
        os.remove(path)
