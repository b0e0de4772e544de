"""Hyperparameter search on the top level's partitions, on Spark (``--tune``, and the default
search of a job given no hyperparameter).

One Spark job: every task takes one top-level partition (cut into seeded pieces of
``SEARCH_PARTITION_ROWS`` rows when larger, each solved as a partition of its own:
hyperparameters chosen on pieces of that size held at 22,000-row partitions, for a fraction of
the kernel work), computes its kernel matrix once (every further γ multiple of the RBF and
Laplacian kernels is its element-wise power), solves the local ODM for every grid point
warm-started along λ (to ``SEARCH_TOL_FACTOR`` × the fit's violation bound), and returns
its share of the validation rows' decision values per grid point
(:func:`sodm_spark.selection.tuning.search_partition`); the driver sums the shares (a level's f)
and scores them, so on partitions no larger than the pieces each grid point's accuracy is the one
a fit with that point would report for its top level. Every grid point is reported when the
job ends (one job instead of one per γ multiple: the kernel once per partition, not once per
multiple).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace

import numpy as np
from threadpoolctl import threadpool_limits

from ..core.kernels import Kernel
from ..core.labels import accuracy_of_scores, coded_classes, correct_rows
from ..core.sparse_rows import as_float_rows
from ..selection.tuning import (MAX_SEARCH_TOL, SEARCH_TOL_FACTOR, GridPoint, ParamGrid,
                                best_point, search_partition, search_subsets,
                                significantly_better)
from .partitioning import assemble, partitions_by_key
from .sodm.params import SODMParams
from .sodm.prepare import PreparedData


@dataclass
class PointResult:
    point: GridPoint
    validation_accuracy: float
    sweeps_max: int  # most sweeps any partition needed (warm-started along λ)
    converged: bool  # every partition reached the search's violation bound
    seconds: float  # summed over partitions (task time)
    correct: np.ndarray | None = field(default=None, repr=False)  # per validation row

    def to_dict(self) -> dict:
        return {**self.point.to_dict(), "validation_accuracy": self.validation_accuracy,
                "sweeps_max": self.sweeps_max, "converged": self.converged,
                "task_seconds": self.seconds}


@dataclass
class TuneResult:
    grid: ParamGrid
    base_gamma: float  # the resolved kernel γ the multiples apply to
    kernel: str
    partitions: int
    validation_rows: int
    points: list = field(default_factory=list)  # PointResult, in grid order
    seconds: float = 0.0
    default: GridPoint | None = None  # kept unless a point beats it significantly

    @property
    def best_index(self) -> int:
        best = best_point([p.validation_accuracy for p in self.points],
                          [p.sweeps_max for p in self.points])
        if self.default is None:
            return best
        default = next(i for i, p in enumerate(self.points) if p.point == self.default)
        chosen = self.points[best]
        return best if significantly_better(chosen.correct, self.points[default].correct) \
            else default

    @property
    def best(self) -> PointResult:
        return self.points[self.best_index]

    def best_params(self, params: SODMParams) -> SODMParams:
        """``params`` with the best point's γ (a number), λ, θ and v."""
        point = self.best.point
        return replace(params, gamma=self.base_gamma * point.gamma_scale, lam=point.lam,
                       theta=point.theta, v=point.v)

    def to_dict(self) -> dict:
        best = self.best
        return {"grid": self.grid.to_dict(), "base_gamma": self.base_gamma,
                "kernel": self.kernel, "partitions": self.partitions,
                "validation_rows": self.validation_rows, "seconds": self.seconds,
                "best": {**best.point.to_dict(), "gamma": self.base_gamma * best.point.gamma_scale,
                         "validation_accuracy": best.validation_accuracy},
                "default": None if self.default is None else self.default.to_dict(),
                "points": [p.to_dict() for p in self.points]}


@dataclass(frozen=True)
class SearchTaskSettings:
    """What every search task reads, besides the kernel and the grid: built once by
    :func:`tune_sodm`."""

    # each grid point is solved until its largest projected-gradient violation is at most
    # this: the fit's bound × SEARCH_TOL_FACTOR, at most MAX_SEARCH_TOL
    violation_tol: float
    max_iter: int  # most sweeps of each solve
    n_classes: int  # 0: binary (±1 labels); C ≥ 3: one-vs-rest on class numbers
    seed: int  # the fit's: partition k is searched with the seed [seed, 97, k]
    max_rows: int | None  # a partition larger than this is searched in pieces of this many
    pieces: int  # pieces searched per partition larger than max_rows
    threads: int  # BLAS threads per task


