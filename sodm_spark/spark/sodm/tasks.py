"""What one Spark task runs on SODM partitions (SODM paper, Algorithm 1, the levels).

A level's RDD holds ``(key, Chunk)`` records, as :mod:`sodm_spark.spark.partitioning` deals
them: partition ``key`` (in Spark partition ``key``) is all the chunks with that key, each of at
most :data:`~sodm_spark.spark.partitioning.CHUNK_BYTES` of rows; y is ±1, or class numbers for
3+ classes; γ is (m,) or (m, C).

:func:`solve_partitions` solves each partition's local ODM (Eqn 1 with the partition's own m·c,
i.e. the block-diagonal problem of Eqn 4) warm-started from its current γ and writes it back as
chunks, the first carrying the solve's :class:`PartitionStats` (or a report function takes
them: :func:`~sodm_spark.spark.engine.map_with_reports`); :func:`merge_key`
merges every p consecutive partitions (k → k // p) by re-keying their chunks and scaling γ, so
a merge moves chunks and never concatenates them; the rest give a chunk's share of f and its
support vectors. What every task of a level reads is one frozen :class:`LevelTaskSettings`
(the local solve's :class:`~sodm_spark.solvers.local_solve.LocalSolve`, the seed, the
compression's :class:`FitTargets`) beside the :class:`~sodm_spark.core.kernels.Kernel`. All
numerics are in ``sodm_spark.solvers``; the functions are module-level and take plain values
and frozen records, so closures never capture a driver object.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace

import numpy as np
from threadpoolctl import threadpool_limits

from ...core.kernels import Kernel, decision_values
from ...core.weights import combined_weights
from ...solvers.local_solve import LocalSolve, expansion_coefficients
from ..gpu import task_gpu_index
from ..partitioning import Chunk, as_chunks, assemble, assembled_weights, partitions_by_key


@dataclass(frozen=True)
class FitTargets:
    """The compression's fit targets a level's tasks leave in their stats (docs/design.md
    §2.6; :class:`~sodm_spark.spark.sodm.level_model.LocalFit`)."""

    share: float = 0.0  # of each partition's rows (seeded) whose f_k the stats carry; 0: none
    with_rows: bool = False  # those rows travel too (they fit the driver's result limit)


@dataclass(frozen=True)
class LevelTaskSettings:
    """What every task of a level reads, besides the kernel: built once per fit by
    :func:`~sodm_spark.spark.sodm.fit.fit_sodm`, its kernel cache set per level."""

    solve: LocalSolve  # λ, θ, v, the violation bound, the sweeps and the kernel cache per task
    n_classes: int = 0  # 0: one binary ODM on ±1 labels; C ≥ 3: one-vs-rest on class numbers
    seed: int = 0  # the fit's: partition k of level l is solved with the seed [seed, l, k]
    fit_targets: FitTargets = field(default_factory=FitTargets)
    # one weight per class (coded order: -1 then +1, or class numbers), every row of a class
    # weighted so in its partition's dual (sodm_spark.core.weights); None: unweighted
    class_weights: tuple | None = None

    def with_cache(self, cache_mb: float, storage: str = "float32") -> "LevelTaskSettings":
        """These settings with a level's kernel cache per task and the dtype of its cached
        kernel values (its LevelPlan's)."""
        return replace(self, solve=replace(self.solve, cache_mb=cache_mb, dtype=storage))


def support_rows(gamma):
    """Rows with dual weight: γ_i ≠ 0 (binary) or any class's γ_ic ≠ 0 (multi-class)."""
    return gamma != 0.0 if gamma.ndim == 1 else np.any(gamma != 0.0, axis=1)


@dataclass(frozen=True)
class PartitionStats:
    """What one partition's solve reports to the driver (:func:`solve_partition`), beside or on
    its chunks: the level's record (:class:`~sodm_spark.spark.sodm.params.LevelStats`) sums
    these over the partitions (docs/design.md §2.4, §6 step 6)."""

    key: int  # the partition
    rows: int
    objective: float
    sweeps: int
    n_sv: int  # rows with dual weight
    converged: bool
    warm_start_violation: float  # the violation at the warm start (Algorithm 1, line 5)
    kernel_mode: str  # 'cached' or 'blocked' (on-demand kernel blocks)
    storage: str  # dtype of the cached kernel values ('int16': fixed point)
    seconds: float
    # this partition's share of f on the validation (and test) rows, and the task-seconds
    # that scoring took; None without rows to score
    eval_scores: np.ndarray | None = None
    eval_seconds: float = 0.0
    # the compression's fit targets (docs/design.md §2.6), all None without a share: a seeded
    # share of the rows (positions in the task, row ids once written back), f_k on them (free:
    # u = Qγ), which are support vectors and, when the driver can take them, the rows
    fit_rows: np.ndarray | None = None
    fit_scores: np.ndarray | None = None
    fit_support: np.ndarray | None = None
    fit_X: object = None  # the rows themselves, dense or CSR

    def __getitem__(self, name: str):
        """A field by its name: these records were dicts before they were typed, and readers
        that index them by name keep working."""
        if name not in self.__dataclass_fields__:
            raise KeyError(name)
        return getattr(self, name)


def solve_partitions(records, kernel: Kernel, settings: LevelTaskSettings, level, threads,
                     eval_X=None, report=None):
    """``mapPartitions`` function: every partition of the records solved
    (:func:`solve_partition`) and written back as chunks, its :class:`PartitionStats` on the
    first — or, with ``report``, handed to ``report({key: stats})`` (an accumulator's ``add``,
    or a report row beside the chunks: :func:`~sodm_spark.spark.engine.map_with_reports`; the
    stats then reach the driver without a pass over the solved chunks)."""
    for key, chunks in partitions_by_key(records):
        X, y, ids, gamma = assemble(chunks)
        weights = assembled_weights(chunks)
        gamma, stats = solve_partition(key, X, y, gamma, kernel, settings, level, threads,
                                       eval_X, weights)
        if stats.fit_rows is not None:  # positions -> the rows' ids
            stats = replace(stats, fit_rows=ids[stats.fit_rows])
        if report is not None:
            report({key: stats})
            stats = None
        yield from as_chunks(key, X, y, ids, gamma, stats, weights)


def solve_partition(key, X, y, gamma, kernel: Kernel, settings: LevelTaskSettings, level,
                    threads, eval_X=None, row_weights=None):
    """One local ODM (Eqn 1 on the partition's m rows), warm-started from ``gamma``: (γ,
    :class:`PartitionStats`). Each row's weight is its ``row_weights`` entry (a weight
    column's) times its class's (docs/design.md §1.4).

    With a ``settings.fit_targets.share`` the stats also carry a seeded share of the rows
    (positions, ``fit_rows``) and the local model f_k on them (``fit_scores``), which the solve
    leaves in u = Qγ: the targets of a compression that needs no second pass over the level
    (:func:`~sodm_spark.spark.sodm.level_model.compress_level`); which of them are support
    vectors (``fit_support``), and with ``settings.fit_targets.with_rows`` the rows too
    (``fit_X``), so that the compression's points can be drawn among them without any pass.

    ``threads`` BLAS threads: PySpark pins Python workers to spark.task.cpus (1) threads, which
    leaves cores idle at the top levels, where fewer partitions than cores remain. With
    ``eval_X`` (the validation rows, and the test rows when every level is scored) the stats
    also hold this partition's share of their decision values (the level's f is the sum over
    partitions), while its rows are at hand: no job, no second read of the level.
    """
    start = time.perf_counter()
    seed = [settings.seed, level, key]
    # a fresh partition of 3+ classes has no warm start yet (its γ is a column of zeros)
    warm_start = None if settings.n_classes and gamma.ndim == 1 else gamma
    with threadpool_limits(max(1, min(threads, os.cpu_count() or 1))):
        # the GPU Spark assigned this task, where the solve's device is one
        result = settings.solve.solve(X, y, kernel, settings.n_classes, warm_start=warm_start,
                                      seed=seed, weights=combined_weights(
                                          row_weights, settings.class_weights, y),
                                      gpu_index=task_gpu_index())
        scoring = time.perf_counter()
        eval_scores = None if eval_X is None else _scores(kernel, eval_X, X, y, result.gamma)
        scoring = time.perf_counter() - scoring
    support = support_rows(result.gamma)
    targets = _fit_targets(X, y, result.u, support, settings.fit_targets, [*seed, 23])
    stats = PartitionStats(
        key=key, rows=X.shape[0], objective=result.objective, sweeps=result.n_sweeps,
        n_sv=int(support.sum()), converged=result.converged,
        warm_start_violation=result.warm_start_violation, kernel_mode=result.kernel_mode,
        storage=result.storage, eval_scores=eval_scores, eval_seconds=scoring,
        seconds=time.perf_counter() - start, **targets)
    return result.gamma, stats


def _fit_targets(X, y, u, support, fit_targets: FitTargets, seed) -> dict:
    """The :class:`PartitionStats` fields of the compression's fit targets (docs/design.md
    §2.6): none without a share of rows to keep."""
    fit_rows = _sample_rows(X.shape[0], fit_targets.share, seed)
    if fit_rows is None:
        return {}
    # f_k on its own rows is free: u = Qγ, so f_k(x_i) = y_i u_i (per class: s_ic u_ic); the
    # rows themselves travel when the driver can take them: a compression of this level then
    # needs no pass over it (its points are the support vectors among them)
    return {"fit_rows": fit_rows, "fit_scores": expansion_coefficients(y, u)[fit_rows],
            "fit_support": support[fit_rows],
            "fit_X": X[fit_rows] if fit_targets.with_rows else None}


def _sample_rows(m, share, seed):
    """Sorted positions of a seeded ``share`` of m rows (at least one when share > 0), or None."""
    if share <= 0.0 or m == 0:
        return None
    count = min(m, max(1, int(round(share * m))))
    return np.sort(np.random.default_rng(seed).choice(m, count, replace=False))


def merge_key(item, p, warm_start_factor, support_only):
    """A chunk of partition k as a chunk of k // p (placed after the chunks of lower
    children), γ multiplied by ``warm_start_factor`` (docs/design.md §2.5); ``support_only``
    (Ca-ODM) keeps its support rows."""
    key, chunk = item
    X, y, ids, gamma, weights = chunk.X, chunk.y, chunk.ids, chunk.gamma, chunk.weights
    if support_only:
        keep = support_rows(gamma)
        X, y, ids, gamma = X[keep], y[keep], ids[keep], gamma[keep]
        weights = None if weights is None else weights[keep]
    return key // p, Chunk((key % p, *chunk.order), X, y, ids, gamma * warm_start_factor, None,
                          weights)


