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
from ..stopping import (REACHED_STOP_LEVEL, WARM_START_OPTIMAL, LevelCost,
                        StopRule, best_level, holdout_mask, predict_seconds)
from ..model import KernelExpansion
from ..partition import (deal_positions, kmeans, nearest_center, nearest_landmark,
                         select_landmarks, stratum_offsets)
from ..solvers import solve_odm_dual
from ..solvers.odm_dcd import DCDResult, kernel_fits_cache, kernel_mode_for
from ..solvers.odm_multiclass import one_vs_rest_signs, solve_odm_multiclass
from ..validation import check_odm_params
from .checkpoint import (LevelCheckpoint, assemble_partition, block_fingerprint, deal_by_layout,
                         merge_fingerprints)
from .io import check_blocks
from .memory import MemoryBudgetError, executor_memory, level_cache_mb

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
    kernel_offset: float = 0.0  # c in the kernel k + c: a penalized bias (kernels.py)
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
    cache_mb: float | None = None  # kernel cache per task; None: what the memory budget allows
    landmark_candidates: int = 50  # candidates per stratum for Eqn 8 (design.md §2.1)
    label_strata: bool = False  # stratified: split each landmark stratum by class too
    memory_mb: float | None = None  # per task; None: the executor's memory / running tasks
    # automatic stopping (sodm_spark.stopping): a validation slice scored after every level
    auto_stop: bool = True
    # 10% of the rows, at most 1,000: one row is 0.1 points, and scoring costs a prediction
    # of every validation row per level (n_val x M kernel entries), so more rows cost seconds
    validation_fraction: float = 0.1
    validation_max_rows: int = 1000
    min_improvement: float = 0.002
    time_budget: float | None = None

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
        # names the known kernels, checks the offset
        Kernel.create(self.kernel, 1.0, self.degree, self.coef0, offset=self.kernel_offset)
        if not 0.0 < self.validation_fraction < 1.0:
            raise ValueError(f"validation_fraction must lie in (0, 1), got "
                             f"{self.validation_fraction!r}.")
        if int(self.validation_max_rows) != self.validation_max_rows or self.validation_max_rows < 1:
            raise ValueError(f"validation_max_rows must be a positive integer, got "
                             f"{self.validation_max_rows!r}.")
        self.stop_rule().validate()

    def stop_rule(self) -> StopRule:
        return StopRule(self.min_improvement, self.time_budget)


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
    max_rows: int = 0  # rows of the largest partition
    memory_mb: float | None = None  # budget of one task at this level
    predicted_seconds: float | None = None  # announced before the level ran
    validation_accuracy: float | None = None
    test_accuracy: float | None = None


@dataclass
class LevelPlan:
    """The next level, announced before it runs: its shape, kernel mode and predicted cost."""

    level: int
    partitions: int
    rows: int  # rows of its largest partition
    kernel: str  # 'cached' or 'blocked'
    memory_mb: float  # budget of one task
    cache_mb: float  # kernel cache of one task
    predicted_seconds: float | None


@dataclass
class SODMFit:
    model: KernelExpansion
    levels: list = field(default_factory=list)
    train_seconds: float = 0.0
    partition_seconds: float = 0.0
    n_rows: int = 0
    stopped_at: int | None = None  # the last level solved
    stop_reason: str = ""
    best_level: int | None = None  # the level whose model was returned
    validation_rows: int = 0
    validation: tuple | None = None  # the validation (X, raw labels) the levels were scored on


# --- task functions (module level: shipped to executors without driver state) ----------------

def _map_labels(block, positive):
    """Raw labels → ±1 with ``positive`` as +1."""
    return block.X, np.where(block.y == positive, 1.0, -1.0), block.row_ids


def _class_numbers(block, classes):
    """Raw labels → class numbers 0..C-1 (float) in the order of ``classes`` (3+ classes)."""
    return block.X, np.searchsorted(classes, block.y).astype(np.float64), block.row_ids


def _support_rows(gamma):
    """Rows with dual weight: γ_i ≠ 0 (binary) or any class's γ_ic ≠ 0 (multi-class)."""
    return gamma != 0.0 if gamma.ndim == 1 else np.any(gamma != 0.0, axis=1)


def _coefficients(y, gamma):
    """The expansion's coefficients: γ_i y_i (binary, ±1 y) or γ_ic y_ic with y_ic = ±1 one
    class against the rest (multi-class, y the class numbers): (m,) or (m, C)."""
    if gamma.ndim == 1:
        return gamma * y
    return gamma * one_vs_rest_signs(y.astype(np.int64), gamma.shape[1])


