"""The global step's rows (docs/design.md §2.9): a level's partitions as the few blocks every
pass of :mod:`.global_step` reads, over the executors (:func:`pass_rows`, persisted) or
collected once onto the driver (:func:`on_the_driver`, where the plan puts passes of few rows:
:data:`~.global_plan.PLACES`).
"""
from __future__ import annotations

import numpy as np

from ...core.weights import combined_weights
from ..engine import PERSIST
from ..frame_rdd import consecutive_groups
from ..in_process import InProcessContext, InProcessRDD


def _compact_rows(item, class_weights):
    """A chunk's rows for the step's passes: (float32 rows, ±1 labels, weights or None, ids)."""
    chunk = item[1]
    weights = combined_weights(chunk.weights, class_weights, chunk.y)
    return (np.asarray(chunk.X, dtype=np.float32), np.asarray(chunk.y, dtype=np.float64),
            None if weights is None else np.asarray(weights, dtype=np.float64),
            np.asarray(chunk.ids, dtype=np.int64))


def _one_block(records):
    """The rows of a task's chunks as one block (their order as stored)."""
    pieces = list(records)
    if not pieces:
        return
    weighted = any(piece[2] is not None for piece in pieces)
    yield (np.concatenate([piece[0] for piece in pieces]),
           np.concatenate([piece[1] for piece in pieces]),
           np.concatenate([piece[2] if piece[2] is not None else np.ones(piece[1].size)
                           for piece in pieces]) if weighted else None,
           np.concatenate([piece[3] for piece in pieces]))


#: The global step's rows as this many blocks at least (one a core where there are more
#: cores): a count that does not follow the session's cores below it, so that a fit on 1 to 8
#: cores sums every pass over the same blocks in the same order, to the same bits (a float
#: sum's last bits follow its order); 8 blocks on 2 cores are 4 rounds of tasks that read a
#: persisted block each, not the hundreds of a level's partitions.
PASS_BLOCKS = 8


def pass_blocks(cores: int) -> int:
    """How many blocks :func:`pass_rows` makes on ``cores`` cores: :data:`PASS_BLOCKS`, or one
    a core where there are more."""
    return max(PASS_BLOCKS, int(cores))


def pass_rows(solved, tasks: int, class_weights=None):
    """The rows of ``solved`` (a level's partitions, or the top level's) as one block per task
    (X, y, the rows' weights or None, their ids), ``tasks`` tasks, persisted: every job of
    the global step reads them."""
    return _blocks(_grouped(solved, tasks), class_weights).persist(PERSIST)


def _in_order(pairs):
    """A group's records in (source partition, position) order, however a shuffle delivered
    them."""
    for _, (_, _, record) in sorted(pairs, key=lambda pair: pair[1][:2]):
        yield record


def _grouped(records, tasks: int):
    """``records`` in at most ``tasks`` partitions, each a range of consecutive ones in their
    order (:func:`~..frame_rdd.consecutive_groups`), on every engine: Spark's coalescer groups a persisted
    level's partitions by their locations instead (9 into 8 of a shuffled level on local[2]:
    not in ranges), so that a fit's blocks, and its sums' last bits, would follow the engine
    and the cluster's layout. A shuffle of the rows once a step, where there are more
    partitions than tasks."""
    n = records.getNumPartitions()
    if n <= tasks:
        return records
    group = consecutive_groups(n, tasks)
    tagged = records.mapPartitionsWithIndex(lambda index, items: (
        (group[index], (index, position, item)) for position, item in enumerate(items)))
    return tagged.partitionBy(tasks, lambda key: key).mapPartitions(_in_order)


def _blocks(grouped, class_weights):
    """Each partition of ``grouped`` (a level's records) as one block of the step's rows."""
    return grouped.map(lambda item: _compact_rows(item, class_weights)).mapPartitions(_one_block)


def _held_on_the_driver(index, items):
    """A partition of a level's ``(key, Chunk)`` records as the driver takes it for the step:
    (its index, its chunks without their solve's stats, which the step does not read)."""
    yield index, [(key, chunk._replace(stats=None)) for key, chunk in items]


def on_the_driver(sc, solved, tasks: int, class_weights=None):
    """(an in-process context of ``sc``'s cores, ``solved``'s partitions held in it, the step's
    blocks as :func:`pass_rows` makes them): one job collects the level's chunks, each
    partition's in stored order, after which the step's blocks, draws, sums and passes run
    the same task functions over the same records in the same order on the driver
    (:mod:`~sodm_spark.spark.in_process`), to the bits a run over the executors gives, without
    a Spark job for each (:data:`~.global_plan.PLACES`)."""
    sc.setJobDescription("SODM global step: the level's rows collected onto the driver")
    held = solved.mapPartitionsWithIndex(_held_on_the_driver).collect()
    sources: list[list] = [[] for _ in range(solved.getNumPartitions())]
    for index, items in held:
        sources[index] = items
    # the tasks' BLAS on one thread, as a Spark task's: a GEMM's last bits follow its threads
    local = InProcessContext(sc.defaultParallelism, task_blas_threads=1)
    level = InProcessRDD(local, sources)
    return local, level, pass_rows(level, tasks, class_weights)
