"""Rows that may be dense or sparse (CSR), and the products ``X Zᵀ`` every kernel block is
built from; pure numpy + numba, no Spark.

Text and web data (the field's LIBSVM sets: 10^5 to 10^7 features, 50-500 values a row) are
CSR; their kernel blocks are dense all the same (documents share their frequent terms), so a
block of sparse rows is ``X Zᵀ`` written into a dense array. scipy's sparse × sparse product
builds a CSR result first, whose structure is as large as the dense block and three times its
bytes; instead, :class:`SparseOperand` lays Z out once per set of rows (the columns it uses,
compacted), and each product is split by column:

* the columns that at least :data:`DENSE_COLUMN_SHARE` of Z's rows use (a text set's frequent
  terms) become two small dense matrices and one GEMM;
* the rest, by term frequency nearly all columns and few products, are added in a numba loop
  over Z's columns (an inverted index), straight into the dense block.

On 6,000 rows of :func:`~sodm_spark.data.big_data.make_text` (150,000 columns, 100 values a row)
one core computes the 6,000 × 6,000 block in 0.43 s this way (laying the rows out included),
0.93 s with the numba loop alone, and 2.9 s with scipy's product and ``toarray``. Columns are compacted to those Z uses,
so the work and memory never depend on the width ``d`` (a row with a feature index of 2·10^9
costs what any other row does).
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse
from numba import njit

#: Rows as this package passes them: a dense array (n × d) or a scipy sparse matrix (CSR). scipy
#: has no type information, so to mypy its matrices, and this union with them, are Any.
Rows = Any

#: A column used by at least this share of Z's rows (and by :data:`DENSE_COLUMN_MIN_ROWS`) is
#: multiplied densely. For the block of the module docstring a share of 0.1, 0.05, 0.02 and
#: 0.01 took 0.43, 0.55, 0.96 and 1.21 s (2,500 rows: 0.11, 0.14, 0.18, 0.20 s); on a set with
#: 16 topics of 3,000 terms, 0.1 and 0.05 tied (0.34 and 0.35 s).
DENSE_COLUMN_SHARE = 0.1
DENSE_COLUMN_MIN_ROWS = 64
#: At most this many dense columns (their two dense matrices stay a few MB a thousand rows).
MAX_DENSE_COLUMNS = 1024


#: A CSR block at least this full is stored dense (``sparse="auto"`` reads, DSVRG's stacked
#: blocks): no larger (8 bytes a cell against 16 a nonzero) and its SVRG steps are 3.6x faster
#: (10^6 x 50 LIBSVM rows: 0.51 s vs 0.14 s per 500,000 steps), since the dense loop needs no
#: indices and no lazy scaling.
DENSE_FROM_DENSITY = 0.5
#: CSR rows at least this full are multiplied as dense rows when scored
#: (:func:`~sodm_spark.core.kernels.decision_values`): their dense copy takes at most 4 times the
#: CSR arrays' memory (8 bytes a cell against 12 a stored value), and one GEMM on every core
#: beats the sparse products: 2,000 Fashion-MNIST rows (half of their values stored) against
#: 27,467 such support vectors took 1.4 s dense, 4.2 s as CSR.
DENSE_PRODUCT_DENSITY = 1.0 / 6.0


def dense_enough(nnz: float, n_rows: int, n_cols: int,
                 density: float = DENSE_FROM_DENSITY) -> bool:
    """Whether rows with ``nnz`` values in ``n_rows`` × ``n_cols`` cells are at least
    ``density`` full (:data:`DENSE_FROM_DENSITY`: better stored dense)."""
    return nnz >= density * n_rows * n_cols


def dense_if_full(rows: Rows, dtype: npt.DTypeLike | None = None,
                  density: float = DENSE_FROM_DENSITY) -> Rows:
    """CSR ``rows`` as a dense array (of ``dtype`` if given) when :func:`dense_enough`, else
    ``rows`` unchanged."""
    if not scipy.sparse.issparse(rows) or not rows.shape[0] or \
            not dense_enough(rows.nnz, rows.shape[0], rows.shape[1], density=density):
        return rows
    return rows.toarray() if dtype is None else rows.astype(dtype).toarray()


def is_sparse(X: object) -> bool:
    """Whether ``X`` holds sparse rows (a scipy sparse matrix or a :class:`SparseOperand`)."""
    return bool(scipy.sparse.issparse(X)) or isinstance(X, SparseOperand)


def as_float_rows(X: Rows, dtype: npt.DTypeLike = np.float64) -> Rows:
    """``X`` as float rows of ``dtype``: a C-contiguous array, or a canonical CSR matrix (sorted
    column indices, no duplicates) whose values are ``dtype``; the caller's matrix is never
    modified."""
    dtype = np.dtype(dtype)
    if isinstance(X, SparseOperand):
        X = X.csr
    if not scipy.sparse.issparse(X):
        return np.ascontiguousarray(X, dtype=dtype)
    X = X.tocsr()
    if not X.has_canonical_format:
        X = X.copy()
        X.sum_duplicates()
    return X if X.dtype == dtype else X.astype(dtype)


def squared_norms(X: Rows, dtype: npt.DTypeLike | None = None) -> np.ndarray:
    """``‖x_i‖²`` of every row, in ``dtype`` (default: the rows' own)."""
    if isinstance(X, SparseOperand):
        return X.squared_norms.astype(dtype or X.squared_norms.dtype, copy=False)
    if scipy.sparse.issparse(X):
        X = X.tocsr()
        rows = np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))
        data = np.asarray(X.data, dtype=np.float64)
        return np.bincount(rows, weights=data * data, minlength=X.shape[0]).astype(
            dtype or X.dtype, copy=False)
    X = np.asarray(X) if dtype is None else np.asarray(X, dtype=dtype)
    norms: np.ndarray = np.einsum("ij,ij->i", X, X)  # numpy types einsum's result as Any
    return norms


