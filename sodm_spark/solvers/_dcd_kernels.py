"""Numba loops of the ODM dual coordinate descent (see ``odm_dcd`` for the math).

Every loop works on one point at a time with the closed-form joint update of (ζ_i, β_i)
derived from the SODM paper's Eqn (1)/(3): with ``r = u_i - Q_ii γ_i``,

    γ_i = (1-θ-r)/(Q_ii + Mcv)   if r < 1-θ,
    γ_i = -(r-1-θ)/(Q_ii + Mc)   if r > 1+θ,
    γ_i = 0                      otherwise,

and keeps ``u = Qγ`` current with one axpy of a kernel row per changed point.
"""
from __future__ import annotations

import numpy as np
from numba import njit


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
    block's sub-matrix); the update keeps ``u = Qγ`` with one axpy of row i.
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
def cached_sweep(Q, gamma, u, order, keep, a_zeta, a_beta, lower, upper, shrink_threshold):
    """One sweep over ``order`` with the whole ``Q`` in memory.

    Returns the largest violation seen; ``keep[k]`` is set False for points shrunk this sweep
    (γ_i = 0 and both gradients above ``shrink_threshold``, as LIBLINEAR's PGmax_old rule).
    """
    max_violation = 0.0
    for k in range(order.shape[0]):
        violation = _visit(Q, order[k], gamma, u, a_zeta, a_beta, lower, upper,
                           shrink_threshold, True)
        keep[k] = violation >= 0.0
        max_violation = max(max_violation, violation)
    return max_violation


@njit(cache=True)
def block_solve(Q_bb, gamma_b, u_b, active_b, order_rounds, a_zeta, a_beta, lower, upper,
                shrink_threshold, inner_tol):
    """Block coordinate descent on one block, all other points fixed.

    ``Q_bb`` is the block's B×B sub-matrix, ``gamma_b``/``u_b`` its γ and Qγ entries (updated in
    place), ``active_b`` its shrinking mask, ``order_rounds`` one seeded permutation of range(B)
    per inner sweep. The first sweep measures the block's violations and shrinks; the others
    run until the block's own violation is below ``inner_tol``. Returns the first-sweep
    violation.
    """
    first_violation = 0.0
    for sweep in range(order_rounds.shape[0]):
        sweep_violation = 0.0
        for k in range(order_rounds.shape[1]):
            i = order_rounds[sweep, k]
            if not active_b[i]:
                continue
            violation = _visit(Q_bb, i, gamma_b, u_b, a_zeta, a_beta, lower, upper,
                               shrink_threshold, sweep == 0)
            if violation < 0.0:
                active_b[i] = False
            sweep_violation = max(sweep_violation, violation)
        if sweep == 0:
            first_violation = sweep_violation
        if sweep_violation <= inner_tol:
            break
    return first_violation


@njit(cache=True)
def add_rows(u, rows, deltas):
    """``u += rowsᵀ · deltas`` in float64 whatever the dtype of ``rows`` (skips zero deltas)."""
    m = rows.shape[1]
    for b in range(rows.shape[0]):
        delta = deltas[b]
        if delta != 0.0:
            for j in range(m):
                u[j] += delta * rows[b, j]


@njit(cache=True)
def add_indexed_rows(u, matrix, index, deltas):
    """``u += matrix[index]ᵀ · deltas`` without copying the selected rows."""
    m = matrix.shape[1]
    for b in range(index.shape[0]):
        delta = deltas[b]
        if delta != 0.0:
            row = index[b]
            for j in range(m):
                u[j] += delta * matrix[row, j]


@njit(cache=True)
def max_violation(gamma, u, a_zeta, a_beta, lower, upper):
    """Largest projected-gradient violation over all points (the stopping measure)."""
    worst = 0.0
    for i in range(gamma.shape[0]):
        violation, _, _ = _point_violation(gamma[i], u[i], a_zeta, a_beta, lower, upper)
        if violation > worst:
            worst = violation
    return worst


@njit(cache=True)
def violations(gamma, u, a_zeta, a_beta, lower, upper):
    """Projected-gradient violation of every point."""
    out = np.empty(gamma.shape[0])
    for i in range(gamma.shape[0]):
        out[i], _, _ = _point_violation(gamma[i], u[i], a_zeta, a_beta, lower, upper)
    return out
