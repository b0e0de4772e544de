"""Compact kernel models by reduced-set projection (issue [12]); pure numpy, no Spark.

ODM duals are dense, so a SODM model keeps most training rows. A model
``f = Σ_i α_i k(x_i, ·)`` (one column of α per output) is replaced by
``f̃ = Σ_j β_j k(z_j, ·)`` over at most N points z, with β the RKHS least-squares projection
of f onto span{k(z_j, ·)}: minimizing ‖f − f̃‖²_H gives ``K_ZZ β = K_ZX α``, and
``K_ZX α`` is f evaluated at the z (one pass of the model over N rows). A small ridge
(relative to the kernel's diagonal) keeps the Cholesky of K_ZZ stable. The z are chosen
among the support vectors by

* ``landmarks``: Eqn (8)'s greedy determinant maximization (pivoted incomplete Cholesky, as
  the strata use) on the support vectors — spread over the data in the RKHS;
* ``largest``: the rows with the largest |α| (summed over outputs);
* ``kmeans``: k-means centres of the support vectors (points of input space, not rows).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import scipy.linalg

from .kernels import kernel_matrix
from .model import KernelExpansion
from .partition import kmeans, select_landmarks

METHODS = ("landmarks", "largest", "kmeans")
# Eqn (8) keeps an n × N factor of the candidates: at most this many support vectors (a
# seeded sample) are candidates, which bounds it at 20,000 × N float64
MAX_CANDIDATES = 20_000


def choose_points(model: KernelExpansion, n_points: int, method: str = "landmarks",
                  seed: int = 0) -> np.ndarray:
    """The N points (rows) the compressed expansion is built on."""
    if method not in METHODS:
        raise ValueError(f"unknown compression method {method!r}; known: {', '.join(METHODS)}.")
    sv = model.support_vectors
    rng = np.random.default_rng([seed, 12])
    if method == "largest":
        weight = np.abs(model.coef).sum(axis=1)
        return sv[np.sort(np.argsort(-weight, kind="stable")[:n_points])]
    candidates = sv if sv.shape[0] <= MAX_CANDIDATES else \
        sv[np.sort(rng.choice(sv.shape[0], MAX_CANDIDATES, replace=False))]
    if method == "kmeans":
        return kmeans(candidates, n_points, seed=seed)
    return candidates[np.sort(select_landmarks(candidates, model.kernel, n_points))]


def compress(model: KernelExpansion, max_sv: int, method: str = "landmarks",
             ridge: float = 1e-6, seed: int = 0) -> KernelExpansion:
    """A model over at most ``max_sv`` points approximating ``model``'s decision function
    (module docstring); the model itself when it already has no more. ``ridge`` is added to
    K_ZZ's diagonal as a share of its mean."""
    if int(max_sv) != max_sv or max_sv < 1:
        raise ValueError(f"max_sv must be a positive integer, got {max_sv!r}.")
    if not (np.isfinite(ridge) and ridge >= 0):
        raise ValueError(f"ridge must be a number >= 0, got {ridge!r}.")
    if model.support_vectors.shape[0] <= max_sv:
        return model
    points = choose_points(model, int(max_sv), method, seed)
    coef = np.asarray(model.coef, dtype=np.float64)
    # f at the new points, without the intercept (it stays as it is)
    plain = replace(model, intercept=None)
    targets = plain.decision_function(points).reshape(points.shape[0], -1)
    gram = kernel_matrix(model.kernel, points, dtype=np.float64)
    gram[np.diag_indices_from(gram)] += ridge * float(np.mean(np.diag(gram)))
    factor = scipy.linalg.cho_factor(gram, lower=True, check_finite=False)
    beta = scipy.linalg.cho_solve(factor, targets, check_finite=False)
    return KernelExpansion(points, beta.reshape(points.shape[0], coef.shape[1]), model.kernel,
                           model.classes, model.intercept)


def compare(original: KernelExpansion, compressed: KernelExpansion, X, y) -> dict:
    """Accuracy of both models on (X, y) and the compressed decision function's error:
    relative RMS ‖f̃ − f‖ / ‖f‖ and the largest |f̃ − f|, and the share of rows whose
    prediction changed."""
    f, g = original.decision_function(X), compressed.decision_function(X)
    before, after = original.predict(X), compressed.predict(X)
    y = np.asarray(y)
    return {"support_vectors_before": int(original.support_vectors.shape[0]),
            "support_vectors_after": int(compressed.support_vectors.shape[0]),
            "accuracy_before": float(np.mean(before == y)),
            "accuracy_after": float(np.mean(after == y)),
            "relative_rms_error": float(np.linalg.norm(g - f) / max(np.linalg.norm(f), 1e-300)),
            "max_abs_error": float(np.max(np.abs(g - f))) if f.size else 0.0,
            "predictions_changed": float(np.mean(before != after)), "rows": int(y.size)}
