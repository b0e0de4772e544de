"""Sums over rows of an RBF kernel against m centres that is never stored (numba, no Spark).

The global step's matrix-free Newton steps (docs/design.md §2.9, :mod:`sodm_spark.models.
nystroem_cg`) need, for rows x_i with labels y_i and weights s_i, the kernel rows
k_i = (k(x_i, z_1), …, k(x_i, z_m)) only inside sums: the margins y_i k_i·α, and

* along a line α + t·p (the line search): for each step length t the loss
  Σ_i s_i D_i (y_i k_i·(α + t p) − τ_i)² and its gradient Σ_i s_i D_i (m_i − τ_i) y_i k_i, with
  the pieces (D_i, τ_i) of the margin m_i at t (docs/design.md §2.9);
* the Hessian's product with a direction p at α: Σ_i s_i D_i(α) (k_i·p) k_i.

Storing the n × m kernel costs n·m floats (2.4 million rows × 10,000 centres: 96 GB), and the
normal matrix K_SZᵀDK_SZ n·m² multiply-adds a pass; these sums cost one kernel entry per row
and centre, each computed, used and dropped while it is in the cache: a row's m entries
(one float32 buffer), their exponentials, two dot products and one axpy per output.

Rows of at most :data:`NARROW_FEATURES` features are the case this is for (a table's
columns): the squared distances run 8 features at a time over contiguous columns of the
centres (``Zᵀ``, padded with zeros to a multiple of 8) so that the loop over centres
vectorizes; the exponential is a degree-6 polynomial of 2^f on [-½, ½] times 2^k put
together from its bits, since numba's ``exp`` is not vectorized without Intel's SVML (relative
error 4e-6 against float64 at exponents down to -80, 1e-7 near 0; measured here: 0.53 ns an
entry against 1.8 ns for ``math.exp`` in the same loop, and 0.40 ns for the 8 distance terms).
Sums are kept in float32 over blocks of :data:`ROW_BLOCK` rows, then added into float64.
Wider rows (the kernel's GEMM dominates) take the array-namespace path of
:mod:`~sodm_spark.models.nystroem_cg`.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit, prange

#: Rows up to this many features (after padding to a multiple of 8) take these loops.
NARROW_FEATURES = 64
#: Rows a thread sums in float32 before adding the block's sums into float64.
ROW_BLOCK = 256
#: Floating-point liberties the loops take: contraction into FMAs and no NaN or infinity
#: checks, but not reassociation, which would fold the rounding constant of the exponential.
FASTMATH = {"nnan", "ninf", "nsz", "contract", "afn", "arcp"}
#: The float32 polynomial of 2^f on [-½, ½] (least squares on Chebyshev nodes, degree 6).
_P0, _P1, _P2, _P3, _P4, _P5, _P6 = (np.float32(1.0), np.float32(0.693147207),
                                     np.float32(0.240226512), np.float32(0.0555032721),
                                     np.float32(0.0096180256), np.float32(0.00134004322),
                                     np.float32(0.00015469732))
_LOG2E = np.float32(1.4426950408889634)
_ROUNDING = np.float32(12582912.0)  # 1.5·2^23: adding and subtracting it rounds to an integer

#: The rows one call sums over: ``X`` float32 (n, width padded to a multiple of 8), ``x_sq``
#: their squared norms, ``y`` ±1 and ``weights`` s_i (float64).
Rows = namedtuple("Rows", ["X", "x_sq", "y", "weights"])
#: The centres: ``ZT`` float32 (width, m) padded as the rows, ``z_sq`` their squared norms,
#: the kernel's ``gamma`` and constant ``offset`` (k = exp(-γ‖x − z‖²) + offset).
Centres = namedtuple("Centres", ["ZT", "z_sq", "gamma", "offset"])
#: The line α + t·p (float32 coefficients of the centres) and the band of Eqn 1's pieces.
Line = namedtuple("Line", ["coef", "direction", "steps", "theta", "v"])


def padded_rows(X: np.ndarray) -> np.ndarray:
    """``X`` as float32 with its columns padded with zeros to a multiple of 8."""
    n, d = X.shape
    width = max(8, -(-d // 8) * 8)
    out = np.zeros((n, width), dtype=np.float32)
    out[:, :d] = X
    return out


def rows_record(X: np.ndarray, y: np.ndarray, weights) -> Rows:
    """The :class:`Rows` of dense rows ``X`` (any float dtype), labels ``y``, weights (None: 1)."""
    padded = padded_rows(X)
    x_sq = np.einsum("ij,ij->i", padded, padded, dtype=np.float64).astype(np.float32)
    s = np.ones(X.shape[0]) if weights is None else np.asarray(weights, dtype=np.float64)
    return Rows(padded, x_sq, np.asarray(y, dtype=np.float64), s)


def centres_record(Z: np.ndarray, gamma: float, offset: float = 0.0) -> Centres:
    """The :class:`Centres` of ``Z`` for the RBF kernel exp(-γ‖x − z‖²) + offset."""
    padded = padded_rows(Z)
    z_sq = np.einsum("ij,ij->i", padded, padded, dtype=np.float64).astype(np.float32)
    return Centres(np.ascontiguousarray(padded.T), z_sq, np.float32(gamma), np.float32(offset))


@njit(fastmath=FASTMATH, error_model="numpy", cache=True)
def _kernel_row(x, x_sq, ZT, z_sq, gamma, offset, buf, bits):
    """One row's kernel entries against every centre into ``buf`` (``bits``: int32 scratch).
    Every array is the calling thread's own: an array shared between threads would have its
    reference count changed by both at every call, one cache line bounced between them."""
    m, width = ZT.shape[1], ZT.shape[0]
    for j in range(m):
        buf[j] = z_sq[j] + x_sq
    for first in range(0, width, 8):
        z0, z1, z2, z3 = ZT[first], ZT[first + 1], ZT[first + 2], ZT[first + 3]
        z4, z5, z6, z7 = ZT[first + 4], ZT[first + 5], ZT[first + 6], ZT[first + 7]
        a0, a1 = np.float32(-2.0) * x[first], np.float32(-2.0) * x[first + 1]
        a2, a3 = np.float32(-2.0) * x[first + 2], np.float32(-2.0) * x[first + 3]
        a4, a5 = np.float32(-2.0) * x[first + 4], np.float32(-2.0) * x[first + 5]
        a6, a7 = np.float32(-2.0) * x[first + 6], np.float32(-2.0) * x[first + 7]
        for j in range(m):
            buf[j] += (a0 * z0[j] + a1 * z1[j] + a2 * z2[j] + a3 * z3[j] + a4 * z4[j]
                       + a5 * z5[j] + a6 * z6[j] + a7 * z7[j])
    scale = -gamma * _LOG2E
    for j in range(m):
        t = max(max(buf[j], np.float32(0.0)) * scale, np.float32(-126.0))
        whole = (t + _ROUNDING) - _ROUNDING
        f = t - whole
        p = _P6 * f + _P5
        p = p * f + _P4
        p = p * f + _P3
        p = p * f + _P2
        p = p * f + _P1
        buf[j] = p * f + _P0
        bits[j] = (np.int32(whole) + np.int32(127)) << 23
    powers = bits.view(np.float32)
    for j in range(m):
        buf[j] = buf[j] * powers[j] + offset


@njit(fastmath=True, error_model="numpy", cache=True)
def _dot(buf, coef):
    total = np.float32(0.0)
    for j in range(buf.size):
        total += buf[j] * coef[j]
    return total


@njit(fastmath=FASTMATH, error_model="numpy", cache=True)
def _axpy(acc, buf, scale):
    for j in range(buf.size):
        acc[j] += buf[j] * scale


@njit(error_model="numpy", cache=True)
def _piece(margin, theta, v):
    """(D, τ) of a margin (docs/design.md §2.9)."""
    if margin < 1.0 - theta:
        return 1.0, 1.0 - theta
    if margin > 1.0 + theta:
        return v, 1.0 + theta
    return 0.0, 1.0


@njit(error_model="numpy", cache=True)
def _line_range(rows, centres, line, first, last):
    """:func:`line_sums` of rows ``first`` to ``last`` (one thread's), on its own copies."""
    ZT, z_sq, coef, direction = (centres.ZT.copy(), centres.z_sq.copy(), line.coef.copy(),
                                 line.direction.copy())
    gamma, offset, theta, v, steps = centres.gamma, centres.offset, line.theta, line.v, \
        line.steps.copy()
    m, n_steps = ZT.shape[1], steps.size
    losses, active = np.zeros(n_steps), np.zeros(n_steps)
    gradients = np.zeros((n_steps, m))
    changed = 0
    buf, bits = np.empty(m, dtype=np.float32), np.empty(m, dtype=np.int32)
    block = np.zeros((n_steps, m), dtype=np.float32)
    for start in range(first, last, ROW_BLOCK):
        stop = min(last, start + ROW_BLOCK)
        X, x_sq = rows.X[start:stop].copy(), rows.x_sq[start:stop].copy()
        y, s = rows.y[start:stop].copy(), rows.weights[start:stop].copy()
        block[:] = 0.0
        for i in range(stop - start):
            _kernel_row(X[i], x_sq[i], ZT, z_sq, gamma, offset, buf, bits)
            at, along = float(_dot(buf, coef)), float(_dot(buf, direction))
            first_weight, first_tau = _piece(y[i] * at, theta, v)
            for k in range(n_steps):
                margin = y[i] * (at + steps[k] * along)
                weight, tau = _piece(margin, theta, v)
                losses[k] += s[i] * weight * (margin - tau) ** 2
                active[k] += s[i] * weight
                if weight != 0.0:
                    _axpy(block[k], buf, np.float32(s[i] * weight * (margin - tau) * y[i]))
                if k == n_steps - 1 and (weight != first_weight or tau != first_tau):
                    changed += 1
        gradients += block
    return losses, gradients, active, changed


@njit(error_model="numpy", cache=True)
def _hessian_range(rows, centres, line, first, last):
    """:func:`hessian_sums` of rows ``first`` to ``last`` (one thread's), on its own copies."""
    ZT, z_sq, coef, direction = (centres.ZT.copy(), centres.z_sq.copy(), line.coef.copy(),
                                 line.direction.copy())
    gamma, offset, theta, v = centres.gamma, centres.offset, line.theta, line.v
    m = ZT.shape[1]
    products, active = np.zeros(m), 0.0
    buf, bits = np.empty(m, dtype=np.float32), np.empty(m, dtype=np.int32)
    block = np.zeros(m, dtype=np.float32)
    for start in range(first, last, ROW_BLOCK):
        stop = min(last, start + ROW_BLOCK)
        X, x_sq = rows.X[start:stop].copy(), rows.x_sq[start:stop].copy()
        y, s = rows.y[start:stop].copy(), rows.weights[start:stop].copy()
        block[:] = 0.0
        for i in range(stop - start):
            _kernel_row(X[i], x_sq[i], ZT, z_sq, gamma, offset, buf, bits)
            weight = _piece(y[i] * float(_dot(buf, coef)), theta, v)[0] * s[i]
            if weight != 0.0:
                active += weight
                _axpy(block, buf, np.float32(weight * _dot(buf, direction)))
        products += block
    return products, active


@njit(parallel=True, error_model="numpy", cache=True)
def line_sums(rows, centres, line, threads):
    """(losses (J,), gradients (J, m) float64, weight in pieces (J,), rows changed) of the rows
    at α + t·p for the J steps t of ``line`` (module docstring); "changed": rows whose piece
    differs between the first and the last step. ``threads``: numba's threads to use."""
    n, m, n_steps = rows.X.shape[0], centres.ZT.shape[1], line.steps.size
    losses, active = np.zeros((threads, n_steps)), np.zeros((threads, n_steps))
    gradients = np.zeros((threads, n_steps, m))
    changed = np.zeros(threads, dtype=np.int64)
    per = -(-n // threads)
    for thread in prange(threads):
        part = _line_range(rows, centres, line, min(n, thread * per), min(n, (thread + 1) * per))
        losses[thread], gradients[thread], active[thread], changed[thread] = part
    return losses.sum(axis=0), gradients.sum(axis=0), active.sum(axis=0), changed.sum()


@njit(parallel=True, error_model="numpy", cache=True)
def hessian_sums(rows, centres, line, threads):
    """(Σ_i s_i D_i(α) (k_i·p) k_i (m,) float64, Σ_i s_i D_i(α)) with the pieces at α =
    ``line.coef`` and p = ``line.direction`` (its steps are not read)."""
    n, m = rows.X.shape[0], centres.ZT.shape[1]
    products, active = np.zeros((threads, m)), np.zeros(threads)
    per = -(-n // threads)
    for thread in prange(threads):
        products[thread], active[thread] = _hessian_range(
            rows, centres, line, min(n, thread * per), min(n, (thread + 1) * per))
    return products.sum(axis=0), active.sum()
