import tracemalloc

import numpy as np
import pytest

from sodm_spark.core.kernels import Kernel, kernel_matrix, kernel_names
from sodm_spark.solvers import solve_odm_dual
from sodm_spark.solvers.dcd_settings import DCDSettings, GivenKernel, ODMHyperparameters

from conftest import make_problem
from reference import kkt_residual, odm_dual_reference, odm_primal

pytestmark = pytest.mark.numerics  # rerun under other BLAS kernels: tests/test_blas_kernels.py

CASES = [  # kernel, gamma, lam, theta, v, m
    ("rbf", 0.3, 3.0, 0.2, 0.5, 60),
    ("rbf", 1.0, 200.0, 0.0, 1.0, 50),
    ("linear", 1.0, 10.0, 0.1, 0.2, 70),
    ("poly", 0.2, 5.0, 0.5, 0.8, 40),
    ("laplacian", 0.4, 50.0, 0.3, 0.1, 55),
]


def q_matrix(X, y, kernel):
    return kernel_matrix(kernel, X) * np.outer(y, y)


@pytest.mark.parametrize("mode", ["cached", "blocked"])
@pytest.mark.parametrize("name,gamma,lam,theta,v,m", CASES)
def test_objective_matches_lbfgsb_and_kkt_holds(mode, name, gamma, lam, theta, v, m):
    X, y = make_problem(m=m, seed=m)
    kernel = Kernel.create(name, gamma, degree=2, coef0=1.0)
    result = solve_odm_dual(X, y, kernel, ODMHyperparameters(lam, theta, v),
                            settings=DCDSettings(violation_tol=1e-9, dtype=np.float64, mode=mode,
                                                 block_size=16), seed=3)
    reference, reference_gamma = odm_dual_reference(q_matrix(X, y, kernel), lam, theta, v)
    assert result.converged and result.kernel_mode == mode
    assert abs(result.objective - reference) <= 1e-6 * abs(reference)
    assert kkt_residual(q_matrix(X, y, kernel), result.gamma, lam, theta, v) <= 1e-8
    np.testing.assert_allclose(result.u, q_matrix(X, y, kernel) @ result.gamma, atol=1e-9)
    np.testing.assert_allclose(result.gamma, reference_gamma, atol=1e-4)
    assert result.n_sv == np.count_nonzero(result.gamma) > 0


@pytest.mark.parametrize("lam,theta,v", [(10.0, 0.1, 0.2), (1.0, 0.5, 1.0), (1000.0, 0.0, 0.5)])
def test_linear_kernel_strong_duality(lam, theta, v):
    X, y = make_problem(m=80, d=4, seed=7)
    result = solve_odm_dual(X, y, Kernel.create("linear"), ODMHyperparameters(lam, theta, v),
                            settings=DCDSettings(violation_tol=1e-10, dtype=np.float64))
    w = X.T @ (result.gamma * y)
    primal = odm_primal(w, X, y, lam, theta, v)
    assert primal == pytest.approx(-result.objective, rel=1e-6)


@pytest.mark.parametrize("mode", ["cached", "blocked"])
def test_warm_start_at_the_optimum_stops_after_one_sweep(mode, problem):
    X, y = problem
    kernel = Kernel.create("rbf", 0.5)
    optimum = solve_odm_dual(X, y, kernel, ODMHyperparameters(10.0, 0.1, 0.5),
                             settings=DCDSettings(violation_tol=1e-8, mode=mode, block_size=16,
                                                  dtype=np.float64))
    warm = solve_odm_dual(X, y, kernel, ODMHyperparameters(10.0, 0.1, 0.5),
                          settings=DCDSettings(violation_tol=1e-6, mode=mode, block_size=16,
                                               dtype=np.float64), gamma0=optimum.gamma)
    cold = solve_odm_dual(X, y, kernel, ODMHyperparameters(10.0, 0.1, 0.5),
                          settings=DCDSettings(violation_tol=1e-6, mode=mode, block_size=16,
                                               dtype=np.float64))
    assert warm.converged and warm.n_sweeps == 1 < cold.n_sweeps


