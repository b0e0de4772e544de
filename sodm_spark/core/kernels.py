"""Kernel functions computed as blocked BLAS.

Every kernel block is built from one matrix product (GEMM) of a row block of ``X`` with ``Z``
(for the RBF kernel through ``‖x‖² + ‖z‖² - 2 x zᵀ``); the laplacian kernel needs L1
distances, which have no GEMM form, and uses scipy's compiled ``cdist`` per block instead.
Row blocks are sized so that one block's scratch memory stays within ``block_mb``.

Rows may be dense or CSR (text and web data: 10^5+ features, a few hundred values a row):
the product ``X Zᵀ`` of sparse rows is :func:`sodm_spark.core.sparse_rows.inner_products` and the
squared norms come from the stored values, so a block of sparse rows is the same dense block
as the one of their dense copies, for the linear, polynomial and RBF kernels. The laplacian
kernel refuses sparse rows (its L1 distances have no product form).

The kernel parameters follow scikit-learn's ``SVC``: ``gamma="scale"`` is ``1 / (d · Var X)``,
``gamma="auto"`` is ``1 / d``, polynomial is ``(gamma · x zᵀ + coef0) ** degree``.

``offset`` c turns any kernel k into k + c: a constant feature √c in the feature space, so a
kernel expansion Σ_i a_i (k(x_i, x) + c) = Σ_i a_i k(x_i, x) + b carries a bias
b = c·Σ_i a_i, penalized as part of ‖w‖² (LIBLINEAR's bias feature B = √c). That is how a
kernel ODM, whose dual (SODM Eqn 1) has no bias, gets one. Distances in the feature space,
hence landmarks and strata (Eqns 7-8), do not change.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numba
import numpy as np
import numpy.typing as npt
import scipy.sparse

from .sparse_rows import (DENSE_PRODUCT_DENSITY, Rows, SparseOperand, as_float_rows,
                          dense_if_full, feature_variance, inner_products, is_sparse,
                          squared_norms)

KNOWN_KERNELS = ("linear", "rbf", "poly", "laplacian")
_ALIASES = {"polynomial": "poly", "gaussian": "rbf"}


def resolve_gamma(gamma: str | float, X: np.ndarray) -> float:
    """Turn ``gamma`` ('scale', 'auto' or a positive number) into a float for data ``X``."""
    needs_variance = isinstance(gamma, str) and gamma == "scale"
    return gamma_value(gamma, X.shape[1], feature_variance(X) if needs_variance else None)


def gamma_value(gamma: str | float, n_features: int, variance: float | None = None) -> float:
    """``gamma`` as a float: 'scale' is 1/(d · Var X) (Var over all entries), 'auto' is 1/d."""
    if isinstance(gamma, str):
        if gamma == "scale":
            if variance is None or not np.isfinite(variance) or variance <= 0.0:
                raise ValueError(
                    "gamma='scale' is 1/(n_features * X.var()), but X has zero variance "
                    "(every feature value is the same); pass a numeric gamma instead."
                )
            return 1.0 / (n_features * variance)
        if gamma == "auto":
            return 1.0 / n_features
        raise ValueError(f"gamma must be 'scale', 'auto' or a positive number, got {gamma!r}.")
    try:
        value = float(gamma)
    except (TypeError, ValueError):
        value = float("nan")
    if not np.isfinite(value) or value <= 0.0:
        raise ValueError(f"gamma must be a positive finite number, got {gamma!r}.")
    return value


@dataclass(frozen=True)
class Kernel:
    """A resolved kernel: name and numeric parameters (gamma already a float)."""

    name: str = "rbf"
    gamma: float = 1.0
    degree: int = 3
    coef0: float = 0.0
    offset: float = 0.0  # c in k + c (module docstring)

    @classmethod
    def create(cls, name: str, gamma: str | float = 1.0, degree: int = 3, coef0: float = 0.0,
               X: Rows | None = None, offset: float = 0.0) -> "Kernel":
        """Validate ``name``; resolve ``gamma`` against ``X`` when it is 'scale' or 'auto'."""
        canonical = _ALIASES.get(name, name) if isinstance(name, str) else name
        if canonical not in KNOWN_KERNELS:
            raise ValueError(
                f"Unknown kernel {name!r}; known kernels are {', '.join(KNOWN_KERNELS)}."
            )
        if canonical == "linear":
            resolved = 1.0
        elif X is None:
            if isinstance(gamma, str):
                raise ValueError(f"gamma={gamma!r} needs the training data to be resolved.")
            resolved = gamma_value(gamma, 1)
        else:
            resolved = resolve_gamma(gamma, X)
        if canonical == "poly":
            if int(degree) != degree or degree < 1:
                raise ValueError(f"degree must be a positive integer, got {degree!r}.")
        try:
            offset = float(offset)
        except (TypeError, ValueError):
            offset = float("nan")
        if not np.isfinite(offset) or offset < 0.0:
            raise ValueError(f"the kernel offset c (k + c) must be a finite number >= 0, "
                             f"got {offset!r}.")
        return cls(canonical, float(resolved), int(degree), float(coef0), offset)

    def to_dict(self) -> dict:
        return {"name": self.name, "gamma": self.gamma, "degree": self.degree, "coef0": self.coef0,
                "offset": self.offset}

    @classmethod
    def from_dict(cls, data: dict) -> "Kernel":
        # models saved before the offset existed have none
        return cls(str(data["name"]), float(data["gamma"]), int(data["degree"]),
                   float(data["coef0"]), float(data.get("offset", 0.0)))

    def diagonal(self, X: np.ndarray) -> np.ndarray:
        """``k(x_i, x_i)`` for every row (dense or CSR), in O(n·d) or O(stored values)."""
        if self.name in ("rbf", "laplacian"):
            return np.full(X.shape[0], 1.0 + self.offset)
        sq = squared_norms(X)
        if self.name == "linear":
            return sq + self.offset
        return (self.gamma * sq + self.coef0) ** self.degree + self.offset

    def block(self, X: np.ndarray, Z: np.ndarray, out: np.ndarray | None = None,
              z_sq_norms: np.ndarray | None = None, first_row: int = 0) -> np.ndarray:
        """One kernel block ``k(X, Z[first_row:])`` of shape (len(X), len(Z) - first_row),
        written into ``out`` if given (``z_sq_norms``: the squared norms of those rows of Z).

        The block is produced by one GEMM in the dtype of ``out`` (float64 when ``out`` is
        None), or for sparse rows by :func:`~sodm_spark.core.sparse_rows.inner_products`.
        """
        dtype = np.float64 if out is None else out.dtype
        if out is None:
            out = np.empty((X.shape[0], Z.shape[0] - first_row), dtype=dtype)
        if self.name == "laplacian":
            if scipy.sparse.issparse(X) or is_sparse(Z):
                raise ValueError(LAPLACIAN_SPARSE)
            # imported here: scipy.spatial costs the scoring tasks half a second to import
            from scipy.spatial.distance import cdist

            out[...] = cdist(X, Z[first_row:], metric="cityblock")
            out *= -self.gamma
            np.exp(out, out=out)
            return out + self.offset if self.offset else out
        X = as_float_rows(X, dtype)  # converted once, for the product and the norms
        inner_products(X, Z, out, first_row)  # one GEMM, or the sparse product (sparse_rows)
        x_sq = z_sq = None
        if self.name == "rbf":
            x_sq = squared_norms(X, dtype)
            z_sq = (squared_norms(Z, dtype)[first_row:] if z_sq_norms is None
                    else z_sq_norms.astype(dtype))
        return self.finish(out, x_sq, z_sq)

    def finish(self, products: np.ndarray, x_sq: np.ndarray | None = None,
               z_sq: np.ndarray | None = None) -> np.ndarray:
        """The kernel block from the products ``X Zᵀ``, in place (rbf: with the rows' squared
        norms ``x_sq`` and ``z_sq``), the offset added."""
        out = products
        if self.name == "poly":
            out *= self.gamma
            out += self.coef0
            if self.degree != 1:
                np.power(out, self.degree, out=out)
        elif self.name == "rbf":  # exp(-gamma * max(0, |x|^2 + |z|^2 - 2 x.z))
            rbf_exponent(out, np.asarray(x_sq, out.dtype), np.asarray(z_sq, out.dtype),
                         self.gamma)
            np.exp(out, out=out)
        elif self.name != "linear":
            raise ValueError(f"the {self.name} kernel is not a function of X Zᵀ.")
        if self.offset:
            out += self.offset
        return out


#: Why the laplacian kernel refuses CSR rows, and what to use instead.
LAPLACIAN_SPARSE = ("the laplacian kernel needs L1 distances |x − z|, which have no product "
                    "form for sparse (CSR) rows; use kernel='rbf' (the Gaussian kernel on the "
                    "same rows) or 'linear', or densify the rows (X.toarray(); LIBSVM input "
                    "read with sparse=False)")


def operand_rows(Z: Rows, dtype: npt.DTypeLike, sparse_products: bool = True) -> Rows:
    """``Z`` as the right-hand rows of many kernel blocks: dense rows C-contiguous in
    ``dtype``; CSR rows laid out once (:class:`~sodm_spark.core.sparse_rows.SparseOperand`) when
    ``sparse_products`` (the left rows are sparse too), else canonical CSR."""
    if isinstance(Z, SparseOperand):
        return Z
    if scipy.sparse.issparse(Z):
        return SparseOperand(Z, dtype) if sparse_products else as_float_rows(Z, dtype)
    return np.ascontiguousarray(Z, dtype=dtype)


@numba.njit(cache=True, fastmath=True)
def rbf_exponent(products: np.ndarray, x_sq: np.ndarray, z_sq: np.ndarray,
                 gamma: float) -> None:
    """``products ← -γ · max(0, ‖x‖² + ‖z‖² − 2·products)`` in place: the RBF exponent of a block
    from its GEMM, in one pass instead of five numpy passes (``np.exp`` follows)."""
    minus_gamma = -gamma
    for a in range(products.shape[0]):
        for b in range(products.shape[1]):
            squared = x_sq[a] + z_sq[b] - 2.0 * products[a, b]
            products[a, b] = minus_gamma * (squared if squared > 0.0 else 0.0)


def rows_per_block(n_columns: int, itemsize: int, block_mb: float) -> int:
    """How many kernel rows of ``n_columns`` entries fit in ``block_mb`` megabytes (at least 1)."""
    return max(1, int(block_mb * 2**20 // max(1, n_columns * itemsize)))


def iter_kernel_blocks(kernel: Kernel, X: np.ndarray, Z: np.ndarray,
                       dtype: npt.DTypeLike = np.float64,
                       block_mb: float = 256.0) -> Iterator[tuple[slice, np.ndarray]]:
    """Yield ``(row_slice, k(X[row_slice], Z))`` with each block at most ``block_mb`` MB."""
    dtype = np.dtype(dtype)
    step = rows_per_block(Z.shape[0], dtype.itemsize, block_mb)
    Zc = operand_rows(Z, dtype, sparse_products=scipy.sparse.issparse(X))
    z_sq = squared_norms(Zc, dtype) if kernel.name == "rbf" else None
    for start in range(0, X.shape[0], step):
        rows = slice(start, min(start + step, X.shape[0]))
        yield rows, kernel.block(X[rows], Zc, out=np.empty((rows.stop - start, Z.shape[0]), dtype),
                                 z_sq_norms=z_sq)


def kernel_matrix(kernel: Kernel, X: np.ndarray, Z: np.ndarray | None = None,
                  dtype: npt.DTypeLike = np.float64, block_mb: float = 256.0) -> np.ndarray:
    """The full ``k(X, Z)`` matrix, filled block by block (the caller decides it fits)."""
    Z = X if Z is None else Z
    out = np.empty((X.shape[0], Z.shape[0]), dtype=dtype)
    for rows, block in iter_kernel_blocks(kernel, X, Z, dtype=dtype, block_mb=block_mb):
        out[rows] = block
    return out


def decision_values(kernel: Kernel, X: np.ndarray, support_vectors: np.ndarray,
                    coefficients: np.ndarray, block_mb: float = 256.0,
                    dtype: npt.DTypeLike = np.float64) -> np.ndarray:
    """``k(X, SV) @ coefficients`` without holding more than one block of ``k(X, SV)``.

    ``coefficients`` is (n_sv,) or (n_sv, n_outputs); the result is (n,) or (n, n_outputs),
    float64 whatever ``dtype`` the kernel blocks are computed in. CSR rows at least
    :data:`~.sparse_rows.DENSE_PRODUCT_DENSITY` full are multiplied as dense rows.
    """
    X, support_vectors = (dense_if_full(rows, dtype, DENSE_PRODUCT_DENSITY)
                          for rows in (X, support_vectors))
    coefficients = np.asarray(coefficients, dtype=np.float64)
    out_shape = (X.shape[0],) + coefficients.shape[1:]
    result = np.zeros(out_shape)
    if support_vectors.shape[0] == 0:
        return result
    coefficients = coefficients.astype(dtype)
    for rows, block in iter_kernel_blocks(kernel, X, support_vectors, dtype, block_mb):
        result[rows] = block @ coefficients
    return result
