"""Input checks shared by every estimator: messages say what is wrong, where, and what to do."""
from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, NoReturn

import numpy as np
import numpy.typing as npt
import scipy.sparse

if TYPE_CHECKING:  # for the annotations only: the workers' checks need not import numba
    from .sparse_rows import Rows

#: Largest feature magnitude accepted. Kernels square the features (‖x‖², x·z, Var X for
#: gamma='scale'); squares of values above ~1.3e154 overflow float64 and turn a model into NaN
#: (an RBF block of a 1e300 row is inf - inf). At 1e100 a square is 1e200 and even a sum of
#: 1e100 of them stays finite, so every kernel block and variance here is safe; real features
#: that large are placeholders (e.g. 1e300 or DBL_MAX for "missing"), not measurements.
MAX_ABS_VALUE = 1e100
#: The same bound for float32 rows (the kernel path's): squares overflow float32 above ~1.8e19,
#: so a feature may be at most 1e15 (a square 1e30; sums of 10^6 of them stay finite).
MAX_ABS_FLOAT32 = 1e15


def max_abs_value(dtype: npt.DTypeLike) -> float:
    """The largest feature magnitude accepted for rows of ``dtype``."""
    return MAX_ABS_FLOAT32 if np.dtype(dtype) == np.float32 else MAX_ABS_VALUE

_RESCALE_ADVICE = ("Rescale those features (e.g. sklearn.preprocessing.StandardScaler or "
                   "MaxAbsScaler), or, if they are placeholders for missing values, remove or "
                   "impute them")


def check_odm_params(lam: object, theta: object, v: object) -> None:
    """ODM hyperparameters of docs/design.md §1: λ > 0, θ ∈ [0, 1), v ∈ (0, 1]."""
    if not (isinstance(lam, (int, float, np.number)) and np.isfinite(lam) and lam > 0):
        raise ValueError(f"lam (λ) must be a positive finite number, got {lam!r}.")
    if not (isinstance(theta, (int, float, np.number)) and 0.0 <= theta < 1.0):
        raise ValueError(f"theta (θ) must lie in [0, 1), got {theta!r}.")
    if not (isinstance(v, (int, float, np.number)) and 0.0 < v <= 1.0):
        raise ValueError(f"v (μ in libodm) must lie in (0, 1], got {v!r}.")


def check_positive_int(value: float, name: str) -> None:
    """Refuse ``value`` unless it is a whole number >= 1, naming the setting ``name``."""
    if int(value) != value or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}.")


def describe_rows(rows: np.ndarray, limit: int = 10) -> str:
    """'rows 3, 17 and 5 more' — 0-based row numbers, the first ``limit`` of them."""
    rows = np.asarray(rows)
    shown = ", ".join(str(int(r)) for r in rows[:limit])
    more = f" and {rows.size - limit} more" if rows.size > limit else ""
    return f"row{'s' if rows.size > 1 else ''} {shown}{more}"


def check_finite_rows(X: Rows, what: str = "X") -> None:
    """Refuse NaN, ±inf or a magnitude above :data:`MAX_ABS_VALUE`, naming the (0-based) rows
    and the first bad column (NaN and ±inf are reported first, the magnitude after).

    ``X`` is a dense array or a scipy CSR matrix (only its stored values are checked).
    """
    if scipy.sparse.issparse(X):
        X = X.tocsr()
        value_rows = np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))
        for bad in (~np.isfinite(X.data), ~_within_limit(X.data)):
            positions = np.flatnonzero(bad)
            if positions.size:
                first = positions[0]
                _refuse(what, np.unique(value_rows[positions]), value_rows[first],
                        X.indices[first], X.data[first])
        return
    ok = _within_limit(X)
    if ok.all():
        return
    for bad in (~np.isfinite(X), ~ok):
        bad_rows = np.flatnonzero(bad.any(axis=1))
        if bad_rows.size:
            first_col = int(np.flatnonzero(bad[bad_rows[0]])[0])
            _refuse(what, bad_rows, bad_rows[0], first_col, X[bad_rows[0], first_col])


