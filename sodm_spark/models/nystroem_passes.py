"""The two sums over rows the matrix-free Nyström ODM needs, on any rows (no Spark).

:mod:`~sodm_spark.models.nystroem_cg` fits the Nyström ODM of docs/design.md §2.9 without the
m × m normal matrix: its Newton steps read the rows only through

* :meth:`RowPasses.line`: along α + t·p, for each step length t, the loss Σ_i s_i D_i
  (y_i f_i − τ_i)², its gradient Σ_i s_i D_i (y_i f_i − τ_i) y_i k_i and the weight in the
  pieces Σ_i s_i D_i, with f = K_SZ(α + t p) and the pieces (D_i, τ_i) of each margin at t;
  and the rows whose piece differs between the first and the last t;
* :meth:`RowPasses.hessian`: Σ_i s_i D_i(α) (k_i·p) k_i, the piece's Hessian applied to p
  (conjugate gradients' product), and Σ_i s_i D_i(α).

A pass costs one kernel entry per row and centre (n·m·d multiply-adds and n·m exponentials).
Dense numpy rows of at most :data:`~sodm_spark.solvers.kernel_products.NARROW_FEATURES`
features with the RBF kernel take the fused numba loops of
:mod:`~sodm_spark.solvers.kernel_products` (no kernel block is stored); other rows, kernels
and array libraries (a GPU's) compute kernel blocks by one GEMM each
(:func:`~sodm_spark.core.kernel_blocks.kernel_block`) and form the same sums from them.
Every sum comes back as float64 numpy.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..core.array_namespace import Array, device_of, namespace_of
from ..core.kernel_blocks import kernel_block, squared_norms
from ..core.distance_kernels import RBFKernel
from ..core.kernels import Kernel
from ..solvers import kernel_products


class LineSums(NamedTuple):
    """What :meth:`RowPasses.line` returns, summed over rows (``+``)."""

    losses: np.ndarray  # (J,): Σ s D (y f − τ)² at each step length
    gradients: np.ndarray  # (J, m): Σ s D (y f − τ) y k_i at each step length
    active: np.ndarray  # (J,): Σ s D at each step length
    changed: int  # rows whose piece differs between the first and the last step length
    rows: int

    def __add__(self, other):
        return LineSums(self.losses + other.losses, self.gradients + other.gradients,
                        self.active + other.active, self.changed + other.changed,
                        self.rows + other.rows)


class HessianSums(NamedTuple):
    """What :meth:`RowPasses.hessian` returns, summed over rows (``+``)."""

    products: np.ndarray  # (m,): Σ s D(α) (k_i·p) k_i
    active: float  # Σ s D(α)

    def __add__(self, other):
        return HessianSums(self.products + other.products, self.active + other.active)


def fused(kernel: Kernel, X) -> bool:
    """Whether rows ``X`` take the fused numba loops: dense numpy, RBF, narrow."""
    return (isinstance(kernel, RBFKernel) and isinstance(X, np.ndarray) and X.ndim == 2
            and -(-X.shape[1] // 8) * 8 <= kernel_products.NARROW_FEATURES)


@dataclass
class RowPasses:
    """The passes over one set of rows ``X`` (labels ``y`` ±1, weights s or None) against
    ``centres`` (numpy, float64) of ``kernel``, with the band (θ, v) of Eqn 1's pieces;
    ``threads``: numba's threads for the fused loops; ``block_rows``: rows of a kernel block
    on the GEMM path."""

    kernel: Kernel
    centres: np.ndarray
    X: Array
    y: Array
    weights: Array | None
    theta: float
    v: float
    threads: int = 1
    block_rows: int = 4096

    def __post_init__(self):
        self._fused = fused(self.kernel, self.X)
        if self._fused:
            self._rows = kernel_products.rows_record(self.X, self.y, self.weights)
            self._centres = kernel_products.centres_record(self.centres, self.kernel.gamma,
                                                           self.kernel.offset)

    def line(self, coef, direction, steps) -> LineSums:
        """The loss, gradient and weight in the pieces at α + t·p for each t in ``steps``."""
        steps = np.asarray(steps, dtype=np.float64)
        if self._fused:
            line = kernel_products.Line(np.asarray(coef, dtype=np.float32),
                                        np.asarray(direction, dtype=np.float32), steps,
                                        float(self.theta), float(self.v))
            with _numba_threads(self.threads):
                losses, gradients, active, changed = kernel_products.line_sums(
                    self._rows, self._centres, line, self.threads)
            return LineSums(losses, gradients, active, int(changed), int(self.X.shape[0]))
        return self._blocks(lambda block, rows: _line_block(
            block, self.y[rows], None if self.weights is None else self.weights[rows], coef,
            direction, steps, self.theta, self.v), LineSums, steps.size)

    def hessian(self, coef, direction) -> HessianSums:
        """The piece's Hessian at α = ``coef`` applied to ``direction``, and Σ s D(α)."""
        if self._fused:
            line = kernel_products.Line(np.asarray(coef, dtype=np.float32),
                                        np.asarray(direction, dtype=np.float32),
                                        np.zeros(1), float(self.theta), float(self.v))
            with _numba_threads(self.threads):
                products, active = kernel_products.hessian_sums(self._rows, self._centres,
                                                                line, self.threads)
            return HessianSums(products, float(active))
        return self._blocks(lambda block, rows: _hessian_block(
            block, self.y[rows], None if self.weights is None else self.weights[rows], coef,
            direction, self.theta, self.v), HessianSums, 1)

    def _blocks(self, sums_of_block, kind, n_steps: int):
        """The sums of every kernel block of the rows (the GEMM path), as numpy float64."""
        xp = namespace_of(self.X)
        where = device_of(self.X)
        Z = xp.asarray(self.centres, dtype=self.X.dtype, device=where)
        z_sq = squared_norms(xp, Z)
        total = None
        for start in range(0, self.X.shape[0], self.block_rows):
            rows = slice(start, min(start + self.block_rows, self.X.shape[0]))
            block = kernel_block(xp, self.kernel, self.X[rows, :], Z, z_sq=z_sq)
            part = sums_of_block(xp.astype(block, xp.float64), rows)
            total = part if total is None else total + part
        return total if total is not None else _empty(kind, self.centres.shape[0], n_steps)