def feature_variance(X: Rows) -> float:
    """The variance over all n·d entries of ``X`` (zeros of sparse rows included), what
    ``gamma="scale"`` needs: E[x²] − E[x]² from the stored values alone."""
    if not scipy.sparse.issparse(X):
        return float(np.var(X))
    cells = float(X.shape[0]) * float(X.shape[1])
    data = np.asarray(X.tocsr().data, dtype=np.float64)
    return float(np.dot(data, data) / cells - (data.sum() / cells) ** 2)


def memory_width(X: Rows) -> float:
    """How many float64 columns a dense row would need to take the memory one row of ``X``
    takes: ``d`` for dense rows; for CSR rows 1.5 per stored value (8 bytes of value, 4 of
    column index) — what memory plans charge a row."""
    if scipy.sparse.issparse(X):
        return float(1.5 * X.nnz / max(1, X.shape[0]) + 1.0)
    return float(X.shape[1])


def stack_rows(pieces: Iterable[Rows]) -> Rows:
    """Row blocks stacked in order: one array, or CSR when any piece is sparse."""
    pieces = list(pieces)
    if len(pieces) == 1:
        return pieces[0]
    if any(scipy.sparse.issparse(piece) for piece in pieces):
        return scipy.sparse.vstack([scipy.sparse.csr_matrix(p) if not scipy.sparse.issparse(p)
                                    else p for p in pieces], format="csr")
    return np.concatenate(pieces)


def dense_rows(X: Rows, dtype: npt.DTypeLike = np.float64) -> np.ndarray:
    """``X`` as a dense C-contiguous array of ``dtype`` (for the few places that need one)."""
    if isinstance(X, SparseOperand):
        X = X.csr
    return np.ascontiguousarray(X.toarray() if scipy.sparse.issparse(X) else X, dtype=dtype)


