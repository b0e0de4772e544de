"""What every scikit-learn estimator here runs first (ODMClassifier and baselines/).

``__init__`` keeps its parameters as given (:func:`keep_params`); ``fit`` and
``decision_function`` take X, y the same way everywhere: numeric cells, float64, finite rows
of bounded magnitude (:mod:`sodm_spark.core.validation` words the refusals), class labels encoded
against ``classes_``; ``predict`` maps decision values to labels. Driver-side only: it imports
scikit-learn, which Spark workers never load (they import :mod:`sodm_spark.core.validation` alone).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from .labels import labels_from_scores
from .validation import check_finite_rows, check_numeric_cells

if TYPE_CHECKING:  # for the annotations only: sparse_rows imports numba
    from .sparse_rows import Rows


def keep_params(estimator: BaseEstimator, params: dict[str, Any]) -> None:
    """scikit-learn's ``__init__`` rule: every parameter stored unchanged under its own name.

    Call it as ``keep_params(self, locals())`` before anything else in ``__init__``, so that
    ``locals()`` holds the parameters alone.
    """
    for name, value in params.items():
        if name != "self":
            setattr(estimator, name, value)


def check_fit_data(estimator: BaseEstimator, X: object, y: object, *,
                   accept_sparse: bool | str = False,
                   regression: bool = False) -> tuple[Rows, np.ndarray]:
    """(X, y) validated for ``estimator.fit``: X float64 (CSR if ``accept_sparse``) with finite
    rows; y class labels, or numbers for a regressor (validate_data refuses a NaN or inf y)."""
    check_numeric_cells(X, "X")
    rows, labels = validate_data(estimator, X, y, dtype=np.float64, ensure_all_finite=False,
                                 accept_sparse=accept_sparse, y_numeric=regression)
    check_finite_rows(rows, "X")
    if not regression:
        check_classification_targets(labels)
    return rows, labels


def encode_classes(estimator: BaseEstimator, y: np.ndarray,
                   binary_error: Callable[[np.ndarray], str] | None = None) -> np.ndarray:
    """Set ``estimator.classes_`` (sorted labels) and return y as indices into it.

    One class is refused; with ``binary_error`` (classes -> message), anything but two.
    """
    estimator.classes_, y_index = np.unique(y, return_inverse=True)
    classes = estimator.classes_
    if binary_error is not None:
        if classes.size != 2:
            raise ValueError(binary_error(classes))
    elif classes.size < 2:
        raise ValueError(
            f"{type(estimator).__name__} needs at least two classes, but y has only one class "
            f"({classes[0]!r}) in {y.size} rows; check the label column.")
    return y_index


def check_predict_data(estimator: BaseEstimator, X: object, *,
                       accept_sparse: bool | str = False) -> Rows:
    """X validated for a fitted estimator's decision function (same columns as in fit)."""
    check_is_fitted(estimator)
    check_numeric_cells(X, "X")
    X = validate_data(estimator, X, dtype=np.float64, ensure_all_finite=False, reset=False,
                      accept_sparse=accept_sparse)
    check_finite_rows(X, "X")
    return X


def predict_labels(estimator: BaseEstimator, X: object) -> np.ndarray:
    """The labels a classifier predicts: ``classes_[1]`` where its 1-D decision function is
    > 0, else the class of the largest column (scores first: they check the fit;
    :func:`~sodm_spark.core.labels.labels_from_scores`)."""
    return labels_from_scores(estimator.decision_function(X), estimator.classes_)
