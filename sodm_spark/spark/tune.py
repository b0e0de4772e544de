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
a fit with that point would report for its top level. The points are ranked by the fit's
metric (``SODMParams.metric``, :mod:`sodm_spark.selection.metrics`; accuracy by default).
Every grid point is reported when the job ends (one job instead of one per γ multiple: the
kernel once per partition, not once per multiple). A sampled search then has a second round (:func:`final_round`): its finalists scored
on the same rows in pieces one merge larger.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace

import numpy as np
from threadpoolctl import threadpool_limits

from ..core.errors import SettingsError
from ..core.kernels import Kernel
from ..core.labels import accuracy_of_scores, coded_classes, correct_rows
from ..core.sparse_rows import as_float_rows, stack_rows
from ..selection.metrics import Evaluation, oriented
from ..selection.tuning import (MAX_SEARCH_TOL, SEARCH_PARTITION_ROWS, SEARCH_SAMPLE_ROWS,
                                SEARCH_TOL_FACTOR, GridPoint, ParamGrid, PointSolve,
                                choose_point, search_partition, search_subsets)
from .engine import Engine
from .gpu import task_gpu_index
from .partitioning import assemble, assembled_weights, partitions_by_key
from .sodm.params import SODMParams
from .sodm.plan import SearchedSolve
from .sodm.prepare import PreparedData


@dataclass
class PointResult:
    point: GridPoint
    validation_accuracy: float
    sweeps_max: int  # most sweeps any partition needed (warm-started along λ)
    converged: bool  # every partition reached the search's violation bound
    seconds: float  # summed over partitions (task time)
    correct: np.ndarray | None = field(default=None, repr=False)  # per validation row
    # judged by another metric than accuracy: its Evaluation of the point's scores
    evaluation: Evaluation | None = field(default=None, repr=False)
    # the rows its solves visited, per row, on average over the pieces (None: not counted,
    # LocalSolution.visits_per_row): the first level's prior visits (spark/sodm/plan.py)
    visits_per_row: float | None = None

    @property
    def judged(self):
        """How the validation rows judge the point (tuning.choose_point)."""
        return self.correct if self.evaluation is None else self.evaluation

    @property
    def ranking(self) -> float:
        """The point's value by the fit's metric, higher better."""
        if self.evaluation is None:
            return self.validation_accuracy
        return oriented(self.evaluation.metric, self.evaluation.value)

    def to_dict(self) -> dict:
        metric = {} if self.evaluation is None else {
            f"validation_{self.evaluation.metric}": self.evaluation.value}
        return {**self.point.to_dict(), "validation_accuracy": self.validation_accuracy,
                **metric, "sweeps_max": self.sweeps_max, "converged": self.converged,
                "task_seconds": self.seconds, "visits_per_row": self.visits_per_row}


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
    # the second round (final_round): the finalists scored on pieces of final_piece_rows
    final_points: list = field(default_factory=list)  # PointResult of each finalist
    final_piece_rows: int = 0
    piece_rows: int = 0  # the first round's rows a solve (a partition, or a piece of one)
    final_pieces: int = 0
    metric: str = "accuracy"  # what the points are ranked by (SODMParams.metric)

    @property
    def best_index(self) -> int:
        """The point a fit takes: the best of the second round when it ran, else of the grid;
        the default point unless that one beats it significantly on the validation rows."""
        ranked = self.final_points or self.points
        defaults = [i for i, p in enumerate(ranked) if p.point == self.default]
        best = ranked[choose_point([p.judged for p in ranked], [p.sweeps_max for p in ranked],
                                   defaults[0] if defaults else None,
                                   [p.ranking for p in ranked])]
        return next(i for i, p in enumerate(self.points) if p.point == best.point)

    @property
    def best_final(self) -> PointResult | None:
        """The chosen point's second-round result (None: no second round)."""
        point = self.best.point
        return next((p for p in self.final_points if p.point == point), None)

    @property
    def best(self) -> PointResult:
        return self.points[self.best_index]

    def searched_solves(self) -> tuple[SearchedSolve, ...]:
        """How the chosen point solved in each round (plan.searched_visits: the first
        level's prior visits)."""
        rounds = [(self.piece_rows, self.best)]
        if self.best_final is not None:
            rounds.append((self.final_piece_rows, self.best_final))
        return tuple(SearchedSolve(rows, point.visits_per_row, point.sweeps_max)
                     for rows, point in rounds if rows > 0)

    def best_params(self, params: SODMParams) -> SODMParams:
        """``params`` with the best point's γ (a number), λ, θ and v."""
        point = self.best.point
        return replace(params, gamma=self.base_gamma * point.gamma_scale, lam=point.lam,
                       theta=point.theta, v=point.v)

    def to_dict(self) -> dict:
        best, final, metric = self.best, self.best_final, self.metric
        chosen = {} if metric == "accuracy" else {
            f"validation_{metric}": best.to_dict()[f"validation_{metric}"],
            f"final_validation_{metric}": None if final is None
            else final.to_dict()[f"validation_{metric}"]}
        return {"grid": self.grid.to_dict(), "base_gamma": self.base_gamma, "metric": metric,
                "kernel": self.kernel, "partitions": self.partitions,
                "validation_rows": self.validation_rows, "seconds": self.seconds,
                "best": {**best.point.to_dict(), "gamma": self.base_gamma * best.point.gamma_scale,
                         "validation_accuracy": best.validation_accuracy,
                         "final_validation_accuracy": None if final is None
                         else final.validation_accuracy, **chosen},
                "default": None if self.default is None else self.default.to_dict(),
                "points": [p.to_dict() for p in self.points],
                "final_round": None if not self.final_points else {
                    "piece_rows": self.final_piece_rows, "pieces": self.final_pieces,
                    "points": [p.to_dict() for p in self.final_points]}}


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
    class_weights: tuple | None = None  # one per class, coded order (PreparedData's)
    device: str = "auto"  # where each solve runs (SODMParams.device)


