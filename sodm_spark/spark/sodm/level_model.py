"""The kernel expansion a solved SODM level defines, made on the driver without passing the whole
support set through it at once (SODM paper, Algorithm 1, the model of the last level).

ODM duals are dense: a level of 600,000 rows × 784 features has ~340,000 support vectors, 1 GB
of float32 — more than Spark's default ``spark.driver.maxResultSize``. So the model is either

* **compressed in place** (:func:`compress_level`, the reduced-set projection of
  :mod:`sodm_spark.models.compression`): the level's tasks left a seeded sample of their rows with
  their own partition's scores (the fit targets), the points are drawn among the support
  vectors of that sample, and only the small least-squares solve runs on the driver; or
* **collected in pieces** (:func:`collect_level`): the support vectors of every chunk, at most
  16 MB each, fetched one Spark partition at a time when they would not fit the result limit.

:mod:`.written_model` picks between them (docs/design.md §6, step 8). Support vectors of
sparse rows stay CSR all the way to the model.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ...core.sparse_rows import as_float_rows, stack_rows
from ...models.compression import (LOCAL_FIT_ROWS_PER_POINT, candidates_wanted, choose_points,
                                   fit_rows_wanted, fitted_model, principal_projection)
from ...models.expansion import KernelExpansion
from ..memory import result_limit_mb
from ..engine import ordered_sum
from .tasks import chunk_order, chunk_support_vectors, partial_scores

if TYPE_CHECKING:
    from .prepare import PreparedData


class LocalFit(NamedTuple):
    """What a level's tasks left for a compression: a seeded share of the rows (``ids``), their
    own partition's f times the partition count (``targets``), which of them are support
    vectors (``support``) and, when the driver could take them, the rows (``rows``)."""

    ids: np.ndarray
    targets: np.ndarray
    rows: object  # float32 rows or CSR, or None
    support: np.ndarray


def training_row_bytes(prepared: PreparedData) -> float:
    """Bytes of a training row on the way to the driver: dense rows are float32, a sparse
    row's values 12 bytes each (8 a memory column)."""
    return 8 * prepared.row_width if prepared.sparse else 4 * prepared.kernel_features


def fit_rows_collectable(sc, n_rows: float, row_bytes: float) -> bool:
    """Whether ``n_rows`` rows of ``row_bytes`` each can come to the driver with a level's stats
    (half of ``spark.driver.maxResultSize``, as :func:`collect_level` takes pieces)."""
    return n_rows > 0 and _piece_is_small(sc, n_rows * row_bytes)


def level_scores(sc, solved, X_eval, kernel, what="score rows"):
    """f of a solved level on ``X_eval`` (driver rows), summed from every chunk's share."""
    sc.setJobDescription(f"SODM: {what}")
    rows = sc.broadcast(as_float_rows(X_eval, np.float32))
    try:
        return ordered_sum(solved, lambda item: partial_scores(item, rows.value, kernel),
                           np.add, chunk_order)
    finally:
        rows.unpersist()


def _sample_support(item, candidate_share, fit_share, seed, largest):
    """(candidate rows, their |α|, fit rows, their ids) sampled from a chunk's support vectors,
    seeded by the chunk's first row id (the same whatever task or attempt reads it); no fit
    rows for a ``fit_share`` of 0."""
    ids, X, coef = chunk_support_vectors(item)
    rng = np.random.default_rng([seed, 19, int(ids[0]) if ids.size else 0])
    weight = np.abs(coef).reshape(ids.size, -1).sum(axis=1) if ids.size else np.zeros(0)
    if largest:  # this chunk's largest |α|: the global largest are among them
        candidates = np.argsort(-weight, kind="stable")[:largest]
    else:
        candidates = np.flatnonzero(rng.random(ids.size) < candidate_share)
    fit = np.flatnonzero(rng.random(ids.size) < fit_share)
    return X[candidates], weight[candidates], X[fit], ids[fit]