def _numpy(values) -> np.ndarray:
    """float64 numpy of an array of any namespace."""
    if isinstance(values, np.ndarray):
        return values.astype(np.float64, copy=False)
    if hasattr(values, "get"):  # CuPy
        return np.asarray(values.get(), dtype=np.float64)
    if hasattr(values, "cpu"):  # PyTorch
        return values.cpu().numpy().astype(np.float64)
    return np.asarray(values, dtype=np.float64)


def _pieces(xp, margins, theta, v):
    below = xp.astype(margins < 1.0 - theta, margins.dtype)
    above = xp.astype(margins > 1.0 + theta, margins.dtype)
    return below + v * above, 1.0 - theta * below + theta * above


def _line_block(block, y, weights, coef, direction, steps, theta, v) -> LineSums:
    xp = namespace_of(block)
    where = device_of(block)
    y = xp.asarray(y, dtype=xp.float64, device=where)
    coef = xp.asarray(coef, dtype=xp.float64, device=where)
    direction = xp.asarray(direction, dtype=xp.float64, device=where)
    along_steps = xp.asarray(steps, dtype=xp.float64, device=where)
    margins = (y * (block @ coef))[:, None] + (y * (block @ direction))[:, None] * \
        along_steps[None, :]
    weight, tau = _pieces(xp, margins, theta, v)
    if weights is not None:
        weight = weight * xp.asarray(weights, dtype=xp.float64, device=where)[:, None]
    residual = weight * (margins - tau)
    last = len(steps) - 1
    moved = (weight[:, last] != weight[:, 0]) | (tau[:, last] != tau[:, 0])
    return LineSums(_numpy(xp.sum(residual * (margins - tau), axis=0)),
                    _numpy((block.T @ (residual * y[:, None])).T),
                    _numpy(xp.sum(weight, axis=0)),
                    int(xp.sum(xp.astype(moved, xp.int64))), int(block.shape[0]))


def _hessian_block(block, y, weights, coef, direction, theta, v) -> HessianSums:
    xp = namespace_of(block)
    where = device_of(block)
    y = xp.asarray(y, dtype=xp.float64, device=where)
    coef = xp.asarray(coef, dtype=xp.float64, device=where)
    direction = xp.asarray(direction, dtype=xp.float64, device=where)
    weight = _pieces(xp, y * (block @ coef), theta, v)[0]
    if weights is not None:
        weight = weight * xp.asarray(weights, dtype=xp.float64, device=where)
    return HessianSums(_numpy(block.T @ (weight * (block @ direction))),
                       float(xp.sum(weight)))


def _empty(kind, m: int, n_steps: int):
    """The sums of no rows."""
    if kind is LineSums:
        return LineSums(np.zeros(n_steps), np.zeros((n_steps, m)), np.zeros(n_steps), 0, 0)
    return HessianSums(np.zeros(m), 0.0)


class _numba_threads:
    """numba's thread count set for a block of code, and restored."""

    def __init__(self, threads: int):
        self.threads = threads

    def __enter__(self):
        import numba

        self.previous = numba.get_num_threads()
        most = numba.config.NUMBA_NUM_THREADS
        numba.set_num_threads(max(1, min(int(self.threads), most)))

    def __exit__(self, *exc):
        import numba

        numba.set_num_threads(self.previous)
