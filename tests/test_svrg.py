"""SVRG numerics for the linear ODM primal (SODM Sec. 3.3 / Alg. 2): small, fast checks.

The independent reference is the exact ODM dual solved by coordinate descent with the linear
kernel: w* = Xᵀ(γ*·y) and P(w*) = -D*.
"""
import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp

from sodm_spark.core.kernels import Kernel
from sodm_spark.solvers import solve_odm_dual
from sodm_spark.solvers.dcd_settings import DCDSettings, ODMHyperparameters
from sodm_spark.solvers.svrg import (SVRGResult, SVRGSchedule, Snapshot,
                                     default_step, loss_gradient_sum, penalized,
                                     primal_objective, sample_rows, smoothness, svrg,
                                     svrg_inner)
from tests.conftest import make_problem

pytestmark = pytest.mark.numerics  # rerun under other BLAS kernels: tests/test_blas_kernels.py

SETTINGS = [(1.0, 0.2, 0.5), (10.0, 0.5, 1.0)]


def dual_reference(X, y, lam, theta, v):
    res = solve_odm_dual(X, y, Kernel.create("linear"), ODMHyperparameters(lam, theta, v),
                         settings=DCDSettings(violation_tol=1e-11, max_iter=100000,
                                              dtype=np.float64, mode="cached"))
    assert res.converged
    return X.T @ (res.gamma * y), -res.objective


def sparse_problem(m=300, d=50, density=0.2, seed=3):
    rng = np.random.default_rng(seed)
    X = sp.random(m, d, density=density, format="csr", random_state=seed,
                  data_rvs=lambda k: rng.normal(size=k))
    y = np.where(X @ rng.normal(size=d) + 0.3 * rng.normal(size=m) > 0, 1.0, -1.0)
    return X, y


def numpy_grad_i(w, x, y, lam, theta, v):
    """∇p_i(w) literally as written in SODM Sec. 3.3."""
    m = y * (w @ x)
    a = lam / (1 - theta) ** 2
    g = w.copy()
    if m < 1 - theta:
        g += a * (m + theta - 1) * y * x
    if m > 1 + theta:
        g += a * v * (m - theta - 1) * y * x
    return g


