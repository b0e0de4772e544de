"""K one-vs-rest ODM duals solved together against one kernel matrix (docs/design.md §1.1).

Class c's problem is the binary dual of Eqn (1) with labels ``y_c = ±1`` (+1 for class c):
``Q_c = diag(y_c) K diag(y_c)``. The C problems share everything but the signs, so one
kernel matrix ``K`` (no labels) serves them all: it is computed once instead of C times
(the dominant cost of C separate solves), and the duals are kept as ``Γ`` (m, C) and
``V[c] = K (y_c ∘ γ_c)``, so class c's ``u_c = Q_c γ_c`` is ``y_c ∘ V[c]``. A sweep visits
the points in one shuffled order and, at each, the classes still active there, with the
closed forms of Eqn (3) (as :mod:`._dcd_kernels`); a changed coordinate adds row i of K to
``V[c]`` (one axpy; the row stays in cache for the point's other classes). Shrinking
(LIBLINEAR's rule) is per coordinate and class, so a class that has converged costs little.

The problems stay independent (each dual is strongly convex, so each has one optimum), so the
result equals C binary solves of :func:`~sodm_spark.solvers.odm_dcd.solve_odm_dual` up to
``violation_tol``; the solve stops when the largest violation over all points and classes is at
most ``violation_tol`` on a sweep over every coordinate.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from ..core.kernels import Kernel
from ..core.sparse_rows import as_float_rows
from ._dcd_kernels import _point_optimum, _point_violation
from .dcd_settings import DCD_DEFAULTS, DCDSettings, ODMHyperparameters
from .kernel_rows import full_q_matrix
from .odm_dcd import ODMProblem, checked_weights, next_shrink_threshold


@dataclass
class MulticlassDCDResult:
    """``gamma`` (m, C): class c's γ = ζ - β; ``u`` (m, C): class c's Q_c γ_c."""

    gamma: np.ndarray
    u: np.ndarray
    objectives: np.ndarray
    n_sweeps: int
    violation: float
    converged: bool
    history: list


def one_vs_rest_signs(y_index: np.ndarray, n_classes: int) -> np.ndarray:
    """(m, C) float64: +1 where the row is of class c, -1 elsewhere."""
    signs = -np.ones((y_index.size, n_classes))
    signs[np.arange(y_index.size), y_index] = 1.0
    return signs


@njit(cache=True)
def multiclass_sweep(K, signs, gamma, V, order, active, band, inverse_weight, thresholds,
                     violations):
    """One sweep over the points in ``order``, each class of a point that is still active.

    ``V`` is (C, m) with ``V[c] = K (y_c ∘ γ_c)``; a changed coordinate costs one axpy of row
    i of K into ``V[c]`` (the row is read from memory once and stays in cache for the other
    classes of the point). ``band`` holds Eqn 1's terms (``_dcd_kernels.Band``; row i's
    diagonal terms divided by its weight, ``inverse_weight[i]`` = 1/s_i). ``active[i, c]`` is
    cleared for a coordinate LIBLINEAR's rule shrinks against ``thresholds[c]``;
    ``violations[c]`` receives class c's largest violation over the coordinates it kept.
    """
    a_zeta, a_beta, lower, upper = band
    n_classes = signs.shape[1]
    m = K.shape[1]
    for c in range(n_classes):
        violations[c] = 0.0
    for t in range(order.shape[0]):
        i = order[t]
        q_ii = K[i, i]
        a_zeta_i, a_beta_i = a_zeta * inverse_weight[i], a_beta * inverse_weight[i]
        for c in range(n_classes):
            if not active[i, c]:
                continue
            y_ic = signs[i, c]
            g_old = gamma[i, c]
            u_ic = y_ic * V[c, i]
            violation, grad_zeta, grad_beta = _point_violation(g_old, u_ic, a_zeta_i,
                                                               a_beta_i, lower, upper)
            if g_old == 0.0 and grad_zeta > thresholds[c] and grad_beta > thresholds[c]:
                active[i, c] = False  # at its optimum 0 with room to spare: shrink
                continue
            violations[c] = max(violations[c], violation)
            delta = _point_optimum(u_ic - q_ii * g_old, q_ii, a_zeta_i, a_beta_i, lower,
                                   upper) - g_old
            if delta != 0.0:
                gamma[i, c] = g_old + delta
                step = delta * y_ic
                for j in range(m):
                    V[c, j] += step * K[i, j]


@njit(cache=True)
def _signed_products(K, signs, gamma):
    """V (C, m) = K (signs ∘ Γ) per class in float64, skipping zero duals."""
    m, n_classes = gamma.shape
    V = np.zeros((n_classes, m))
    for i in range(m):
        for c in range(n_classes):
            weight = signs[i, c] * gamma[i, c]
            if weight != 0.0:
                for j in range(m):
                    V[c, j] += weight * K[i, j]
    return V


def solve_odm_multiclass(X: np.ndarray, y_index: np.ndarray, n_classes: int, kernel: Kernel,
                         hyper: ODMHyperparameters, *, settings: DCDSettings = DCD_DEFAULTS,
                         gamma0=None, seed=0, weights=None,
                         kernel_values: np.ndarray | None = None) -> MulticlassDCDResult:
    """The C one-vs-rest ODM duals (Eqn 1 with ``hyper``'s λ, θ, v, class c against the
    rest) of ``X`` with class numbers ``y_index`` in [0, C), solved together with the whole
    kernel matrix in memory.

    ``gamma0`` (m, C) warm-starts every class; a class with no row here is a problem with
    only negatives (its γ pushes every margin to -(1-θ) or below). Arguments otherwise as
    :func:`~sodm_spark.solvers.odm_dcd.solve_odm_dual` (cached mode: of ``settings``, the
    violation bound, the sweeps, the dtype, shrinking, ``block_mb`` and the callback;
    ``kernel_values`` the m×m kernel matrix if the caller already computed it; ``weights``
    each row's s_i > 0, the same in every class's problem).
    """
    violation_tol, max_iter, callback = settings.violation_tol, settings.max_iter, \
        settings.callback
    X = as_float_rows(X, np.float64)
    y_index = np.asarray(y_index)
    m = X.shape[0]
    if y_index.shape != (m,) or (m and (y_index.min() < 0 or y_index.max() >= n_classes)):
        raise ValueError(f"y_index must hold one class number in [0, {n_classes}) per row.")
    signs = one_vs_rest_signs(y_index.astype(np.int64), n_classes)
    problem = ODMProblem(hyper.lam, hyper.theta, hyper.v, m, checked_weights(weights, m))
    inverse_weight = problem.inverse_weight
    gamma = np.zeros((m, n_classes)) if gamma0 is None else \
        np.array(gamma0, dtype=np.float64, copy=True)
    if gamma.shape != (m, n_classes) or not np.all(np.isfinite(gamma)):
        raise ValueError(f"gamma0 must be a finite ({m}, {n_classes}) matrix.")
    if kernel_values is None:
        # the kernel matrix, no signs
        K = full_q_matrix(kernel, X, None, settings.dtype, settings.block_mb)
    elif kernel_values.shape != (m, m):
        raise ValueError(f"the kernel matrix is {kernel_values.shape}, X has {m} rows.")
    else:
        K = kernel_values
    V = _signed_products(K, signs, gamma)
    rng = np.random.default_rng(seed)
    everyone = np.ones((m, n_classes), dtype=np.bool_)
    active = everyone.copy()
    thresholds = np.full(n_classes, np.inf)
    class_violations = np.zeros(n_classes)
    history = []
    violation, converged, sweep = np.inf, False, 0
    for sweep in range(1, int(max_iter) + 1):
        points = np.flatnonzero(active.any(axis=1))
        order = points[rng.permutation(points.size)]
        multiclass_sweep(K, signs, gamma, V, order, active, problem.band, inverse_weight,
                         thresholds, class_violations)
        violation = float(class_violations.max()) if n_classes else 0.0
        history.append(violation)
        if callback is not None:
            callback(sweep, violation, int(active.sum()))
        if violation <= violation_tol:
            if active.all():  # a sweep over every coordinate, none shrunk
                converged = True
                break
            active[:] = everyone  # re-check every coordinate before stopping
            thresholds[:] = np.inf
            continue
        for c in range(n_classes):
            thresholds[c] = next_shrink_threshold(class_violations[c], settings.shrinking)
    u = signs * V.T
    objectives = np.array([problem.objective(gamma[:, c], u[:, c]) for c in range(n_classes)])
    return MulticlassDCDResult(gamma=gamma, u=u, objectives=objectives, n_sweeps=sweep,
                               violation=float(violation), converged=converged,
                               history=history)
