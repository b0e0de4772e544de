"""K one-vs-rest ODM duals solved together (solvers.odm_multiclass) against K binary solves.

Reference: :func:`solve_odm_dual` run once per class on the same rows with that class as +1
(the problems are independent and strongly convex, so both must reach the same optimum), and
a brute-force QP (scipy's L-BFGS-B on Eqn 1 in (ζ, β)) for one class.
"""
import numpy as np
import pytest
from scipy.optimize import minimize

from sodm_spark.core.kernels import Kernel
from sodm_spark.solvers.odm_dcd import ODMProblem, solve_odm_dual
from sodm_spark.solvers.odm_multiclass import one_vs_rest_signs, solve_odm_multiclass
from sodm_spark.solvers.dcd_settings import DCDSettings, ODMHyperparameters

pytestmark = pytest.mark.numerics  # rerun under other BLAS kernels: tests/test_blas_kernels.py

LAM, THETA, V = 50.0, 0.2, 0.4


def blobs(n_per_class=40, n_classes=4, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=2.0, size=(n_classes, 3))
    X = np.concatenate([c + rng.normal(size=(n_per_class, 3)) for c in centres])
    return X, np.repeat(np.arange(n_classes), n_per_class)


@pytest.mark.parametrize("kernel", [Kernel.create("rbf", 0.3), Kernel.create("linear")])
def test_joint_solve_equals_one_binary_solve_per_class(kernel):
    X, y = blobs()
    joint = solve_odm_multiclass(X, y, 4, kernel, ODMHyperparameters(LAM, THETA, V),
                                 settings=DCDSettings(violation_tol=1e-10, max_iter=5000,
                                                      dtype=np.float64))
    assert joint.converged
    for c in range(4):
        y_pm = np.where(y == c, 1.0, -1.0)
        single = solve_odm_dual(X, y_pm, kernel, ODMHyperparameters(LAM, THETA, V),
                                settings=DCDSettings(violation_tol=1e-10, max_iter=5000,
                                                     dtype=np.float64, mode="cached"))
        scale = np.abs(single.gamma).max()
        np.testing.assert_allclose(joint.gamma[:, c], single.gamma, rtol=0, atol=1e-6 * scale)
        assert joint.objectives[c] == pytest.approx(single.objective, rel=1e-6)
        np.testing.assert_allclose(joint.u[:, c], single.u, rtol=0,
                                   atol=1e-6 * np.abs(single.u).max())


def test_one_class_matches_a_brute_force_qp():
    X, y = blobs(n_per_class=15, n_classes=3, seed=1)
    kernel = Kernel.create("rbf", 0.5)
    joint = solve_odm_multiclass(X, y, 3, kernel, ODMHyperparameters(LAM, THETA, V),
                                 settings=DCDSettings(violation_tol=1e-10, max_iter=5000,
                                                      dtype=np.float64))
    y_pm = np.where(y == 2, 1.0, -1.0)
    Q = kernel.block(X, X) * np.outer(y_pm, y_pm)
    problem = ODMProblem(LAM, THETA, V, X.shape[0])
    m = X.shape[0]

    def dual(z):  # Eqn (1) in (ζ, β) ≥ 0
        zeta, beta = z[:m], z[m:]
        g = zeta - beta
        Qg = Q @ g
        value = (0.5 * g @ Qg + 0.5 * problem.a_beta * (V * zeta @ zeta + beta @ beta)
                 - problem.lower * zeta.sum() + problem.upper * beta.sum())
        grad = np.concatenate([Qg + problem.a_zeta * zeta - problem.lower,
                               -Qg + problem.a_beta * beta + problem.upper])
        return value, grad

    best = minimize(dual, np.zeros(2 * m), jac=True, method="L-BFGS-B",
                    bounds=[(0, None)] * (2 * m), options={"ftol": 1e-15, "gtol": 1e-12,
                                                          "maxiter": 20000})
    assert joint.objectives[2] == pytest.approx(best.fun, rel=1e-6)
    np.testing.assert_allclose(joint.gamma[:, 2], best.x[:m] - best.x[m:], atol=1e-5)


