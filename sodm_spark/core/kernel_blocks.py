"""Kernel blocks and decision values in any array namespace (numpy, PyTorch, CuPy).

The device path's kernels (docs/design.md §2.10): every block is one matrix product ``X Zᵀ``
(GEMM) finished elementwise, for the radial kernels through ``‖x‖² + ‖z‖² − 2 x·z``; the
laplacian's L1 distances have no product form and are summed over the features of a row
block at a time. Each kernel computes its own block (:meth:`Kernel.array_block
<sodm_spark.core.kernels.Kernel.array_block>`), which equals :meth:`Kernel.block` on the same
rows (tests/test_odm_newton.py). Arrays are created with ``device``'s library
(:class:`~sodm_spark.core.array_namespace.ArrayDevice`): on a GPU the rows are copied there
once and every block stays there.
"""
from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy.typing as npt

from . import kernels
from .array_namespace import Array, ArrayDevice, DType, device_of
from .kernels import Kernel

#: Rows of one block are sized so that its scratch (the products and one temporary of the
#: same size) stays within this many bytes; on a GPU that is a few of its 132 SMs' worth of
#: work per GEMM, large enough to reach its matrix throughput.
BLOCK_BYTES = 1 << 30


def rows_per_block(n_columns: int, itemsize: int, block_bytes: int = BLOCK_BYTES) -> int:
    """Rows of a kernel block of ``n_columns`` entries within ``block_bytes`` (at least 1),
    the block and its one temporary counted: :func:`.kernels.rows_per_block` of twice the
    entry."""
    return kernels.rows_per_block(n_columns, 2 * itemsize, block_bytes / 2**20)


def squared_norms(xp: ModuleType, X: Array) -> Array:
    """``‖x_i‖²`` of every row."""
    return xp.sum(X * X, axis=1)


def kernel_block(xp: ModuleType, kernel: Kernel, X: Array, Z: Array, x_sq: Array | None = None,
                 z_sq: Array | None = None) -> Array:
    """``k(X, Z)`` (len(X) × len(Z)) in X's dtype: :meth:`Kernel.array_block`, one GEMM
    finished elementwise (laplacian: L1 distances). ``x_sq`` and ``z_sq``: the rows' squared
    norms, which a radial kernel reads, computed if not given."""
    if kernel.radial:
        x_sq = squared_norms(xp, X) if x_sq is None else x_sq
        z_sq = squared_norms(xp, Z) if z_sq is None else z_sq
    return kernel.array_block(xp, X, Z, x_sq, z_sq)


def kernel_matrix(device: ArrayDevice, kernel: Kernel, X: Array, Z: Array | None = None,
                  dtype: DType = None, block_bytes: int = BLOCK_BYTES) -> Array:
    """The whole ``k(X, Z)`` on ``device`` in ``dtype`` (the device's float32 by default),
    filled one row block at a time (the caller decides that it fits)."""
    xp = device.xp
    dtype = xp.float32 if dtype is None else dtype
    X = device.asarray(X, dtype=dtype)
    Z = X if Z is None else device.asarray(Z, dtype=dtype)
    z_sq = squared_norms(xp, Z)
    out = xp.empty((X.shape[0], Z.shape[0]), dtype=dtype, device=device_of(X))
    step = rows_per_block(Z.shape[0], 8, block_bytes)
    for start in range(0, X.shape[0], step):
        rows = X[start:min(start + step, X.shape[0]), :]
        out[start:start + rows.shape[0], :] = kernel_block(xp, kernel, rows, Z, z_sq=z_sq)
    return out


def decision_values(device: ArrayDevice, kernel: Kernel, X: Array, support_vectors: Array,
                    coefficients: npt.ArrayLike, dtype: DType = None,
                    block_bytes: int = BLOCK_BYTES) -> npt.NDArray[Any]:
    """``k(X, SV) @ coefficients`` on ``device`` in blocks of rows, returned as float64 numpy
    ((n,) or (n, outputs), as ``coefficients``): the kernel blocks in ``dtype`` (float32 by
    default), the products accumulated in float64."""
    import numpy as np

    xp = device.xp
    dtype = xp.float32 if dtype is None else dtype
    coefficients = np.asarray(coefficients, dtype=np.float64)
    # (n,) or (n, outputs); numpy's stubs type np.zeros of this concatenated shape as 0-d
    result: np.ndarray = np.zeros((np.shape(X)[0],) + coefficients.shape[1:])
    if np.shape(support_vectors)[0] == 0 or result.shape[0] == 0:
        return result
    SV = device.asarray(support_vectors, dtype=dtype)
    coef = device.asarray(coefficients, dtype=xp.float64)
    sv_sq = squared_norms(xp, SV)
    step = rows_per_block(SV.shape[0], 8, block_bytes)
    for start in range(0, result.shape[0], step):
        rows = device.asarray(X[start:min(start + step, result.shape[0]), ...], dtype=dtype)
        block = xp.astype(kernel_block(xp, kernel, rows, SV, z_sq=sv_sq), xp.float64)
        result[start:start + rows.shape[0], ...] = device.to_numpy(block @ coef)
    return result
