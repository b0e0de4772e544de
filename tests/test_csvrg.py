"""CSVRG (the CSVRG paper, Tan, Zhang & Wang, AAAI 2019, Algorithm 1): convergence to exact
optima, projection, coreset, estimator."""
import numpy as np
import pytest
from scipy.optimize import minimize
from sklearn.svm import LinearSVC

from conftest import make_problem
from sodm_spark.baselines.csvrg import CSVRGClassifier
from sodm_spark.baselines.csvrg_solver import (CSVRGSchedule, CoverageSettings, KernelCache,
                                               MarginLoss, build_coreset, csvrg)
from sodm_spark.core.kernels import Kernel
from sodm_spark.estimators.sklearn import ODMClassifier
from sodm_spark.models.expansion import KernelExpansion
from sodm_spark.solvers import solve_odm_dual
from sodm_spark.solvers.dcd_settings import DCDSettings, ODMHyperparameters

pytestmark = pytest.mark.numerics  # rerun under other BLAS kernels: tests/test_blas_kernels.py


def rbf(A, B, gamma):
    """Plain numpy RBF kernel (independent of sodm_spark.core.kernels)."""
    return np.exp(-gamma * ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1))


def primal(loss, coef, K_train_sv, K_sv_sv, y, lam, theta=0.1, v=0.5):
    """½‖w‖² + (1/m)Σ ℓ for w = Σ coef_j φ(sv_j), from explicit kernel matrices."""
    z = y * (K_train_sv @ coef)
    if loss == "odm":
        xi, eps = np.maximum(0, 1 - theta - z), np.maximum(0, z - 1 - theta)
        data = lam / 2 * np.mean(xi ** 2 + v * eps ** 2) / (1 - theta) ** 2
    elif loss == "hinge":
        data = lam * np.mean(np.maximum(0, 1 - z))
    else:
        data = lam * np.mean(np.maximum(0, 1 - z) ** 2)
    return 0.5 * coef @ K_sv_sv @ coef + data


GAMMA = 0.3


@pytest.fixture(scope="module")
def small():
    X, y = make_problem(m=80, d=4, seed=1)
    return X, y, rbf(X, X, GAMMA)


@pytest.mark.parametrize("option", ["I", "II"])
def test_delta_zero_reaches_exact_odm_optimum_linearly(small, option):
    X, y, K = small
    lam, theta, v = 8.0, 0.2, 0.5
    exact = solve_odm_dual(X, y, Kernel("rbf", GAMMA), ODMHyperparameters(lam, theta, v),
                           settings=DCDSettings(violation_tol=1e-10, max_iter=100000,
                                                dtype=np.float64))
    best = primal("odm", exact.gamma * y, K, K, y, lam, theta, v)
    result = csvrg(X, y, Kernel("rbf", GAMMA), MarginLoss(lam, theta, v),
                   coverage=CoverageSettings(delta=0.0),
                   schedule=CSVRGSchedule(epochs=12, option=option, seed=3),
                   cache=KernelCache(dtype=np.float64))
    assert result.n_core == len(X)  # δ = 0: every row is its own core point
    C = result.core_points
    found = primal("odm", result.sigma, rbf(X, C, GAMMA), rbf(C, C, GAMMA), y, lam, theta, v)
    assert abs(found - best) <= 1e-3 * best
    assert found == pytest.approx(result.objective, rel=1e-9)
    gaps = (np.asarray(result.history) - best) / best
    assert gaps.min() > -1e-9  # never below the exact optimum
    used = gaps[gaps > 1e-9]
    assert used.size >= 4
    rate = np.exp(np.polyfit(np.arange(used.size), np.log(used), 1)[0])
    assert rate < 0.3  # geometric: each epoch cuts the gap by a constant factor


def test_iterates_stay_in_theorem_1_ball(small):
    X, y, _ = small
    X, y = X[:40], y[:40]
    lam, theta, v = 50.0, 0.1, 0.5
    H = np.sqrt(lam / 2 * ((1 - theta) ** 2 + v * (1 + theta) ** 2)) / (1 - theta)
    norms = {}
    for project in (True, False):
        res = csvrg(X, y, Kernel("rbf", GAMMA), MarginLoss(lam, theta, v),
                    coverage=CoverageSettings(delta=0.0),
                    schedule=CSVRGSchedule(epochs=3, step=0.05),
                    cache=KernelCache(dtype=np.float64), trace=True, project=project)
        Kc = rbf(res.core_points, res.core_points, GAMMA)
        norms[project] = np.sqrt(np.einsum("ti,ij,tj->t", res.trace, Kc, res.trace))
    assert norms[False].max() > 1.5 * H  # this step overshoots without the projection
    assert norms[True].max() <= H * (1 + 1e-9)
    assert norms[True].max() >= H * (1 - 1e-6)  # and the projection was active