def test_same_seed_same_gamma_and_other_seed_same_optimum(problem):
    X, y = problem
    kernel = Kernel.create("rbf", 0.5)
    runs = [solve_odm_dual(X, y, kernel, ODMHyperparameters(10.0, 0.1, 0.5),
                           settings=DCDSettings(violation_tol=1e-8), seed=seed)
            for seed in ([4, 1, 2], [4, 1, 2], 99)]
    assert np.array_equal(runs[0].gamma, runs[1].gamma)
    assert not np.array_equal(runs[0].gamma, runs[2].gamma)  # another order, another path
    np.testing.assert_allclose(runs[0].gamma, runs[2].gamma, atol=1e-5)


def test_a_given_signed_q_is_read_as_it_is_and_reaches_the_reference_optimum():
    X, y = make_problem(m=90, d=4, seed=12)
    kernel = Kernel.create("rbf", 0.4)
    Q = q_matrix(X, y, kernel)
    reference, reference_gamma = odm_dual_reference(Q, 30.0, 0.2, 0.5)
    given = Q.copy()
    result = solve_odm_dual(X, y, kernel, ODMHyperparameters(30.0, 0.2, 0.5),
                            settings=DCDSettings(violation_tol=1e-9, dtype=np.float64),
                            given=GivenKernel(signed_q=given))
    assert result.converged and result.kernel_mode == "cached"
    assert abs(result.objective - reference) <= 1e-6 * abs(reference)
    np.testing.assert_allclose(result.gamma, reference_gamma, atol=1e-4)
    np.testing.assert_allclose(result.u, Q @ result.gamma, atol=1e-9)
    assert np.array_equal(given, Q)  # read, never written
    with pytest.raises(ValueError, match="signed_q must be the 90×90 float32"):
        solve_odm_dual(X, y, kernel, ODMHyperparameters(30.0, 0.2, 0.5),
                       given=GivenKernel(signed_q=given))  # float64 for float32


def test_cached_and_on_demand_paths_agree():
    X, y = make_problem(m=400, d=8, seed=5)
    kernel = Kernel.create("rbf", 0.1)
    cached = solve_odm_dual(X, y, kernel, ODMHyperparameters(100.0, 0.1, 0.2),
                            settings=DCDSettings(violation_tol=1e-7, dtype=np.float64))
    # A 1 MB budget holds 2 of the 4 blocks of 100 rows: the rest is recomputed on demand.
    blocked = solve_odm_dual(X, y, kernel, ODMHyperparameters(100.0, 0.1, 0.2),
                             settings=DCDSettings(violation_tol=1e-7, dtype=np.float64,
                                                  cache_mb=0.7, block_size=100))
    assert cached.kernel_mode == "cached" and blocked.kernel_mode == "blocked"
    assert blocked.objective == pytest.approx(cached.objective, rel=1e-9)
    np.testing.assert_allclose(blocked.gamma, cached.gamma, atol=1e-6)


def test_on_demand_path_never_holds_an_m_by_m_matrix():
    X, y = make_problem(m=4000, d=10, seed=2)
    kernel = Kernel.create("rbf", 0.1)
    m_by_m_bytes = 4000 * 4000 * 4
    # compile the numba loops first: a first-time compile allocates Python objects that
    # tracemalloc would count
    solve_odm_dual(X[:50], y[:50], kernel, ODMHyperparameters(100.0, 0.1, 0.2),
                   settings=DCDSettings(mode="blocked", block_size=16))
    tracemalloc.start()
    result = solve_odm_dual(X, y, kernel, ODMHyperparameters(100.0, 0.1, 0.2),
                            settings=DCDSettings(violation_tol=1e-3, cache_mb=8, block_size=256))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert result.kernel_mode == "blocked" and result.converged
    # the 8 MB row cache + what the memory budget counts for the solver (X, vectors, one
    # block of rows and its GEMM scratch); Q would be 64 MB
    from sodm_spark.solvers.kernel_rows import solver_memory_mb
    assert peak <= (8 + solver_memory_mb(4000, 10, block_size=256)) * 2**20, \
        f"peak {peak / 2**20:.1f} MB"
    assert peak < m_by_m_bytes / 3, f"peak {peak / 2**20:.1f} MB"


