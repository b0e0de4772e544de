"""Class probabilities from decision values, fitted on held-out rows: Platt's sigmoid, or an
isotonic (monotone step) map.

Platt (*Probabilistic Outputs for Support Vector Machines and Comparisons to Regularized
Likelihood Methods*) maps a decision value f to P(y = +1 | f) = 1 / (1 + exp(A·f + B)), with
(A, B) minimizing the cross-entropy against smoothed targets t_i = (N₊ + 1)/(N₊ + 2) for
positive rows and 1/(N₋ + 2) for negative ones (a prior that keeps a separable slice from
driving A to -∞). The minimization is the Newton method with a backtracking line search of
Lin, Lin and Weng (*A Note on Platt's Probabilistic Outputs for Support Vector Machines*):
the objective written so that no exp overflows, the Hessian regularized by σ = 1e-12.

The isotonic map of Zadrozny and Elkan (*Transforming Classifier Scores into Accurate
Multiclass Probability Estimates*) is the non-decreasing function of f closest in squared error
to the 0/1 labels: pool-adjacent-violators over the rows sorted by f (tied values pooled
first), kept as the points where it changes and read between them by linear interpolation,
as scikit-learn's ``IsotonicRegression(out_of_bounds="clip")`` reads it; outside the fitted
range it keeps its end values. It assumes nothing about the shape of the map, so it needs more
held-out rows than the sigmoid's two numbers (Niculescu-Mizil and Caruana, *Predicting Good
Probabilities With Supervised Learning*: with few rows the sigmoid does as well or better).

Two classes: one map of f (the score of the second class), P(first class) = 1 − P(second).
Three or more: one map per class of its one-vs-rest score, the probabilities of a row divided
by their sum (a row that every map sends to 0 gets equal probabilities), as scikit-learn's
``CalibratedClassifierCV`` combines one-vs-rest calibrations. The rows a calibration is fitted
on must be held out from training (the fit's validation slice, docs/design.md §2.7, or
out-of-fold decision values): on training rows the decision values are optimistic.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from scipy.special import expit

#: The calibrations a fit can ask for ("none": no probabilities); the first is the default.
METHODS = ("sigmoid", "isotonic")
CALIBRATIONS = (*METHODS, "none")

#: Newton's stopping tolerance on the gradient, the smallest line-search step, the Hessian's
#: ridge and the most iterations (Lin, Lin and Weng's values).
GRADIENT_TOL, MIN_STEP, HESSIAN_RIDGE, MAX_NEWTON_STEPS = 1e-5, 1e-10, 1e-12, 100


def _objective(a: float, b: float, f: np.ndarray, t: np.ndarray) -> float:
    """Σ_i t_i z_i + log(1 + e^{-z_i}) with z = a·f + b: the cross-entropy of the sigmoid
    against the targets, in a form whose exponentials cannot overflow."""
    z = a * f + b
    return float(np.sum(t * z + np.logaddexp(0.0, -z)))


def _checked(scores, positive) -> tuple[np.ndarray, np.ndarray]:
    """(float64 scores, booleans), one label per finite score, or a ValueError saying why."""
    f = np.asarray(scores, dtype=np.float64).ravel()
    positive = np.asarray(positive, dtype=bool).ravel()
    if f.shape != positive.shape or f.size == 0:
        raise ValueError(f"a calibration needs one label per score; got {f.size} scores and "
                         f"{positive.size} labels.")
    if not np.all(np.isfinite(f)):
        raise ValueError("a calibration needs finite decision values; some are NaN or inf.")
    return f, positive


def fit_sigmoid(scores, positive) -> tuple[float, float]:
    """Platt's (A, B) for decision values ``scores`` of rows whose class is ``positive``
    (booleans): P(positive | f) = 1 / (1 + exp(A·f + B))."""
    f, positive = _checked(scores, positive)
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


def _one_vs_rest(scores, labels, n_classes: int):
    """(score column, booleans) of each map a calibration fits: one of f for two classes (the
    second class's), one per class of its one-vs-rest score for more."""
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels).ravel()
    if n_classes == 2:
        return [(scores.ravel(), labels == 1)]
    if scores.ndim != 2 or scores.shape[1] != n_classes:
        raise ValueError(f"{n_classes} classes need one score column each; got scores of "
                         f"shape {scores.shape}.")
    return [(scores[:, c], labels == c) for c in range(n_classes)]