def _held_out_rows(block, seed, fraction, candidate_fraction):
    """(X, ±1 y) of the rows of a (X, ±1 y, ids) block held out for validation (dense), and a
    seeded sample of its other rows as landmark candidates (one pass for both)."""
    X, y, ids = block
    rows = holdout_mask(ids, seed, fraction)
    held = X[rows]
    kept = X[~rows]
    key = int(ids[0]) if ids.size else 0  # stable per block, whatever the block layout
    candidates = kept[np.random.default_rng([seed, 7, key]).random(kept.shape[0])
                      < candidate_fraction]
    return (held.toarray() if scipy.sparse.issparse(held) else held), y[rows], candidates


def _kept_rows(block, seed, fraction):
    X, y, ids = block
    rows = ~holdout_mask(ids, seed, fraction)
    return X[rows], y[rows], ids[rows]


def _moments(block):
    X = block[0]
    if scipy.sparse.issparse(X):
        return np.array([X.shape[0], X.shape[0] * X.shape[1], X.sum(), X.multiply(X).sum()])
    return np.array([X.shape[0], X.size, X.sum(), np.einsum("ij,ij->", X, X)])


def _sample_rows(item, fraction, seed):
    (X, _, _), index = item
    return X[np.random.default_rng([seed, 7, index]).random(X.shape[0]) < fraction]


def _assign_strata(item, how, centers, kernel_dict, label_groups=2):
    """(block index, stratum of every row): nearest landmark in the RKHS (Eqn 7), nearest
    k-means center, or 0.

    "landmarks+labels" splits every landmark stratum by class as well (``label_groups``·S
    strata: 2 for ±1 labels, C for class numbers), so each partition also gets the exact class
    proportions of every stratum.
    """
    (X, y, ids), index = item
    if how.startswith("landmarks"):
        strata = nearest_landmark(X, centers, Kernel.from_dict(kernel_dict))
        if how == "landmarks+labels":
            strata = label_groups * strata + (y > 0 if label_groups == 2
                                               else y.astype(np.int64))
    elif how == "centers":
        strata = nearest_center(X, centers)
    else:
        strata = np.zeros(X.shape[0], dtype=np.int64)
    return index, strata


def _deal(item, strata, offsets, n_partitions, direct, seed):
    """Split one input block into (target partition, sub-block) pairs; ``strata`` and
    ``offsets`` are this block's (stratum per row, first dealing position per stratum)."""
    (X, y, ids), index = item
    if direct:  # DC-ODM: the cluster is the partition
        targets = strata
    else:
        targets = deal_positions(strata, offsets, [seed, 11, index]) % n_partitions
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


def _solve_partition(item, kernel_dict, config, level, threads, validation_X=None):
    """One local ODM (Eqn 1 on the partition's m rows), warm-started from its γ.

    ``threads`` BLAS threads: PySpark pins Python workers to spark.task.cpus (1) threads, which
    leaves cores idle at the top levels, where fewer partitions than cores remain. With
    ``validation_X`` the task also returns this partition's share of the validation rows'
    decision values (the level's f is the sum over partitions), saving a job per level.
    """
    key, (X, y, ids, gamma) = item
    start = time.perf_counter()
    kernel = Kernel.from_dict(kernel_dict)
    with threadpool_limits(max(1, min(threads, os.cpu_count() or 1))):
        if config.get("n_classes"):
            result = _solve_classes(X, y, gamma, kernel, config, [config["seed"], level, key])
        else:
            result = solve_odm_dual(X, y, kernel, config["lam"],
                                    config["theta"], config["v"], tol=config["tol"],
                                    max_iter=config["max_iter"], gamma0=gamma,
                                    seed=[config["seed"], level, key],
                                    cache_mb=config["cache_mb"])
        validation_scores = None if validation_X is None else _scores(
            kernel, validation_X, X, y, result.gamma)
    stats = {"key": key, "rows": X.shape[0], "objective": result.objective,
             "validation_scores": validation_scores,
             "kernel_mode": result.kernel_mode,
             "sweeps": result.n_sweeps, "n_sv": int(_support_rows(result.gamma).sum()),
             "converged": result.converged,
             "warm_start_violation": result.history[0] if result.history else 0.0,
             "seconds": time.perf_counter() - start}
    return key, (X, y, ids, result.gamma, stats)


