"""CVR / CVM (the CVR paper, Tsang, Kwok & Lai, ICML 2005) against independent exact solutions
of the same duals.

The references build K̃ from scikit-learn's pairwise kernels and solve the simplex QP with
scipy's SLSQP, then polish it on its support with one KKT linear solve and check the KKT
conditions, so the comparison never goes through the MEB code.
"""
import warnings

import numpy as np
import pytest
from scipy.optimize import minimize
from sklearn.datasets import make_friedman1
from sklearn.exceptions import ConvergenceWarning, SkipTestWarning
from sklearn.metrics.pairwise import laplacian_kernel, polynomial_kernel, rbf_kernel
from sklearn.multiclass import OneVsRestClassifier
from sklearn.utils.estimator_checks import check_estimator

from sodm_spark.baselines.cvm import (CVMClassifier, CVRRegressor, mean_relative_error,
                                      rmse_over_max)
from sodm_spark.baselines.cvm_solver import CoreSearch, solve_l2_svm, solve_l2_svr
from sodm_spark.core.kernels import Kernel
from sodm_spark.models.expansion import KernelExpansion

from conftest import make_problem

pytestmark = pytest.mark.numerics  # rerun under other BLAS kernels: tests/test_blas_kernels.py

GAMMA = 0.4


def reference_kernel(name, X, Z=None):
    if name == "rbf":
        return rbf_kernel(X, Z, gamma=GAMMA)
    if name == "laplacian":
        return laplacian_kernel(X, Z, gamma=GAMMA)
    return polynomial_kernel(X, Z, degree=2, gamma=GAMMA, coef0=1.0)


def simplex_qp_max(Q, lin):
    """max linᵀa - aᵀQa over the simplex: SLSQP, then an exact KKT solve on its support."""
    n = lin.size
    result = minimize(lambda a: a @ Q @ a - lin @ a, np.full(n, 1.0 / n),
                      jac=lambda a: 2 * Q @ a - lin, method="SLSQP", bounds=[(0, None)] * n,
                      constraints=[{"type": "eq", "fun": lambda a: a.sum() - 1.0,
                                    "jac": lambda a: np.ones(n)}],
                      options=dict(ftol=1e-15, maxiter=3000))
    a = result.x
    support = np.flatnonzero(a > 1e-7 * a.max())
    kkt = np.zeros((support.size + 1, support.size + 1))  # 2Q_SS a_S + ν1 = lin_S, 1ᵀa_S = 1
    kkt[:-1, :-1] = 2 * Q[np.ix_(support, support)]
    kkt[:-1, -1] = kkt[-1, :-1] = 1.0
    solution = np.linalg.solve(kkt, np.append(lin[support], 1.0))
    a = np.zeros(n)
    a[support] = solution[:-1]
    grad = lin - 2 * Q @ a
    assert a.min() >= 0 and grad.max() <= solution[-1] + 1e-9, "reference is not optimal"
    return lin @ a - a @ Q @ a, a


def svr_problem(kernel_name, m=50, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(m, 3))
    y = np.sin(2 * X[:, 0]) + X[:, 1] ** 2 + 0.1 * rng.normal(size=m)
    return X, y


def kernel_of(name):
    return Kernel.create(name, GAMMA, degree=2, coef0=1.0)


@pytest.mark.parametrize("kernel_name", ["rbf", "laplacian", "poly"])
def test_cvr_meets_the_paper_bound_against_exact_l2_svr(kernel_name):
    X, y = svr_problem(kernel_name)
    m, C, mu = len(y), 5.0, 0.1
    C_paper = C * mu * m
    K1 = reference_kernel(kernel_name, X) + 1.0
    Kt = np.block([[K1 + np.eye(m) * mu * m / C_paper, -K1],   # Eqn 8
                   [-K1, K1 + np.eye(m) * mu * m / C_paper]])
    lin = 2.0 / C_paper * np.concatenate([y, -y])               # Eqn 7
    d_star, a = simplex_qp_max(Kt, lin)
    eta = np.max(np.diag(Kt) - lin)                             # smallest η with Δ ≥ 0 (Eqn 15)
    beta = a[:m] - a[m:]
    f_ref = C_paper * K1 @ beta                                 # Eqn 9: w'φ(x) + b
    # the reference is exact: p* = C²·d* at the primal point Eqns 9-10 recover from it
    eps_ref = a @ np.concatenate([y, -y]) - C_paper * a @ Kt @ a
    primal = (C_paper ** 2 * beta @ (K1 - 1.0) @ beta + (C_paper * beta.sum()) ** 2
              + C_paper / (mu * m) * np.sum(np.maximum(0, y - f_ref - eps_ref) ** 2
                                            + np.maximum(0, f_ref - y - eps_ref) ** 2)
              + 2 * C_paper * eps_ref)
    assert primal == pytest.approx(C_paper ** 2 * d_star, rel=1e-8)

    for tol in (1e-2, 1e-3):  # Property 3: R² ≤ p*/C² + η ≤ (1+ε)² R²
        solution = solve_l2_svr(X, y, kernel_of(kernel_name), C=C, mu=mu,
                                search=CoreSearch(tol=tol, final_check="full", seed=3))
        meb = solution.meb
        assert meb.converged and meb.eta == pytest.approx(eta, rel=1e-12)
        assert meb.radius2 <= d_star + eta + 1e-10
        assert d_star + eta <= (1 + tol) ** 2 * meb.radius2
        if tol == 1e-2:  # a real approximation: fewer core vectors than exact support vectors
            assert solution.core_rows.size < np.count_nonzero(a)

    tight = solve_l2_svr(X, y, kernel_of(kernel_name), C=C, mu=mu,
                         search=CoreSearch(tol=1e-10, final_check="full", seed=3))
    sv = tight.support_rows
    f_cvr = (reference_kernel(kernel_name, X, X[sv])) @ tight.coef + tight.intercept
    np.testing.assert_allclose(f_cvr, f_ref, atol=1e-6)
    assert tight.margin == pytest.approx(eps_ref, abs=1e-6)      # ε̄ of Eqn 10
    assert tight.primal_objective == pytest.approx(C_paper ** 2 * d_star, rel=1e-7)


