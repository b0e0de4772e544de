"""Independent references for the ODM dual: plain numpy + scipy, no code shared with the solver."""
import numpy as np
from scipy.optimize import minimize


def odm_dual_reference(Q, lam, theta, v):
    """Minimize Eqn (1) over (ζ, β) ≥ 0 with scipy's L-BFGS-B; returns (objective, γ)."""
    m = Q.shape[0]
    mc = m * (1 - theta) ** 2 / (lam * v)

    def objective(a):
        zeta, beta = a[:m], a[m:]
        gamma = zeta - beta
        q_gamma = Q @ gamma
        value = (0.5 * gamma @ q_gamma + 0.5 * mc * (v * zeta @ zeta + beta @ beta)
                 + (theta - 1) * zeta.sum() + (theta + 1) * beta.sum())
        grad = np.concatenate([q_gamma + mc * v * zeta + theta - 1,
                               -q_gamma + mc * beta + theta + 1])
        return value, grad

    result = minimize(objective, np.zeros(2 * m), jac=True, method="L-BFGS-B",
                      bounds=[(0, None)] * (2 * m),
                      options=dict(ftol=1e-16, gtol=1e-13, maxiter=50000, maxcor=50))
    return result.fun, result.x[:m] - result.x[m:]


def kkt_residual(Q, gamma, lam, theta, v):
    """Largest projected gradient of Eqn (1) at ζ = max(γ,0), β = max(-γ,0), in numpy."""
    m = Q.shape[0]
    mc = m * (1 - theta) ** 2 / (lam * v)
    zeta, beta = np.maximum(gamma, 0), np.maximum(-gamma, 0)
    q_gamma = Q @ gamma
    g_zeta = q_gamma + mc * v * zeta + theta - 1
    g_beta = -q_gamma + mc * beta + theta + 1
    pg_zeta = np.where(zeta > 0, g_zeta, np.minimum(g_zeta, 0))
    pg_beta = np.where(beta > 0, g_beta, np.minimum(g_beta, 0))
    return float(max(np.abs(pg_zeta).max(), np.abs(pg_beta).max()))


def odm_primal(w, X, y, lam, theta, v):
    """The ODM primal (SODM paper Sec. 2.1) at w for the linear kernel."""
    m = X.shape[0]
    margin = y * (X @ w)
    xi = np.maximum(0, 1 - theta - margin)
    eps = np.maximum(0, margin - 1 - theta)
    return 0.5 * w @ w + lam / (2 * m) * np.sum(xi ** 2 + v * eps ** 2) / (1 - theta) ** 2


def odm_weighted_primal_reference(X, y, weights, lam, theta, v):
    """The weighted ODM primal for the linear kernel, ½‖w‖² + λ/(2S) Σ_i s_i (ξ_i² + v ε_i²) /
    (1-θ)² with S = Σ s_i, minimized over w by L-BFGS-B (it is smooth: the squared hinges have
    continuous gradients); returns (w, the primal's value). No dual, no code of the solver."""
    total = weights.sum()
    factor = lam / (2 * total * (1 - theta) ** 2)

    def objective(w):
        margin = y * (X @ w)
        xi = np.maximum(0, 1 - theta - margin)
        eps = np.maximum(0, margin - 1 - theta)
        value = 0.5 * w @ w + factor * np.sum(weights * (xi ** 2 + v * eps ** 2))
        d_margin = factor * weights * (-2 * xi + 2 * v * eps)
        return value, w + X.T @ (d_margin * y)

    result = minimize(objective, np.zeros(X.shape[1]), jac=True, method="L-BFGS-B",
                      options=dict(ftol=1e-16, gtol=1e-12, maxiter=50000))
    return result.x, result.fun
