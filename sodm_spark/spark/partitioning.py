"""How rows are laid out into partitions on Spark, for SODM and DSVRG alike (docs/design.md §2.3).

Partitioned rows are ``(key, Chunk)`` records. Partition ``key`` (in Spark partition ``key``)
is all the chunks with that key, their rows concatenated in the order of the chunks' ``order``
tuples (:func:`assemble`); each chunk holds at most :data:`CHUNK_BYTES` of rows, because a Spark
record crosses the JVM whole (persisted, shuffled, handed to Python) and a partition of 10^5 rows
is hundreds of MB. y is ±1, or class numbers for 3+ classes; γ is (m,) or (m, C), zeros until
SODM solves a level.

:func:`partition_blocks` deals the input rows into K partitions: landmark strata of Eqns 7-8
dealt evenly, or a comparator's partitions (k-means, DiP, random, cascade). It takes the few
settings it reads as arguments: SODM passes its parameters' fields, DSVRG its own. All numerics
are in ``sodm_spark.partition``; the functions shipped to tasks are module-level and take plain
values, so closures never capture a driver object.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from collections import namedtuple

import numpy as np

from ..core.errors import SettingsError, refused_as_settings
from ..core.kernels import Kernel
from ..core.sparse_rows import stack_rows
from ..core.validation import check_positive_int
from ..partition import (deal_positions, kmeans, nearest_center, nearest_landmark,
                         select_landmarks, stratum_offsets)
from .io import MAX_BLOCK_BYTES, feature_bytes
from .engine import PERSIST, store

#: The partitioners :func:`partition_blocks` knows (its docstring says how each deals the rows).
PARTITIONERS = ("stratified", "random", "kmeans", "dip", "cascade")
#: Candidates per stratum the landmarks of Eqn 8 are chosen from (docs/design.md §2.1).
LANDMARK_CANDIDATES = 50

@dataclass(frozen=True)
class Partitioning:
    """How :func:`partition_blocks` deals rows: ``partitioner`` (one of :data:`PARTITIONERS`),
    ``strata`` strata (landmarks of Eqn 8 for stratified, k-means clusters for dip) chosen among
    ``landmark_candidates`` sampled rows a stratum, ``label_strata`` to split every landmark
    stratum by class too, every random choice seeded by ``seed``."""

    partitioner: str
    strata: int
    seed: int
    landmark_candidates: int = LANDMARK_CANDIDATES
    label_strata: bool = False

    @refused_as_settings()  # check_positive_int's refusals too
    def __post_init__(self):
        if self.partitioner not in PARTITIONERS:
            raise SettingsError(f"Unknown partitioner {self.partitioner!r}; known: "
                                f"{', '.join(PARTITIONERS)}.")
        check_positive_int(self.strata, "strata")
        check_positive_int(self.landmark_candidates, "landmark_candidates")


Chunk = namedtuple("Chunk", "order X y ids gamma stats weights", defaults=(None,))
Chunk.__doc__ = """A run of a partition's rows: ``order`` (a tuple) places it among the
partition's chunks, ``stats`` is the solve's record on a partition's first chunk, else None;
``weights`` the rows' weight column (docs/design.md §1.4), or None."""

#: Most bytes of features in one chunk (the input blocks' bound).
CHUNK_BYTES = MAX_BLOCK_BYTES


def assemble(chunks):
    """(X, y, ids, γ) of a partition from its chunks, in the order of their ``order``."""
    chunks = sorted(chunks, key=lambda chunk: chunk.order)
    return (stack_rows([c.X for c in chunks]), np.concatenate([c.y for c in chunks]),
            np.concatenate([c.ids for c in chunks]), np.concatenate([c.gamma for c in chunks]))


def assembled_weights(chunks):
    """The weight column of a partition's rows in :func:`assemble`'s order, or None."""
    chunks = sorted(chunks, key=lambda chunk: chunk.order)
    if all(chunk.weights is None for chunk in chunks):
        return None
    return np.concatenate([chunk.weights for chunk in chunks])


def partitions_by_key(records):
    """(key, its chunks) for every key of a Spark partition's records, one key at a time.

    A key's records are consecutive: a Spark partition holds one key, or several coalesced in
    order (a level run with fewer tasks than partitions). So only one partition's chunks are in
    memory at once.
    """
    for key, group in itertools.groupby(records, key=lambda record: record[0]):
        yield key, [chunk for _, chunk in group]