def _class_probabilities(p: np.ndarray) -> np.ndarray:
    """(n, C) rows summing to one from the maps' values ``p``: (n, 1) of two classes' second,
    or (n, C) one-vs-rest values divided by their sum (a row of zeros: equal shares)."""
    if p.shape[1] == 1:
        return np.column_stack([1.0 - p[:, 0], p[:, 0]])
    total = p.sum(axis=1, keepdims=True)
    uniform = np.full_like(p, 1.0 / p.shape[1])
    return np.where(total > 0, p / np.where(total > 0, total, 1.0), uniform)


@dataclass(frozen=True)
class SigmoidCalibration:
    """Platt's sigmoids: ``slopes`` and ``intercepts`` (A, B) of one sigmoid (two classes, of
    the second class's score) or one per class (one-vs-rest scores)."""

    slopes: np.ndarray
    intercepts: np.ndarray
    method: ClassVar[str] = "sigmoid"

    @classmethod
    def fit(cls, scores, labels, n_classes: int) -> "SigmoidCalibration":
        """Sigmoids for decision values ``scores`` ((n,) for two classes, (n, C) for C ≥ 3) of
        rows with class numbers ``labels`` (0 … C-1, as the classes are sorted)."""
        pairs = [fit_sigmoid(f, positive)
                 for f, positive in _one_vs_rest(scores, labels, n_classes)]
        slopes, intercepts = (np.array(values, dtype=np.float64) for values in zip(*pairs))
        return cls(slopes, intercepts)

    def probabilities(self, scores) -> np.ndarray:
        """(n, C) class probabilities of decision values ``scores``, rows summing to one."""
        scores = np.asarray(scores, dtype=np.float64)
        scores = scores.reshape(-1, 1) if self.slopes.size == 1 else scores
        return _class_probabilities(expit(-(scores * self.slopes + self.intercepts)))

    def to_dict(self) -> dict:
        """Plain numbers for a model's metadata.json."""
        return {"method": "sigmoid", "slopes": self.slopes.tolist(),
                "intercepts": self.intercepts.tolist()}

    @property
    def outputs(self) -> int:
        """The decision values it maps: one (two classes), else one per class."""
        return int(self.slopes.size)

    @classmethod
    def from_dict(cls, saved: dict) -> "SigmoidCalibration":
        _check_method(saved, cls.method)
        slopes, intercepts = (_finite(saved, key) for key in ("slopes", "intercepts"))
        if slopes.ndim != 1 or slopes.shape != intercepts.shape or slopes.size == 0:
            raise ValueError("a sigmoid calibration needs as many intercepts as slopes, at "
                             f"least one; got {slopes.shape} and {intercepts.shape}.")
        return cls(slopes, intercepts)


def fit_isotonic(scores, positive) -> tuple[np.ndarray, np.ndarray]:
    """The isotonic map of decision values ``scores`` onto rows whose class is ``positive``
    (booleans) as (thresholds, probabilities): the non-decreasing p(f) of least squared error
    against the 0/1 labels, at the points where it changes (each run of equal values by its
    two ends), increasing thresholds; read by :func:`numpy.interp`."""
    # scikit-learn's pool-adjacent-violators (compiled), imported here only: Spark's workers
    # import this module to score and never fit
    from sklearn.isotonic import isotonic_regression

    f, positive = _checked(scores, positive)
    # rows of one decision value are one point: their share of positives, weighted by count
    points, inverse, counts = np.unique(f, return_inverse=True, return_counts=True)
    shares = np.bincount(inverse, weights=positive.astype(np.float64)) / counts
    fitted = isotonic_regression(shares, sample_weight=counts.astype(np.float64),
                                 increasing=True)
    fitted = np.clip(fitted, 0.0, 1.0)  # weighted means of 0/1, up to rounding
    keep = np.ones(points.size, dtype=bool)  # inside a run of equal values nothing is read
    keep[1:-1] = (fitted[1:-1] != fitted[:-2]) | (fitted[1:-1] != fitted[2:])
    return points[keep], fitted[keep]