def test_hinge_reaches_box_qp_optimum(small):
    X, y, K = small
    lam, m = 8.0, len(y)
    Q = y[:, None] * y[None, :] * K
    # Bias-free hinge SVM dual: max 1ᵀa - ½aᵀQa, 0 ≤ a ≤ λ/m (an independent reference).
    ref = minimize(lambda a: (0.5 * a @ Q @ a - a.sum(), Q @ a - 1), np.zeros(m), jac=True,
                   method="L-BFGS-B", bounds=[(0, lam / m)] * m,
                   options=dict(ftol=1e-15, gtol=1e-12, maxiter=20000))
    best = primal("hinge", ref.x * y, K, K, y, lam)
    assert best == pytest.approx(-ref.fun, rel=1e-6)  # strong duality: the reference is exact
    res = csvrg(X, y, Kernel("rbf", GAMMA), MarginLoss(lam, kind="hinge"),
                coverage=CoverageSettings(delta=0.0), schedule=CSVRGSchedule(epochs=60, seed=1),
                cache=KernelCache(dtype=np.float64))
    C = res.core_points
    found = primal("hinge", res.sigma, rbf(X, C, GAMMA), rbf(C, C, GAMMA), y, lam)
    assert best <= found <= best * (1 + 3e-3)


def test_squared_hinge_matches_liblinear():
    X, y = make_problem(m=120, d=5, seed=4)
    lam = 30.0
    svc = LinearSVC(C=lam / len(y), loss="squared_hinge", fit_intercept=False, tol=1e-12,
                    max_iter=200000).fit(X, y)
    w_ref = svc.coef_.ravel()
    best = 0.5 * w_ref @ w_ref + lam * np.mean(np.maximum(0, 1 - y * (X @ w_ref)) ** 2)
    res = csvrg(X, y, Kernel("linear"), MarginLoss(lam, kind="squared_hinge"),
                coverage=CoverageSettings(delta=0.0), schedule=CSVRGSchedule(epochs=40),
                cache=KernelCache(dtype=np.float64))
    w = res.sigma @ res.core_points
    found = 0.5 * w @ w + lam * np.mean(np.maximum(0, 1 - y * (X @ w)) ** 2)
    assert found == pytest.approx(best, rel=1e-6)
    np.testing.assert_allclose(w, w_ref, atol=1e-3 * np.abs(w_ref).max())


def test_coreset_covers_respects_budget_and_shrinks_with_delta():
    X, _ = make_problem(m=400, d=2, seed=5)
    kernel, sizes = Kernel("rbf", 1.0), []
    for delta in (0.3, 0.6, 1.0, 1.4):
        cs = build_coreset(X, kernel, delta, max_core=400, seed=2)
        D = 2 - 2 * rbf(X, cs.points, 1.0)  # squared RKHS distances, plain numpy
        assert np.all(D.min(axis=1) <= (delta / 2) ** 2 + 1e-12)  # δ-coverage
        np.testing.assert_array_equal(cs.assignment, D.argmin(axis=1))  # nearest core point
        P = 2 - 2 * rbf(cs.points, cs.points, 1.0)
        assert P[np.triu_indices(cs.size, 1)].min() > (delta / 2) ** 2  # online rule's spacing
        sizes.append(cs.size)
    assert all(a > b for a, b in zip(sizes, sizes[1:]))
    capped = build_coreset(X, kernel, 0.3, max_core=25, seed=2)
    assert capped.size == 25 and capped.assignment.max() == 24
    labels = np.where(X[:, 0] > 0, 1.0, -1.0)
    split = build_coreset(X, kernel, 0.6, max_core=60, seed=2, refine=1, labels=labels)
    assert split.size <= 60
    # Cells never mix labels: each row's core point comes from its own label's rows.
    np.testing.assert_array_equal(labels[split.index][split.assignment], labels)