def _search_task(records, X_val, kernel: Kernel, grid: ParamGrid,
                 settings: SearchTaskSettings):
    """``mapPartitions`` function: for each top-level partition, every grid point: (scores,
    stats), summed over the partition's pieces when it is cut
    (:func:`~sodm_spark.selection.tuning.search_subsets`)."""
    for key, chunks in partitions_by_key(records):
        X, y, _, _ = assemble(chunks)
        weights = assembled_weights(chunks)
        total = merged = None
        for rows in search_subsets(X.shape[0], settings.max_rows, settings.pieces,
                                   settings.seed, key):
            with threadpool_limits(max(1, min(settings.threads, os.cpu_count() or 1))):
                _, scores, stats = search_partition(
                    X[rows], y[rows], X_val, kernel, grid, n_classes=settings.n_classes,
                    seed=[settings.seed, 97, key], class_weights=settings.class_weights,
                    row_weights=None if weights is None else weights[rows],
                    solving=PointSolve(settings.violation_tol, settings.max_iter,
                                       settings.device, task_gpu_index()))
            total = scores if total is None else total + scores
            merged = stats if merged is None else list(map(_pieces_stats, merged, stats))
        yield total, merged


def _pieces_stats(a: dict, b: dict) -> dict:
    """One grid point's stats over two pieces of a partition: the most sweeps, both converged,
    the objectives and seconds summed, each piece's visits of a row."""
    return {"sweeps": max(a["sweeps"], b["sweeps"]), "objective": a["objective"] + b["objective"],
            "converged": a["converged"] and b["converged"], "seconds": a["seconds"] + b["seconds"],
            "visits": _piece_visits(a) + _piece_visits(b)}


def _piece_visits(stats: dict) -> list:
    """The visits of a row each piece of ``stats`` counted (search_partition gives one number
    or None, :func:`_pieces_stats` a list)."""
    visits = stats.get("visits")
    if visits is None:
        return []
    return list(visits) if isinstance(visits, list) else [float(visits)]


def _task_settings(params: SODMParams, prepared: PreparedData, max_rows, pieces: int,
                   threads: int) -> SearchTaskSettings:
    """What a search's tasks read: the fit's solve loosened to the search's violation bound."""
    fit_solve = params.local_solve
    return SearchTaskSettings(
        violation_tol=min(fit_solve.violation_tol * SEARCH_TOL_FACTOR, MAX_SEARCH_TOL),
        max_iter=fit_solve.max_iter, n_classes=prepared.classes.size if prepared.multi else 0,
        seed=params.seed, max_rows=max_rows, pieces=pieces, threads=max(1, threads),
        class_weights=prepared.class_weights, device=params.device)