def test_float32_cache_is_close_to_float64(problem):
    X, y = problem
    kernel = Kernel.create("rbf", 0.5)
    single = solve_odm_dual(X, y, kernel, ODMHyperparameters(10.0, 0.1, 0.5),
                            settings=DCDSettings(violation_tol=1e-8, dtype=np.float32))
    double = solve_odm_dual(X, y, kernel, ODMHyperparameters(10.0, 0.1, 0.5),
                            settings=DCDSettings(violation_tol=1e-8, dtype=np.float64))
    assert single.objective == pytest.approx(double.objective, rel=1e-5)


def test_shrinking_reaches_the_same_optimum_and_max_iter_stops():
    X, y = make_problem(m=300, d=3, seed=11, noise=0.0)
    kernel = Kernel.create("rbf", 1.0)
    args = (X, y, kernel, ODMHyperparameters(5.0, 0.6, 0.5))
    shrunk = solve_odm_dual(*args, settings=DCDSettings(violation_tol=1e-8, dtype=np.float64))
    plain = solve_odm_dual(*args, settings=DCDSettings(violation_tol=1e-8, dtype=np.float64,
                                                       shrinking=False))
    assert np.count_nonzero(shrunk.gamma) < 300  # some points sit inside the margin band
    np.testing.assert_allclose(shrunk.gamma, plain.gamma, atol=1e-7)
    stopped = solve_odm_dual(*args, settings=DCDSettings(violation_tol=1e-8, max_iter=2))
    assert not stopped.converged and stopped.n_sweeps == 2 and stopped.violation > 1e-8


def test_the_visits_are_the_rows_each_sweep_left_active():
    """The level cost model's visits (spark/sodm/plan.py): without shrinking every sweep but
    the converged one visits every row; with shrinking, each sweep's active rows, as its
    callback reports them, fewer than its sweeps times the rows."""
    X, y = make_problem(m=300, d=3, seed=11, noise=0.0)
    args = (X, y, Kernel.create("rbf", 1.0), ODMHyperparameters(5.0, 0.6, 0.5))
    plain = solve_odm_dual(*args, settings=DCDSettings(violation_tol=1e-6, dtype=np.float64,
                                                       shrinking=False))
    assert plain.converged and plain.visits == 300 * (plain.n_sweeps - 1)
    active = []
    shrunk = solve_odm_dual(*args, settings=DCDSettings(
        violation_tol=1e-6, dtype=np.float64, callback=lambda _, __, rows: active.append(rows)))
    assert shrunk.converged and len(active) == shrunk.n_sweeps
    assert shrunk.visits == sum(active[:-1]) < 300 * (shrunk.n_sweeps - 1)
    stopped = solve_odm_dual(*args, settings=DCDSettings(violation_tol=1e-12, max_iter=2,
                                                         shrinking=False))
    assert not stopped.converged and stopped.visits == 600


@pytest.mark.parametrize("kwargs,match", [
    (dict(lam=0.0), "lam"), (dict(lam=-1.0), "lam"), (dict(theta=1.0), "theta"),
    (dict(theta=-0.1), "theta"), (dict(v=0.0), "v "), (dict(v=1.5), "v "),
])
def test_bad_hyperparameters_are_refused(problem, kwargs, match):
    X, y = problem
    params = dict(lam=1.0, theta=0.1, v=0.5) | kwargs
    with pytest.raises(ValueError, match=match):
        solve_odm_dual(X, y, Kernel.create("rbf", 1.0), ODMHyperparameters(**params))