def _search_task(records, X_val, kernel: Kernel, grid: ParamGrid,
                 settings: SearchTaskSettings):
    """``mapPartitions`` function: for each top-level partition, every grid point: (scores,
    stats), summed over the partition's pieces when it is cut
    (:func:`~sodm_spark.selection.tuning.search_subsets`)."""
    for key, chunks in partitions_by_key(records):
        X, y, _, _ = assemble(chunks)
        total = merged = None
        for rows in search_subsets(X.shape[0], settings.max_rows, settings.pieces,
                                   settings.seed, key):
            with threadpool_limits(max(1, min(settings.threads, os.cpu_count() or 1))):
                _, scores, stats = search_partition(
                    X[rows], y[rows], X_val, kernel, grid, n_classes=settings.n_classes,
                    violation_tol=settings.violation_tol, max_iter=settings.max_iter,
                    seed=[settings.seed, 97, key])
            total = scores if total is None else total + scores
            merged = stats if merged is None else list(map(_pieces_stats, merged, stats))
        yield total, merged


def _pieces_stats(a: dict, b: dict) -> dict:
    """One grid point's stats over two pieces of a partition: the most sweeps, both converged,
    the objectives and seconds summed."""
    return {"sweeps": max(a["sweeps"], b["sweeps"]), "objective": a["objective"] + b["objective"],
            "converged": a["converged"] and b["converged"], "seconds": a["seconds"] + b["seconds"]}


def tune_sodm(sc, prepared: PreparedData, params: SODMParams, grid: ParamGrid,
              on_point=None, keys=None, default: GridPoint | None = None,
              max_rows: int | None = None, pieces: int = 1) -> TuneResult:
    """Score every point of ``grid`` on the prepared top level's partitions (see the module
    docstring), or on those of ``keys`` only (a sample: the other partitions are not read),
    each larger than ``max_rows`` cut to ``pieces`` disjoint seeded subsets of that many rows;
    ``on_point(PointResult, index, total)`` is called for each as it is known. With
    ``default`` (a grid point) the result's best is that point unless another beats it
    significantly on the validation rows
    (:func:`~sodm_spark.selection.tuning.significantly_better`)."""
    grid.validate(prepared.kernel.name)
    if prepared.parts is None:
        raise ValueError("tune_sodm needs the prepared data partitioned (prepare_sodm with "
                         "partition=True).")
    if prepared.validation_pair is None:
        raise ValueError("tuning needs validation rows: prepare with hold_out=True or give "
                         "validation data.")
    started = time.perf_counter()
    X_val, y_val = prepared.validation_pair  # labels coded: ±1, or class numbers
    coded = coded_classes(prepared.classes.size)
    n_parts = prepared.parts.getNumPartitions() if keys is None else len(keys)
    cores = max(1, sc.defaultParallelism)
    fit_solve = params.local_solve
    settings = SearchTaskSettings(
        violation_tol=min(fit_solve.violation_tol * SEARCH_TOL_FACTOR, MAX_SEARCH_TOL),
        max_iter=fit_solve.max_iter, n_classes=prepared.classes.size if prepared.multi else 0,
        seed=params.seed, max_rows=max_rows, pieces=pieces,
        threads=max(1, cores // min(n_parts, cores)))
    kernel = prepared.kernel
    X_val_b = sc.broadcast(as_float_rows(X_val, np.float64))
    result = TuneResult(grid=grid, base_gamma=prepared.kernel.gamma, kernel=prepared.kernel.name,
                        partitions=n_parts, validation_rows=int(len(y_val)), default=default)
    total = len(grid)
    try:
        sc.setJobDescription(f"SODM tune: {total} grid points on {n_parts} partitions")
        search = lambda records: _search_task(  # noqa: E731
            records, X_val_b.value, kernel, grid, settings)
        shares = prepared.parts.mapPartitions(search).collect() if keys is None else \
            sc.runJob(prepared.parts, search, partitions=sorted(keys))
        scores = np.sum([share[0] for share in shares], axis=0)
        for j, point in enumerate(grid.points()):
            stats = [share[1][j] for share in shares]
            entry = PointResult(point, accuracy_of_scores(scores[j], y_val, coded),
                                max(s["sweeps"] for s in stats),
                                all(s["converged"] for s in stats),
                                float(sum(s["seconds"] for s in stats)),
                                correct_rows(scores[j], y_val, coded))
            result.points.append(entry)
            if on_point is not None:
                on_point(entry, len(result.points), total)
    finally:
        X_val_b.unpersist()
        sc.setJobDescription(None)
    result.seconds = time.perf_counter() - started
    return result
