"""The logloss of decision values on the validation slice: probabilities from Platt's sigmoids
cross-fitted over two seeded halves of the slice, and the loss's per-row terms for a paired
comparison (pure numpy; :mod:`.metrics` explains both, docs/design.md §2.7).

Platt (*Probabilistic Outputs for Support Vector Machines and Comparisons to Regularized
Likelihood Methods*) fitted his sigmoid on decision values the model was not trained on; here
the slice is held out of training, and each half's probabilities come from sigmoids fitted on
the other half only, so no row is scored by a calibration fitted on itself.
"""
from __future__ import annotations

import numpy as np

from ..models.calibration import SigmoidCalibration

#: Probabilities are kept this far from 0 and 1 before the log (scikit-learn's eps once was).
PROBABILITY_CLIP = 1e-15
_HALVES_STREAM = 137  # the stream of the seeded halves


def class_numbers(labels, binary: bool) -> np.ndarray:
    """Labels as class numbers: two classes given as ±1 or 0/1 become 0/1."""
    labels = np.asarray(labels)
    return (labels > 0).astype(np.int64) if binary else labels.astype(np.int64)


def _halves(n: int, seed) -> tuple:
    """The two seeded halves of n rows the logloss's calibrations are cross-fitted over."""
    if n < 2:
        raise ValueError("cross-fitted probabilities need at least two rows.")
    order = np.random.default_rng([seed, _HALVES_STREAM]).permutation(n)
    return order[:n // 2], order[n // 2:]


def cross_fitted_probabilities(scores, labels, seed=0) -> np.ndarray:
    """(n, C) class probabilities of decision values ``scores`` (labels as
    :class:`~.metrics.Evaluation` takes them): the rows cut into two halves by a seeded permutation,
    each half's probabilities from Platt's sigmoids fitted on the other half."""
    return _cross_fit(np.asarray(scores, dtype=np.float64), labels, seed)[0]


def _cross_fit(scores, labels, seed):
    """(probabilities, [(rows fitted on, rows scored, their calibration)] both ways)."""
    binary = scores.ndim == 1
    labels = class_numbers(labels, binary)
    n_classes = 2 if binary else scores.shape[1]
    halves = _halves(labels.size, seed)
    probabilities, fits = np.empty((labels.size, n_classes)), []
    for fitted, scored in (halves, halves[::-1]):
        calibration = SigmoidCalibration.fit(scores[fitted], labels[fitted], n_classes)
        probabilities[scored] = calibration.probabilities(scores[scored])
        fits.append((fitted, scored, calibration))
    return probabilities, fits


def logloss_terms(scores, labels, w, seed):
    """(logloss, per-row terms, one stratum). A row's term is its own loss's share, plus,
    for the rows a calibration was fitted on, their pull on the loss of the other half
    through that calibration's (A, B): −Gᵀ H⁻¹ ψ_j, with ψ_j the row's gradient of Platt's
    objective, H its Hessian and G the gradient of the scored half's weighted loss (the
    M-estimator's sandwich). Fitted on the same loss, the pull would vanish to first order;
    normalized one-vs-rest sigmoids do not minimize the multi-class loss, and leaving it out
    put the 3-class error a quarter low in simulation."""
    probabilities, fits = _cross_fit(scores, labels, seed)
    rows = np.arange(labels.size)
    p = np.clip(probabilities[rows, labels], PROBABILITY_CLIP, 1.0 - PROBABILITY_CLIP)
    loss = -np.log(p)
    total = w.sum()
    value = float(w @ loss / total)
    terms = w * (loss - value) / total
    columns = scores[:, None] if scores.ndim == 1 else scores
    # the rows each sigmoid takes as positive: the second class's, or class k's
    positive = labels[:, None] == (np.array([1]) if scores.ndim == 1
                                   else np.arange(columns.shape[1]))[None, :]
    for fitted, scored, calibration in fits:
        # σ_k = P(class k | f_k) of each sigmoid, on the scored half
        sigma = 1.0 / (1.0 + np.exp(np.clip(columns[scored] * calibration.slopes
                                            + calibration.intercepts, -700.0, 700.0)))
        if scores.ndim == 1:  # ℓ = −log σ or −log(1 − σ): ∂ℓ/∂z = y − σ
            slope = positive[scored] - sigma
        else:  # ℓ = −log σ_y + log Σσ_k: ∂ℓ/∂z_k = σ_k(1 − σ_k)([k = y]/σ_y − 1/Σσ)
            own = sigma[np.arange(scored.size), labels[scored]][:, None]
            slope = sigma * (1.0 - sigma) * (positive[scored] / own
                                             - 1.0 / sigma.sum(axis=1, keepdims=True))
        for k in range(columns.shape[1]):
            f_scored, f_fitted = columns[scored, k], columns[fitted, k]
            gradient = np.array([w[scored] * slope[:, k] @ f_scored,
                                 w[scored] @ slope[:, k]])
            is_positive = positive[fitted, k]
            n_pos = float(is_positive.sum())
            targets = np.where(is_positive, (n_pos + 1.0) / (n_pos + 2.0),
                               1.0 / (fitted.size - n_pos + 2.0))
            q = 1.0 / (1.0 + np.exp(np.clip(calibration.slopes[k] * f_fitted
                                            + calibration.intercepts[k], -700.0, 700.0)))
            curvature = q * (1.0 - q)
            hessian = np.array([[f_fitted ** 2 @ curvature, f_fitted @ curvature],
                                [f_fitted @ curvature, curvature.sum()]]) + 1e-12 * np.eye(2)
            pull = np.linalg.solve(hessian, gradient)  # H⁻¹G (H is symmetric)
            residual = targets - q
            terms[fitted] -= (pull[0] * f_fitted + pull[1]) * residual / total
    return value, terms, np.zeros(labels.size, dtype=np.int64)