@pytest.mark.parametrize("kernel_name", ["rbf", "poly"])
def test_cvm_meets_the_paper_bound_against_exact_l2_svm(kernel_name):
    X, y = make_problem(m=60, d=3, seed=4)
    C = 2.0
    Kt = np.outer(y, y) * (reference_kernel(kernel_name, X) + 1.0) + np.eye(60) / C  # Eqn 5
    d_star, a = simplex_qp_max(Kt, np.zeros(60))
    eta = np.max(np.diag(Kt))        # Sec. 3.2: Δ = max diag - diag, η = max diag
    f_ref = (reference_kernel(kernel_name, X) + 1.0) @ (a * y)
    for tol in (1e-2, 1e-3):
        meb = solve_l2_svm(X, y, kernel_of(kernel_name), C=C,
                           search=CoreSearch(tol=tol, final_check="full", seed=1)).meb
        assert meb.converged and meb.eta == pytest.approx(eta, rel=1e-12)
        assert meb.radius2 <= d_star + eta + 1e-10
        assert d_star + eta <= (1 + tol) ** 2 * meb.radius2

    model = CVMClassifier(kernel=kernel_name, gamma=GAMMA, degree=2, coef0=1.0, C=C, tol=1e-10,
                          final_check="full", random_state=1).fit(X, y)
    np.testing.assert_allclose(model.decision_function(X), f_ref, atol=1e-6)
    assert model.rho_ == pytest.approx(a @ Kt @ a, rel=1e-6)
    np.testing.assert_array_equal(model.predict(X), np.where(f_ref > 0, 1.0, -1.0))


def test_core_set_size_levels_off_as_rows_grow():
    cvr, cvm = {}, {}
    for m in (2000, 8000, 32000, 128000):
        X, y = make_friedman1(m, noise=1.0, random_state=0)
        model = CVRRegressor(C=1.0, mu=0.02, tol=1e-3, random_state=0).fit(X, y)
        X_c, y_c = make_problem(m=m, d=5, seed=0)
        classifier = CVMClassifier(C=1.0, tol=1e-3, random_state=0).fit(X_c, y_c)
        assert model.converged_ and classifier.converged_
        cvr[m], cvm[m] = model.n_core_, classifier.n_core_
    for sizes in (cvr, cvm):
        assert sizes[128000] <= 1.2 * sizes[32000]      # 4x the rows, (almost) no more cores
        assert sizes[32000] <= 1.6 * sizes[8000]
        assert sizes[128000] < 0.01 * 128000


def test_cvr_regressor_defaults_fit_unscaled_friedman():
    X, y = make_friedman1(1500, noise=1.0, random_state=1)   # y in about [0, 30]
    X_test, y_test = make_friedman1(1000, noise=1.0, random_state=2)
    model = CVRRegressor(random_state=0).fit(X, y)
    assert model.converged_ and model.mu_ == 0.1
    assert model.score(X_test, y_test) > 0.9            # the noise alone leaves R² ≈ 0.96
    assert model.support_vectors_.shape == (model.dual_coef_.shape[1], 10)
    assert set(model.support_) <= set(model.core_indices_)
    expansion = model.model_.decision_function(X_test)  # the expansion carries the intercept
    np.testing.assert_allclose(expansion, model.predict(X_test))
    assert model.model_.intercept == pytest.approx([model.intercept_])


def test_cvr_is_affine_equivariant_in_the_target():
    X, y = make_friedman1(2000, noise=1.0, random_state=1)
    model = CVRRegressor(tol=1e-4, random_state=0).fit(X, y)
    scaled = CVRRegressor(tol=1e-4, random_state=0).fit(X, 1000 * y + 5000)
    np.testing.assert_allclose(scaled.predict(X[:200]), 1000 * model.predict(X[:200]) + 5000,
                               rtol=1e-7)
    assert scaled.epsilon_ == pytest.approx(1000 * model.epsilon_, rel=1e-6)


