"""Exact linear-kernel ODM by a generalized Newton method on the primal (SODM Sec. 2.1).

P(w, b) = ½‖w‖² + a/(2M) Σ_i (ξ_i² + v ε_i²), a = λ/(1-θ)², margins m_i = y_i(wᵀx_i + b), is
convex and piecewise quadratic (strongly convex in w; the bias b, present with
``fit_intercept``, is not penalized: see :mod:`sodm_spark.solvers.svrg`). Newton steps with the
generalized Hessian diag(1, …, 1, 0) + (a/M) X̂_Aᵀ D X̂_A (X̂ = X with a column of ones when
there is a bias; D = 1 on rows with margin < 1-θ, v on rows with margin > 1+θ) and a
backtracking line search converge in a few iterations (as libodm's trust-region Newton, TRON).
Used as the exact reference for DSVRG and SVRG, and as ODMClassifier's linear solver. Dense
Hessians for d ≤ 2,000, conjugate gradients with Hessian-vector products (X stays sparse)
above.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator, cg

from ..core.validation import check_odm_params
from .svrg import loss_gradient_sum, penalized

# Added to the bias's Hessian entry so that a step stays defined when no row is active
# (every margin inside the band: the objective is then flat in b).
_BIAS_RIDGE = 1e-12


@dataclass
class NewtonResult:
    w: np.ndarray
    objective: float
    iterations: int
    gradient_norm: float
    intercept: float = 0.0


def newton_primal(X, y, lam, theta, v, *, gradient_tol=1e-10, max_iter=100, w0=None,
                  fit_intercept=True, weights=None) -> NewtonResult:
    """Minimize the ODM primal; stop when ‖∇P‖ ≤ gradient_tol·max(1, ‖∇P(0)‖).
    ``fit_intercept`` (default, as MLlib and scikit-learn) adds the unpenalized bias b; ``w0``
    may hold d or (with an intercept) d+1 entries. ``weights``: each row's s_i > 0, the loss
    a weighted mean over S = Σ s_i (docs/design.md §1.4)."""
    check_odm_params(lam, theta, v)
    X = X.tocsr() if sp.issparse(X) else np.ascontiguousarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    m, d = X.shape
    fit_intercept = bool(fit_intercept)
    n_params = d + fit_intercept
    a = lam / (1.0 - theta) ** 2
    w = np.zeros(n_params)
    if w0 is not None:
        w0 = np.asarray(w0, dtype=np.float64).reshape(-1)
        w[:w0.size] = w0

    total = float(m) if weights is None else float(np.sum(weights))
    row_weight = np.ones(m) if weights is None else np.asarray(weights, dtype=np.float64)

    def objective_and_gradient(w):
        loss, grad = loss_gradient_sum(w, X, y, lam, theta, v, fit_intercept, weights=weights)
        return (0.5 * float(w[:d] @ w[:d]) + loss / total,
                penalized(w, fit_intercept) + grad / total)

    def hessian_vector(X_active, d_active):
        def product(s):
            direction_w = s[:d]
            inner = X_active @ direction_w + (s[d] if fit_intercept else 0.0)
            scaled = d_active * inner
            out = np.zeros(n_params)
            out[:d] = direction_w + X_active.T @ scaled
            if fit_intercept:
                out[d] = scaled.sum() + _BIAS_RIDGE * s[d]
            return out
        return product

    value, gradient = objective_and_gradient(w)
    scale = max(1.0, float(np.linalg.norm(gradient)))
    iteration = 0
    for iteration in range(1, max_iter + 1):  # noqa: B007 - the steps taken, read after the loop
        margins = y * (X @ w[:d] + (w[d] if fit_intercept else 0.0))
        piece = np.where(margins < 1 - theta, 1.0, np.where(margins > 1 + theta, v, 0.0))
        active = np.flatnonzero(piece)
        X_active, d_active = X[active], piece[active] * row_weight[active] * (a / total)
        if d <= 2000:
            dense = X_active.toarray() if sp.issparse(X_active) else X_active
            if fit_intercept:
                dense = np.hstack([dense, np.ones((dense.shape[0], 1))])
            hessian = (dense.T * d_active) @ dense
            hessian[np.diag_indices(d)] += 1.0
            if fit_intercept:
                hessian[d, d] += _BIAS_RIDGE
            direction = np.linalg.solve(hessian, -gradient)
        else:
            operator = LinearOperator((n_params, n_params), dtype=np.float64,
                                      matvec=hessian_vector(X_active, d_active))
            direction, _ = cg(operator, -gradient, rtol=1e-10, maxiter=500)
        step = 1.0
        while True:  # Armijo backtracking
            candidate = w + step * direction
            new_value, new_gradient = objective_and_gradient(candidate)
            if new_value <= value + 1e-4 * step * gradient @ direction or step < 1e-10:
                break
            step *= 0.5
        w, value, gradient = candidate, new_value, new_gradient
        if np.linalg.norm(gradient) <= gradient_tol * scale:
            break
    return NewtonResult(w[:d], float(value), iteration, float(np.linalg.norm(gradient)),
                        float(w[d]) if fit_intercept else 0.0)
