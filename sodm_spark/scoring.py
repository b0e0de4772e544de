"""Scoring rows with a kernel model in float32 where it cannot change a prediction (issue
[12]); pure numpy, no Spark.

Kernel blocks against the support set are one GEMM each; float32 halves their time. A
float32 kernel entry is off by at most a few units of float32 rounding relative to the
entry's terms, so a row's score is off by at most about ``FLOAT32_SLACK · Σ_i |α_i|`` (the
kernels here have |k| ≤ 1 for rbf/laplacian; the bound is scaled by the largest |k| of the
block otherwise). Rows whose decision is closer to a boundary than twice that bound (|f| for
two classes, the gap between the two largest scores for more) are scored again in float64,
so the predictions are those of a float64 scoring.
"""
from __future__ import annotations

import numpy as np

from .kernels import Kernel, decision_values

# relative error of a float32 kernel entry, generously: the squared distance
# ‖x‖² + ‖z‖² − 2xᵀz loses digits to cancellation before exp
FLOAT32_SLACK = 1e-4
PRECISIONS = ("float32", "float64")


def raw_scores(X: np.ndarray, support_vectors: np.ndarray, coef: np.ndarray, kernel: Kernel,
               intercept=None, precision: str = "float32") -> tuple[np.ndarray, int]:
    """(scores (n, K) float64 with the intercept — K = 1 for two classes —, how many rows
    were re-scored in float64)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}.")
    coef = np.asarray(coef, dtype=np.float64).reshape(support_vectors.shape[0], -1)
    if kernel.name == "linear":  # a weight vector: one dot product per row, nothing to save
        precision = "float64"
    dtype = np.float32 if precision == "float32" else np.float64
    shift = 0.0 if intercept is None else np.asarray(intercept, np.float64).reshape(1, -1)
    scores = decision_values(kernel, X, support_vectors, coef, dtype=dtype) + shift
    rescored = 0
    if precision == "float32" and X.shape[0]:
        scale = 1.0 if kernel.name in ("rbf", "laplacian") else max(
            1.0, float(np.abs(kernel.diagonal(X)).max()),
            float(np.abs(kernel.diagonal(support_vectors)).max()) if support_vectors.size else 1.0)
        bound = FLOAT32_SLACK * scale * (1.0 + kernel.offset) * np.abs(coef).sum(axis=0).max()
        if scores.shape[1] == 1:
            margin = np.abs(scores[:, 0])
        else:
            top2 = np.partition(scores, scores.shape[1] - 2, axis=1)[:, -2:]
            margin = top2[:, 1] - top2[:, 0]
        near = np.flatnonzero(margin <= 2.0 * bound)
        if near.size:
            scores[near] = decision_values(kernel, X[near], support_vectors, coef) + shift
            rescored = int(near.size)
    return scores, rescored


def predictions(scores: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """Labels from (n, K) scores: the sign for K = 1, else the first largest score."""
    if scores.shape[1] == 1:
        return classes[(scores[:, 0] > 0).astype(np.int64)]
    return classes[np.argmax(scores, axis=1)]