def _solve_classes(X, y, gamma, kernel, config, seed):
    """The C one-vs-rest duals of one partition (y: class numbers), warm-started from γ (m, C):
    together against one kernel matrix when it fits the cache
    (:func:`~sodm_spark.solvers.odm_multiclass.solve_odm_multiclass`), else one on-demand
    binary solve per class. Returns a DCDResult whose objective is the classes' sum."""
    n_classes, m = config["n_classes"], X.shape[0]
    if gamma.ndim == 1:  # a fresh partition: no warm start yet
        gamma = np.zeros((m, n_classes))
    y_index = y.astype(np.int64)
    if kernel_fits_cache(m, X.shape[1], config["cache_mb"]):
        joint = solve_odm_multiclass(X, y_index, n_classes, kernel, config["lam"],
                                     config["theta"], config["v"], tol=config["tol"],
                                     max_iter=config["max_iter"], gamma0=gamma, seed=seed)
        return DCDResult(gamma=joint.gamma, u=joint.u, objective=float(joint.objectives.sum()),
                         n_sweeps=joint.n_sweeps, violation=joint.violation,
                         converged=joint.converged, kernel_mode="cached",
                         history=joint.history, kernel_rows_computed=m)
    results = [solve_odm_dual(X, np.where(y_index == c, 1.0, -1.0), kernel, config["lam"],
                              config["theta"], config["v"], tol=config["tol"],
                              max_iter=config["max_iter"], gamma0=gamma[:, c],
                              seed=[*seed, c], cache_mb=config["cache_mb"], mode="blocked")
               for c in range(n_classes)]
    return DCDResult(gamma=np.stack([r.gamma for r in results], axis=1),
                     u=np.stack([r.u for r in results], axis=1),
                     objective=float(sum(r.objective for r in results)),
                     n_sweeps=max(r.n_sweeps for r in results),
                     violation=max(r.violation for r in results),
                     converged=all(r.converged for r in results), kernel_mode="blocked",
                     history=[max(r.history[0] if r.history else 0.0 for r in results)],
                     kernel_rows_computed=sum(r.kernel_rows_computed for r in results))


def _merge_key(item, p):
    key, (X, y, ids, gamma, _) = item
    return key // p, (key % p, X, y, ids, gamma)


def _merge_children(records, scale, support_only):
    for key, (X, y, ids, gamma) in _grouped(records):
        if support_only:  # Ca-ODM: only support vectors move up a level
            keep = _support_rows(gamma)
            X, y, ids, gamma = X[keep], y[keep], ids[keep], gamma[keep]
        yield key, (X, y, ids, gamma * scale)


def _scores(kernel, X_eval, X, y, gamma):
    """This partition's share of f on ``X_eval``, in float32: a level's accuracy only needs
    the sign of f, and float32 halves the GEMM time (the saved model predicts in float64)."""
    support = _support_rows(gamma)
    return decision_values(kernel, X_eval, X[support], _coefficients(y, gamma)[support],
                           dtype=np.float32)


def _partial_scores(item, X_test, kernel_dict):
    _, (X, y, _, gamma, _) = item
    return _scores(Kernel.from_dict(kernel_dict), X_test, X, y, gamma)


def _support_vectors(item):
    _, (X, y, ids, gamma, _) = item
    support = _support_rows(gamma)
    return ids[support], X[support], _coefficients(y, gamma)[support]


# --- driver -----------------------------------------------------------------------------------

def checked_classes(blocks, n_features: int) -> np.ndarray:
    """The sorted label values of ``blocks`` after one checking job (NaN/inf rows are named)."""
    stats = check_blocks(blocks, n_features, max_labels=100)
    if stats.label_counts is None:
        raise ValueError("the label column holds more than 100 distinct values; SODM is a "
                         "classifier (is the label column the right one, or is it a "
                         "regression target?).")
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


@dataclass
class PreparedData:
    """What every fit of the same rows shares (:func:`prepare_sodm`): the labelled training
    rows, the validation and test pairs, the resolved kernel and, once partitioned, the top
    level's partitions. A hyperparameter search and the fit after it use one of these."""

    labelled: object  # RDD of (X, y, ids): ±1 y, or class numbers for 3+ classes
    training: object  # the same without the held-out validation rows
    classes: np.ndarray
    kernel: Kernel
    n_rows: int  # training rows (validation rows excluded)
    n_features: int
    validation_pair: tuple | None  # (X, ±1 y or class numbers) on the driver
    test_pair: tuple | None
    started: float  # perf_counter when preparation began (the fit's clock)
    candidates: np.ndarray | None = None  # sampled rows for landmarks / k-means centers
    parts: object = None  # RDD of the top level's partitions, once partitioned
    sizes: np.ndarray | None = None
    partition_seconds: float = 0.0
    fingerprint: dict | None = None  # of all rows, for checkpoints (.checkpoint)

    @property
    def multi(self) -> bool:
        return self.classes.size > 2