@dataclass(frozen=True)
class IsotonicCalibration:
    """Isotonic maps (:func:`fit_isotonic`): the ``thresholds[k]`` of map k and its
    probabilities there, ``values[k]``; one map (two classes, of the second class's score) or
    one per class (one-vs-rest scores), each with its own number of points."""

    thresholds: tuple
    values: tuple
    method: ClassVar[str] = "isotonic"

    @classmethod
    def fit(cls, scores, labels, n_classes: int) -> "IsotonicCalibration":
        """Maps for decision values ``scores`` ((n,) for two classes, (n, C) for C ≥ 3) of rows
        with class numbers ``labels`` (0 … C-1, as the classes are sorted)."""
        maps = [fit_isotonic(f, positive)
                for f, positive in _one_vs_rest(scores, labels, n_classes)]
        return cls(tuple(x for x, _ in maps), tuple(p for _, p in maps))

    def probabilities(self, scores) -> np.ndarray:
        """(n, C) class probabilities of decision values ``scores``, rows summing to one; a
        score outside a map's fitted range gets that map's end value."""
        scores = np.asarray(scores, dtype=np.float64)
        scores = scores.reshape(-1, 1) if len(self.thresholds) == 1 else scores
        return _class_probabilities(np.column_stack([
            np.interp(scores[:, k], x, p)
            for k, (x, p) in enumerate(zip(self.thresholds, self.values))]))

    def to_dict(self) -> dict:
        """Plain numbers for a model's metadata.json."""
        return {"method": "isotonic", "thresholds": [x.tolist() for x in self.thresholds],
                "probabilities": [p.tolist() for p in self.values]}

    @property
    def outputs(self) -> int:
        """The decision values it maps: one (two classes), else one per class."""
        return len(self.thresholds)

    @classmethod
    def from_dict(cls, saved: dict) -> "IsotonicCalibration":
        _check_method(saved, cls.method)
        thresholds = tuple(_finite(saved, "thresholds", k) for k in range(
            len(saved["thresholds"])))
        probabilities = tuple(_finite(saved, "probabilities", k) for k in range(
            len(saved["probabilities"])))
        if len(thresholds) != len(probabilities) or not thresholds or any(
                x.ndim != 1 or x.shape != p.shape or x.size == 0 or np.any(np.diff(x) < 0)
                for x, p in zip(thresholds, probabilities)):
            raise ValueError("an isotonic calibration needs, per map, as many probabilities "
                             "as thresholds, at least one, and the thresholds in order.")
        return cls(thresholds, probabilities)


CALIBRATION_CLASSES = {c.method: c for c in (SigmoidCalibration, IsotonicCalibration)}


def _finite(saved: dict, key: str, index: int | None = None) -> np.ndarray:
    """``saved[key]`` (its ``index``-th list) as float64, refused (a ValueError naming it)
    unless every number is finite: a NaN or an infinity would make every probability NaN."""
    values = np.asarray(saved[key] if index is None else saved[key][index], dtype=np.float64)
    if not np.all(np.isfinite(values)):
        where = key if index is None else f"{key}[{index}]"
        raise ValueError(f"{where} holds NaN or infinite numbers "
                         f"({values[~np.isfinite(values)][:3].tolist()}); a calibration's "
                         "numbers are all finite.")
    return values


def _check_method(saved: dict, method: str) -> None:
    if saved.get("method") != method:
        raise ValueError(f"calibration method {saved.get('method')!r} is not {method!r}.")


def fit_calibration(method: str, scores, labels, n_classes: int):
    """A calibration of ``method`` (one of :data:`CALIBRATIONS`; "none": None) fitted on
    held-out decision values ``scores`` of rows with class numbers ``labels``."""
    if method == "none":
        return None
    if method not in CALIBRATION_CLASSES:
        raise ValueError(f"calibration must be one of {', '.join(CALIBRATIONS)}, got "
                         f"{method!r}.")
    return CALIBRATION_CLASSES[method].fit(scores, labels, n_classes)


def calibration_from_dict(saved: dict):
    """The calibration a model's metadata.json holds (:meth:`SigmoidCalibration.to_dict`,
    :meth:`IsotonicCalibration.to_dict`)."""
    method = saved.get("method") if isinstance(saved, dict) else None
    if method not in CALIBRATION_CLASSES:
        raise ValueError(f"unknown calibration method {method!r}; this version reads "
                         f"{' and '.join(map(repr, METHODS))}.")
    return CALIBRATION_CLASSES[method].from_dict(saved)