def _rows_by_id(item, fit_ids, projection):
    """(rows, their ids) of a chunk whose ids are in the sorted ``fit_ids`` — any row, support
    vector or not —, through ``projection`` when given (float32; CSR rows stay CSR)."""
    chunk = item[1]
    found = np.flatnonzero(np.isin(chunk.ids, fit_ids, assume_unique=True))
    rows = as_float_rows(chunk.X[found], np.float32)
    return (rows if projection is None else projection.projected(rows)), chunk.ids[found]


def compress_level(sc, solved, kernel, classes, n_support: int, n_points: int,
                   method: str = "random", seed: int = 0, ridge: float = 1e-6, local_fit=None):
    """The level's model projected onto ``n_points`` of its support vectors (see the module
    docstring): (KernelExpansion, rows the data fit used, where their targets came from, passes
    over the level's rows it ran).

    ``local_fit`` (:class:`LocalFit`) from the level's tasks: each row's own partition model
    times the number of partitions, which the solve left in u (the level's f is the sum of
    the partitions' models, each of which models the whole data). Fitted on
    :data:`~sodm_spark.models.compression.LOCAL_FIT_ROWS_PER_POINT` such rows a point, the
    projection is as accurate as one fitted on
    :data:`~sodm_spark.models.compression.FIT_ROWS_PER_POINT` rows
    scored by the whole level model (measured beside the constants), and needs no pass of
    those rows over the level. Without it (a level read back from a checkpoint), f on the fit
    rows is summed from the tasks' partial scores. Wide rows are projected onto the principal
    directions of the chosen points (:func:`~sodm_spark.models.compression.principal_projection`),
    in the tasks, so the driver receives the fit rows projected. When the tasks returned the
    rows themselves (``local_fit.rows``; not for ``method="largest"``, whose points are the
    largest |α| of the whole level), no pass over the level runs at all.
    """
    wanted = candidates_wanted(method, n_points)
    if local_fit is not None and local_fit.rows is not None and method != "largest":
        return _compress_local(local_fit, kernel, classes, n_points, method, seed, ridge, wanted)
    n_fit = fit_rows_wanted(n_points) if local_fit is None else \
        LOCAL_FIT_ROWS_PER_POINT * n_points
    # a little more than wanted, so that the seeded draws rarely fall short
    candidate_share = min(1.0, 1.1 * wanted / max(n_support, 1))
    fit_share = 0.0 if local_fit is not None else min(1.0, 1.1 * n_fit / max(n_support, 1))
    largest = n_points if method == "largest" else 0
    rng = np.random.default_rng([seed, 12])
    sc.setJobDescription(f"SODM: sample the compression's points ({method})")
    samples = solved.map(lambda item: _sample_support(
        item, candidate_share, fit_share, seed, largest)).collect()
    candidates = stack_rows([s[0] for s in samples])
    weights = np.concatenate([s[1] for s in samples])
    if method == "largest":
        candidates = candidates[np.argsort(-weights, kind="stable")[:n_points]]
    else:
        candidates = candidates[_at_most(candidates.shape[0], wanted, rng)]
    points = choose_points(as_float_rows(candidates, np.float64), n_points, method, kernel,
                           seed)
    projection = principal_projection(points, kernel)
    if local_fit is None:
        rows = stack_rows([s[2] for s in samples])
        rows = rows[_at_most(rows.shape[0], n_fit, rng)]
        targets = level_scores(sc, solved, rows, kernel, "the compression's fit targets")
        if projection is not None:
            rows = projection.projected(rows)
    else:
        order = _fit_order(local_fit, n_fit, rng)
        fit_ids, local_targets = local_fit.ids[order], np.asarray(local_fit.targets)[order]
        sc.setJobDescription("SODM: the compression's fit rows")
        shared = sc.broadcast((fit_ids, projection))
        try:
            found = solved.map(lambda item: _rows_by_id(item, *shared.value)).collect()
        finally:
            shared.unpersist()
        rows = stack_rows([pair[0] for pair in found])
        targets = local_targets[np.searchsorted(fit_ids, np.concatenate([p[1] for p in found]))]
    model = _fitted(kernel, classes, points, rows, targets, ridge, projection)
    sc.setJobDescription(None)
    passes = 2  # the sample, then the targets (summed from the tasks) or the rows
    return model, rows.shape[0], "model" if local_fit is None else "partitions", passes


