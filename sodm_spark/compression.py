"""Compact kernel models by reduced-set projection; pure numpy, no Spark.

ODM duals are dense, so a SODM model keeps most training rows. A model
``f = Σ_i α_i k(x_i, ·)`` (one column of α per output) is replaced by
``f̃ = Σ_j β_j k(z_j, ·)`` over at most N points z, with β the RKHS least-squares projection
of f onto span{k(z_j, ·)}: minimizing ‖f − f̃‖²_H gives ``K_ZZ β = K_ZX α``, and
``K_ZX α`` is f evaluated at the z (one pass of the model over N rows). A small ridge
(relative to the kernel's diagonal) keeps the Cholesky of K_ZZ stable. The z are chosen
among the support vectors by

* ``random``: a seeded sample of the support vectors (as good as k-means centres at scale, and
  free; the measurements are beside :data:`KMEANS_CANDIDATES`);
* ``landmarks``: Eqn (8)'s greedy determinant maximization (pivoted incomplete Cholesky, as
  the strata use) on the support vectors — spread over the data in the RKHS;
* ``largest``: the rows with the largest |α| (summed over outputs);
* ``kmeans``: k-means centres of the support vectors (points of input space, not rows).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import scipy.linalg
import scipy.sparse

from .kernels import decision_values, kernel_matrix
from .model import KernelExpansion, labels_from_scores
from .partition import kmeans, select_landmarks

METHODS = ("random", "landmarks", "largest", "kmeans")
#: Why k-means compression refuses a model of sparse rows, and what to use instead.
SPARSE_KMEANS = ("compression method 'kmeans' places its points at k-means centres, which for "
                 "sparse rows are dense vectors of every feature; use 'random' or 'landmarks' "
                 "(points among the support vectors, kept sparse)")
FITS = ("data", "rkhs")
# "data" fits f on a seeded sample of the support vectors, FIT_ROWS_PER_POINT per point and at
# least FIT_ROWS. On 600,000 deformed Fashion-MNIST rows (a model of 338,829 SVs, test accuracy
# 0.9791), 5,000 random SVs fitted on 10,000 rows kept 0.9745, on 20,000 rows 0.9767
FIT_ROWS, FIT_ROWS_PER_POINT = 10_000, 4
# A SODM level's compression fits instead each row's own partition's f (times the partition
# count; free in the level's tasks, see sodm_spark.spark.level_model): LOCAL_FIT_ROWS_PER_POINT
# per point. Six exact ODMs on 22,222 deformed Fashion-MNIST rows each (their sum: test
# accuracy 0.9777), 5,000 random points: whole-model targets on 20,000 rows 0.9759; own-partition
# targets on 20,000 rows 0.9730, 40,000 0.9757, 60,000 0.9767
LOCAL_FIT_ROWS_PER_POINT = 12
# Eqn (8) keeps an n × N factor of the candidates: at most this many support vectors (a
# seeded sample) are candidates, which bounds it at 20,000 × N float64
MAX_CANDIDATES = 20_000
# k-means: centres only need to cover the support vectors, not to converge. On the binary
# Fashion-MNIST model (33,269 SVs → 2,000): 20,000 candidates and 100 iterations 34.5 s, test
# accuracy 0.9749; 10,000 and 5 iterations 16.5 s, 0.9755 (the full model: 0.9768). On the
# 338,829-SV model above, 5,000 centres (10 iterations, 25,000 candidates) kept 0.9770 and took
# 124 s; 5,000 random support vectors kept 0.9767 and took nothing.
KMEANS_CANDIDATES, KMEANS_ITERATIONS = 10_000, 10
#: ``max_sv="auto"``: models of more than AUTO_ABOVE support vectors are compressed to AUTO_POINTS
#: random ones — scoring then costs 2·AUTO_POINTS·d flops a row, not 2·n_sv·d (a 338,829-SV
#: model scores ~330 rows/s on 2 cores at d = 784; 5,000 points, over 10,000 rows/s).
AUTO_ABOVE, AUTO_POINTS = 100_000, 5_000


def most_points(max_sv) -> int | None:
    """The most points ``max_sv`` can compress a model to, whatever its size; None: never."""
    if max_sv is None or max_sv == "none":
        return None
    return AUTO_POINTS if max_sv == "auto" else int(max_sv)


def local_fit_share(max_sv, n_rows: int) -> float:
    """The share of a level's rows whose own partition's scores its tasks keep as a compression's
    fit targets: 0 when ``max_sv`` never compresses a model of ``n_rows`` rows."""
    points = most_points(max_sv)
    if points is None or (max_sv == "auto" and n_rows <= AUTO_ABOVE) or n_rows <= points:
        return 0.0
    return min(1.0, 1.05 * LOCAL_FIT_ROWS_PER_POINT * points / n_rows)


def resolve_max_sv(max_sv, n_support: int) -> int | None:
    """The number of points to compress to: ``max_sv`` ("auto", "none"/None, or N) for a model
    of ``n_support`` support vectors; None to keep the model as it is."""
    if max_sv is None or max_sv == "none":
        return None
    if max_sv == "auto":
        return AUTO_POINTS if n_support > AUTO_ABOVE else None
    if isinstance(max_sv, bool) or int(max_sv) != max_sv or max_sv < 1:
        raise ValueError(f"max_sv must be 'auto', 'none' or a positive integer, got {max_sv!r}.")
    return int(max_sv) if n_support > max_sv else None


def candidates_wanted(method: str, n_points: int) -> int:
    """How many support vectors ``method`` chooses its ``n_points`` points among."""
    if method not in METHODS:
        raise ValueError(f"unknown compression method {method!r}; known: {', '.join(METHODS)}.")
    if method in ("random", "largest"):
        return n_points
    return max(KMEANS_CANDIDATES, 5 * n_points) if method == "kmeans" else MAX_CANDIDATES


def fit_rows_wanted(n_points: int) -> int:
    """Support vectors the data fit samples for ``n_points`` points."""
    return max(FIT_ROWS, FIT_ROWS_PER_POINT * n_points)


def choose_points(candidates: np.ndarray, n_points: int, method: str, kernel,
                  seed: int = 0) -> np.ndarray:
    """The N points (rows) the compressed expansion is built on, among ``candidates`` (a
    seeded sample of the support vectors; for "largest", those with the largest |α|)."""
    if method not in METHODS:
        raise ValueError(f"unknown compression method {method!r}; known: {', '.join(METHODS)}.")
    if method in ("random", "largest") or candidates.shape[0] <= n_points:
        return candidates[:n_points]
    if method == "kmeans":
        if scipy.sparse.issparse(candidates):
            raise ValueError(SPARSE_KMEANS + ".")
        return kmeans(candidates, n_points, seed=seed, max_iter=KMEANS_ITERATIONS)
    return candidates[np.sort(select_landmarks(candidates, kernel, n_points))]


def _candidates(model: KernelExpansion, n_points: int, method: str, seed: int) -> np.ndarray:
    sv = model.support_vectors
    if method == "largest":
        weight = np.abs(model.coef).sum(axis=1)
        return sv[np.sort(np.argsort(-weight, kind="stable")[:n_points])]
    limit = candidates_wanted(method, n_points)
    if sv.shape[0] <= limit:
        return sv
    return sv[np.sort(np.random.default_rng([seed, 12]).choice(sv.shape[0], limit,
                                                               replace=False))]


def fit_coefficients(kernel, points: np.ndarray, rows: np.ndarray, targets: np.ndarray,
                     ridge: float = 1e-6, block_mb: float = 256.0) -> np.ndarray:
    """β of the data fit (module docstring): (K_ZS K_SZ + ridge·K_ZZ) β = K_ZS f(S), ``ridge``
    relative to the traces; targets (n,) or (n, outputs) give β (N, outputs). K_SZ is made a
    block of rows at a time (``block_mb``), so memory is N² + a block whatever n is."""
    targets = np.asarray(targets, dtype=np.float64).reshape(rows.shape[0], -1)
    n_points = points.shape[0]
    gram = kernel_matrix(kernel, points, dtype=np.float64)
    lhs = np.zeros((n_points, n_points))
    rhs = np.zeros((n_points, targets.shape[1]))
    step = max(1, int(block_mb * 2**20 // (8 * max(n_points, 1))))
    for start in range(0, rows.shape[0], step):
        cross = kernel_matrix(kernel, rows[start:start + step], points, dtype=np.float64)
        lhs += cross.T @ cross  # one triangle (syrk) for a product with its own transpose
        rhs += cross.T @ targets[start:start + step]
    lhs += ridge * gram * (np.trace(lhs) / np.trace(gram))
    return _cholesky_solve(lhs, rhs, 1e-10)


def _cholesky_solve(lhs, rhs, jitter):
    lhs[np.diag_indices_from(lhs)] += jitter * float(np.mean(np.diag(lhs)))
    factor = scipy.linalg.cho_factor(lhs, lower=True, check_finite=False)
    return scipy.linalg.cho_solve(factor, rhs, check_finite=False)


def compress(model: KernelExpansion, max_sv: int, method: str = "kmeans",
             ridge: float = 1e-6, seed: int = 0, fit: str = "data") -> KernelExpansion:
    """A model over at most ``max_sv`` points approximating ``model``'s decision function
    (module docstring); the model itself when it already has no more.

    ``fit="rkhs"``: β minimizes ‖f − f̃‖ in the RKHS (K_ZZ β = f(Z)). ``fit="data"``: β
    minimizes Σ_s (f(x_s) − f̃(x_s))² over a seeded sample S of the support vectors (the rows
    near the boundary, where predictions are decided), i.e. (K_ZS K_SZ + ridge·K_ZZ) β =
    K_ZS f(S) — the RKHS fit spends its points on directions of the RKHS the data never visit.
    ``ridge`` is relative to the mean diagonal of the matrix solved.
    """
    if int(max_sv) != max_sv or max_sv < 1:
        raise ValueError(f"max_sv must be a positive integer, got {max_sv!r}.")
    if not (np.isfinite(ridge) and ridge >= 0):
        raise ValueError(f"ridge must be a number >= 0, got {ridge!r}.")
    if fit not in FITS:
        raise ValueError(f"fit must be one of {', '.join(FITS)}, got {fit!r}.")
    if model.support_vectors.shape[0] <= max_sv:
        return model
    points = choose_points(_candidates(model, int(max_sv), method, seed), int(max_sv), method,
                           model.kernel, seed)
    coef = np.asarray(model.coef, dtype=np.float64)
    sv = model.support_vectors  # f in the kernel's input space (any feature scaling applied)
    if fit == "rkhs":
        gram = kernel_matrix(model.kernel, points, dtype=np.float64)
        beta = _cholesky_solve(gram, decision_values(model.kernel, points, sv, coef), ridge)
    else:
        n_rows = min(sv.shape[0], fit_rows_wanted(points.shape[0]))
        rows = sv[np.sort(np.random.default_rng([seed, 13]).choice(sv.shape[0], n_rows,
                                                                   replace=False))]
        targets = decision_values(model.kernel, rows, sv, coef, dtype=np.float32)
        beta = fit_coefficients(model.kernel, points, rows, targets, ridge)
    return replace(model, support_vectors=points,
                   coef=beta.reshape(points.shape[0], coef.shape[1]))


def compare(original: KernelExpansion, compressed: KernelExpansion, X, y) -> dict:
    """Accuracy of both models on (X, y) and the compressed decision function's error
    (:func:`compare_scores`)."""
    report = compare_scores(original.decision_function(X), compressed.decision_function(X),
                            y, original.classes)
    report["support_vectors_before"] = int(original.support_vectors.shape[0])
    report["support_vectors_after"] = int(compressed.support_vectors.shape[0])
    return report


def compare_scores(f, g, y, classes) -> dict:
    """Accuracy of the scores ``f`` (the model) and ``g`` (its compression) against the raw
    labels ``y``, the relative RMS ‖g − f‖ / ‖f‖, the largest |g − f| and the share of rows
    whose prediction changed."""
    f, g = np.asarray(f, dtype=np.float64), np.asarray(g, dtype=np.float64)
    before, after = labels_from_scores(f, classes), labels_from_scores(g, classes)
    y = np.asarray(y)
    return {"accuracy_before": float(np.mean(before == y)),
            "accuracy_after": float(np.mean(after == y)),
            "relative_rms_error": float(np.linalg.norm(g - f) / max(np.linalg.norm(f), 1e-300)),
            "max_abs_error": float(np.max(np.abs(g - f))) if f.size else 0.0,
            "predictions_changed": float(np.mean(before != after)), "rows": int(y.size)}