@pytest.mark.parametrize("name", ["rbf", "laplacian", "poly", "linear"])
def test_cached_q_mirrors_row_blocks_exactly(name):
    from sodm_spark.solvers.kernel_rows import full_q_matrix
    X, y = make_problem(m=300, d=7, seed=9)
    kernel = Kernel.create(name, 0.2, degree=2, coef0=1.0)
    Q = full_q_matrix(kernel, X, y, np.float64, block_mb=300 * 8 * 40 / 2**20)  # 40-row blocks
    np.testing.assert_allclose(Q, q_matrix(X, y, kernel), rtol=1e-12, atol=1e-12)
    assert np.abs(Q - Q.T).max() <= 1e-14


@pytest.mark.parametrize("threads", [1, 2])
def test_a_prefaulted_q_is_the_same_matrix(monkeypatch, threads):
    from sodm_spark.solvers import kernel_rows
    X, y = make_problem(m=700, d=5, seed=10)
    kernel = Kernel.create("rbf", 0.3)
    reference = kernel_rows.full_q_matrix(kernel, X, y, np.float32)  # below PREFAULT_MB
    monkeypatch.setattr(kernel_rows, "PREFAULT_MB", 0)  # every matrix prefaulted
    touched = kernel_rows.prefaulted_empty((700, 700), np.float32, threads)
    assert touched.shape == (700, 700) and touched.dtype == np.float32
    # one zero a page: every 1,024th value of the flat array (a float64 page holds 512)
    assert np.all(touched.reshape(-1)[::1024] == 0.0)
    np.testing.assert_array_equal(kernel_rows.full_q_matrix(kernel, X, y, np.float32), reference)
    np.testing.assert_allclose(reference, q_matrix(X, y, kernel), rtol=1e-5, atol=1e-6)


def test_row_cache_serves_its_capacity_every_sweep_and_returns_exact_rows():
    from sodm_spark.solvers.kernel_rows import KernelRows, full_q_matrix
    X, y = make_problem(m=400, d=3, seed=12)
    kernel = Kernel.create("rbf", 0.5)
    source = KernelRows(kernel, X, y, np.float32, 250 * 400 * 4)  # room for 250 rows
    Q = full_q_matrix(kernel, X, y, np.float32)
    rng = np.random.default_rng(0)
    for sweep in range(5):
        computed_before = source.computed_rows
        order = rng.permutation(400)
        order = np.concatenate([order[source.cached(order)], order[~source.cached(order)]])
        for start in range(0, 400, 100):
            index = source.cached_first(order[start:start + 100])
            # Q's lower triangle is mirrored: equal to a computed row up to float32 rounding
            np.testing.assert_allclose(source.rows(index), Q[index], rtol=0, atol=1e-6)
        # from the second sweep on the 250 cached rows are served, the other 150 recomputed
        expected = 400 if sweep == 0 else 150
        assert source.computed_rows - computed_before == expected
    mixed = np.array([5, 1, 399, 7])  # any order: the rows come back in that order
    np.testing.assert_allclose(source.rows(mixed), Q[mixed], rtol=0, atol=1e-6)


# Fixed-point (int16) kernel storage: Q at half float32's memory (kernel_rows.FIXED_POINT)


@pytest.mark.parametrize("name", kernel_names())
def test_a_fixed_point_q_is_within_half_a_step_of_the_exact_one(name):
    from sodm_spark.solvers.kernel_rows import FIXED_POINT, fixed_point_scale, full_q_matrix
    X, y = make_problem(m=300, d=7, seed=9)
    kernel = Kernel.create(name, 0.2, degree=2, coef0=1.0)
    exact = q_matrix(X, y, kernel)
    scale = fixed_point_scale(kernel, X)
    # the largest value is on the diagonal (a positive semi-definite kernel), and spans the range
    assert scale == pytest.approx(np.abs(exact).max() / 32767, rel=1e-12)
    Q = full_q_matrix(kernel, X, y, FIXED_POINT, block_mb=300 * 4 * 40 / 2**20, scale=scale)
    assert Q.dtype == np.int16 and np.array_equal(Q, Q.T) and np.abs(Q).max() == 32767
    # half a step of rounding, and float32's own error in the kernel's epilogue
    assert np.abs(Q * scale - exact).max() <= 0.5 * scale + 1e-6 * np.abs(exact).max()