def _scores(kernel, X_eval, X, y, gamma):
    """This partition's share of f on ``X_eval``, in float32: a level's accuracy only needs
    the sign of f, and float32 halves the GEMM time (the saved model predicts in float64)."""
    support = support_rows(gamma)
    return decision_values(kernel, X_eval, X[support],
                           expansion_coefficients(y, gamma)[support],
                           dtype=np.float32)


def partial_scores(item, X_eval, kernel: Kernel):
    """A chunk's share of f on ``X_eval``."""
    chunk = item[1]
    return _scores(kernel, X_eval, chunk.X, chunk.y, chunk.gamma)


def chunk_support_vectors(item):
    """(row ids, rows, coefficients) of a chunk's support vectors."""
    chunk = item[1]
    support = support_rows(chunk.gamma)
    return (chunk.ids[support], chunk.X[support],
            expansion_coefficients(chunk.y, chunk.gamma)[support])


def chunk_order(item):
    """(partition, order) of a chunk record: its place in the level, however a shuffle
    delivered it (sums over chunks are taken in this order:
    :func:`~sodm_spark.spark.engine.ordered_sum`)."""
    return item[0], item[1].order


def checkpoint_layout(item):
    """(key, order, row ids, γ) of a chunk: a checkpoint records each partition's rows in order."""
    key, chunk = item
    return key, chunk.order, chunk.ids, chunk.gamma