def prepare_sodm(sc, blocks, params: SODMParams, classes, test=None, validation=None,
                 hold_out: bool | None = None, partition: bool = True,
                 fingerprint: bool = False) -> PreparedData:
    """Label the rows, hold out the validation slice, resolve the kernel and (``partition``)
    deal the rows into the top level's p^L partitions; ``fingerprint``: hash the rows in the
    first pass too (:func:`.checkpoint.block_fingerprint`, for checkpoints).

    Rows are held out (``validation_fraction`` of them, at most ``validation_max_rows``, by a
    seeded hash of the row id) when ``validation`` is not given and ``hold_out`` is true
    (default: automatic stopping has more than one level to choose between).
    """
    started = time.perf_counter()
    params.validate()
    classes = np.asarray(classes)
    if classes.size < 2:
        raise ValueError(f"SODM needs at least two classes; the labels hold {classes.size} "
                         f"class ({', '.join(map(str, classes[:10]))}): check the label "
                         "column.")
    multi = classes.size > 2
    if multi:
        classes = np.unique(classes)  # class numbers follow the sorted labels
    positive = classes[1]
    labelled = blocks.map(lambda b: _class_numbers(b, classes)) if multi else \
        blocks.map(lambda b: _map_labels(b, positive))
    if not blocks.is_cached:  # several passes follow: parse the input once
        labelled.persist(SPILL)
    if fingerprint:  # the same pass hashes the rows for the checkpoint
        moments, data_fingerprint = labelled.map(
            lambda b: (_moments(b), block_fingerprint(b))).treeReduce(
            lambda a, b: (a[0] + b[0], merge_fingerprints(a[1], b[1])))
    else:
        moments, data_fingerprint = labelled.map(_moments).treeReduce(np.add), None
    n_all = int(round(moments[0]))
    n_partitions = params.p ** params.levels
    if n_partitions > n_all:
        raise ValueError(
            f"levels={params.levels} with p={params.p} asks for {n_partitions} partitions but the "
            f"data have only {n_all} rows; use --levels {largest_levels(n_all, params.p)} or less.")
    if hold_out is None:  # one level to solve leaves nothing to choose between
        hold_out = params.auto_stop and params.levels > params.stop_level
    training, validation_pair, candidates = labelled, validation, None
    if validation is None and hold_out:
        fraction = min(params.validation_fraction, params.validation_max_rows / moments[0])
        seed = params.seed
        wanted = landmark_candidates_wanted(params, int(moments[0]), params.p ** params.levels)
        candidate_fraction = min(1.0, 1.2 * wanted / moments[0])
        sc.setJobDescription("SODM: hold out the validation rows, sample landmark candidates")
        pieces = labelled.map(
            lambda b: _held_out_rows(b, seed, fraction, candidate_fraction)).collect()
        X_val = np.concatenate([piece[0] for piece in pieces])
        if 0 < X_val.shape[0] < moments[0]:
            y_val = np.concatenate([piece[1] for piece in pieces])
            validation_pair = (X_val, classes[y_val.astype(np.int64)] if multi
                               else np.where(y_val > 0, positive, classes[0]))
            moments = moments - _moments((X_val,))
            training = labelled.map(lambda b: _kept_rows(b, seed, fraction))
            candidates = np.concatenate([piece[2] for piece in pieces]) if wanted else None
    n_rows, count, total, squares = moments
    n_rows = int(round(n_rows))
    if n_partitions > n_rows:  # enough rows in all, too few once the validation rows are out
        raise ValueError(
            f"levels={params.levels} with p={params.p} asks for {n_partitions} partitions but "
            f"only {n_rows} rows are left after holding out {n_all - n_rows} for validation; "
            f"use --levels {largest_levels(n_rows, params.p)} or less, or --no-auto-stop.")
    n_features = int(round(count / n_rows))
    gamma = 1.0 if params.kernel == "linear" else gamma_value(
        params.gamma, n_features, squares / count - (total / count) ** 2)
    kernel = Kernel.create(params.kernel, gamma, params.degree, params.coef0,
                           offset=params.kernel_offset)
    prepared = PreparedData(
        labelled=labelled, training=training, classes=classes, kernel=kernel, n_rows=n_rows,
        n_features=n_features, started=started, candidates=candidates,
        fingerprint=data_fingerprint,
        test_pair=None if test is None else _plus_minus(test, classes, n_features, "test"),
        validation_pair=None if validation_pair is None else _plus_minus(
            validation_pair, classes, n_features, "validation"))
    if partition:
        partition_prepared(sc, prepared, params)
    return prepared