def as_chunks(key, X, y, ids, gamma, stats=None, weights=None):
    """(key, Chunk) records of at most :data:`CHUNK_BYTES` each for one partition's rows;
    ``stats`` goes with the first."""
    n = X.shape[0]
    step = max(1, int(CHUNK_BYTES * n // max(1, feature_bytes(X)))) if n else 1
    for number, start in enumerate(range(0, max(n, 1), step)):
        rows = slice(start, start + step)
        yield key, Chunk((number,), X[rows], y[rows], ids[rows], gamma[rows],
                         stats if number == 0 else None,
                         None if weights is None else weights[rows])


def whole_partitions(records):
    """``mapPartitions`` function: (key, (X, y, ids, γ)) per partition (DSVRG's blocks)."""
    for key, chunks in partitions_by_key(records):
        yield key, assemble(chunks)


# --- task functions (module level: shipped to executors without driver state) ----------------

def _sample_rows(item, fraction, seed):
    block, index = item
    X = block[0]
    return X[np.random.default_rng([seed, 7, index]).random(X.shape[0]) < fraction]


def _assign_strata(item, how, centers, kernel, label_groups=2):
    """(block index, stratum of every row): nearest landmark in the RKHS (Eqn 7), nearest
    k-means center, or 0.

    "landmarks+labels" splits every landmark stratum by class as well (``label_groups``·S
    strata: 2 for ±1 labels, C for class numbers), so each partition also gets the exact class
    proportions of every stratum.
    """
    block, index = item
    X, y = block[0], block[1]
    if how.startswith("landmarks"):
        strata = nearest_landmark(X, centers, kernel)
        if how == "landmarks+labels":
            strata = label_groups * strata + (y > 0 if label_groups == 2
                                               else y.astype(np.int64))
    elif how == "centers":
        strata = nearest_center(X, centers)
    else:
        strata = np.zeros(X.shape[0], dtype=np.int64)
    return index, strata


def _deal(item, strata, offsets, n_partitions, direct, seed):
    """Split one input block into (target partition, chunk) pairs, γ = 0; ``strata`` and
    ``offsets`` are this block's (stratum per row, first dealing position per stratum)."""
    block, index = item
    X, y, ids = block[:3]
    weights = block[3] if len(block) > 3 else None  # a weight column's
    if direct:  # DC-ODM: the cluster is the partition
        targets = strata
    else:
        targets = deal_positions(strata, offsets, [seed, 11, index]) % n_partitions
    for target in np.unique(targets):
        rows = targets == target
        yield int(target), Chunk((index,), X[rows], y[rows], ids[rows],
                                 np.zeros(int(rows.sum())), None,
                                 None if weights is None else weights[rows])


# --- driver -----------------------------------------------------------------------------------

def landmark_candidates_wanted(partitioner: str, strata: int, n_rows: int, n_partitions: int,
                               landmark_candidates: int = LANDMARK_CANDIDATES) -> int:
    """How many sampled rows the landmarks (stratified) or k-means centers are chosen from;
    0 for the partitioners that need none."""
    if partitioner not in ("stratified", "dip", "kmeans"):
        return 0
    n_groups = n_partitions if partitioner == "kmeans" else strata
    return min(n_rows, landmark_candidates * n_groups)


def partition_blocks(sc, labelled, kernel: Kernel, n_rows: int, n_partitions: int,
                     dealing: Partitioning, *, candidates=None, n_classes: int = 2):
    """Deal the rows of ``labelled`` (RDD of (X, y, ids): ±1 y, or class numbers when
    ``n_classes`` > 2) into ``n_partitions`` blocks as ``dealing`` says (:class:`Partitioning`);
    ``candidates``: the sampled rows the landmarks or centers are chosen from (default: sampled
    here, ``dealing.landmark_candidates`` per stratum).

    Returns the persisted, computed RDD of (key, :class:`Chunk`) with γ = 0 — the
    chunks of key k in Spark partition k —
    the landmarks (stratified), k-means centers (dip, kmeans) or None (random, cascade), and
    the most rows each partition holds (exact for kmeans, ⌈n/K⌉ for the even dealings).
    stratified: S landmarks by Eqn 8 on a seeded sample of ``landmark_candidates·S`` rows,
    strata by Eqn 7, every stratum shuffled and dealt evenly; dip: the same dealing over
    k-means clusters; kmeans: each of K k-means clusters is one partition; random and cascade:
    one stratum dealt evenly.
    """
    # plain values: the closures below ship them to the tasks
    partitioner, strata, seed = dealing.partitioner, dealing.strata, dealing.seed
    landmark_candidates, label_strata = dealing.landmark_candidates, dealing.label_strata
    n_input = labelled.getNumPartitions()
    # a unique, stable number per input block without zipWithIndex's counting job: the Spark
    # partition index for the first block of a partition (there is one block per partition)
    indexed = labelled.mapPartitionsWithIndex(
        lambda part, blocks: ((block, part + position * n_input)
                              for position, block in enumerate(blocks)))
    how, centers, direct = "none", None, False
    wanted = landmark_candidates_wanted(partitioner, strata, n_rows, n_partitions,
                                        landmark_candidates)
    if wanted:
        n_groups = n_partitions if partitioner == "kmeans" else strata
        if candidates is None:
            fraction = min(1.0, 1.2 * wanted / n_rows)
            candidates = stack_rows(
                indexed.map(lambda item: _sample_rows(item, fraction, seed)).collect())
        sample = candidates[np.random.default_rng([seed, 3]).permutation(
            candidates.shape[0])[:wanted]]
        if partitioner == "stratified":
            how = "landmarks+labels" if label_strata else "landmarks"
            centers = sample[select_landmarks(sample, kernel, strata)]
        else:
            how = "centers"
            centers = kmeans(sample, min(n_groups, sample.shape[0]), seed=seed)
            direct = partitioner == "kmeans"
    label_groups = max(2, n_classes)
    n_strata = 1 if centers is None else \
        centers.shape[0] * (label_groups if how.endswith("labels") else 1)
    # only the stratum numbers come to the driver (the rows stay where they are cached)
    row_strata = dict(indexed.map(lambda item: _assign_strata(item, how, centers, kernel,
                                                              label_groups)).collect())
    order = sorted(row_strata)
    counts = np.stack([np.bincount(row_strata[index], minlength=n_strata)
                       for index in order])
    offsets = dict(zip(order, stratum_offsets(counts)))
    strata_b = sc.broadcast(row_strata)
    records = indexed.flatMap(lambda item: _deal(item, strata_b.value[item[1]], offsets[item[1]],
                                                 n_partitions, direct, seed))
    parts = records.partitionBy(n_partitions, lambda key: key).persist(PERSIST)
    store(parts)
    strata_b.unpersist(blocking=False)
    totals = counts.sum(axis=0)
    sizes = (np.bincount(np.arange(totals.size), weights=totals, minlength=n_partitions)
             if direct else np.full(n_partitions, -(-n_rows // n_partitions)))  # ⌈n/K⌉ dealt
    return parts, centers, sizes.astype(np.int64)
