"""Exact linear-kernel ODM by a generalized Newton method on the primal (SODM Sec. 2.1).

P(w) = ½‖w‖² + a/(2M) Σ_i (ξ_i² + v ε_i²), a = λ/(1-θ)², is strongly convex and piecewise
quadratic, so Newton steps with the generalized Hessian I + (a/M) X_Aᵀ D X_A (D = 1 on rows
with margin < 1-θ, v on rows with margin > 1+θ) and a backtracking line search converge in a
few iterations (as libodm's trust-region Newton, TRON). Used as the exact reference for DSVRG
and SVRG at sizes where the dual's M×M kernel is out of reach. Dense Hessians for d ≤ 2,000,
conjugate gradients with Hessian-vector products (X stays sparse) above.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator, cg

from .svrg import loss_gradient_sum
from ..validation import check_odm_params


@dataclass
class NewtonResult:
    w: np.ndarray
    objective: float
    iterations: int
    gradient_norm: float


def newton_primal(X, y, lam, theta, v, *, tol=1e-10, max_iter=100, w0=None) -> NewtonResult:
    """Minimize the ODM primal; stop when ‖∇P(w)‖ ≤ tol·max(1, ‖∇P(0)‖)."""
    check_odm_params(lam, theta, v)
    X = X.tocsr() if sp.issparse(X) else np.ascontiguousarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    m, d = X.shape
    a = lam / (1.0 - theta) ** 2
    w = np.zeros(d) if w0 is None else np.array(w0, dtype=np.float64)

    def objective_and_gradient(w):
        loss, grad = loss_gradient_sum(w, X, y, lam, theta, v)
        return 0.5 * w @ w + loss / m, w + grad / m

    value, gradient = objective_and_gradient(w)
    scale = max(1.0, float(np.linalg.norm(gradient)))
    for iteration in range(1, max_iter + 1):
        margins = y * (X @ w)
        weights = np.where(margins < 1 - theta, 1.0, np.where(margins > 1 + theta, v, 0.0))
        active = np.flatnonzero(weights)
        X_active, d_active = X[active], weights[active] * (a / m)
        if d <= 2000:
            dense = X_active.toarray() if sp.issparse(X_active) else X_active
            hessian = (dense.T * d_active) @ dense
            hessian[np.diag_indices(d)] += 1.0
            direction = np.linalg.solve(hessian, -gradient)
        else:
            operator = LinearOperator((d, d), dtype=np.float64,
                                      matvec=lambda s: s + X_active.T @ (d_active * (X_active @ s)))
            direction, _ = cg(operator, -gradient, rtol=1e-10, maxiter=500)
        step = 1.0
        while True:  # Armijo backtracking
            candidate = w + step * direction
            new_value, new_gradient = objective_and_gradient(candidate)
            if new_value <= value + 1e-4 * step * gradient @ direction or step < 1e-10:
                break
            step *= 0.5
        w, value, gradient = candidate, new_value, new_gradient
        if np.linalg.norm(gradient) <= tol * scale:
            break
    return NewtonResult(w, float(value), iteration, float(np.linalg.norm(gradient)))