def bad_value_rows(indptr: np.ndarray, values: np.ndarray, labels: np.ndarray,
                   limit: float) -> tuple[np.ndarray, np.ndarray]:
    """Of CSR rows (``indptr``, stored ``values``, ``labels``): the rows whose label or a value
    is NaN or ±inf, and the other rows holding a value beyond ±``limit`` (ascending row
    numbers each)."""
    value_rows = np.repeat(np.arange(labels.size), np.diff(indptr))
    finite = np.isfinite(values)
    bad = np.union1d(value_rows[~finite], np.flatnonzero(~np.isfinite(labels)))
    huge = np.setdiff1d(value_rows[finite & (np.abs(values) > limit)], bad)
    return bad, huge


def _within_limit(values: np.ndarray) -> np.ndarray:
    """Finite and at most MAX_ABS_VALUE in magnitude (only float64 can exceed it finitely)."""
    within: np.ndarray  # numpy types these comparisons as Any
    if values.dtype.kind == "f" and float(np.finfo(values.dtype).max) > MAX_ABS_VALUE:
        within = np.abs(values) <= MAX_ABS_VALUE  # False for NaN and ±inf as well
    else:
        within = np.isfinite(values)
    return within


def _refuse(what: str, bad_rows: np.ndarray, first_row: int, first_col: int,
            first_value: float) -> NoReturn:
    where = (f"{describe_rows(bad_rows)} (0-based; first at row {first_row}, column "
             f"{first_col}: {float(first_value)!r})")
    if not np.isfinite(first_value):
        raise ValueError(f"{what} contains NaN or infinity in {where}. Remove or impute those "
                         "values before fitting.")
    raise ValueError(f"{what} holds values beyond ±{MAX_ABS_VALUE:g} in {where}; kernels square "
                     f"the features and would overflow to NaN. {_RESCALE_ADVICE}.")


def check_numeric_cells(X: object, what: str = "X") -> None:
    """Refuse text cells in an object/string array or DataFrame, naming the row and column.

    Cheap for numeric input (nothing to do); call it before scikit-learn's ``validate_data``,
    whose "could not convert string to float" names neither. Cells that are not text (e.g. a
    dict) are left for ``validate_data`` to refuse with its own TypeError.
    """
    if scipy.sparse.issparse(X) or getattr(getattr(X, "dtype", None), "kind", "O") in "biufc":
        return
    columns = getattr(X, "columns", None)
    try:
        values = np.asarray(X)
    except Exception:  # ragged nested lists and the like: validate_data explains those
        return
    if values.ndim != 2 or values.dtype.kind not in "OUS":
        return
    for j in range(values.shape[1]):
        try:
            values[:, j].astype(np.float64)
        except TypeError:
            return
        except ValueError:
            for i, cell in enumerate(values[:, j]):  # error path only: find the culprit
                try:
                    float(cell)
                except ValueError:
                    name = f" ({columns[j]!r})" if columns is not None else ""
                    cell = str(cell) if isinstance(cell, (str, bytes)) else cell
                    raise ValueError(
                        f"{what} holds the non-numeric value {cell!r} at row {i}, column "
                        f"{j}{name} (0-based). Every feature must be a number: convert or "
                        "encode that column (e.g. sklearn.preprocessing.OneHotEncoder for "
                        "categories), or drop it.") from None


def shown_classes(classes: npt.ArrayLike) -> str:
    """The first ten label values, as a message shows them."""
    classes = np.asarray(classes)
    return ", ".join(f"{c:g}" if isinstance(c, (float, np.floating)) else str(c)
                     for c in classes[:10]) + (", ..." if classes.size > 10 else "")


def check_two_classes(classes: npt.ArrayLike, where: str, method: str,
                      more: str = "train one model per class against the rest") -> None:
    """Refuse label sets that are not exactly two classes, for the binary-only methods
    (``more``: what to do with more classes)."""
    classes = np.asarray(classes)
    if classes.size == 2:
        return
    raise ValueError(
        f"{where}: the labels hold {classes.size} class{'es' if classes.size != 1 else ''} "
        f"({shown_classes(classes)}); {method} is a binary classifier and needs exactly two "
        "label values (e.g. 0/1 or -1/+1). Check that the label column is the right one, or "
        f"keep the rows of two classes (for more, {more}).")


def seed_from(random_state: object) -> int:
    """The integer seed of an estimator's ``random_state`` (None means 0, so fits repeat).

    Only non-negative ints are taken: a ``RandomState`` instance would make a retried Spark
    task draw different numbers from the first attempt.
    """
    if random_state is None:
        return 0
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool) \
            and int(random_state) >= 0:
        return int(random_state)
    raise ValueError(f"random_state must be a non-negative int or None, got {random_state!r}.")
