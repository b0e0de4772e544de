"""SODM (SODM paper, Algorithm 1) on Spark: partition, solve locally, merge level by level.

The data live in an RDD of numpy blocks. Partitioning (landmark strata of Eqns 7-8 dealt
evenly, or a comparator's partitions) shuffles sub-blocks to K = p^L partitions; every level
solves each partition's local ODM (Eqn 1 with the partition's own m·c, i.e. the block-diagonal
problem of Eqn 4) in one task, warm-started from its current γ, then merges every p
consecutive partitions with one shuffle of blocks. All numerics are in ``sodm_spark.solvers``
and ``sodm_spark.partition``; the functions shipped to tasks are module-level and take plain
values, so closures never capture a driver object.
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import scipy.sparse
from pyspark import StorageLevel
from threadpoolctl import threadpool_limits

from ..kernels import Kernel, decision_values, gamma_value
from ..model import KernelExpansion
from ..partition import (deal_positions, kmeans, nearest_center, nearest_landmark,
                         select_landmarks, stratum_offsets)
from ..solvers import solve_odm_dual
from ..solvers.odm_dcd import solver_memory_mb
from ..validation import check_odm_params
from .checkpoint import LevelCheckpoint, assemble_partition, deal_by_layout
from .io import check_blocks

logger = logging.getLogger(__name__)

PARTITIONERS = ("stratified", "random", "kmeans", "dip", "cascade")
# Solved levels are expensive to recompute: spill to disk rather than drop when memory is short.
SPILL = StorageLevel.MEMORY_AND_DISK
WARM_STARTS = ("scaled", "concat")


@dataclass(frozen=True)
class SODMParams:
    """Every knob of one SODM fit; defaults are what ``jobs/train_sodm.py`` uses."""

    kernel: str = "rbf"
    gamma: object = "scale"
    degree: int = 3
    coef0: float = 0.0
    lam: float = 1000.0
    theta: float = 0.1
    v: float = 0.5
    tol: float = 1e-3
    max_iter: int = 1000
    p: int = 3
    levels: int = 3
    # S = 20: 200 strata gave the same accuracy per level on Fashion-MNIST (8 seeds, within
    # one standard error of random partitions; even an oracle stratification ties) and cost
    # 5-8 s more partitioning at 20k-60k rows
    strata: int = 20
    stop_level: int = 0
    partitioner: str = "stratified"
    warm_start: str = "scaled"
    seed: int = 0
    cache_mb: float = 4096.0
    landmark_candidates: int = 50  # candidates per stratum for Eqn 8 (design.md §2.1)
    label_strata: bool = False  # stratified: split each landmark stratum by class too
    memory_mb: float | None = None  # per task; None: spark.executor.pyspark.memory or RAM/cores

    def validate(self) -> None:
        check_odm_params(self.lam, self.theta, self.v)
        if int(self.p) != self.p or self.p < 2:
            raise ValueError(f"p (partitions merged per level) must be an integer >= 2, got {self.p!r}.")
        if int(self.levels) != self.levels or self.levels < 0:
            raise ValueError(f"levels must be an integer >= 0, got {self.levels!r}.")
        if not 0 <= self.stop_level <= self.levels:
            raise ValueError(f"stop_level must lie in [0, levels={self.levels}], got {self.stop_level!r}.")
        if int(self.strata) != self.strata or self.strata < 1:
            raise ValueError(f"strata must be a positive integer, got {self.strata!r}.")
        if int(self.landmark_candidates) != self.landmark_candidates or self.landmark_candidates < 1:
            raise ValueError(f"landmark_candidates must be a positive integer, got "
                             f"{self.landmark_candidates!r}.")
        if self.partitioner not in PARTITIONERS:
            raise ValueError(f"Unknown partitioner {self.partitioner!r}; known: {', '.join(PARTITIONERS)}.")
        if self.warm_start not in WARM_STARTS:
            raise ValueError(f"warm_start must be one of {', '.join(WARM_STARTS)}, got {self.warm_start!r}.")
        Kernel.create(self.kernel, 1.0, self.degree, self.coef0)  # names the known kernels


class StatsRecord:
    """A dataclass row of the metrics JSON (fields left at None are omitted)."""

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass
class LevelStats(StatsRecord):
    """One solved level: what the job prints and writes to the metrics JSON."""

    level: int
    partitions: int
    seconds: float
    objective: float
    n_sv: int
    sweeps_max: int
    sweeps_total: int
    rows: int
    warm_start_violation: float
    kernel: str = ""  # 'cached', 'blocked' (on-demand kernel blocks) or both
    elapsed: float = 0.0  # since the fit started, partitioning included, test scoring excluded
    test_accuracy: float | None = None


@dataclass
class SODMFit:
    model: KernelExpansion
    levels: list = field(default_factory=list)
    train_seconds: float = 0.0
    partition_seconds: float = 0.0
    n_rows: int = 0


# --- task functions (module level: shipped to executors without driver state) ----------------

def _map_labels(block, positive):
    """Raw labels → ±1 with ``positive`` as +1."""
    return block.X, np.where(block.y == positive, 1.0, -1.0), block.row_ids


def _moments(block):
    X = block[0]
    if scipy.sparse.issparse(X):
        return np.array([X.shape[0], X.shape[0] * X.shape[1], X.sum(), X.multiply(X).sum()])
    return np.array([X.shape[0], X.size, X.sum(), np.einsum("ij,ij->", X, X)])


def _sample_rows(item, fraction, seed):
    (X, _, _), index = item
    return X[np.random.default_rng([seed, 7, index]).random(X.shape[0]) < fraction]


def _assign_strata(item, how, centers, kernel_dict):
    """Stratum of every row: nearest landmark in the RKHS (Eqn 7), nearest k-means center, or 0.

    "landmarks+labels" splits every landmark stratum by class as well (2·S strata), so each
    partition also gets the exact class proportions of every stratum.
    """
    (X, y, ids), index = item
    if how.startswith("landmarks"):
        strata = nearest_landmark(X, centers, Kernel.from_dict(kernel_dict))
        if how == "landmarks+labels":
            strata = 2 * strata + (y > 0)
    elif how == "centers":
        strata = nearest_center(X, centers)
    else:
        strata = np.zeros(X.shape[0], dtype=np.int64)
    return index, (X, y, ids, strata)


def _deal(item, offsets, n_partitions, direct, seed):
    """Split one input block into (target partition, sub-block) pairs."""
    index, (X, y, ids, strata) = item
    if direct:  # DC-ODM: the cluster is the partition
        targets = strata
    else:
        targets = deal_positions(strata, offsets[index], [seed, 11, index]) % n_partitions
    for target in np.unique(targets):
        rows = targets == target
        yield int(target), (index, X[rows], y[rows], ids[rows])


def _concat_pieces(pieces):
    """Concatenate sub-blocks in a fixed order (shuffle output order is not deterministic)."""
    pieces = sorted(pieces, key=lambda piece: piece[0])
    rows = [p[1] for p in pieces]
    X = scipy.sparse.vstack(rows, format="csr") if scipy.sparse.issparse(rows[0]) \
        else np.concatenate(rows)
    return (X, np.concatenate([p[2] for p in pieces]),
            np.concatenate([p[3] for p in pieces]),
            np.concatenate([p[4] for p in pieces]) if len(pieces[0]) > 4 else None)


def _grouped(records):
    """(key, concatenated block) for each key of a shuffled partition, keys in order."""
    groups = {}
    for key, piece in records:
        groups.setdefault(key, []).append(piece)
    for key in sorted(groups):
        yield key, _concat_pieces(groups[key])


def _build_partitions(records):
    for key, (X, y, ids, _) in _grouped(records):
        yield key, (X, y, ids, np.zeros(X.shape[0]))


def _solve_partition(item, kernel_dict, config, level, threads):
    """One local ODM (Eqn 1 on the partition's m rows), warm-started from its γ.

    ``threads`` BLAS threads: PySpark pins Python workers to spark.task.cpus (1) threads, which
    leaves cores idle at the top levels, where fewer partitions than cores remain.
    """
    key, (X, y, ids, gamma) = item
    start = time.perf_counter()
    with threadpool_limits(max(1, min(threads, os.cpu_count() or 1))):
        result = solve_odm_dual(X, y, Kernel.from_dict(kernel_dict), config["lam"],
                                config["theta"], config["v"], tol=config["tol"],
                                max_iter=config["max_iter"], gamma0=gamma,
                                seed=[config["seed"], level, key], cache_mb=config["cache_mb"])
    stats = {"key": key, "rows": X.shape[0], "objective": result.objective,
             "kernel_mode": result.kernel_mode,
             "sweeps": result.n_sweeps, "n_sv": result.n_sv, "converged": result.converged,
             "warm_start_violation": result.history[0] if result.history else 0.0,
             "seconds": time.perf_counter() - start}
    return key, (X, y, ids, result.gamma, stats)


def _merge_key(item, p):
    key, (X, y, ids, gamma, _) = item
    return key // p, (key % p, X, y, ids, gamma)


def _merge_children(records, scale, support_only):
    for key, (X, y, ids, gamma) in _grouped(records):
        if support_only:  # Ca-ODM: only support vectors move up a level
            keep = gamma != 0.0
            X, y, ids, gamma = X[keep], y[keep], ids[keep], gamma[keep]
        yield key, (X, y, ids, gamma * scale)


def _partial_scores(item, X_test, kernel_dict):
    _, (X, y, _, gamma, _) = item
    support = gamma != 0.0
    return decision_values(Kernel.from_dict(kernel_dict), X_test, X[support],
                           (gamma * y)[support])


def _support_vectors(item):
    _, (X, y, ids, gamma, _) = item
    support = gamma != 0.0
    return ids[support], X[support], (gamma * y)[support]


# --- driver -----------------------------------------------------------------------------------

class MemoryBudgetError(ValueError):
    """A level whose largest partition cannot be solved within the per-task memory budget."""


def _size_mb(text: str) -> float:
    """Spark's size strings ('512m', '2g', '1024k', plain MiB) in MB."""
    text = str(text).strip().lower().rstrip("b")
    units = {"k": 1 / 1024, "m": 1.0, "g": 1024.0, "t": 1024.0 ** 2}
    return float(text[:-1]) * units[text[-1]] if text and text[-1] in units else float(text)


def task_memory_mb(sc, configured: float | None = None) -> float:
    """Memory one solve may use: ``configured``, else ``spark.executor.pyspark.memory``, else
    this machine's RAM divided by its cores (every core may run a solve at once)."""
    if configured:
        return float(configured)
    pyspark_memory = sc.getConf().get("spark.executor.pyspark.memory", None)
    if pyspark_memory:
        return _size_mb(pyspark_memory)
    ram_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20
    return ram_mb / max(1, os.cpu_count() or 1)


def level_cache_mb(level: int, rows: int, n_features: int, params: "SODMParams",
                   budget_mb: float) -> float:
    """The kernel cache a level's solves may use within ``budget_mb``, or MemoryBudgetError.

    A partition whose whole kernel matrix does not fit the cache is solved with on-demand kernel
    blocks (the solver's blocked mode); one that cannot be solved even so stops the fit here,
    before any task runs out of memory.
    """
    need = solver_memory_mb(rows, n_features)
    if need > budget_mb:
        hint = (f"stop one level earlier with --stop-level {level + 1}"
                if level < params.levels else "start from more partitions (--levels)")
        raise MemoryBudgetError(
            f"level {level}: its largest partition holds {rows} rows x {n_features} features and "
            f"needs about {need:,.0f} MB to solve even with on-demand kernel blocks, over the "
            f"{budget_mb:,.0f} MB a task may use (memory_mb / spark.executor.pyspark.memory); "
            f"{hint}, or give tasks more memory.")
    return max(0.0, min(params.cache_mb, budget_mb - need))


def checked_classes(blocks, n_features: int) -> np.ndarray:
    """The sorted label values of ``blocks`` after one checking job (NaN/inf rows are named)."""
    stats = check_blocks(blocks, n_features, max_labels=100)
    if stats.label_counts is None:
        raise ValueError("the label column holds more than 100 distinct values; SODM needs "
                         "two classes (is the label column the right one?).")
    return np.array(list(stats.label_counts), dtype=np.float64)


def row_count_and_variance(blocks) -> tuple[int, int, float]:
    """(rows, features, variance over all entries) of a Block RDD in one pass — what
    ``gamma="scale"`` needs, without collecting the data."""
    n_rows, count, total, squares = blocks.map(_moments).treeReduce(np.add)
    n_rows = int(n_rows)
    return n_rows, int(round(count / n_rows)), float(squares / count - (total / count) ** 2)


def largest_levels(n_rows: int, p: int) -> int:
    """Largest L with p^L <= n_rows (every partition gets at least one row)."""
    levels = 0
    while p ** (levels + 1) <= n_rows:
        levels += 1
    return levels


def fit_sodm(sc, blocks, params: SODMParams, classes, test=None, on_level=None,
             checkpoint_dir=None, resume: bool = False) -> SODMFit:
    """Fit SODM on ``blocks`` (RDD of (X, y, row_ids) with raw labels from ``classes``, 2 values).

    ``test`` is an optional (X_test, y_test) pair on the driver, scored after every level;
    ``on_level(LevelStats)`` is called as each level finishes (the job prints it).
    With ``checkpoint_dir`` every finished level is recorded there (:mod:`.checkpoint`);
    ``resume=True`` continues from the last recorded level instead of starting over, and
    gives the model an uninterrupted run would have given.
    """
    params.validate()
    classes = np.asarray(classes)
    if classes.size != 2:
        raise ValueError(f"SODM is a binary classifier; the labels hold {classes.size} classes "
                         f"({', '.join(map(str, classes[:10]))}).")
    started = time.perf_counter()
    config = {"lam": params.lam, "theta": params.theta, "v": params.v, "tol": params.tol,
              "max_iter": params.max_iter, "seed": params.seed, "cache_mb": params.cache_mb}
    positive = classes[1]
    labelled = blocks.map(lambda b: _map_labels(b, positive)).persist(SPILL)
    n_rows, count, total, squares = labelled.map(_moments).treeReduce(np.add)
    n_rows = int(n_rows)
    n_partitions = params.p ** params.levels
    if n_partitions > n_rows:
        raise ValueError(
            f"levels={params.levels} with p={params.p} asks for {n_partitions} partitions but the "
            f"data have only {n_rows} rows; use --levels {largest_levels(n_rows, params.p)} or less.")
    n_features = int(round(count / n_rows))
    gamma = 1.0 if params.kernel == "linear" else gamma_value(
        params.gamma, n_features, squares / count - (total / count) ** 2)
    kernel = Kernel.create(params.kernel, gamma, params.degree, params.coef0)
    kernel_dict = kernel.to_dict()

    checkpoint = None
    if checkpoint_dir is not None:
        checkpoint = LevelCheckpoint(checkpoint_dir, asdict(params), n_rows, n_features, classes)
        if checkpoint.exists() and not resume:
            raise ValueError(f"{checkpoint_dir} already holds a checkpoint; pass --resume to "
                             "continue it, or choose an empty --checkpoint-dir.")
    restored = None
    if resume and checkpoint is not None and checkpoint.exists():
        sc.setJobDescription("SODM resume: deal rows to their checkpointed partitions")
        restored = _restore(sc, labelled, checkpoint)
        parts = None
    else:
        sc.setJobDescription(f"SODM partition: {params.partitioner} into {n_partitions}")
        parts, _, sizes = partition_blocks(sc, labelled, params, kernel, n_rows, n_partitions)
    partition_seconds = time.perf_counter() - started
    labelled.unpersist()

    test_X = test_y = None
    if test is not None:
        unknown = np.setdiff1d(np.asarray(test[1]), classes)
        if unknown.size:
            raise ValueError(f"the test labels hold {unknown[:5].tolist()}, which the training "
                             f"labels {classes.tolist()} do not; use the same label coding.")
        if np.shape(test[0])[1] != n_features:
            raise ValueError(f"the test data have {np.shape(test[0])[1]} features, the training "
                             f"data {n_features}.")
        test_X = sc.broadcast(np.asarray(test[0], dtype=np.float64))
        test_y = np.where(np.asarray(test[1]) == positive, 1.0, -1.0)
    levels, solved, previous = [], None, parts
    cores = max(1, sc.defaultParallelism)
    scoring_seconds = 0.0
    level = params.levels
    budget_mb = task_memory_mb(sc, params.memory_mb)
    if restored is not None:
        level, levels, solved, sizes = restored
        entry = levels[-1]
    while True:
        if restored is None:
            level_config = dict(config, cache_mb=level_cache_mb(
                level, int(np.max(sizes)), n_features, params, budget_mb))
            solved, entry, sizes = _solve_level(sc, previous, solved, level, params, kernel_dict,
                                                level_config, cores)
            entry.elapsed = time.perf_counter() - started - scoring_seconds
            if test is not None:
                scoring_start = time.perf_counter()
                sc.setJobDescription(f"SODM level {level}: score the test set")
                scores = solved.map(lambda item: _partial_scores(item, test_X.value, kernel_dict)) \
                    .treeReduce(np.add)
                entry.test_accuracy = float(np.mean(np.where(scores > 0, 1.0, -1.0) == test_y))
                scoring_seconds += time.perf_counter() - scoring_start
            levels.append(entry)
            if checkpoint is not None:
                sc.setJobDescription(f"SODM level {level}: checkpoint")
                checkpoint.save_level(level, solved.map(_layout).collect(), entry.to_dict())
            if on_level is not None:
                on_level(entry)
        restored = None
        warm_started = level < params.levels
        if warm_started and entry.warm_start_violation <= params.tol:
            break  # Algorithm 1, line 5: every partition already optimal at its warm start
        if level <= params.stop_level:
            break
        n_level_partitions = params.p ** level
        sizes = np.bincount(np.arange(sizes.size) // params.p, weights=sizes).astype(np.int64)
        sc.setJobDescription(f"SODM level {level}: merge into {n_level_partitions // params.p}")
        scale = 1.0 / params.p if params.warm_start == "scaled" else 1.0
        support_only = params.partitioner == "cascade"
        previous = (solved.map(lambda item: _merge_key(item, params.p))
                    .partitionBy(n_level_partitions // params.p, lambda key: key)
                    .mapPartitions(lambda records: _merge_children(records, scale, support_only),
                                   preservesPartitioning=True))
        level -= 1
    sc.setJobDescription("SODM: collect the model")
    pieces = solved.map(_support_vectors).collect()
    solved.unpersist()
    if test_X is not None:
        test_X.unpersist()
    ids = np.concatenate([piece[0] for piece in pieces])
    order = np.argsort(ids, kind="stable")
    support_vectors = np.concatenate([piece[1] for piece in pieces])[order]
    coef = np.concatenate([piece[2] for piece in pieces])[order]
    sc.setJobDescription(None)
    model = KernelExpansion(support_vectors, coef[:, None], kernel, classes)
    return SODMFit(model=model, levels=levels,
                   train_seconds=time.perf_counter() - started - scoring_seconds,
                   partition_seconds=partition_seconds, n_rows=n_rows)


def _solve_level(sc, previous, prior_solved, level, params, kernel_dict, config, cores):
    """Solve every partition of one level (one task each); returns (solved RDD, LevelStats)."""
    level_start = time.perf_counter()
    n_level_partitions = params.p ** level
    sc.setJobDescription(f"SODM level {level}: solve {n_level_partitions} partitions")
    threads = max(1, cores // min(n_level_partitions, cores))
    solved = previous.map(lambda item: _solve_partition(
        item, kernel_dict, config, level, threads)).persist(SPILL)
    stats = solved.map(lambda item: item[1][4]).collect()
    previous.unpersist()
    if prior_solved is not None:
        prior_solved.unpersist()
    entry = LevelStats(level=level, partitions=len(stats), seconds=0.0,
                       objective=float(sum(s["objective"] for s in stats)),
                       n_sv=int(sum(s["n_sv"] for s in stats)),
                       sweeps_max=int(max(s["sweeps"] for s in stats)),
                       sweeps_total=int(sum(s["sweeps"] for s in stats)),
                       rows=int(sum(s["rows"] for s in stats)),
                       warm_start_violation=float(max(s["warm_start_violation"] for s in stats)),
                       kernel="+".join(sorted({s["kernel_mode"] for s in stats})))
    entry.seconds = time.perf_counter() - level_start
    sizes = np.zeros(n_level_partitions, dtype=np.int64)
    sizes[[st["key"] for st in stats]] = [st["rows"] for st in stats]
    return solved, entry, sizes


def _layout(item):
    key, (_, _, ids, gamma, _) = item
    return key, ids, gamma


def _restore(sc, labelled, checkpoint: LevelCheckpoint):
    """(level, its LevelStats list, solved RDD) rebuilt from the last checkpointed level."""
    level, finished, pieces = checkpoint.load_last()
    keys = np.concatenate([np.full(ids.size, key, dtype=np.int64) for key, ids, _ in pieces])
    positions = np.concatenate([np.arange(ids.size) for _, ids, _ in pieces])
    ids = np.concatenate([ids for _, ids, _ in pieces])
    order = np.argsort(ids)
    lookup = sc.broadcast((ids[order], keys[order], positions[order]))
    gammas = sc.broadcast({key: gamma for key, _, gamma in pieces})
    n_partitions = max(key for key, _, _ in pieces) + 1
    solved = (labelled.flatMap(lambda item: deal_by_layout(item, *lookup.value))
              .partitionBy(n_partitions, lambda key: key)
              .mapPartitions(lambda records: assemble_partition(records, gammas.value),
                             preservesPartitioning=True)
              .persist(SPILL))
    restored_rows = solved.map(lambda item: item[1][2].size).sum()
    if restored_rows != ids.size:
        raise ValueError(f"checkpoint {checkpoint.directory}: {ids.size - restored_rows} of its "
                         "rows are missing from the data; resume with the same data.")
    stats = [LevelStats(**{k: v for k, v in entry.items() if k in LevelStats.__dataclass_fields__})
             for entry in finished]
    sizes = np.zeros(n_partitions, dtype=np.int64)
    for key, ids_of_key, _ in pieces:
        sizes[key] = ids_of_key.size
    return level, stats, solved, sizes


def partition_blocks(sc, labelled, params: SODMParams, kernel: Kernel, n_rows: int,
                     n_partitions: int):
    """Deal the rows of ``labelled`` (RDD of (X, ±1 y, ids)) into ``n_partitions`` blocks.

    Returns the persisted, computed RDD of (key, (X, y, ids, γ=0)) — key k in Spark partition k, one block each —
    the landmarks (stratified), k-means centers (dip, kmeans) or None (random, cascade), and
    the most rows each partition holds (exact for kmeans, ⌈n/K⌉ for the even dealings).
    stratified: S landmarks by Eqn 8 on a seeded sample of ``landmark_candidates·S`` rows,
    strata by Eqn 7, every stratum shuffled and dealt evenly; dip: the same dealing over
    k-means clusters; kmeans: each of K k-means clusters is one partition; random and cascade:
    one stratum dealt evenly.
    """
    seed = params.seed
    indexed = labelled.zipWithIndex()  # a unique, stable number per input block
    how, centers, direct = "none", None, False
    if params.partitioner in ("stratified", "dip", "kmeans"):
        n_groups = n_partitions if params.partitioner == "kmeans" else params.strata
        wanted = min(n_rows, params.landmark_candidates * n_groups)
        fraction = min(1.0, 1.2 * wanted / n_rows)
        sample = np.concatenate(indexed.map(lambda item: _sample_rows(item, fraction, seed)).collect())
        sample = sample[np.random.default_rng([seed, 3]).permutation(sample.shape[0])[:wanted]]
        if params.partitioner == "stratified":
            how = "landmarks+labels" if params.label_strata else "landmarks"
            centers = sample[select_landmarks(sample, kernel, params.strata)]
        else:
            how = "centers"
            centers = kmeans(sample, min(n_groups, sample.shape[0]), seed=seed)
            direct = params.partitioner == "kmeans"
    kernel_dict = kernel.to_dict()
    centers_b = sc.broadcast(centers)
    with_strata = indexed.map(
        lambda item: _assign_strata(item, how, centers_b.value, kernel_dict)).persist(SPILL)
    n_strata = 1 if centers is None else centers.shape[0] * (2 if how.endswith("labels") else 1)
    block_counts = dict(with_strata.map(
        lambda item: (item[0], np.bincount(item[1][3], minlength=n_strata))).collect())
    counts = np.stack([block_counts[index] for index in range(len(block_counts))])
    offsets = stratum_offsets(counts)
    records = with_strata.flatMap(lambda item: _deal(item, offsets, n_partitions, direct, seed))
    parts = records.partitionBy(n_partitions, lambda key: key).mapPartitions(
        _build_partitions, preservesPartitioning=True).persist(SPILL)
    parts.count()
    with_strata.unpersist(blocking=False)
    centers_b.unpersist(blocking=False)
    totals = counts.sum(axis=0)
    sizes = (np.bincount(np.arange(totals.size), weights=totals, minlength=n_partitions)
             if direct else np.full(n_partitions, -(-n_rows // n_partitions)))  # ⌈n/K⌉ dealt
    return parts, centers, sizes.astype(np.int64)