def test_kernels_without_a_diagonal_bound_are_stored_in_float32():
    from sodm_spark.solvers.kernel_rows import fixed_point_scale
    X, y = make_problem(m=80, d=4, seed=4)
    kernel = Kernel.create("poly", 0.5, degree=3, coef0=-1.0)  # not positive semi-definite
    assert fixed_point_scale(kernel, X) is None
    result = solve_odm_dual(X, y, kernel, ODMHyperparameters(10.0, 0.1, 0.5),
                            settings=DCDSettings(dtype="int16", max_iter=3))
    assert result.storage == "float32"
    # kernel rows on demand are float32 whatever the cache holds
    rbf = Kernel.create("rbf", 0.5)
    blocked = solve_odm_dual(X, y, rbf, ODMHyperparameters(10.0, 0.1, 0.5),
                             settings=DCDSettings(dtype="int16", mode="blocked"))
    cached = solve_odm_dual(X, y, rbf, ODMHyperparameters(10.0, 0.1, 0.5),
                            settings=DCDSettings(dtype="int16"))
    assert (blocked.storage, cached.storage) == ("float32", "int16")


@pytest.mark.parametrize("name,gamma,lam,theta,v,m", CASES)
def test_a_fixed_point_solve_reaches_the_exact_optimum_within_the_storage_error(
        name, gamma, lam, theta, v, m):
    X, y = make_problem(m=m, seed=m)
    kernel = Kernel.create(name, gamma, degree=2, coef0=1.0)
    result = solve_odm_dual(X, y, kernel, ODMHyperparameters(lam, theta, v),
                            settings=DCDSettings(violation_tol=1e-9, dtype="int16", block_size=16),
                            seed=3)
    exact = q_matrix(X, y, kernel)
    reference, reference_gamma = odm_dual_reference(exact, lam, theta, v)
    assert result.converged and result.storage == "int16" and result.kernel_mode == "cached"
    # every entry of Q moved by at most half a step: the optimum by about as little (the
    # objective by up to 4e-5 of itself on these cases)
    step = np.abs(exact).max() / 32767
    assert abs(result.objective - reference) <= 3e-4 * abs(reference)
    np.testing.assert_allclose(result.gamma, reference_gamma,
                               atol=1e-3 * max(1.0, np.abs(reference_gamma).max()))
    # the KKT conditions of the exact problem hold up to the storage error of Qγ
    assert kkt_residual(exact, result.gamma, lam, theta, v) <= \
        1e-8 + step * np.abs(result.gamma).sum()


def test_a_fixed_point_model_predicts_as_the_float32_one_on_real_rows():
    from sklearn.datasets import load_digits
    from sklearn.preprocessing import MinMaxScaler

    X, digits = load_digits(return_X_y=True)
    X = MinMaxScaler().fit_transform(X)
    y = np.where(digits % 2 == 1, 1.0, -1.0)  # odd against even digits
    train, test = slice(0, 1200), slice(1200, None)
    kernel = Kernel.create("rbf", 1.0 / (X.shape[1] * X.var()))
    scores = {}
    for dtype in ("float32", "int16"):
        result = solve_odm_dual(X[train], y[train], kernel, ODMHyperparameters(1e5, 0.1, 0.2),
                                settings=DCDSettings(violation_tol=1e-2, dtype=dtype))
        assert result.storage == dtype
        scores[dtype] = kernel_matrix(kernel, X[test], X[train]) @ (result.gamma * y[train])
    accuracy = {dtype: np.mean(np.sign(s) == y[test]) for dtype, s in scores.items()}
    assert accuracy["float32"] > 0.95  # the task is learned at all
    assert abs(accuracy["int16"] - accuracy["float32"]) <= 2 / y[test].size
    assert np.mean(np.sign(scores["int16"]) == np.sign(scores["float32"])) >= 0.99