def test_streamed_kernel_rows_give_the_cached_result(small):
    X, y, _ = small
    args = dict(coverage=CoverageSettings(delta=0.8, max_core=30),
                schedule=CSVRGSchedule(epochs=4, seed=2, option="II"))
    cached = csvrg(X, y, Kernel("rbf", GAMMA), MarginLoss(8.0),
                   cache=KernelCache(dtype=np.float64), **args)
    streamed = csvrg(X, y, Kernel("rbf", GAMMA), MarginLoss(8.0),
                     cache=KernelCache(cache_mb=0.0, dtype=np.float64, chunk_rows=16), **args)
    assert cached.kernel_mode == "cached" and streamed.kernel_mode == "streamed"
    np.testing.assert_allclose(streamed.sigma, cached.sigma, rtol=1e-9, atol=1e-12)


def test_classifier_is_sparse_accurate_and_deterministic():
    X, y = make_problem(m=700, d=5, seed=6)
    labels = np.where(y > 0, "yes", "no")
    train, test = slice(0, 500), slice(500, None)
    model = CSVRGClassifier(lam=100.0, max_core=60, random_state=4).fit(X[train], labels[train])
    assert list(model.classes_) == ["no", "yes"]
    assert model.n_core_ == model.support_vectors_.shape[0] <= 60
    assert model.dual_coef_.shape == (1, model.n_core_)
    assert model.converged_ and model.objective_history_[-1] < model.objective_history_[0]
    exact = ODMClassifier(lam=100.0).fit(X[train], labels[train])
    assert model.score(X[test], labels[test]) >= exact.score(X[test], labels[test]) - 0.05
    scores = model.decision_function(X[test])
    assert np.array_equal(model.predict(X[test]), np.where(scores > 0, "yes", "no"))
    assert isinstance(model.model_, KernelExpansion)
    np.testing.assert_allclose(model.model_.decision_function(X[test]), scores)
    again = CSVRGClassifier(lam=100.0, max_core=60, random_state=4).fit(X[train], labels[train])
    np.testing.assert_array_equal(again.dual_coef_, model.dual_coef_)
    np.testing.assert_array_equal(again.support_vectors_, model.support_vectors_)
    other = CSVRGClassifier(lam=100.0, max_core=60, random_state=5).fit(X[train], labels[train])
    assert not np.array_equal(other.support_vectors_, model.support_vectors_)


@pytest.mark.parametrize("params, message", [
    (dict(loss="logistic"), "loss must be one of"),
    (dict(option="III"), "option must be 'I' or 'II'"),
    (dict(delta=-1.0), "delta must be"),
    (dict(max_core=0), "max_core must be an integer"),
    (dict(step=2.0), "step must be"),
    (dict(theta=1.5), "theta"),
    (dict(random_state="seed"), "random_state"),
])
def test_bad_parameters_are_refused(params, message):
    X, y = make_problem(m=30, d=3)
    with pytest.raises(ValueError, match=message):
        CSVRGClassifier(**params).fit(X, y)


def test_bad_data_is_refused():
    X, y = make_problem(m=30, d=3)
    X[7, 2] = np.nan
    with pytest.raises(ValueError, match="row 7"):
        CSVRGClassifier().fit(X, y)
    X[7, 2] = 0.0
    with pytest.raises(ValueError, match="binary classifier.*3 class"):
        CSVRGClassifier().fit(X, np.arange(30) % 3)
    with pytest.raises(ValueError, match="1 class"):
        CSVRGClassifier().fit(X, np.ones(30))


def test_letter_loader(tmp_path):
    from sodm_spark.data.datasets import load_letter

    with pytest.raises(FileNotFoundError, match="r-cran-mlbench"):
        load_letter(data_dir=tmp_path)
    try:
        X, y = load_letter()
    except FileNotFoundError as missing:  # r-cran-mlbench absent (tests/data_packages.sh)
        pytest.skip(f"letter data not installed: {missing}")
    assert X.shape == (20000, 16) and set(np.unique(y)) == {-1, 1}
    assert (y == 1).sum() == 9940  # A-M
    np.testing.assert_array_equal(X[0, :4], [2, 8, 3, 5])  # the UCI file's first row, a T
    assert y[0] == -1
