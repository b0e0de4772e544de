"""The kernel expansion a solved SODM level defines, made on the driver without passing the whole
support set through it at once (SODM paper, Algorithm 1, the model of the last level).

ODM duals are dense: a level of 600,000 rows × 784 features has ~340,000 support vectors, 1 GB
of float32 — more than Spark's default ``spark.driver.maxResultSize``. So the model is either

* **compressed in place** (:func:`compress_level`, the reduced-set projection of
  :mod:`sodm_spark.compression`): the tasks sample candidate points and fit rows among their
  support vectors, f on the fit rows is summed from the tasks' partial scores, and only the
  small least-squares solve runs on the driver; or
* **collected in pieces** (:func:`collect_level`): the support vectors of every chunk, at most
  16 MB each, fetched one Spark partition at a time when they would not fit the result limit.
"""
from __future__ import annotations

import numpy as np

from ..compression import candidates_wanted, choose_points, fit_coefficients, fit_rows_wanted
from ..model import KernelExpansion
from .memory import result_limit_mb
from .sodm_tasks import chunk_support_vectors, partial_scores


def level_scores(sc, solved, X_eval, kernel_dict, what="score rows"):
    """f of a solved level on ``X_eval`` (driver rows), summed from every chunk's share."""
    sc.setJobDescription(f"SODM: {what}")
    rows = sc.broadcast(np.asarray(X_eval, dtype=np.float32))
    try:
        return solved.map(lambda item: partial_scores(item, rows.value, kernel_dict)) \
            .treeReduce(np.add)
    finally:
        rows.unpersist()


def _sample_support(item, candidate_share, fit_share, seed, largest):
    """(candidate rows, their |α|, fit rows) sampled from a chunk's support vectors, seeded by
    the chunk's first row id (the same whatever task or attempt reads it)."""
    ids, X, coef = chunk_support_vectors(item)
    if ids.size == 0:
        return X[:0], np.zeros(0), X[:0]
    rng = np.random.default_rng([seed, 19, int(ids[0])])
    weight = np.abs(coef).reshape(ids.size, -1).sum(axis=1)
    if largest:  # this chunk's largest |α|: the global largest are among them
        candidates = np.argsort(-weight, kind="stable")[:largest]
    else:
        candidates = np.flatnonzero(rng.random(ids.size) < candidate_share)
    fit = np.flatnonzero(rng.random(ids.size) < fit_share)
    return X[candidates], weight[candidates], X[fit]


def compress_level(sc, solved, kernel, classes, n_support: int, n_points: int,
                   method: str = "random", seed: int = 0, ridge: float = 1e-6):
    """The level's model projected onto ``n_points`` of its support vectors (see the module
    docstring): (KernelExpansion, rows the data fit used)."""
    kernel_dict = kernel.to_dict()
    wanted, n_fit = candidates_wanted(method, n_points), fit_rows_wanted(n_points)
    # a little more than wanted, so that the seeded draws rarely fall short
    candidate_share = min(1.0, 1.1 * wanted / max(n_support, 1))
    fit_share = min(1.0, 1.1 * n_fit / max(n_support, 1))
    largest = n_points if method == "largest" else 0
    sc.setJobDescription(f"SODM: sample the compression's points ({method}) and fit rows")
    samples = solved.map(lambda item: _sample_support(item, candidate_share, fit_share, seed,
                                                      largest)).collect()
    candidates = np.concatenate([s[0] for s in samples])
    weights = np.concatenate([s[1] for s in samples])
    rows = np.concatenate([s[2] for s in samples])
    rng = np.random.default_rng([seed, 12])
    if method == "largest":
        candidates = candidates[np.argsort(-weights, kind="stable")[:n_points]]
    elif candidates.shape[0] > wanted:
        candidates = candidates[np.sort(rng.choice(candidates.shape[0], wanted, replace=False))]
    if rows.shape[0] > n_fit:
        rows = rows[np.sort(rng.choice(rows.shape[0], n_fit, replace=False))]
    points = choose_points(np.asarray(candidates, dtype=np.float64), n_points, method, kernel,
                           seed)
    targets = level_scores(sc, solved, rows, kernel_dict, "the compression's fit targets")
    beta = fit_coefficients(kernel, points, np.asarray(rows, dtype=np.float64), targets, ridge)
    sc.setJobDescription(None)
    return KernelExpansion(points.astype(np.float32), beta, kernel, classes), rows.shape[0]


def _piece_is_small(sc, piece_bytes: float) -> bool:
    limit_mb = result_limit_mb(sc)
    return limit_mb <= 0 or piece_bytes / 2**20 < 0.5 * limit_mb  # 0: no limit


def collect_level(sc, solved, kernel, classes, n_support: int, n_features: int,
                  itemsize: int, multi: bool) -> KernelExpansion:
    """The level's whole model on the driver, its support vectors in row-id order: one
    ``collect`` when they fit half of ``spark.driver.maxResultSize``, else one chunk per job
    (``toLocalIterator`` over chunks dealt one to a Spark partition)."""
    sc.setJobDescription("SODM: collect the model")
    pieces = solved.map(chunk_support_vectors)
    if _piece_is_small(sc, float(n_support) * n_features * itemsize):
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
    support_vectors = np.concatenate([piece[1] for piece in collected])[order]
    coef = np.concatenate([piece[2] for piece in collected])[order]
    return KernelExpansion(support_vectors, coef if multi else coef[:, None], kernel, classes)