def _point_result(point, scores, stats, y_val, coded, params: SODMParams,
                  weights=None) -> PointResult:
    """A point's result from its decision values summed over the pieces (``scores``) and each
    piece's stats, judged by ``params.metric`` on the validation rows weighted by ``weights``
    (their class and row weights; None: unweighted)."""
    evaluation = None if params.metric == "accuracy" and weights is None else Evaluation(
        scores, y_val, weights, params.metric, params.seed)
    visits = [v for s in stats for v in _piece_visits(s)]
    return PointResult(point, accuracy_of_scores(scores, y_val, coded),
                       max(s["sweeps"] for s in stats), all(s["converged"] for s in stats),
                       float(sum(s["seconds"] for s in stats)),
                       correct_rows(scores, y_val, coded), evaluation,
                       float(np.mean(visits)) if visits else None)


def tune_sodm(sc: Engine, prepared: PreparedData, params: SODMParams, grid: ParamGrid,
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
        raise SettingsError("tune_sodm needs the prepared data partitioned (prepare_sodm with "
                            "partition=True).")
    if prepared.validation_pair is None:
        raise SettingsError("tuning needs validation rows: prepare with hold_out=True or give "
                            "validation data.")
    started = time.perf_counter()
    X_val, y_val = prepared.validation_pair  # labels coded: ±1, or class numbers
    coded = coded_classes(prepared.classes.size)
    n_parts = prepared.parts.getNumPartitions() if keys is None else len(keys)
    cores = max(1, sc.defaultParallelism)
    settings = _task_settings(params, prepared, max_rows, pieces, cores // min(n_parts, cores))
    kernel = prepared.kernel
    X_val_b = sc.broadcast(as_float_rows(X_val, np.float64))
    result = TuneResult(grid=grid, base_gamma=prepared.kernel.gamma, kernel=prepared.kernel.name,
                        partitions=n_parts, validation_rows=int(len(y_val)), default=default,
                        metric=params.metric)
    rows_each = -(-prepared.n_rows // max(1, prepared.parts.getNumPartitions()))
    result.piece_rows = min(rows_each, max_rows) if max_rows else rows_each
    total = len(grid)
    try:
        sc.setJobDescription(f"SODM tune: {total} grid points on {n_parts} partitions")
        search = lambda records: _search_task(  # noqa: E731
            records, X_val_b.value, kernel, grid, settings)
        shares = prepared.parts.mapPartitions(search).collect() if keys is None else \
            sc.runJob(prepared.parts, search, partitions=sorted(keys))
        scores = np.sum([share[0] for share in shares], axis=0)
        for j, point in enumerate(grid.points()):
            entry = _point_result(point, scores[j], [share[1][j] for share in shares], y_val,
                                  coded, params, prepared.validation_weights)
            result.points.append(entry)
            if on_point is not None:
                on_point(entry, len(result.points), total)
    finally:
        X_val_b.unpersist()
        sc.setJobDescription(None)
    result.seconds = time.perf_counter() - started
    return result


#: The second round of a search (:func:`final_round`): this many of the first round's best
#: points, and the default point, are scored again on pieces of p × SEARCH_PARTITION_ROWS rows.
FINALISTS = 3
#: The most rows the second round gathers on the driver (the first round's sample is about
#: SEARCH_SAMPLE_ROWS); a search over every partition has no second round.
FINAL_ROUND_MAX_ROWS = 2 * SEARCH_SAMPLE_ROWS


class PointList:
    """Grid points given one by one, with the two things :func:`search_partition` reads of a
    grid: the γ multiples and the points in solve order (λ ascending innermost)."""

    def __init__(self, points):
        self._points = sorted(set(points), key=lambda p: (p.gamma_scale, p.theta, p.v, p.lam))
        self.gamma_scales = tuple(sorted({p.gamma_scale for p in self._points}))

    def points(self) -> list[GridPoint]:
        return list(self._points)

    def __len__(self) -> int:
        return len(self._points)


def finalists(result: TuneResult, count: int = FINALISTS) -> list:
    """The ``count`` points of the first round with the highest validation accuracy, or
    value of the fit's metric (ties: fewer sweeps, then grid order) and the default point."""
    ranked = sorted(range(len(result.points)),
                    key=lambda i: (-result.points[i].ranking,
                                   result.points[i].sweeps_max, i))
    chosen = [result.points[i].point for i in ranked[:count]]
    if result.default is not None and result.default not in chosen:
        chosen.append(result.default)
    return chosen


def _sampled_rows(records, settings: SearchTaskSettings):
    """``runJob`` function: the rows of each sampled partition the first round searched
    (its pieces, :func:`~sodm_spark.selection.tuning.search_subsets`), as (key, X, y,
    weights or None)."""
    result = []
    for key, chunks in partitions_by_key(records):
        X, y, _, _ = assemble(chunks)
        weights = assembled_weights(chunks)
        rows = np.sort(np.concatenate(search_subsets(X.shape[0], settings.max_rows,
                                                     settings.pieces, settings.seed, key)))
        result.append((key, X[rows], y[rows], None if weights is None else weights[rows]))
    return result


def _final_task(pieces, X_val, kernel: Kernel, points: PointList,
                settings: SearchTaskSettings):
    """``mapPartitions`` function of the second round: every finalist on each piece."""
    for number, X, y, weights in pieces:
        with threadpool_limits(max(1, min(settings.threads, os.cpu_count() or 1))):
            _, scores, stats = search_partition(
                X, y, X_val, kernel, points, n_classes=settings.n_classes,
                seed=[settings.seed, 101, number], class_weights=settings.class_weights,
                row_weights=weights,
                solving=PointSolve(settings.violation_tol, settings.max_iter, settings.device,
                                   task_gpu_index()))
        yield scores, stats


def final_round(sc: Engine, prepared: PreparedData, params: SODMParams, result: TuneResult, keys,
                pieces: int) -> TuneResult:
    """The search's second round, in place on ``result``: the :func:`finalists` of the first
    scored again on the same sampled rows cut into pieces of p × SEARCH_PARTITION_ROWS, the
    partitions one merge below the first round's pieces. A point's rank on 2,500 rows need not
    hold where the fit's models are larger (smoother kernels win on small pieces); the fit
    takes the second round's best (:attr:`TuneResult.best_index`). Skipped (``result``
    unchanged) when the sample is not drawn (``keys`` None), holds fewer rows than one such
    piece, or more than :data:`FINAL_ROUND_MAX_ROWS`."""
    piece_rows = params.p * SEARCH_PARTITION_ROWS
    # the first round (tune_sodm) refused data without both
    assert prepared.parts is not None and prepared.validation_pair is not None
    n_parts = prepared.parts.getNumPartitions()
    rows_each = min(-(-prepared.n_rows // n_parts), SEARCH_PARTITION_ROWS * pieces)
    if keys is None or len(result.points) < 2 or \
            not piece_rows <= len(keys) * rows_each <= FINAL_ROUND_MAX_ROWS:
        return result
    started = time.perf_counter()
    cores = max(1, sc.defaultParallelism)
    settings = _task_settings(params, prepared, SEARCH_PARTITION_ROWS, pieces, 1)
    points = PointList(finalists(result))
    X_val, y_val = prepared.validation_pair
    coded = coded_classes(prepared.classes.size)
    X_val_b, kernel = sc.broadcast(as_float_rows(X_val, np.float64)), prepared.kernel
    try:
        sc.setJobDescription("SODM tune: the sampled rows for the second round")
        sampled = sorted(sc.runJob(prepared.parts,
                                   lambda records: _sampled_rows(records, settings),
                                   partitions=sorted(keys)), key=lambda item: item[0])
        X = stack_rows([item[1] for item in sampled])
        y = np.concatenate([item[2] for item in sampled])
        w = None if sampled[0][3] is None else np.concatenate([item[3] for item in sampled])
        count = max(1, X.shape[0] // piece_rows)
        bounds = np.linspace(0, X.shape[0], count + 1).astype(np.int64)
        cut = [(number, X[bounds[number]:bounds[number + 1]], y[bounds[number]:bounds[number + 1]],
                None if w is None else w[bounds[number]:bounds[number + 1]])
               for number in range(count)]
        settings = replace(settings, threads=max(1, cores // min(count, cores)))
        sc.setJobDescription(f"SODM tune: {len(points)} finalists on {count} pieces of "
                             f"{piece_rows:,} rows")
        shares = sc.parallelize(cut, count).mapPartitions(
            lambda items: _final_task(items, X_val_b.value, kernel, points, settings)).collect()
    finally:
        X_val_b.unpersist()
        sc.setJobDescription(None)
    scores = np.sum([share[0] for share in shares], axis=0)
    result.final_points = [_point_result(point, scores[j], [share[1][j] for share in shares],
                                         y_val, coded, params, prepared.validation_weights)
                           for j, point in enumerate(points.points())]
    result.final_piece_rows, result.final_pieces = int(bounds[1] - bounds[0]), count
    result.seconds += time.perf_counter() - started
    return result
