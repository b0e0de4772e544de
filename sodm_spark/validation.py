"""Input checks shared by every estimator: messages say what is wrong, where, and what to do."""
from __future__ import annotations

import numpy as np
import scipy.sparse


def check_odm_params(lam, theta, v) -> None:
    """ODM hyperparameters of design.md §1: λ > 0, θ ∈ [0, 1), v ∈ (0, 1]."""
    if not (isinstance(lam, (int, float, np.number)) and np.isfinite(lam) and lam > 0):
        raise ValueError(f"lam (λ) must be a positive finite number, got {lam!r}.")
    if not (isinstance(theta, (int, float, np.number)) and 0.0 <= theta < 1.0):
        raise ValueError(f"theta (θ) must lie in [0, 1), got {theta!r}.")
    if not (isinstance(v, (int, float, np.number)) and 0.0 < v <= 1.0):
        raise ValueError(f"v (μ in libodm) must lie in (0, 1], got {v!r}.")


def describe_rows(rows: np.ndarray, limit: int = 10) -> str:
    """'rows 3, 17 and 5 more' — 0-based row numbers, the first ``limit`` of them."""
    rows = np.asarray(rows)
    shown = ", ".join(str(int(r)) for r in rows[:limit])
    more = f" and {rows.size - limit} more" if rows.size > limit else ""
    return f"row{'s' if rows.size > 1 else ''} {shown}{more}"


def check_finite_rows(X, what: str = "X") -> None:
    """Refuse NaN or ±inf, naming the (0-based) rows and the first bad column.

    ``X`` is a dense array or a scipy CSR matrix (only its stored values are checked).
    """
    if scipy.sparse.issparse(X):
        X = X.tocsr()
        bad_values = np.flatnonzero(~np.isfinite(X.data))
        if bad_values.size:
            rows = np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))[bad_values]
            raise ValueError(
                f"{what} contains NaN or infinity in {describe_rows(np.unique(rows))} (0-based; "
                f"first at row {rows[0]}, column {X.indices[bad_values[0]]}). Remove or impute "
                "those values before fitting.")
        return
    finite = np.isfinite(X)
    if finite.all():
        return
    bad_rows = np.flatnonzero(~finite.all(axis=1))
    first_row = bad_rows[0]
    first_col = int(np.flatnonzero(~finite[first_row])[0])
    raise ValueError(
        f"{what} contains NaN or infinity in {describe_rows(bad_rows)} (0-based; first at "
        f"row {first_row}, column {first_col}: {X[first_row, first_col]!r}). Remove or impute "
        "those values before fitting."
    )