def _compress_local(local_fit: LocalFit, kernel, classes, n_points, method, seed, ridge, wanted):
    """:func:`compress_level` from the rows the level's tasks returned, with no pass over the
    level: the points are drawn among the fit rows that are support vectors (a uniform sample
    of the rows, so a uniform sample of the support vectors)."""
    rng = np.random.default_rng([seed, 12])
    order = _fit_order(local_fit, LOCAL_FIT_ROWS_PER_POINT * n_points, rng)
    rows = as_float_rows(local_fit.rows, np.float32)[order]
    targets = np.asarray(local_fit.targets)[order]
    support = np.flatnonzero(local_fit.support[order])
    support = support[_at_most(support.size, wanted, rng)]
    points = choose_points(as_float_rows(rows[support], np.float64), n_points, method, kernel,
                           seed)
    projection = principal_projection(points, kernel)
    if projection is not None:
        rows = projection.projected(rows)
    model = _fitted(kernel, classes, points, rows, targets, ridge, projection)
    return model, rows.shape[0], "partitions", 0


def _at_most(n: int, most: int, rng) -> np.ndarray:
    """Sorted positions of a seeded sample of ``most`` of n items; all of them when n ≤ most
    (no draw then)."""
    return np.arange(n) if n <= most else np.sort(rng.choice(n, most, replace=False))


def _fit_order(local_fit: LocalFit, n_fit: int, rng) -> np.ndarray:
    """Positions of at most ``n_fit`` of the tasks' fit rows (seeded), in row-id order."""
    order = np.argsort(local_fit.ids, kind="stable")
    return order[_at_most(order.size, n_fit, rng)]


def _fitted(kernel, classes, points, rows, targets, ridge, projection):
    """The expansion on ``points`` fitted to ``targets`` on ``rows`` (already projected)."""
    model = fitted_model(KernelExpansion(points[:0], np.zeros((0, 1)), kernel, classes), points,
                         rows, targets, ridge, projection)
    if projection is None:  # stored as the level's rows are
        model = replace(model, support_vectors=model.support_vectors.astype(np.float32))
    return model


def _piece_is_small(sc, piece_bytes: float) -> bool:
    limit_mb = result_limit_mb(sc)
    return limit_mb <= 0 or piece_bytes / 2**20 < 0.5 * limit_mb  # 0: no limit


def collect_level(sc, solved, kernel, classes, n_support: int, n_features: int,
                  row_bytes: float, multi: bool) -> KernelExpansion:
    """The level's whole model on the driver, its support vectors in row-id order: one
    ``collect`` when they fit half of ``spark.driver.maxResultSize`` (``row_bytes`` a row), else
    one chunk per job (``toLocalIterator`` over chunks dealt one to a Spark partition)."""
    sc.setJobDescription("SODM: collect the model")
    pieces = solved.map(chunk_support_vectors)
    if _piece_is_small(sc, float(n_support) * row_bytes):
        collected = pieces.collect()
    else:
        numbered = pieces.filter(lambda piece: piece[0].size > 0).zipWithIndex()
        count = numbered.count()
        collected = list(numbered.map(lambda pair: (pair[1], pair[0]))
                         .partitionBy(max(1, count), lambda key: key).values().toLocalIterator())
    sc.setJobDescription(None)
    if not collected:
        return KernelExpansion(np.zeros((0, n_features)), np.zeros((0, 1)), kernel, classes)
    ids = np.concatenate([piece[0] for piece in collected])
    order = np.argsort(ids, kind="stable")
    support_vectors = stack_rows([piece[1] for piece in collected])[order]
    coef = np.concatenate([piece[2] for piece in collected])[order]
    return KernelExpansion(support_vectors, coef if multi else coef[:, None], kernel, classes)

