"""Class probabilities from decision values: Platt's sigmoid, fitted on held-out rows.

Platt (*Probabilistic Outputs for Support Vector Machines and Comparisons to Regularized
Likelihood Methods*) maps a decision value f to P(y = +1 | f) = 1 / (1 + exp(A·f + B)), with
(A, B) minimizing the cross-entropy against smoothed targets t_i = (N₊ + 1)/(N₊ + 2) for
positive rows and 1/(N₋ + 2) for negative ones (a prior that keeps a separable slice from
driving A to -∞). The minimization is the Newton method with a backtracking line search of
Lin, Lin and Weng (*A Note on Platt's Probabilistic Outputs for Support Vector Machines*):
the objective written so that no exp overflows, the Hessian regularized by σ = 1e-12.

Two classes: one sigmoid of f (the score of the second class). Three or more: one sigmoid per
class of its one-vs-rest score, the probabilities of a row normalized to sum to one (as
scikit-learn's ``CalibratedClassifierCV`` combines one-vs-rest sigmoids). The rows a
calibration is fitted on must be held out from training (the fit's validation slice,
docs/design.md §2.7): on training rows the decision values are optimistic.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import expit

#: Newton's stopping tolerance on the gradient, the smallest line-search step, the Hessian's
#: ridge and the most iterations (Lin, Lin and Weng's values).
GRADIENT_TOL, MIN_STEP, HESSIAN_RIDGE, MAX_NEWTON_STEPS = 1e-5, 1e-10, 1e-12, 100


def _objective(a: float, b: float, f: np.ndarray, t: np.ndarray) -> float:
    """Σ_i t_i z_i + log(1 + e^{-z_i}) with z = a·f + b: the cross-entropy of the sigmoid
    against the targets, in a form whose exponentials cannot overflow."""
    z = a * f + b
    return float(np.sum(t * z + np.logaddexp(0.0, -z)))


def fit_sigmoid(scores, positive) -> tuple[float, float]:
    """Platt's (A, B) for decision values ``scores`` of rows whose class is ``positive``
    (booleans): P(positive | f) = 1 / (1 + exp(A·f + B))."""
    f = np.asarray(scores, dtype=np.float64).ravel()
    positive = np.asarray(positive, dtype=bool).ravel()
    if f.shape != positive.shape or f.size == 0:
        raise ValueError(f"a calibration needs one label per score; got {f.size} scores and "
                         f"{positive.size} labels.")
    if not np.all(np.isfinite(f)):
        raise ValueError("a calibration needs finite decision values; some are NaN or inf.")
    n_pos = float(positive.sum())
    n_neg = f.size - n_pos
    t = np.where(positive, (n_pos + 1.0) / (n_pos + 2.0), 1.0 / (n_neg + 2.0))
    a, b = 0.0, float(np.log((n_neg + 1.0) / (n_pos + 1.0)))
    value = _objective(a, b, f, t)
    for _ in range(MAX_NEWTON_STEPS):
        p = expit(-(a * f + b))  # P(positive) at (a, b)
        d1, d2 = t - p, p * (1.0 - p)
        g1, g2 = float(f @ d1), float(d1.sum())
        if abs(g1) < GRADIENT_TOL and abs(g2) < GRADIENT_TOL:
            break
        h11 = HESSIAN_RIDGE + float((f * f) @ d2)
        h22 = HESSIAN_RIDGE + float(d2.sum())
        h21 = float(f @ d2)
        det = h11 * h22 - h21 * h21
        da, db = -(h22 * g1 - h21 * g2) / det, -(-h21 * g1 + h11 * g2) / det
        slope = g1 * da + g2 * db
        step = 1.0
        while step >= MIN_STEP:  # backtracking: sufficient decrease (Armijo, 1e-4)
            trial = _objective(a + step * da, b + step * db, f, t)
            if trial < value + 1e-4 * step * slope:
                a, b, value = a + step * da, b + step * db, trial
                break
            step /= 2.0
        else:  # no step decreases F: (a, b) is as good as Newton gets
            break
    return a, b


@dataclass(frozen=True)
class SigmoidCalibration:
    """Platt's sigmoids: ``slopes`` and ``intercepts`` (A, B) of one sigmoid (two classes, of
    the second class's score) or one per class (one-vs-rest scores)."""

    slopes: np.ndarray
    intercepts: np.ndarray

    @classmethod
    def fit(cls, scores, labels, n_classes: int) -> "SigmoidCalibration":
        """Sigmoids for decision values ``scores`` ((n,) for two classes, (n, C) for C ≥ 3) of
        rows with class numbers ``labels`` (0 … C-1, as the classes are sorted)."""
        scores = np.asarray(scores, dtype=np.float64)
        labels = np.asarray(labels).ravel()
        if n_classes == 2:
            pairs = [fit_sigmoid(scores.ravel(), labels == 1)]
        else:
            if scores.ndim != 2 or scores.shape[1] != n_classes:
                raise ValueError(f"{n_classes} classes need one score column each; got "
                                 f"scores of shape {scores.shape}.")
            pairs = [fit_sigmoid(scores[:, c], labels == c) for c in range(n_classes)]
        slopes, intercepts = (np.array(values, dtype=np.float64) for values in zip(*pairs))
        return cls(slopes, intercepts)

    def probabilities(self, scores) -> np.ndarray:
        """(n, C) class probabilities of decision values ``scores``, rows summing to one."""
        scores = np.asarray(scores, dtype=np.float64)
        if self.slopes.size == 1:
            p = expit(-(self.slopes[0] * scores.ravel() + self.intercepts[0]))
            return np.column_stack([1.0 - p, p])
        p = expit(-(scores * self.slopes + self.intercepts))
        total = p.sum(axis=1, keepdims=True)
        uniform = np.full_like(p, 1.0 / p.shape[1])
        return np.where(total > 0, p / np.where(total > 0, total, 1.0), uniform)

    def to_dict(self) -> dict:
        """Plain numbers for a model's metadata.json."""
        return {"method": "sigmoid", "slopes": self.slopes.tolist(),
                "intercepts": self.intercepts.tolist()}

    @classmethod
    def from_dict(cls, saved: dict) -> "SigmoidCalibration":
        if saved.get("method") != "sigmoid":
            raise ValueError(f"unknown calibration method {saved.get('method')!r}; this "
                             "version reads 'sigmoid' only.")
        return cls(np.asarray(saved["slopes"], dtype=np.float64),
                   np.asarray(saved["intercepts"], dtype=np.float64))