def test_laplacian_kernel_and_saved_model(tmp_path):
    X, y = make_friedman1(1500, noise=1.0, random_state=3)
    model = CVRRegressor(kernel="laplacian", random_state=0).fit(X[:1000], y[:1000])
    assert model.score(X[1000:], y[1000:]) > 0.6
    model.model_.save(tmp_path / "cvr")
    loaded = KernelExpansion.load(tmp_path / "cvr")
    np.testing.assert_allclose(loaded.predict(X[1000:]), model.predict(X[1000:]))


def test_cvm_classifier_any_two_labels():
    X, y = make_problem(m=400, d=4, seed=5)
    labels = np.where(y > 0, "spam", "ham")
    numeric = CVMClassifier(random_state=0).fit(X, y)
    named = CVMClassifier(random_state=0).fit(X, labels)
    assert list(named.classes_) == ["ham", "spam"]
    np.testing.assert_array_equal(named.predict(X), np.where(numeric.predict(X) > 0, "spam", "ham"))
    assert numeric.score(X, y) > 0.85


def test_cvm_three_classes_one_vs_rest_matches_sklearn_wrapper():
    rng = np.random.default_rng(6)
    centers = np.array([[0.0, 0.0], [3.0, 0.0], [0.0, 3.0]])
    y = np.repeat(["a", "b", "c"], 100)
    X = centers[np.repeat(np.arange(3), 100)] + rng.normal(size=(300, 2))
    ours = CVMClassifier(C=1.0, tol=1e-4, random_state=0).fit(X, y)
    wrapped = OneVsRestClassifier(CVMClassifier(C=1.0, tol=1e-4, random_state=0)).fit(X, y)
    np.testing.assert_allclose(ours.decision_function(X), wrapped.decision_function(X),
                               rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(ours.predict(X), wrapped.predict(X))
    assert ours.dual_coef_.shape == (3, ours.support_.size) and ours.score(X, y) > 0.85


def test_deterministic_with_a_seed():
    X, y = make_friedman1(5000, noise=1.0, random_state=4)
    first, second = (CVRRegressor(tol=1e-4, random_state=7).fit(X, y) for _ in range(2))
    np.testing.assert_array_equal(first.core_indices_, second.core_indices_)
    np.testing.assert_array_equal(first.predict(X[:50]), second.predict(X[:50]))
    other = CVRRegressor(tol=1e-4, random_state=8).fit(X, y)
    assert not np.array_equal(other.core_indices_, first.core_indices_)


def test_paper_metrics_closed_form():
    y, pred = np.array([1.0, 2.0, 4.0]), np.array([1.5, 2.0, 3.0])
    assert rmse_over_max(y, pred) == pytest.approx(np.sqrt(1.25 / 3) / 4)
    assert mean_relative_error(y, pred) == pytest.approx((0.5 + 0 + 0.25) / 3)
    with pytest.raises(ValueError, match="row 1"):
        mean_relative_error([1.0, 0.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="one length"):
        rmse_over_max([1.0, 2.0], [1.0])


def test_bad_inputs_are_refused():
    X, y = make_problem(m=40, d=3)
    X_nan = X.copy()
    X_nan[7, 2] = np.nan
    with pytest.raises(ValueError, match="row 7"):
        CVRRegressor().fit(X_nan, y)
    with pytest.raises(ValueError, match="NaN"):
        CVRRegressor().fit(X, np.where(np.arange(40) == 3, np.nan, y))
    with pytest.raises(ValueError, match="at least two classes"):
        CVMClassifier().fit(X, np.ones(40))
    for params in (dict(C=0.0), dict(tol=-1e-3), dict(mu=0.0), dict(max_core=1),
                   dict(final_check="all"), dict(points_per_iter=0), dict(random_state="x")):
        with pytest.raises(ValueError):
            CVRRegressor(**params).fit(X, y)
    with pytest.raises(ValueError, match="at least 2 rows"):
        CVRRegressor().fit(X[:1], y[:1])
    fitted = CVRRegressor().fit(X, y)
    with pytest.raises(ValueError):
        fitted.predict(X[:, :2])


def test_max_core_warns():
    X, y = make_friedman1(2000, noise=1.0, random_state=5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = CVRRegressor(tol=1e-7, max_core=50, random_state=0).fit(X, y)
    assert any(issubclass(w.category, ConvergenceWarning) for w in caught)
    assert not model.converged_ and model.n_core_ <= 50


@pytest.mark.parametrize("estimator", [CVRRegressor(tol=1e-3), CVMClassifier(tol=1e-3)],
                         ids=["CVRRegressor", "CVMClassifier"])
def test_scikit_learn_estimator_contract(estimator):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", SkipTestWarning)  # array-API checks need SCIPY_ARRAY_API
        check_estimator(estimator)