@pytest.mark.parametrize("sparse", [False, True])
def test_gradient_matches_finite_differences(sparse):
    X, y = make_problem(m=40, d=6, seed=2)
    lam, theta, v = 2.0, 0.3, 0.4
    Xin = sp.csr_matrix(X) if sparse else X
    w = np.random.default_rng(0).normal(size=6) * 2.0
    margins = y * (X @ w)
    # every piece of the loss is exercised: ξ > 0, ε > 0 and the flat middle
    assert (margins < 1 - theta).any() and (margins > 1 + theta).any()
    assert ((margins > 1 - theta) & (margins < 1 + theta)).any()
    loss_sum, grad_sum = loss_gradient_sum(w, Xin, y, lam, theta, v)
    assert primal_objective(w, Xin, y, lam, theta, v) == pytest.approx(
        0.5 * w @ w + loss_sum / 40, rel=1e-14)
    full = w + grad_sum / X.shape[0]
    h = 1e-6
    fd = np.array([(primal_objective(w + h * e, Xin, y, lam, theta, v)
                    - primal_objective(w - h * e, Xin, y, lam, theta, v)) / (2 * h)
                   for e in np.eye(6)])
    np.testing.assert_allclose(full, fd, rtol=1e-6, atol=1e-7)
    per_row = np.mean([numpy_grad_i(w, X[i], y[i], lam, theta, v) for i in range(40)], axis=0)
    np.testing.assert_allclose(full, per_row, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("lam,theta,v", SETTINGS)
def test_svrg_reaches_dual_optimum(lam, theta, v):
    X, y = make_problem(m=500, d=20, seed=1)
    w_star, p_star = dual_reference(X, y, lam, theta, v)
    assert primal_objective(w_star, X, y, lam, theta, v) == pytest.approx(p_star, rel=1e-9)
    res = svrg(X, y, ODMHyperparameters(lam, theta, v),
               SVRGSchedule(epochs=40, relative_change_tol=1e-10, seed=0), fit_intercept=False)
    assert isinstance(res, SVRGResult) and res.converged and res.epochs < 40
    assert len(res.history) == res.epochs + 1 and res.objective == res.history[-1]
    assert abs(res.objective - p_star) <= 1e-4 * abs(p_star)
    assert res.objective >= p_star - 1e-12
    np.testing.assert_allclose(res.w, w_star, atol=1e-4 * np.linalg.norm(w_star))


def test_objective_gap_shrinks_geometrically():
    X, y = make_problem(m=500, d=20, seed=1)
    lam, theta, v = SETTINGS[1]
    _, p_star = dual_reference(X, y, lam, theta, v)
    res = svrg(X, y, ODMHyperparameters(lam, theta, v),
               SVRGSchedule(epochs=8, relative_change_tol=0.0, seed=4), fit_intercept=False)
    gaps = np.array(res.history) - p_star
    assert res.epochs == 8 and not res.converged
    assert gaps[1] > 0 and gaps[8] <= 1e-2 * gaps[1]
    assert np.all(np.diff(gaps[:5]) < 0)


def test_sparse_and_dense_give_the_same_w():
    Xs, y = sparse_problem()
    lam, theta, v = 3.0, 0.2, 0.5
    res_s = svrg(Xs, y, ODMHyperparameters(lam, theta, v),
                 SVRGSchedule(epochs=6, relative_change_tol=0.0, seed=7))
    res_d = svrg(Xs.toarray(), y, ODMHyperparameters(lam, theta, v),
                 SVRGSchedule(epochs=6, relative_change_tol=0.0, seed=7))
    np.testing.assert_allclose(res_s.w, res_d.w, rtol=0, atol=1e-10)
    np.testing.assert_allclose(res_s.history, res_d.history, rtol=1e-12)


def test_csr_lazy_inner_loop_equals_dense_loop_and_formula():
    Xs, y = sparse_problem(m=120, d=40, density=0.15, seed=5)
    Xs = Xs * (0.6 / np.sqrt(smoothness(Xs, 1.0, 0.0, 1.0)))   # L_max ≈ 1.4
    X = Xs.toarray()
    lam, theta, v = 1.0, 0.1, 0.7
    rng = np.random.default_rng(1)
    w, snap = rng.normal(size=40) * 6, rng.normal(size=40) * 6
    g = loss_gradient_sum(snap, X, y, lam, theta, v)[1] / X.shape[0]
    # 0.7**1000 < 1e-100: the lazy scale s is renormalized along the way
    rows = sample_rows(120, 1000, np.random.default_rng(2))
    copies = [a.copy() for a in (w, snap, g, Xs.data, y)]
    out_s = svrg_inner(w, Snapshot(snap, g), Xs, y, rows, 0.3, ODMHyperparameters(lam, theta, v))
    out_d = svrg_inner(w, Snapshot(snap, g), X, y, rows, 0.3, ODMHyperparameters(lam, theta, v))
    np.testing.assert_allclose(out_s, out_d, rtol=0, atol=1e-11)
    for before, after in zip(copies, (w, snap, g, Xs.data, y)):
        np.testing.assert_array_equal(before, after)
    # a few steps against ∇p_i(w) - ∇p_i(w̃) + μ̃ written out in numpy; both loss pieces occur
    margins = y[rows[:25]] * (X[rows[:25]] @ w)
    assert (margins < 1 - theta).any() and (margins > 1 + theta).any()
    ref = w.copy()
    mu = snap + g
    for i in rows[:25]:
        ref = ref - 0.3 * (numpy_grad_i(ref, X[i], y[i], lam, theta, v)
                           - numpy_grad_i(snap, X[i], y[i], lam, theta, v) + mu)
    for Xin in (X, Xs):
        np.testing.assert_allclose(svrg_inner(w, Snapshot(snap, g), Xin, y, rows[:25], 0.3,
                                              ODMHyperparameters(lam, theta, v)),
                                   ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(svrg_inner(w, Snapshot(snap, g), X, y, rows[:0], 0.3,
                                             ODMHyperparameters(lam, theta, v)), w)


def test_seed_reproducibility_and_independence():
    X, y = make_problem(m=300, d=10, seed=6)
    lam, theta, v = SETTINGS[0]
    a = svrg(X, y, ODMHyperparameters(lam, theta, v),
             SVRGSchedule(epochs=25, relative_change_tol=1e-12, seed=11))
    b = svrg(X, y, ODMHyperparameters(lam, theta, v),
             SVRGSchedule(epochs=25, relative_change_tol=1e-12, seed=11))
    c = svrg(X, y, ODMHyperparameters(lam, theta, v),
             SVRGSchedule(epochs=25, relative_change_tol=1e-12, seed=12))
    np.testing.assert_array_equal(a.w, b.w)
    assert a.history == b.history
    assert a.history[1] != c.history[1]                      # another path ...
    assert abs(a.objective - c.objective) <= 1e-9 * a.objective   # ... to the same optimum
    np.testing.assert_allclose(a.w, c.w, atol=1e-5)
    one_a = svrg(X, y, ODMHyperparameters(lam, theta, v),
                 SVRGSchedule(epochs=1, relative_change_tol=0, seed=[11, 0]))
    one_b = svrg(X, y, ODMHyperparameters(lam, theta, v),
                 SVRGSchedule(epochs=1, relative_change_tol=0, seed=[11, 1]))
    assert not np.array_equal(one_a.w, one_b.w)


def test_sample_rows_without_replacement():
    rng = np.random.default_rng(0)
    r = sample_rows(10, 7, rng)
    assert r.dtype == np.int64 and r.size == 7 and np.unique(r).size == 7
    r = sample_rows(10, 25, rng)
    assert r.size == 25
    assert sorted(r[:10]) == list(range(10)) and sorted(r[10:20]) == list(range(10))
    assert sample_rows(5, 0, rng).size == 0


def test_step_and_smoothness():
    X, y = make_problem(m=50, d=4, seed=0)
    lam, theta, v = 2.0, 0.5, 0.3
    L = 1 + lam / 0.25 * max(1, v) * np.max(np.sum(X ** 2, axis=1))
    assert smoothness(X, lam, theta, v) == pytest.approx(L)
    assert smoothness(sp.csr_matrix(X), lam, theta, v) == pytest.approx(L)
    assert 0 < default_step(X, lam, theta, v) <= 1 / (2 * L) * (1 + 1e-12)


def test_huge_sparse_matrix_is_never_densified():
    m, d, nnz_row = 2000, 200_000, 4
    rng = np.random.default_rng(0)
    indices = rng.integers(0, d, size=m * nnz_row).astype(np.int32)
    data = rng.normal(size=m * nnz_row)
    X = sp.csr_matrix((data, indices, np.arange(0, m * nnz_row + 1, nnz_row)), shape=(m, d))
    y = np.where(rng.random(m) < 0.5, 1.0, -1.0)
    svrg(X[:50], y[:50], ODMHyperparameters(1.0, 0.2, 0.5), SVRGSchedule(epochs=1))  # warm-up (numba compile)
    tracemalloc.start()
    try:
        res = svrg(X, y, ODMHyperparameters(1.0, 0.2, 0.5),
                   SVRGSchedule(epochs=3, relative_change_tol=0.0))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < m * d * 8 / 200, peak                           # dense X would be 3.2 GB
    assert res.w.shape == (d,) and np.all(np.isfinite(res.w))
    assert res.history[-1] < res.history[0]


def test_bad_inputs():
    X, y = make_problem(m=30, d=3)
    with pytest.raises(ValueError, match="-1 or \\+1"):
        svrg(X, (y > 0).astype(float), ODMHyperparameters(1.0, 0.2, 0.5))
    with pytest.raises(ValueError, match="one label per row"):
        svrg(X, y[:-1], ODMHyperparameters(1.0, 0.2, 0.5))
    for lam in (0.0, -1.0, np.inf):
        with pytest.raises(ValueError, match="lam"):
            svrg(X, y, ODMHyperparameters(lam, 0.2, 0.5))
    with pytest.raises(ValueError, match="theta"):
        svrg(X, y, ODMHyperparameters(1.0, 1.0, 0.5))
    with pytest.raises(ValueError, match="v "):
        svrg(X, y, ODMHyperparameters(1.0, 0.2, 0.0))
    with pytest.raises(ValueError, match="w0 must be a vector of length 3"):
        svrg(X, y, ODMHyperparameters(1.0, 0.2, 0.5), w0=np.zeros(4))
    with pytest.raises(ValueError, match="length 3"):
        primal_objective(np.zeros(2), X, y, 1.0, 0.2, 0.5)
    with pytest.raises(ValueError, match="step"):
        svrg_inner(np.zeros(3), Snapshot(np.zeros(3), np.zeros(3)), X, y, [0, 1], 1.5,
                   ODMHyperparameters(1.0, 0.2, 0.5))
    with pytest.raises(ValueError, match="rows"):
        svrg_inner(np.zeros(3), Snapshot(np.zeros(3), np.zeros(3)), X, y, [30], 0.1,
                   ODMHyperparameters(1.0, 0.2, 0.5))
    with pytest.raises(ValueError, match="inner_steps"):
        svrg(X, y, ODMHyperparameters(1.0, 0.2, 0.5), SVRGSchedule(inner_steps=0))


def test_stops_on_relative_objective_change():
    X, y = make_problem(m=500, d=20, seed=1)
    lam, theta, v = SETTINGS[1]
    tol = 8e-3
    res = svrg(X, y, ODMHyperparameters(lam, theta, v),
               SVRGSchedule(epochs=50, relative_change_tol=tol, seed=3))
    h = np.array(res.history)
    change = np.abs(np.diff(h)) / np.abs(h[1:])
    assert res.converged and res.epochs == len(h) - 1 < 50
    assert change[-1] <= tol and np.all(change[:-1] > tol)


# ---------------------------------------------------------------- the intercept
def shifted_problem(m=400, d=8, seed=21, shift=3.0):
    """Rows in [shift, shift+1]^d whose classes split at the cube's centre: the separating
    hyperplane lies far from the origin, so a model without a bias cannot fit it."""
    rng = np.random.default_rng(seed)
    X = shift + rng.random((m, d))
    w_true = rng.normal(size=d)
    y = np.where((X - shift - 0.5) @ w_true + 0.05 * rng.normal(size=m) > 0, 1.0, -1.0)
    return X, y


def scipy_primal(X, y, lam, theta, v):
    """The primal with an unpenalized bias written out in numpy and minimized by L-BFGS: an
    independent reference for (w, b) and P."""
    from scipy.optimize import minimize
    a, m, d = lam / (1 - theta) ** 2, X.shape[0], X.shape[1]

    def fun(wb):
        margins = y * (X @ wb[:d] + wb[d])
        xi, eps = np.maximum(1 - theta - margins, 0), np.maximum(margins - 1 - theta, 0)
        value = 0.5 * wb[:d] @ wb[:d] + a / (2 * m) * np.sum(xi ** 2 + v * eps ** 2)
        c = a / m * (v * eps - xi) * y
        return value, np.append(wb[:d] + X.T @ c, c.sum())

    res = minimize(fun, np.zeros(d + 1), jac=True, method="L-BFGS-B",
                   options={"ftol": 1e-16, "gtol": 1e-11, "maxiter": 20000, "maxcor": 30})
    return res.x[:d], res.x[d], res.fun


@pytest.mark.parametrize("sparse", [False, True])
def test_intercept_gradient_matches_finite_differences(sparse):
    X, y = make_problem(m=40, d=6, seed=2)
    lam, theta, v = 2.0, 0.3, 0.4
    Xin = sp.csr_matrix(X) if sparse else X
    wb = np.random.default_rng(0).normal(size=7) * 2.0
    loss_sum, grad_sum = loss_gradient_sum(wb, Xin, y, lam, theta, v, fit_intercept=True)
    assert grad_sum.shape == (7,)
    assert primal_objective(wb, Xin, y, lam, theta, v, fit_intercept=True) == pytest.approx(
        0.5 * wb[:6] @ wb[:6] + loss_sum / 40, rel=1e-14)           # b is not penalized
    full = penalized(wb, True) + grad_sum / 40
    h = 1e-6
    fd = np.array([(primal_objective(wb + h * e, Xin, y, lam, theta, v, True)
                    - primal_objective(wb - h * e, Xin, y, lam, theta, v, True)) / (2 * h)
                   for e in np.eye(7)])
    np.testing.assert_allclose(full, fd, rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="length 7 .*then the intercept"):
        loss_gradient_sum(wb[:6], Xin, y, lam, theta, v, fit_intercept=True)


def test_intercept_inner_loops_dense_csr_and_formula():
    Xs, y = sparse_problem(m=120, d=40, density=0.15, seed=5)
    Xs = Xs * (0.6 / np.sqrt(smoothness(Xs, 1.0, 0.0, 1.0, fit_intercept=True)))
    Xs.data += 0.5   # rows not centred
    X = Xs.toarray()
    lam, theta, v = 1.0, 0.1, 0.7
    rng = np.random.default_rng(1)
    wb, snap = rng.normal(size=41) * 3, rng.normal(size=41) * 3
    g = loss_gradient_sum(snap, X, y, lam, theta, v, True)[1] / X.shape[0]
    rows = sample_rows(120, 1000, np.random.default_rng(2))   # the lazy scale is renormalized
    out_s = svrg_inner(wb, Snapshot(snap, g), Xs, y, rows, 0.3, ODMHyperparameters(lam, theta, v), True)
    out_d = svrg_inner(wb, Snapshot(snap, g), X, y, rows, 0.3, ODMHyperparameters(lam, theta, v), True)
    np.testing.assert_allclose(out_s, out_d, rtol=0, atol=1e-10)
    # ∇p_i(w, b) = (w, 0) + c_i·y_i(x_i, 1), steps written out in numpy
    a = lam / (1 - theta) ** 2

    def grad_i(wb, i):
        m = y[i] * (X[i] @ wb[:40] + wb[40])
        c = a * (m - 1 + theta) if m < 1 - theta else a * v * (m - 1 - theta) if m > 1 + theta \
            else 0.0
        return penalized(wb, True) + c * y[i] * np.append(X[i], 1.0)

    ref, mu = wb.copy(), penalized(snap, True) + g
    for i in rows[:25]:
        ref = ref - 0.3 * (grad_i(ref, i) - grad_i(snap, i) + mu)
    for Xin in (X, Xs):
        np.testing.assert_allclose(svrg_inner(wb, Snapshot(snap, g), Xin, y, rows[:25], 0.3,
                                              ODMHyperparameters(lam, theta, v), True),
                                   ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("lam", [1.0, 100.0])
def test_intercept_solvers_reach_the_independent_primal_optimum(lam):
    from sodm_spark.solvers.odm_primal import newton_primal
    X, y = shifted_problem()
    theta, v = 0.1, 0.5
    w_ref, b_ref, p_ref = scipy_primal(X, y, lam, theta, v)
    newton = newton_primal(X, y, lam, theta, v)
    assert newton.objective == pytest.approx(p_ref, rel=1e-6)
    assert newton.objective <= p_ref * (1 + 1e-9)      # at least as good as L-BFGS
    np.testing.assert_allclose(newton.w, w_ref, rtol=1e-4, atol=1e-4 * np.linalg.norm(w_ref))
    assert newton.intercept == pytest.approx(b_ref, rel=1e-4, abs=1e-4)
    for Xin in (X, sp.csr_matrix(X)):
        res = svrg(Xin, y, ODMHyperparameters(lam, theta, v),
                   SVRGSchedule(epochs=200, relative_change_tol=1e-13, seed=3))
        assert res.objective == pytest.approx(newton.objective, rel=1e-6)
        assert res.intercept == pytest.approx(newton.intercept, rel=1e-3, abs=1e-3)
    # without the bias the hyperplane must pass the origin: the fit is far worse
    plain = newton_primal(X, y, lam, theta, v, fit_intercept=False)
    assert plain.objective > newton.objective * (1 + 1e-3)
    if lam >= 100:  # a loss-dominated fit: the bias decides the accuracy
        accuracy = lambda w, b: np.mean(np.where(X @ w + b > 0, 1.0, -1.0) == y)
        assert accuracy(newton.w, newton.intercept) > accuracy(plain.w, 0.0) + 0.05


def test_intercept_fit_does_not_depend_on_where_the_origin_lies():
    """Shifting every row by a vector s only moves b by -wᵀs (the bias is unpenalized)."""
    from sodm_spark.solvers.odm_primal import newton_primal
    X, y = shifted_problem(shift=0.0)
    s = np.linspace(-4.0, 6.0, X.shape[1])
    base = newton_primal(X, y, 30.0, 0.2, 0.5)
    moved = newton_primal(X + s, y, 30.0, 0.2, 0.5)
    np.testing.assert_allclose(moved.w, base.w, rtol=1e-8, atol=1e-10)
    assert moved.intercept == pytest.approx(base.intercept - base.w @ s, rel=1e-8)
    assert moved.objective == pytest.approx(base.objective, rel=1e-10)
