"""What every scikit-learn estimator here runs first (ODMClassifier and baselines/).

``__init__`` keeps its parameters as given (:func:`keep_params`); ``fit`` and
``decision_function`` take X, y the same way everywhere: numeric cells, float64, finite rows
of bounded magnitude (:mod:`sodm_spark.core.validation` words the refusals), class labels encoded
against ``classes_``; ``predict`` maps decision values to labels. Driver-side only: it imports
scikit-learn, which Spark workers never load (they import :mod:`sodm_spark.core.validation` alone).

Feature names, so that no reordering of a DataFrame's columns gives a silently wrong answer
(:mod:`sodm_spark.core.feature_names`): fitted on a DataFrame whose column names are all
strings, an estimator keeps ``feature_names_in_`` as scikit-learn does, and
:func:`with_fit_features` gives its ``model_`` those names and the columns' dtypes. Every
method that scores rows takes a DataFrame's columns **by name** (:func:`columns_in_fit_order`):
any order gives the same answer, a column the fit did not see is left out with one
``UserWarning`` line, a missing one is refused with one line naming it. Here the estimators
part from scikit-learn, which refuses reordered columns: the columns are reordered instead.
Rows without names (arrays, CSR) stay positional, only their width checked, and scikit-learn's
own warnings stay where one side has names and the other none ("X does not have valid feature
names, but ... was fitted with feature names" and the converse).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from .feature_names import checked_names, frame_in_order, named_columns
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
    names = frame_names(X)
    if names is not None:  # a repeated name could not be taken by name when scoring
        checked_names(names, "X")
    check_numeric_cells(X, "X")
    rows, labels = validate_data(estimator, X, y, dtype=np.float64, ensure_all_finite=False,
                                 accept_sparse=accept_sparse, y_numeric=regression)
    # the dtypes go into model_ with the names (with_fit_features); validate_data has set
    # feature_names_in_, or deleted it for rows without names
    estimator._feature_types_in = (
        _column_types(X) if getattr(estimator, "feature_names_in_", None) is not None
        else None)
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


def frame_names(X: object) -> list[str] | None:
    """The column names of a DataFrame ``X`` when every one is a string (scikit-learn's rule
    for ``feature_names_in_``), else None: arrays, CSR, and frames of unnamed (integer)
    columns are rows without names (:func:`~sodm_spark.core.feature_names.named_columns`)."""
    return named_columns(X)


def _column_types(X: object) -> tuple[str, ...] | None:
    """The dtype name of each column of the DataFrame ``X`` (NumPy's: "float64", "int64",
    "bool"; an extension dtype's own name), None when it says none."""
    dtypes = getattr(X, "dtypes", None)
    if dtypes is None:
        return None
    return tuple(str(getattr(kind, "name", kind)) for kind in dtypes)


def with_fit_features(estimator: BaseEstimator, model: Any) -> Any:
    """``model`` (a :class:`~sodm_spark.models.expansion.KernelExpansion`) with the feature
    names ``estimator`` was fitted with and their dtypes, so that a saved model, the MLflow
    flavor and the ONNX export take the columns by name too; unchanged after a fit on rows
    without names."""
    names = getattr(estimator, "feature_names_in_", None)
    if names is None:
        return model
    return model.with_features([str(name) for name in names],
                               getattr(estimator, "_feature_types_in", None))


def columns_in_fit_order(estimator: BaseEstimator, X: object, where: str = "X") -> object:
    """``X`` with the columns ``estimator`` was fitted on, by name, in the fit's order, where
    both have names (module docstring): a DataFrame whose columns come in another order is
    reordered, not refused as scikit-learn would; the columns the fit did not see are left out
    with one ``UserWarning`` line naming them; a missing one is refused (an InputError, a
    ValueError) naming it. Anything else is returned as it is, for validate_data's positional
    checks (the width) and scikit-learn's warnings."""
    fitted = getattr(estimator, "feature_names_in_", None)
    return frame_in_order(X, None if fitted is None else list(fitted), where, stacklevel=5)


def check_predict_data(estimator: BaseEstimator, X: object, *,
                       accept_sparse: bool | str = False) -> Rows:
    """X validated for a fitted estimator's decision function: a DataFrame's columns taken by
    name (:func:`columns_in_fit_order`), rows without names as the fit's columns in order."""
    check_is_fitted(estimator)
    X = columns_in_fit_order(estimator, X)
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
