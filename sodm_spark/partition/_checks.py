"""Input checks shared by the partition helpers (clear ValueErrors, no silent garbage)."""
from __future__ import annotations

import numbers

import numpy as np
import scipy.sparse

from ..core.validation import check_finite_rows


def as_rows(X, what: str = "X", allow_empty: bool = False, sparse: bool = False):
    """``X`` as a 2-D numeric array of finite values (with ``sparse``, a CSR matrix stays
    one); empty only when ``allow_empty``."""
    if scipy.sparse.issparse(X) and not sparse:
        raise ValueError(f"{what} is a sparse matrix; this step needs dense rows (X.toarray()).")
    X = X.tocsr() if scipy.sparse.issparse(X) else np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"{what} must be a 2-D array (rows × features), got shape {X.shape}.")
    if not np.issubdtype(X.dtype, np.number) or np.issubdtype(X.dtype, np.complexfloating):
        raise ValueError(f"{what} must hold real numbers, got dtype {X.dtype}.")
    if X.shape[0] == 0 and not allow_empty:
        raise ValueError(f"{what} is empty (0 rows); it needs at least one row.")
    if X.shape[1] == 0:
        raise ValueError(f"{what} has no features (0 columns).")
    check_finite_rows(X, what)
    return X


def check_same_features(X: np.ndarray, Z: np.ndarray, what_x: str, what_z: str) -> None:
    if X.shape[1] != Z.shape[1]:
        raise ValueError(
            f"{what_x} has {X.shape[1]} features but {what_z} has {Z.shape[1]}; both must "
            "describe rows in the same feature space."
        )


def as_count(value, name: str, minimum: int = 1) -> int:
    """A Python int ``>= minimum`` (bools and non-integral numbers are refused)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {value!r}.")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}.")
    return int(value)
