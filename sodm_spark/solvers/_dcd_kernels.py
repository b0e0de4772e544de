"""Numba loops of the ODM dual coordinate descent (see ``odm_dcd`` for the math).

Every loop works on one point at a time with the closed-form joint update of (ζ_i, β_i)
derived from the SODM paper's Eqn (1)/(3): with ``r = u_i - Q_ii γ_i``,

    γ_i = (1-θ-r)/(Q_ii + Mcv)   if r < 1-θ,
    γ_i = -(r-1-θ)/(Q_ii + Mc)   if r > 1+θ,
    γ_i = 0                      otherwise,

and keeps ``u = Qγ`` current with one axpy of a kernel row per changed point.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit, prange

#: The largest magnitude of a fixed-point (int16) kernel entry (kernel_rows.FIXED_POINT).
FIXED_POINT_STEPS = 32767

#: Eqn 1's terms that every point's update reads (the closed forms above): the diagonal terms
#: a^ζ = S·c·v and a^β = S·c (row i's divided by its weight s_i) and the band's edges 1-θ and
#: 1+θ, as floats (``odm_dcd.ODMProblem.band``). A namedtuple, which numba takes as one argument.
Band = namedtuple("Band", ["a_zeta", "a_beta", "lower", "upper"])


@njit(cache=True, inline="always")
def _point_violation(gamma_i, u_i, a_zeta, a_beta, lower, upper):
    """Largest |projected gradient| of point i over its two dual variables ζ_i, β_i ≥ 0."""
    zeta = gamma_i if gamma_i > 0.0 else 0.0
    beta = -gamma_i if gamma_i < 0.0 else 0.0
    grad_zeta = u_i + a_zeta * zeta - lower
    grad_beta = -u_i + a_beta * beta + upper
    pg_zeta = grad_zeta if zeta > 0.0 else min(grad_zeta, 0.0)
    pg_beta = grad_beta if beta > 0.0 else min(grad_beta, 0.0)
    return max(abs(pg_zeta), abs(pg_beta)), grad_zeta, grad_beta


@njit(cache=True, inline="always")
def _point_optimum(r, q_ii, a_zeta, a_beta, lower, upper):
    if r < lower:
        return (lower - r) / (q_ii + a_zeta)
    if r > upper:
        return -(r - upper) / (q_ii + a_beta)
    return 0.0


@njit(cache=True, inline="always")
def _visit(Q, i, gamma, u, a_zeta, a_beta, lower, upper, shrink_threshold, may_shrink):
    """Visit point i: its violation before the update, or -1.0 if it is shrunk instead.

    ``Q`` holds the rows of the points indexed like ``gamma`` and ``u`` (all of Q, or one
    block's sub-matrix); the update keeps ``u = Qγ`` with one axpy of row i. ``a_zeta`` and
    ``a_beta`` are point i's own diagonal terms (the problem's divided by the row's weight).
    """
    g_old = gamma[i]
    violation, grad_zeta, grad_beta = _point_violation(g_old, u[i], a_zeta, a_beta, lower, upper)
    if may_shrink and g_old == 0.0 and grad_zeta > shrink_threshold \
            and grad_beta > shrink_threshold:
        return -1.0
    q_ii = Q[i, i]
    delta = _point_optimum(u[i] - q_ii * g_old, q_ii, a_zeta, a_beta, lower, upper) - g_old
    if delta != 0.0:
        gamma[i] = g_old + delta
        for j in range(Q.shape[1]):
            u[j] += delta * Q[i, j]
    return violation


@njit(cache=True)
def block_solve(Q_bb, gamma_b, u_b, active_b, order_rounds, band, inverse_weight_b,
                shrink_threshold, inner_tol):
    """Block coordinate descent on one block, all other points fixed.

    ``Q_bb`` is the block's B×B sub-matrix, ``gamma_b``/``u_b`` its γ and Qγ entries (updated in
    place), ``active_b`` its shrinking mask, ``order_rounds`` one seeded permutation of range(B)
    per inner sweep, ``band`` the problem's :data:`Band`, ``inverse_weight_b`` each point's
    1/s_i (a row of weight s_i has the diagonal terms a_zeta/s_i and a_beta/s_i:
    ``odm_dcd.ODMProblem``). The first sweep measures the block's violations and shrinks; the
    others run until the block's own violation is below ``inner_tol``. Returns the first-sweep
    violation.
    """
    a_zeta, a_beta, lower, upper = band
    first_violation = 0.0
    for sweep in range(order_rounds.shape[0]):
        sweep_violation = 0.0
        for k in range(order_rounds.shape[1]):
            i = order_rounds[sweep, k]
            if not active_b[i]:
                continue
            violation = _visit(Q_bb, i, gamma_b, u_b, a_zeta * inverse_weight_b[i],
                               a_beta * inverse_weight_b[i], lower, upper, shrink_threshold,
                               sweep == 0)
            if violation < 0.0:
                active_b[i] = False
            sweep_violation = max(sweep_violation, violation)
        if sweep == 0:
            first_violation = sweep_violation
        if sweep_violation <= inner_tol:
            break
    return first_violation


@njit(cache=True, fastmath=True)
def add_weighted_rows(u, matrix, rows, d):
    """``u += matrix[rows]ᵀ · d`` (the rows' weights) without copying the selected rows.

    Memory-bound: each selected row is read once, and ``u`` once per eight rows (22,000-column
    float32 rows: 24 GB/s on one core here, against 10.5 GB/s a row at a time). The products
    are in the dtype of ``d`` (float32 by default: relative error 6e-8 each; an int16 matrix,
    :data:`~.kernel_rows.FIXED_POINT`, is read at float32 weights), summed into float64 ``u``.
    """
    m = matrix.shape[1]
    n = rows.shape[0]
    b = 0
    while b + 8 <= n:
        r0, r1, r2, r3 = rows[b], rows[b + 1], rows[b + 2], rows[b + 3]
        r4, r5, r6, r7 = rows[b + 4], rows[b + 5], rows[b + 6], rows[b + 7]
        d0, d1, d2, d3 = d[b], d[b + 1], d[b + 2], d[b + 3]
        d4, d5, d6, d7 = d[b + 4], d[b + 5], d[b + 6], d[b + 7]
        for j in range(m):
            u[j] += ((d0 * matrix[r0, j] + d1 * matrix[r1, j])
                     + (d2 * matrix[r2, j] + d3 * matrix[r3, j])) \
                + ((d4 * matrix[r4, j] + d5 * matrix[r5, j])
                   + (d6 * matrix[r6, j] + d7 * matrix[r7, j]))
        b += 8
    while b < n:
        r0, d0 = rows[b], d[b]
        for j in range(m):
            u[j] += d0 * matrix[r0, j]
        b += 1


@njit(cache=True)
def add_indexed_rows(u, matrix, index, deltas):
    """``u += matrix[index]ᵀ · deltas`` for a float matrix, zero deltas skipped
    (:func:`add_weighted_rows`, the products in the matrix's dtype)."""
    moved = deltas != 0.0
    add_weighted_rows(u, matrix, index[moved], deltas[moved].astype(matrix.dtype))


@njit(cache=True)
def add_scaled_rows(u, matrix, index, deltas, scale):
    """``u += scale · matrix[index]ᵀ · deltas`` for a fixed-point (integer) matrix whose value
    is ``scale`` times its entries, zero deltas skipped; float32 products."""
    moved = deltas != 0.0
    add_weighted_rows(u, matrix, index[moved], (deltas[moved] * scale).astype(np.float32))


@njit(cache=True)
def add_rows(u, rows, deltas):
    """``u += rowsᵀ · deltas`` (all rows of a block; :func:`add_indexed_rows`)."""
    add_indexed_rows(u, rows, np.arange(rows.shape[0]), deltas)


@njit(cache=True)
def max_violation(gamma, u, a_zeta, a_beta, inverse_weight, lower, upper):
    """Largest projected-gradient violation over all points (the stopping measure)."""
    worst = 0.0
    for i in range(gamma.shape[0]):
        violation, _, _ = _point_violation(gamma[i], u[i], a_zeta * inverse_weight[i],
                                           a_beta * inverse_weight[i], lower, upper)
        if violation > worst:
            worst = violation
    return worst


@njit(cache=True)
def violations(gamma, u, a_zeta, a_beta, inverse_weight, lower, upper):
    """Projected-gradient violation of every point (``inverse_weight``: each point's 1/s_i)."""
    out = np.empty(gamma.shape[0])
    for i in range(gamma.shape[0]):
        out[i], _, _ = _point_violation(gamma[i], u[i], a_zeta * inverse_weight[i],
                                        a_beta * inverse_weight[i], lower, upper)
    return out


@njit(cache=True)
def gather_block(matrix, index):
    """``matrix[np.ix_(index, index)]`` for a sorted ``index``, reading each row in order
    (numpy's fancy indexing of a 512 × 512 block of a 7,400-row Q took as long as the sweep's
    own row reads)."""
    n = index.shape[0]
    out = np.empty((n, n), dtype=matrix.dtype)
    for a in range(n):
        row = index[a]
        for b in range(n):
            out[a, b] = matrix[row, index[b]]
    return out


@njit(cache=True)
def gather_scaled_block(matrix, index, scale):
    """:func:`gather_block` of a fixed-point matrix, as float32 values ``scale`` · entry."""
    n = index.shape[0]
    out = np.empty((n, n), dtype=np.float32)
    for a in range(n):
        row = index[a]
        for b in range(n):
            out[a, b] = matrix[row, index[b]] * scale
    return out


@njit(cache=True)
def mirror_rows_below(matrix, start, stop, tile):
    """``matrix[j, i] = matrix[i, j]`` for rows i in [start, stop) and j >= stop, in ``tile``
    × ``tile`` tiles (a plain transposed copy walks memory across rows and ran at a tenth of
    this speed)."""
    m = matrix.shape[0]
    for j0 in range(stop, m, tile):
        for i0 in range(start, stop, tile):
            for j in range(j0, min(j0 + tile, m)):
                for i in range(i0, min(i0 + tile, stop)):
                    matrix[j, i] = matrix[i, j]


@njit(cache=True)
def signed_rows_into(matrix, block, start, y, offset, tile):
    """Rows ``start:start+len(block)`` of Q from columns ``start`` on: ``y_i y_j (k_ij + offset)``
    for the kernel ``block``, and the same values mirrored below the block (tiled)."""
    rows, columns = block.shape
    for a in range(rows):
        i = start + a
        for b in range(columns):
            j = start + b
            matrix[i, j] = y[i] * y[j] * (block[a, b] + offset)
    mirror_rows_below(matrix, start, start + rows, tile)


@njit(cache=True)
def quantized_rows_into(matrix, block, start, y, inverse_scale, tile):
    """:func:`signed_rows_into` for a fixed-point ``matrix`` (int16): each value
    ``y_i y_j k_ij`` divided by the matrix's scale and rounded to the nearest integer (at
    most half a step off), clipped to the int16 range the scale was chosen to span."""
    rows, columns = block.shape
    top = np.float64(FIXED_POINT_STEPS)
    for a in range(rows):
        i = start + a
        for b in range(columns):
            j = start + b
            value = np.rint(y[i] * y[j] * block[a, b] * inverse_scale)
            matrix[i, j] = min(top, max(-top, value))
    mirror_rows_below(matrix, start, start + rows, tile)


@njit(cache=True, parallel=True)
def touch_pages(flat, stride):
    """Write a zero every ``stride`` values of ``flat`` (one per memory page), the pages split
    among numba's threads: the operating system maps a fresh array's pages on first write, and
    several threads fault pages in together (see ``kernel_rows.prefaulted_empty``)."""
    n = flat.shape[0]
    for page in prange((n + stride - 1) // stride):
        flat[page * stride] = 0
