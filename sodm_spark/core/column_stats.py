"""Per-column statistics of rows in one pass, and the feature scaling a kernel model applies to
its inputs; pure numpy, no Spark.

The kernel path maps every column before the kernel (SODM's ``scale="minmax"``, as LIBSVM's
guide advises). Dense rows are mapped onto [0, 1], ``(x − least) / (largest − least)``. Sparse
rows are divided by each column's largest magnitude instead (scikit-learn's ``MaxAbsScaler``):
a shift would turn every zero of a CSR row into a stored value. Both give the same rows when
every column's least value is 0 (non-negative data with a zero in every column, as
term counts and tf-idf have). Sparse statistics are kept for the columns that hold a value only,
so a row with a feature index of 2·10^9 costs what any other does.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import scipy.sparse

if TYPE_CHECKING:  # for the annotations only: sparse_rows imports numba
    from .sparse_rows import Rows


class ColumnStats:
    """Rows, and per column the sum, the sum of squares and the extremes — in one pass, merged
    across blocks (:meth:`merge`), in float64 whatever the rows' dtype.

    Dense rows: arrays over all ``d`` columns (``columns`` is None; ``low``/``high`` the least
    and largest value). CSR rows (``sparse``): arrays over ``columns``, the sorted columns that
    hold a stored value, with ``stored`` values each; ``low``/``high`` are then the extremes of
    the stored values (a column with fewer than ``n`` stored values also holds zeros).
    """

    def __init__(self, X: Rows | None = None, d: int = 0, sparse: bool = False) -> None:
        self.sparse = bool(sparse) or scipy.sparse.issparse(X)
        self.d = d if X is None else X.shape[1]
        self.n = 0 if X is None else X.shape[0]
        self.columns = np.zeros(0, np.int64) if self.sparse else None
        width = 0 if self.sparse else self.d
        self.sums, self.squares = np.zeros(width), np.zeros(width)
        self.low, self.high = np.full(width, np.inf), np.full(width, -np.inf)
        self.stored = np.zeros(width, np.int64) if self.sparse else None
        if X is None:
            return
        if scipy.sparse.issparse(X):
            X = X.tocsr()
            values = np.asarray(X.data, dtype=np.float64)
            self.columns, where = np.unique(X.indices, return_inverse=True)
            k = self.columns.size
            self.stored = np.bincount(where, minlength=k).astype(np.int64)
            self.sums = np.bincount(where, weights=values, minlength=k)
            self.squares = np.bincount(where, weights=values * values, minlength=k)
            self.low, self.high = np.full(k, np.inf), np.full(k, -np.inf)
            np.minimum.at(self.low, where, values)
            np.maximum.at(self.high, where, values)
        elif self.n:
            self.sums = X.sum(axis=0, dtype=np.float64)
            self.squares = np.einsum("ij,ij->j", X, X, dtype=np.float64)
            self.low = np.asarray(X.min(axis=0), dtype=np.float64)
            self.high = np.asarray(X.max(axis=0), dtype=np.float64)

    def as_sparse(self) -> "ColumnStats":
        """The same statistics kept per stored column (every column of dense rows is stored
        ``n`` times, its zeros included)."""
        if self.sparse:
            return self
        out = ColumnStats(d=self.d, sparse=True)
        out.n, out.columns = self.n, np.arange(self.d, dtype=np.int64)
        out.sums, out.squares, out.low, out.high = self.sums, self.squares, self.low, self.high
        out.stored = np.full(self.d, self.n, dtype=np.int64)
        return out

    @staticmethod
    def merge(a: ColumnStats, b: ColumnStats) -> ColumnStats:
        if a.sparse or b.sparse:
            return _merge_sparse(a.as_sparse(), b.as_sparse())
        merged = ColumnStats(d=a.d)
        merged.n = a.n + b.n
        merged.sums, merged.squares = a.sums + b.sums, a.squares + b.squares
        merged.low, merged.high = np.minimum(a.low, b.low), np.maximum(a.high, b.high)
        return merged

    def without(self, X: Rows) -> ColumnStats:
        """These statistics less the sums of the rows ``X`` (the extremes are kept)."""
        other = ColumnStats(X, d=self.d)
        if not (self.sparse or other.sparse):
            out = ColumnStats(d=self.d)
            out.n, out.low, out.high = self.n - other.n, self.low, self.high
            out.sums, out.squares = self.sums - other.sums, self.squares - other.squares
            return out
        mine, other = self.as_sparse(), other.as_sparse()
        # sparse statistics hold both arrays (as_sparse)
        assert mine.columns is not None and mine.stored is not None
        assert other.columns is not None and other.stored is not None
        where = np.searchsorted(mine.columns, other.columns)  # X's columns are among ours
        out = ColumnStats(d=self.d, sparse=True)
        out.n, out.columns, out.low, out.high = mine.n - other.n, mine.columns, mine.low, mine.high
        out.sums, out.squares, out.stored = mine.sums.copy(), mine.squares.copy(), \
            mine.stored.copy()
        out.sums[where] -= other.sums
        out.squares[where] -= other.squares
        out.stored[where] -= other.stored
        return out

    def minmax(self) -> tuple[np.ndarray, np.ndarray]:
        """(offset, scale) mapping every column onto [0, 1]: (x − least) / (largest − least);
        a constant column only shifted (dense statistics)."""
        span = self.high - self.low
        return self.low.copy(), np.where(span > 0, 1.0 / np.where(span > 0, span, 1.0), 1.0)

    def maxabs(self) -> tuple[np.ndarray, np.ndarray]:
        """(columns, scale) dividing each column that holds a value by its largest magnitude
        (sparse statistics): the other columns are left as they are, zeros stay zeros."""
        stats = self.as_sparse()
        assert stats.columns is not None  # sparse statistics name their columns
        largest = np.maximum(np.abs(stats.low), np.abs(stats.high))
        scale = np.where(largest > 0, 1.0 / np.where(largest > 0, largest, 1.0), 1.0)
        return stats.columns.copy(), scale

    def scaling(self, weights: Sequence[float] | None = None
                ) -> tuple[np.ndarray | None, np.ndarray, np.ndarray | None]:
        """The model's feature scaling for these rows, (offset, scale, columns): min-max for
        dense rows (columns None), max-abs for sparse ones (offset None) — module docstring;
        dense rows' scales times each feature's ``weights`` when given (a one-hot feature's
        1/√2, :mod:`sodm_spark.core.categories`)."""
        if self.sparse:
            columns, scale = self.maxabs()
            return None, scale, columns
        offset, scale = self.minmax()
        if weights is not None:
            if len(weights) != self.d:
                raise ValueError(f"{len(weights)} feature weights for rows of {self.d} "
                                 "features")
            scale = scale * np.asarray(weights, dtype=np.float64)
        return offset, scale, None

    def centring(self) -> tuple[np.ndarray, np.ndarray, None] | None:
        """The feature map (offset, scale, columns) that moves dense rows to their mean, when
        :func:`centring_offset` asks for it (an rbf kernel's rows left unscaled), else None."""
        if self.sparse or self.n < 2:
            return None
        means = self.sums / self.n
        offset = centring_offset(means, self.squares / self.n - means ** 2)
        return None if offset is None else (offset, np.ones_like(offset), None)

    def variance(self, offset: np.ndarray | float | None = None,
                 scale: np.ndarray | None = None) -> float:
        """Variance over all n·d entries (what gamma='scale' needs), of the rows mapped by
        (x − offset) · scale when given (``offset`` None: no shift; for sparse statistics
        ``scale`` is per stored column)."""
        sums, squares = self.sums, self.squares
        if scale is not None:
            offset = 0.0 if offset is None else offset
            sums = (self.sums - self.n * offset) * scale
            squares = (self.squares - 2 * offset * self.sums + self.n * offset ** 2) * scale ** 2
        count = float(self.n) * float(self.d)
        return float(squares.sum() / count - (sums.sum() / count) ** 2)


def centring_offset(means: np.ndarray, variances: np.ndarray) -> np.ndarray | None:
    """``means`` when dense rows with these column means and variances lie farther from the
    origin than they spread (‖mean‖² above the summed variances), else None. The rbf kernel's
    GEMM form ‖x‖² + ‖z‖² − 2x·z then loses the distances' digits in float32 (the cancellation
    grows with that ratio, and a dual solved on such a kernel diverged); the kernel is
    translation invariant, so its rows are taken less their mean instead."""
    return means if float(means @ means) > float(np.sum(variances)) else None


def _merge_sparse(a: ColumnStats, b: ColumnStats) -> ColumnStats:
    merged = ColumnStats(d=max(a.d, b.d), sparse=True)
    merged.n = a.n + b.n
    assert a.columns is not None and b.columns is not None  # both sparse (merge)
    merged.columns = np.union1d(a.columns, b.columns)
    k = merged.columns.size
    merged.sums, merged.squares = np.zeros(k), np.zeros(k)
    merged.low, merged.high = np.full(k, np.inf), np.full(k, -np.inf)
    merged.stored = np.zeros(k, np.int64)
    for part in (a, b):  # each side's columns are unique: plain fancy-index updates
        # sparse statistics hold both arrays (as_sparse)
        assert part.columns is not None and part.stored is not None
        where = np.searchsorted(merged.columns, part.columns)
        merged.sums[where] += part.sums
        merged.squares[where] += part.squares
        merged.stored[where] += part.stored
        merged.low[where] = np.minimum(merged.low[where], part.low)
        merged.high[where] = np.maximum(merged.high[where], part.high)
    return merged


def scale_rows(X: Rows, offset: npt.ArrayLike | None = None, scale: npt.ArrayLike | None = None,
               columns: np.ndarray | None = None) -> Rows:
    """Rows as a kernel model's inputs: ``(x − offset) · scale`` per column (``columns`` None),
    or ``x · scale`` in the given ``columns`` only, the others as they are (max-abs scaling of
    sparse rows; ``offset`` None). Dense or CSR ``X`` in its own float dtype (float64 for other
    dtypes); CSR rows stay CSR unless a nonzero offset must shift their zeros."""
    if scale is None:
        return X
    dtype = X.dtype if X.dtype in (np.float32, np.float64) else np.dtype(np.float64)
    if scipy.sparse.issparse(X) and (offset is None or not np.any(offset)):
        X = X.tocsr()
        if columns is None:
            factors = np.asarray(scale, dtype=np.float64)[X.indices]
        else:
            factors = _column_factors(X.indices, columns, scale)
        return scipy.sparse.csr_matrix(((X.data * factors).astype(dtype), X.indices.copy(),
                                        X.indptr.copy()), shape=X.shape)
    if scipy.sparse.issparse(X):  # a dense model's shift: the rows are dense anyway
        X = X.toarray()
    X = np.asarray(X, dtype=dtype)
    if columns is not None:
        X = X.copy()
        X[:, columns] *= np.asarray(scale, dtype=dtype)
        return X
    shift = 0.0 if offset is None else np.asarray(offset).astype(dtype)
    return (X - shift) * np.asarray(scale).astype(dtype)


def _column_factors(indices: np.ndarray, columns: np.ndarray,
                    scale: npt.ArrayLike) -> np.ndarray:
    """The scale of each stored value's column: ``scale`` where its column is in ``columns``
    (sorted), 1 elsewhere."""
    factors = np.ones(indices.size)
    if columns.size:
        where = np.minimum(np.searchsorted(columns, indices), columns.size - 1)
        found = columns[where] == indices
        factors[found] = np.asarray(scale, dtype=np.float64)[where[found]]
    return factors