class SparseOperand:
    """The CSR rows Z of products ``X Zᵀ``, laid out once (module docstring): the columns Z
    uses (sorted), which of them are dense and their dense matrix (m × k), and the others as
    an inverted index (per column, its rows in increasing order and their values).

    Build one for rows many products are taken against (a partition's rows, a support set);
    :func:`inner_products` builds one on the fly for a plain CSR matrix.
    """

    def __init__(self, Z: Rows, dtype: npt.DTypeLike = np.float64) -> None:
        self.dtype = np.dtype(dtype)
        self.csr = as_float_rows(Z, self.dtype)
        m = self.csr.shape[0]
        self.shape = self.csr.shape
        self.squared_norms = squared_norms(self.csr)
        self.columns, compact = np.unique(self.csr.indices, return_inverse=True)
        counts = np.bincount(compact, minlength=self.columns.size)
        dense = counts >= max(DENSE_COLUMN_SHARE * m, DENSE_COLUMN_MIN_ROWS)
        if dense.sum() > MAX_DENSE_COLUMNS:  # keep the most used
            dense[:] = False
            dense[np.argsort(-counts, kind="stable")[:MAX_DENSE_COLUMNS]] = True
        self.dense_rank = np.cumsum(dense) - 1  # position among the dense columns
        self.rare_rank = np.cumsum(~dense) - 1  # position among the others
        self.is_dense = dense
        rows = np.repeat(np.arange(m, dtype=np.int64), np.diff(self.csr.indptr))
        in_dense = dense[compact]
        self.dense = np.zeros((m, int(dense.sum())), dtype=self.dtype)
        self.dense[rows[in_dense], self.dense_rank[compact[in_dense]]] = self.csr.data[in_dense]
        rare_column = self.rare_rank[compact[~in_dense]]
        order = np.argsort(rare_column, kind="stable")  # by column, rows increasing within
        n_rare = int((~dense).sum())
        self.rare_indptr = np.zeros(n_rare + 1, dtype=np.int64)
        np.cumsum(np.bincount(rare_column, minlength=n_rare), out=self.rare_indptr[1:])
        self.rare_rows = rows[~in_dense][order]
        self.rare_values = self.csr.data[~in_dense][order]

    def __getitem__(self, rows: Any) -> Rows:
        return self.csr[rows]

    def products(self, X: Rows, out: np.ndarray, first_row: int = 0) -> np.ndarray:
        """``out[...] = X Z[first_row:]ᵀ`` for CSR rows ``X``, in ``out``'s dtype."""
        X = as_float_rows(X, out.dtype)
        n = X.shape[0]
        if not self.columns.size:  # Z holds no value: every product is 0
            out[...] = 0.0
            return out
        where = np.minimum(np.searchsorted(self.columns, X.indices), self.columns.size - 1)
        shared = self.columns[where] == X.indices  # columns Z never uses add nothing
        rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(X.indptr))
        in_dense = shared & self.is_dense[where]
        x_dense = np.zeros((n, self.dense.shape[1]), dtype=out.dtype)
        x_dense[rows[in_dense], self.dense_rank[where[in_dense]]] = X.data[in_dense]
        np.matmul(x_dense, np.asarray(self.dense[first_row:], dtype=out.dtype).T, out=out)
        rare = shared & ~self.is_dense[where]
        x_indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows[rare], minlength=n), out=x_indptr[1:])
        _add_rare_products(out, x_indptr, self.rare_rank[where[rare]], X.data[rare],
                           self.rare_indptr, self.rare_rows,
                           self.rare_values.astype(out.dtype, copy=False), int(first_row))
        return out


@njit(cache=True)
def _add_rare_products(out: np.ndarray, x_indptr: np.ndarray, x_columns: np.ndarray,
                       x_values: np.ndarray, z_indptr: np.ndarray, z_rows: np.ndarray,
                       z_values: np.ndarray, first_row: int) -> None:
    """``out[i, j - first_row] += Σ_f x_if z_jf`` over the columns f of the inverted index
    (rows j ≥ ``first_row`` only; each column's rows are sorted, so they start at a binary
    search)."""
    for i in range(x_indptr.size - 1):
        row = out[i]
        for p in range(x_indptr[i], x_indptr[i + 1]):
            column = x_columns[p]
            value = x_values[p]
            start, stop = z_indptr[column], z_indptr[column + 1]
            if first_row > 0:
                start += np.searchsorted(z_rows[start:stop], first_row)
            for q in range(start, stop):
                row[z_rows[q] - first_row] += value * z_values[q]


def inner_products(X: Rows, Z: Rows, out: np.ndarray, first_row: int = 0) -> np.ndarray:
    """``out[...] = X Z[first_row:]ᵀ`` in ``out``'s dtype for dense or CSR ``X`` and dense, CSR
    or :class:`SparseOperand` ``Z``: one GEMM for dense rows, scipy's sparse × dense product
    when one side is dense, the split product of :class:`SparseOperand` when both are sparse."""
    dtype = out.dtype
    x_sparse = scipy.sparse.issparse(X)
    if not is_sparse(Z):
        Zc = np.asarray(Z[first_row:] if first_row else Z, dtype=dtype)
        if x_sparse:
            out[...] = as_float_rows(X, dtype) @ Zc.T
        else:
            np.matmul(np.asarray(X, dtype=dtype), Zc.T, out=out)
        return out
    if not x_sparse:
        csr = Z.csr if isinstance(Z, SparseOperand) else Z.tocsr()
        csr = as_float_rows(csr[first_row:] if first_row else csr, dtype)
        out[...] = (csr @ np.asarray(X, dtype=dtype).T).T
        return out
    operand = Z if isinstance(Z, SparseOperand) else SparseOperand(Z, dtype)
    return operand.products(X, out, first_row)
