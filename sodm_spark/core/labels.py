"""Labels as the solvers code them, and back; labels and accuracy from decision values.

Two classes are coded ±1 (``classes[1]``, the larger label, is +1: f > 0 predicts it); three or
more are class numbers 0..C-1 in the order of the sorted labels (one-vs-rest, one score per
class: the largest wins). Every path codes, decodes and scores labels with these functions: the
estimators, the Spark preparation of the rows, the levels' validation and test scores, the
search and DSVRG.
"""
from __future__ import annotations

import numpy as np
import numpy.typing as npt


def plus_minus(y: npt.ArrayLike, positive: object) -> np.ndarray:
    """Raw labels as ±1 (float64), ``positive`` as +1."""
    return np.where(np.asarray(y) == positive, 1.0, -1.0)


def coded_labels(y: npt.ArrayLike, classes: npt.ArrayLike) -> np.ndarray:
    """Raw labels ``y`` of the sorted label values ``classes`` as the solvers take them: ±1
    for two classes, else the class numbers (float64)."""
    classes = np.asarray(classes)
    if classes.size > 2:
        return np.searchsorted(classes, y).astype(np.float64)
    return plus_minus(y, classes[1])


def raw_labels(y: np.ndarray, classes: npt.ArrayLike) -> np.ndarray:
    """Coded labels (±1, or class numbers for 3+ classes) back to the label values."""
    classes = np.asarray(classes)
    return classes[(y > 0).astype(np.int64)] if classes.size == 2 else classes[y.astype(np.int64)]


def coded_classes(n_classes: int) -> np.ndarray:
    """The label values of the coded labels of ``n_classes`` classes: (-1, +1) for two (or 0,
    a binary problem), else 0..C-1."""
    return np.array([-1.0, 1.0]) if n_classes <= 2 else np.arange(n_classes)


def labels_from_scores(scores: npt.ArrayLike, classes: npt.ArrayLike) -> np.ndarray:
    """Labels from decision values: by the sign of f ((n,) or (n, 1): ``classes[1]`` when
    f > 0), else the class of the largest score."""
    scores = np.asarray(scores)
    labels: np.ndarray  # numpy types an array indexed by an array as Any
    if scores.ndim == 2 and scores.shape[1] > 1:
        labels = np.asarray(classes)[np.argmax(scores, axis=1)]
    else:
        labels = np.asarray(classes)[(scores.reshape(-1) > 0).astype(np.int64)]
    return labels


def correct_rows(scores: npt.ArrayLike, y: npt.ArrayLike, classes: npt.ArrayLike) -> np.ndarray:
    """Which rows the scores label right (:func:`labels_from_scores`); ``y`` in the labels of
    ``classes``: raw, or coded with :func:`coded_classes`."""
    right: np.ndarray = labels_from_scores(scores, classes) == np.asarray(y)  # numpy: Any
    return right


def accuracy_of_scores(scores: npt.ArrayLike, y: npt.ArrayLike,
                       classes: npt.ArrayLike) -> float:
    """Share of rows the scores label right (:func:`correct_rows`)."""
    return float(np.mean(correct_rows(scores, y, classes)))