def test_warm_start_from_the_optimum_stops_at_once_and_float32_is_close():
    X, y = blobs(seed=2)
    kernel = Kernel.create("rbf", 0.3)
    exact = solve_odm_multiclass(X, y, 4, kernel, ODMHyperparameters(LAM, THETA, V),
                                 settings=DCDSettings(violation_tol=1e-9, dtype=np.float64))
    again = solve_odm_multiclass(X, y, 4, kernel, ODMHyperparameters(LAM, THETA, V),
                                 settings=DCDSettings(violation_tol=1e-6, dtype=np.float64),
                                 gamma0=exact.gamma)
    assert again.n_sweeps == 1 and again.converged
    single = solve_odm_multiclass(X, y, 4, kernel, ODMHyperparameters(LAM, THETA, V),
                                  settings=DCDSettings(violation_tol=1e-4))  # float32 kernel
    np.testing.assert_allclose(single.objectives, exact.objectives, rtol=1e-3)


def test_a_class_without_rows_is_an_all_negative_problem():
    X, y = blobs(n_classes=3, seed=3)
    kernel = Kernel.create("rbf", 0.3)
    joint = solve_odm_multiclass(X, y, 4, kernel, ODMHyperparameters(LAM, THETA, V),
                                 settings=DCDSettings(violation_tol=1e-9, dtype=np.float64))
    alone = solve_odm_dual(X, -np.ones(X.shape[0]), kernel, ODMHyperparameters(LAM, THETA, V),
                           settings=DCDSettings(violation_tol=1e-9, dtype=np.float64,
                                                mode="cached"))
    np.testing.assert_allclose(joint.gamma[:, 3], alone.gamma, atol=1e-7)
    assert np.all(joint.u[:, 3] > 0)  # u_i = y_i f(x_i) = -f(x_i): every row on the negative side


def test_signs_and_bad_input():
    np.testing.assert_array_equal(one_vs_rest_signs(np.array([0, 2, 1]), 3),
                                  [[1, -1, -1], [-1, -1, 1], [-1, 1, -1]])
    X, y = blobs(n_per_class=5, n_classes=2)
    with pytest.raises(ValueError, match=r"class number in \[0, 2\)"):
        solve_odm_multiclass(X, y + 1, 2, Kernel.create("linear"),
                             ODMHyperparameters(LAM, THETA, V))
    with pytest.raises(ValueError, match="gamma0 must be a finite"):
        solve_odm_multiclass(X, y, 2, Kernel.create("linear"), ODMHyperparameters(LAM, THETA, V),
                             gamma0=np.zeros((3, 2)))


def test_fixed_point_storage_serves_the_per_class_solves_and_the_joint_one_stays_float():
    from sodm_spark.solvers.local_solve import LocalSolve
    X, y = blobs(n_per_class=60)
    kernel = Kernel.create("rbf", 0.3)
    exact = LocalSolve(LAM, THETA, V, violation_tol=1e-8, dtype="float64").solve(X, y, kernel, 4)
    # the joint solver keeps its one kernel matrix in float32 when fixed point is asked for
    joint = LocalSolve(LAM, THETA, V, violation_tol=1e-8, dtype="int16").solve(X, y, kernel, 4)
    assert joint.storage == "float32" and len(joint.runs) == 1
    # a cache too small for K in float32 (225 kB) but not in int16 (115 kB): per-class solves,
    # each on its own cached int16 Q
    per_class = LocalSolve(LAM, THETA, V, violation_tol=1e-8, dtype="int16",
                           cache_mb=0.15).solve(X, y, kernel, 4)
    assert per_class.storage == "int16" and len(per_class.runs) == 4
    assert per_class.kernel_mode == "cached"
    for solved in (joint, per_class):
        np.testing.assert_allclose(solved.objectives, exact.objectives, rtol=1e-4)
        np.testing.assert_allclose(solved.gamma, exact.gamma,
                                   atol=1e-3 * np.abs(exact.gamma).max())