def partition_prepared(sc, prepared: PreparedData, params: SODMParams) -> None:
    """Deal the prepared training rows into the top level's partitions (in place)."""
    n_partitions = params.p ** params.levels
    sc.setJobDescription(f"SODM partition: {params.partitioner} into {n_partitions}")
    prepared.parts, _, prepared.sizes = partition_blocks(
        sc, prepared.training, params, prepared.kernel, prepared.n_rows, n_partitions,
        prepared.candidates, prepared.classes.size)
    prepared.partition_seconds = time.perf_counter() - prepared.started
    prepared.labelled.unpersist()


def fit_sodm(sc, blocks, params: SODMParams, classes, test=None, on_level=None,
             checkpoint_dir=None, resume: bool = False, validation=None,
             on_plan=None, prepared: PreparedData | None = None) -> SODMFit:
    """Fit SODM on ``blocks`` (RDD of (X, y, row_ids) with raw labels from ``classes``).

    Two classes: one ODM (``classes[1]`` is +1). More: the one-vs-rest ODMs of every class,
    solved together in each partition against one kernel matrix, with the same partitions,
    merges and stopping for all; the model has one coefficient column per class.

    ``test`` is an optional (X_test, y_test) pair on the driver, scored after every level;
    ``on_plan(LevelPlan)`` is called before each level (its predicted seconds) and
    ``on_level(LevelStats)`` as each level finishes (the job prints both).
    With ``params.auto_stop`` a validation slice — ``validation`` = (X, y) if given, else rows
    held out of ``blocks`` (``validation_fraction``, at most ``validation_max_rows``) — is
    scored after every level, the fit stops by :class:`~sodm_spark.stopping.StopRule`, and the
    model is the best level's. With ``checkpoint_dir`` every finished level is recorded there
    (:mod:`.checkpoint`); ``resume=True`` continues from the last recorded level instead of
    starting over, and gives the model (and the stopping decisions) an uninterrupted run
    would have given. ``prepared`` (from :func:`prepare_sodm`, partitioned; its kernel may
    differ from ``params``' after a search) skips the preparation: ``blocks``, ``classes``,
    ``test`` and ``validation`` are then ignored, and the fit's clock started with it.
    """
    params.validate()
    if prepared is None:
        prepared = prepare_sodm(sc, blocks, params, classes, test, validation, partition=False,
                                fingerprint=checkpoint_dir is not None)
    classes, multi, kernel = prepared.classes, prepared.multi, prepared.kernel
    n_rows, n_features = prepared.n_rows, prepared.n_features
    training, started = prepared.training, prepared.started
    test_pair, validation_pair = prepared.test_pair, prepared.validation_pair
    config = {"lam": params.lam, "theta": params.theta, "v": params.v, "tol": params.tol,
              "max_iter": params.max_iter, "seed": params.seed,
              "n_classes": classes.size if multi else 0}
    kernel_dict = kernel.to_dict()

    checkpoint = None
    if checkpoint_dir is not None:
        if prepared.fingerprint is None:  # prepared elsewhere (a search): one more pass
            sc.setJobDescription("SODM checkpoint: fingerprint the data")
            prepared.fingerprint = prepared.labelled.map(block_fingerprint).treeReduce(
                merge_fingerprints)
        checkpoint = LevelCheckpoint(checkpoint_dir, asdict(params), n_rows, n_features,
                                     classes, prepared.fingerprint)
        if checkpoint.exists() and not resume:
            raise ValueError(f"{checkpoint_dir} already holds a checkpoint; pass --resume to "
                             "continue it, or choose an empty --checkpoint-dir.")
    restored = None
    if resume and checkpoint is not None and checkpoint.exists():
        sc.setJobDescription("SODM resume: deal rows to their checkpointed partitions")
        restored = _restore(sc, training, checkpoint)
        parts = None
        prepared.labelled.unpersist()
    else:
        if prepared.parts is None:
            partition_prepared(sc, prepared, params)
        parts, sizes = prepared.parts, prepared.sizes
    partition_seconds = prepared.partition_seconds or time.perf_counter() - started

    test_X = None if test_pair is None else sc.broadcast(test_pair[0])
    validation_X = None if validation_pair is None else sc.broadcast(
        np.asarray(validation_pair[0], dtype=np.float32))
    levels, solved, previous = [], None, parts
    cores = max(1, sc.defaultParallelism)
    scoring_seconds = 0.0
    level = params.levels
    memory = executor_memory(sc, params.memory_mb)
    kept = {}  # level -> its solved RDD: the last two, for the best-level model
    if restored is not None:
        level, levels, solved, sizes = restored
        kept[level] = solved
        entry = levels[-1]
        started -= entry.elapsed  # the time budget counts the interrupted run's levels too
    plan = None if restored is not None else _plan_level(level, sizes, n_features, params,
                                                         memory, levels, cores)
    stop_reason = ""
    while True:
        if restored is None:
            if on_plan is not None:
                on_plan(plan)
            solved, entry, sizes, validation_scores = _solve_level(
                sc, previous, level, params, kernel_dict, dict(config, cache_mb=plan.cache_mb),
                cores, validation_X)
            entry.memory_mb, entry.predicted_seconds = plan.memory_mb, plan.predicted_seconds
            if validation_pair is not None:
                entry.validation_accuracy = _accuracy(validation_scores, validation_pair[1])
            entry.elapsed = time.perf_counter() - started - scoring_seconds
            if test_pair is not None:
                scoring_start = time.perf_counter()
                sc.setJobDescription(f"SODM level {level}: score the test set")
                scores = solved.map(lambda item: _partial_scores(item, test_X.value, kernel_dict)) \
                    .treeReduce(np.add)
                entry.test_accuracy = _accuracy(scores, test_pair[1])
                scoring_seconds += time.perf_counter() - scoring_start
            levels.append(entry)
            kept[level] = solved
            for older in [key for key in kept if key > level + 1]:
                kept.pop(older).unpersist()
            if checkpoint is not None:
                sc.setJobDescription(f"SODM level {level}: checkpoint")
                checkpoint.save_level(level, solved.map(_layout).collect(), entry.to_dict())
            if on_level is not None:
                on_level(entry)
        restored = None
        warm_started = level < params.levels
        plan = None
        if warm_started and entry.warm_start_violation <= params.tol:
            stop_reason = WARM_START_OPTIMAL  # Algorithm 1, line 5
        elif level <= params.stop_level:
            stop_reason = REACHED_STOP_LEVEL
        else:
            merged = np.bincount(np.arange(sizes.size) // params.p, weights=sizes).astype(np.int64)
            try:
                plan = _plan_level(level - 1, merged, n_features, params, memory, levels, cores)
            except MemoryBudgetError as error:
                if not params.auto_stop:
                    raise
                stop_reason = f"next level does not fit the memory budget: {error}"
            if plan is not None and params.auto_stop:
                accuracies = [e.validation_accuracy for e in levels
                              if e.validation_accuracy is not None]
                stop_reason = params.stop_rule().reason_to_stop(
                    accuracies, time.perf_counter() - started - scoring_seconds,
                    plan.predicted_seconds) or ""
        if stop_reason:
            break
        n_level_partitions = params.p ** level
        sizes = merged
        sc.setJobDescription(f"SODM level {level}: merge into {n_level_partitions // params.p}")
        scale = 1.0 / params.p if params.warm_start == "scaled" else 1.0
        support_only = params.partitioner == "cascade"
        previous = (solved.map(lambda item: _merge_key(item, params.p))
                    .partitionBy(n_level_partitions // params.p, lambda key: key)
                    .mapPartitions(lambda records: _merge_children(records, scale, support_only),
                                   preservesPartitioning=True))
        level -= 1
    chosen = level
    validated = [(e.level, e.validation_accuracy) for e in levels
                 if e.validation_accuracy is not None]
    if params.auto_stop and validated:
        chosen = best_level(validated)
    if chosen not in kept:  # resumed right after the best level: read it back
        _, _, kept[chosen], _ = _restore(sc, training, checkpoint, chosen)
    sc.setJobDescription("SODM: collect the model")
    pieces = kept[chosen].map(_support_vectors).collect()
    for rdd in kept.values():
        rdd.unpersist()
    for broadcast in (test_X, validation_X):
        if broadcast is not None:
            broadcast.unpersist()
    ids = np.concatenate([piece[0] for piece in pieces])
    order = np.argsort(ids, kind="stable")
    support_vectors = np.concatenate([piece[1] for piece in pieces])[order]
    coef = np.concatenate([piece[2] for piece in pieces])[order]
    sc.setJobDescription(None)
    model = KernelExpansion(support_vectors, coef if multi else coef[:, None], kernel, classes)
    return SODMFit(model=model, levels=levels,
                   train_seconds=time.perf_counter() - started - scoring_seconds,
                   partition_seconds=partition_seconds, n_rows=n_rows, stopped_at=level,
                   stop_reason=stop_reason, best_level=chosen,
                   validation_rows=0 if validation_pair is None else len(validation_pair[1]),
                   validation=None if validation_pair is None else (
                       validation_pair[0], _raw_labels(validation_pair[1], classes)))


def _raw_labels(y, classes):
    """±1 (binary) or class numbers (3+ classes) back to the label values."""
    return classes[(y > 0).astype(np.int64)] if classes.size == 2 else classes[y.astype(np.int64)]


def _plus_minus(pair, classes, n_features, what):
    """(float64 X, ±1 y) of a driver-side (X, raw y) pair checked against the training data
    (class numbers instead of ±1 for 3+ classes)."""
    X, y = np.asarray(pair[0], dtype=np.float64), np.asarray(pair[1])
    unknown = np.setdiff1d(y, classes)
    if unknown.size:
        raise ValueError(f"the {what} labels hold {unknown[:5].tolist()}, which the training "
                         f"labels {classes.tolist()} do not; use the same label coding.")
    if X.shape[1] != n_features:
        raise ValueError(f"the {what} data have {X.shape[1]} features, the training "
                         f"data {n_features}.")
    if classes.size > 2:
        return X, np.searchsorted(classes, y).astype(np.float64)
    return X, np.where(y == classes[1], 1.0, -1.0)


def _accuracy(scores, y) -> float:
    """Share of rows right: sign of f against ±1 y, or the largest score against the class
    numbers y (multi-class)."""
    if scores.ndim == 2:
        return float(np.mean(np.argmax(scores, axis=1) == y))
    return float(np.mean(np.where(scores > 0, 1.0, -1.0) == y))


def _plan_level(level, sizes, n_features, params, memory, done, cores) -> LevelPlan:
    """Shape, kernel mode, memory and predicted seconds of the level about to run.

    Raises MemoryBudgetError when its largest partition cannot be solved within the budget.
    """
    partitions, rows = int(sizes.size), int(np.max(sizes))
    budget = memory.task_mb(partitions)
    cache_mb = level_cache_mb(level, rows, n_features, budget, params.cache_mb, params.levels)
    mode = kernel_mode_for(rows, cache_mb)
    costs = [LevelCost(e.partitions, e.max_rows or -(-e.rows // e.partitions), e.seconds)
             for e in done]
    predicted = predict_seconds(costs, partitions, rows, cores)
    if predicted is not None and mode == "blocked" and done:
        # on-demand blocks recompute the uncached share of the kernel in every sweep
        uncached = 1.0 - min(1.0, cache_mb * 2**20 / (4.0 * rows * rows))
        predicted *= 1.0 + max(1, done[-1].sweeps_max) * uncached
    return LevelPlan(level, partitions, rows, mode, budget, cache_mb, predicted)


def _solve_level(sc, previous, level, params, kernel_dict, config, cores, validation_X=None):
    """Solve every partition of one level (one task each): (solved RDD, LevelStats, partition
    sizes, the validation rows' decision values or None)."""
    level_start = time.perf_counter()
    n_level_partitions = params.p ** level
    sc.setJobDescription(f"SODM level {level}: solve {n_level_partitions} partitions")
    threads = max(1, cores // min(n_level_partitions, cores))
    solved = previous.map(lambda item: _solve_partition(
        item, kernel_dict, config, level, threads,
        None if validation_X is None else validation_X.value)).persist(SPILL)
    stats = solved.map(lambda item: item[1][4]).collect()
    previous.unpersist()
    entry = LevelStats(level=level, partitions=len(stats), seconds=0.0,
                       objective=float(sum(s["objective"] for s in stats)),
                       n_sv=int(sum(s["n_sv"] for s in stats)),
                       sweeps_max=int(max(s["sweeps"] for s in stats)),
                       sweeps_total=int(sum(s["sweeps"] for s in stats)),
                       rows=int(sum(s["rows"] for s in stats)),
                       warm_start_violation=float(max(s["warm_start_violation"] for s in stats)),
                       kernel="+".join(sorted({s["kernel_mode"] for s in stats})),
                       max_rows=int(max(s["rows"] for s in stats)))
    validation_scores = None if validation_X is None else np.sum(
        [s["validation_scores"] for s in stats], axis=0)
    entry.seconds = time.perf_counter() - level_start
    sizes = np.zeros(n_level_partitions, dtype=np.int64)
    sizes[[st["key"] for st in stats]] = [st["rows"] for st in stats]
    return solved, entry, sizes, validation_scores


def _layout(item):
    key, (_, _, ids, gamma, _) = item
    return key, ids, gamma


def _restore(sc, labelled, checkpoint: LevelCheckpoint, level: int | None = None):
    """(level, the LevelStats list, solved RDD, partition sizes) rebuilt from a checkpointed
    level (default: the last)."""
    level, finished, pieces = checkpoint.load_level(level)
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


def landmark_candidates_wanted(params: SODMParams, n_rows: int, n_partitions: int) -> int:
    """How many sampled rows the landmarks (stratified) or k-means centers are chosen from;
    0 for the partitioners that need none."""
    if params.partitioner not in ("stratified", "dip", "kmeans"):
        return 0
    n_groups = n_partitions if params.partitioner == "kmeans" else params.strata
    return min(n_rows, params.landmark_candidates * n_groups)


def partition_blocks(sc, labelled, params: SODMParams, kernel: Kernel, n_rows: int,
                     n_partitions: int, candidates=None, n_classes: int = 2):
    """Deal the rows of ``labelled`` (RDD of (X, y, ids): ±1 y, or class numbers when
    ``n_classes`` > 2) into ``n_partitions`` blocks.

    Returns the persisted, computed RDD of (key, (X, y, ids, γ=0)) — key k in Spark partition k, one block each —
    the landmarks (stratified), k-means centers (dip, kmeans) or None (random, cascade), and
    the most rows each partition holds (exact for kmeans, ⌈n/K⌉ for the even dealings).
    stratified: S landmarks by Eqn 8 on a seeded sample of ``landmark_candidates·S`` rows,
    strata by Eqn 7, every stratum shuffled and dealt evenly; dip: the same dealing over
    k-means clusters; kmeans: each of K k-means clusters is one partition; random and cascade:
    one stratum dealt evenly.
    """
    seed = params.seed
    n_input = labelled.getNumPartitions()
    # a unique, stable number per input block without zipWithIndex's counting job: the Spark
    # partition index for the first block of a partition (there is one block per partition)
    indexed = labelled.mapPartitionsWithIndex(
        lambda part, blocks: ((block, part + position * n_input)
                              for position, block in enumerate(blocks)))
    how, centers, direct = "none", None, False
    wanted = landmark_candidates_wanted(params, n_rows, n_partitions)
    if wanted:
        n_groups = n_partitions if params.partitioner == "kmeans" else params.strata
        if candidates is None:
            fraction = min(1.0, 1.2 * wanted / n_rows)
            candidates = np.concatenate(
                indexed.map(lambda item: _sample_rows(item, fraction, seed)).collect())
        sample = candidates[np.random.default_rng([seed, 3]).permutation(
            candidates.shape[0])[:wanted]]
        if params.partitioner == "stratified":
            how = "landmarks+labels" if params.label_strata else "landmarks"
            centers = sample[select_landmarks(sample, kernel, params.strata)]
        else:
            how = "centers"
            centers = kmeans(sample, min(n_groups, sample.shape[0]), seed=seed)
            direct = params.partitioner == "kmeans"
    kernel_dict = kernel.to_dict()
    label_groups = max(2, n_classes)
    n_strata = 1 if centers is None else \
        centers.shape[0] * (label_groups if how.endswith("labels") else 1)
    # only the stratum numbers come to the driver (the rows stay where they are cached)
    strata = dict(indexed.map(lambda item: _assign_strata(item, how, centers, kernel_dict,
                                                          label_groups)).collect())
    order = sorted(strata)
    counts = np.stack([np.bincount(strata[index], minlength=n_strata) for index in order])
    offsets = dict(zip(order, stratum_offsets(counts)))
    strata_b = sc.broadcast(strata)
    records = indexed.flatMap(lambda item: _deal(item, strata_b.value[item[1]], offsets[item[1]],
                                                 n_partitions, direct, seed))
    parts = records.partitionBy(n_partitions, lambda key: key).mapPartitions(
        _build_partitions, preservesPartitioning=True).persist(SPILL)
    parts.count()
    strata_b.unpersist(blocking=False)
    totals = counts.sum(axis=0)
    sizes = (np.bincount(np.arange(totals.size), weights=totals, minlength=n_partitions)
             if direct else np.full(n_partitions, -(-n_rows // n_partitions)))  # ⌈n/K⌉ dealt
    return parts, centers, sizes.astype(np.int64)
