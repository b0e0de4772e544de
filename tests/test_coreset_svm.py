"""Sensitivity coresets for the SVM (the coreset SVM paper, Algorithm 1): numerics and the
classifier.

References are independent of the code under test: a brute-force QP (scipy SLSQP) for the
weighted SVM, an explicit feature map for the kernel path, a numerical search for the
sensitivity supremum (Eqn 4), Lemma 8's closed-form total, full-data objectives, and uniform
sampling as the baseline the coreset must beat.
"""
import numpy as np
import pytest
from scipy.optimize import minimize
from sklearn.svm import SVC

from sodm_spark.baselines.coreset_svm import CoresetSVMClassifier
from sodm_spark.baselines.coreset_svm_solver import (ReductionSettings, build_coreset,
                                                     merge_and_reduce, sample_coreset,
                                                     sensitivity_bounds, solve_weighted_svm,
                                                     svm_objective, uniform_coreset)
from sodm_spark.core.kernels import Kernel

pytestmark = pytest.mark.numerics  # rerun under other BLAS kernels: tests/test_blas_kernels.py


def imbalanced_problem(seed=0, n=2000, n_minority=40, n_flipped=10, d=3):
    """Two clusters, 2% minority class, a few flipped labels; rows scaled to ‖x‖ ≤ 1.

    The hinge loss near the optimum sits on the few minority and flipped rows, which uniform
    sampling mostly misses: the case importance sampling is for.
    """
    rng = np.random.default_rng(seed)
    X = rng.normal(0.0, 0.5, size=(n, d))
    y = -np.ones(n)
    y[:n_minority] = 1.0
    X[:, 0] += 1.5 * y
    flipped = rng.choice(n, n_flipped, replace=False)
    y[flipped] *= -1
    return X / np.linalg.norm(X, axis=1).max(), y


def relative_errors(coreset, X, y, C, W, b):
    full = svm_objective(X, y, None, C, W, b)
    return np.abs(svm_objective(coreset.X, coreset.y, coreset.weights, C, W, b) - full) / full


def queries_near(solution, rng, count=30, spread=(0.3, 3.0)):
    """Random (w, b) around the optimum, half close to it and half far."""
    scales = np.repeat(spread, count // len(spread))
    noise = rng.normal(size=(scales.size, solution.coef.size))
    W = solution.coef * (1.0 + scales[:, None] * noise)
    return W, solution.intercept + scales * rng.normal(size=scales.size)


@pytest.fixture(scope="module")
def solved():
    X, y = imbalanced_problem()
    solution = solve_weighted_svm(X, y, None, 1.0)
    return X, y, solution, sensitivity_bounds(X, y, None, 1.0, solution)


# ---------------------------------------------------------------- coreset vs uniform
def test_coreset_beats_uniform_sampling_of_the_same_size():
    C, m, eps = 1.0, 150, 0.2
    errors = {"coreset": [], "uniform": []}
    for data_seed in (0, 1):
        X, y = imbalanced_problem(data_seed)
        solution = solve_weighted_svm(X, y, None, C)
        gamma = sensitivity_bounds(X, y, None, C, solution)
        W, b = queries_near(solution, np.random.default_rng(100 + data_seed))
        for seed in range(40):
            errors["coreset"].append(relative_errors(
                sample_coreset(X, y, None, gamma, m, seed=seed), X, y, C, W, b))
            errors["uniform"].append(relative_errors(
                uniform_coreset(X, y, m, seed=seed), X, y, C, W, b))
    core, uniform = np.concatenate(errors["coreset"]), np.concatenate(errors["uniform"])
    assert np.mean(core < eps) > np.mean(uniform < eps) + 0.1
    assert core.mean() < 0.7 * uniform.mean()
    assert core.var() < 0.5 * uniform.var()


def test_weights_positive_and_estimator_unbiased(solved):
    """Σ v ≈ u(P) = n and E f((S, v), w) = f(P, w) (Sec. 4.1), over 300 seeded draws."""
    X, y, solution, gamma = solved
    W, b = queries_near(solution, np.random.default_rng(7), count=4)
    full = svm_objective(X, y, None, 1.0, W, b)
    sums, values = [], []
    for seed in range(300):
        coreset = sample_coreset(X, y, None, gamma, 150, seed=seed)
        assert np.all(coreset.weights > 0) and len(coreset) <= 150
        sums.append(coreset.weights.sum())
        values.append(svm_objective(coreset.X, coreset.y, coreset.weights, 1.0, W, b))
    sums, values = np.asarray(sums), np.asarray(values)
    assert abs(sums.mean() - len(y)) < 4 * sums.std() / np.sqrt(sums.size)
    z = (values.mean(axis=0) - full) / (values.std(axis=0) / np.sqrt(len(values)))
    assert np.all(np.abs(z) < 4)


# ---------------------------------------------------------------- the bounds themselves
def eqn5_literal(X, y, u, C, w, b, f_star):
    """Algorithm 1 lines 2-5 transcribed point by point, with the bias as coordinate d+1."""
    points = y[:, None] * np.hstack([X, np.ones((len(y), 1))])  # p = y·(x, 1)
    w_full, gamma = np.r_[w, b], []
    for i in range(len(y)):
        same = y == y[i]
        p_delta = u[same] @ points[same] / u[same].sum() - points[i]
        K = u[~same].sum() / (2 * u.sum() * u[same].sum())
        a = w_full @ p_delta - K / C
        gamma.append(u[i] / u[same].sum() + C * u[i] / (2 * f_star) * (
            np.sqrt(a * a + 2 * f_star * p_delta @ p_delta) + a))
    return np.asarray(gamma)


def test_sensitivity_bound_dominates_searched_supremum_and_lemma8():
    """γ_i ≥ sup_w u_i f(p_i, w)/f(P, w) over ‖w‖ ≥ 1 (Lemma 7's query set), Σγ ≤ Lemma 8."""
    rng = np.random.default_rng(3)
    n, d = 80, 2
    X = rng.normal(0.0, 0.6, size=(n, d))
    y = np.where(rng.random(n) < 0.3, 1.0, -1.0)
    X[:, 0] += 0.8 * y
    y[:4] *= -1
    X /= np.linalg.norm(X, axis=1).max()
    u = rng.uniform(0.5, 2.0, n)
    for C in (1.0, 0.1):
        solution = solve_weighted_svm(X, y, u, C, tol=1e-8)
        gamma = sensitivity_bounds(X, y, u, C, solution)
        np.testing.assert_allclose(gamma, eqn5_literal(X, y, u, C, solution.coef,
                                                       solution.intercept, solution.objective))
        # Lemma 11 (inexact solution, ξ = duality gap) can only be looser than Eqn 5.
        assert np.all(sensitivity_bounds(X, y, u, C, solution, "lemma11") >= gamma)

        def ratio(p, i, C=C):  # this pass's C
            w = p[:d] / (np.linalg.norm(p[:d]) + 1e-12) * (1.0 + p[d] ** 2)
            hinge = np.maximum(0.0, 1.0 - y * (X @ w + p[d + 1]))
            return u[i] * (w @ w / (2 * u.sum()) + C * hinge[i]) / (w @ w / 2 + C * u @ hinge)

        ratios = []
        for i in list(range(6)) + list(np.argsort(gamma)[-4:]):
            starts = [np.r_[solution.coef, 0.0, solution.intercept],
                      np.r_[-y[i] * X[i], 1.0, 0.0], np.r_[y[i] * X[i], 1.0, 0.0]]
            best = max(-minimize(lambda p, i=i: -ratio(p, i), s, method="Nelder-Mead",
                                 options=dict(xatol=1e-6, fatol=1e-10, maxiter=2000)).fun
                       for s in starts)
            ratios.append(best / gamma[i])
        assert max(ratios) <= 1.0 + 1e-9
        assert max(ratios) > 0.6  # the bound is not loose by a constant factor
        spread = sum((u[y == c] * np.linalg.norm(
            X[y == c] - u[y == c] @ X[y == c] / u[y == c].sum(), axis=1)).sum() for c in (-1, 1))
        assert gamma.sum() <= 2 + C * spread / np.sqrt(solution.objective)


def test_kernel_path_matches_explicit_feature_map():
    """poly degree 2 on X is the linear kernel on vec(x xᵀ): same SVM, same bounds."""
    X, y = imbalanced_problem(n=300, n_minority=30, d=3)
    features = np.einsum("ni,nj->nij", X, X).reshape(len(X), -1)
    poly = Kernel.create("poly", gamma=1.0, degree=2, coef0=0.0)
    kernel_solution = solve_weighted_svm(X, y, None, 1.0, poly, tol=1e-7)
    linear_solution = solve_weighted_svm(features, y, None, 1.0, tol=1e-7)
    assert kernel_solution.objective == pytest.approx(linear_solution.objective, rel=1e-6)
    for bound in ("lemma7", "lemma11"):
        np.testing.assert_allclose(
            sensitivity_bounds(X, y, None, 1.0, kernel_solution, bound),
            sensitivity_bounds(features, y, None, 1.0, linear_solution, bound), rtol=1e-4)


# ---------------------------------------------------------------- the weighted solver
def _weighted_problem(seed=5, n=30, d=3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.where(X[:, 0] - 0.5 * X[:, 1] + 0.7 * rng.normal(size=n) > 0, 1.0, -1.0)
    return X, y, rng.uniform(0.2, 3.0, n)


def test_linear_solver_matches_brute_force_primal_qp():
    X, y, u = _weighted_problem()
    n, d, C = X.shape[0], X.shape[1], 0.7
    # Variables (w, b, ξ): ½‖w‖² + C Σ u_i ξ_i, y_i(wᵀx_i + b) ≥ 1 - ξ_i, ξ ≥ 0.
    constraints = {"type": "ineq", "fun": lambda z: y * (X @ z[:d] + z[d]) - 1 + z[d + 1:],
                   "jac": lambda z: np.hstack([y[:, None] * X, y[:, None], np.eye(n)])}
    reference = minimize(lambda z: 0.5 * z[:d] @ z[:d] + C * u @ z[d + 1:], np.zeros(d + 1 + n),
                         jac=lambda z: np.r_[z[:d], 0.0, C * u], constraints=[constraints],
                         bounds=[(None, None)] * (d + 1) + [(0, None)] * n, method="SLSQP",
                         options=dict(ftol=1e-12, maxiter=500))
    assert reference.success
    solution = solve_weighted_svm(X, y, u, C, tol=1e-8)
    assert solution.objective == pytest.approx(reference.fun, rel=1e-6)
    np.testing.assert_allclose(solution.coef, reference.x[:d], atol=1e-4)
    assert solution.duality_gap < 1e-5 * solution.objective
    assert svm_objective(X, y, u, C, solution.coef, solution.intercept) == \
        pytest.approx(solution.objective)


def test_rbf_solver_matches_brute_force_dual_qp():
    X, y, u = _weighted_problem(seed=6)
    C, kernel = 2.0, Kernel.create("rbf", gamma=0.5)
    Q = (y[:, None] * y[None, :]) * np.exp(
        -0.5 * ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1))
    # Dual of Eqn 2: max Σα - ½αᵀQα, 0 ≤ α ≤ C u, yᵀα = 0; its optimum equals the primal's.
    reference = minimize(lambda a: 0.5 * a @ Q @ a - a.sum(), np.zeros(len(y)),
                         jac=lambda a: Q @ a - 1.0, bounds=[(0, C * w) for w in u],
                         constraints=[{"type": "eq", "fun": lambda a: y @ a, "jac": lambda a: y}],
                         method="SLSQP", options=dict(ftol=1e-13, maxiter=1000))
    assert reference.success
    solution = solve_weighted_svm(X, y, u, C, kernel, tol=1e-8)
    assert solution.objective == pytest.approx(-reference.fun, rel=1e-5)


def test_integer_weight_equals_repeated_rows():
    X, y, _ = _weighted_problem(seed=8)
    counts = np.random.default_rng(8).integers(1, 4, size=len(y))
    weighted = solve_weighted_svm(X, y, counts.astype(float), 0.5, tol=1e-9)
    repeated = solve_weighted_svm(np.repeat(X, counts, axis=0), np.repeat(y, counts), None, 0.5,
                                  tol=1e-9)
    assert weighted.objective == pytest.approx(repeated.objective, rel=1e-7)
    np.testing.assert_allclose(weighted.coef, repeated.coef, atol=1e-5)


# ---------------------------------------------------------------- merge-and-reduce
def test_merge_and_reduce_keeps_the_approximation(solved):
    X, y, solution, gamma = solved
    C, m, n = 1.0, 150, len(y)
    W, b = queries_near(solution, np.random.default_rng(100))
    merged_errors, uniform_errors, sums = [], [], []
    for seed in range(20):
        chunks = np.array_split(np.random.default_rng([seed, 9]).permutation(n), 8)
        coresets = [build_coreset(X[rows], y[rows], m, C, seed=[seed, k], indices=rows)
                    for k, rows in enumerate(chunks)]
        merged = merge_and_reduce(coresets, m, C, seed=seed)
        assert len(merged) <= m and np.all(merged.weights > 0)
        np.testing.assert_array_equal(X[merged.indices], merged.X)
        np.testing.assert_array_equal(y[merged.indices], merged.y)
        sums.append(merged.weights.sum())
        merged_errors.append(relative_errors(merged, X, y, C, W, b))
        uniform_errors.append(relative_errors(uniform_coreset(X, y, m, seed=seed), X, y, C, W, b))
    merged_errors, uniform_errors = np.concatenate(merged_errors), np.concatenate(uniform_errors)
    assert merged_errors.mean() < 0.8 * uniform_errors.mean()
    assert merged_errors.var() < 0.6 * uniform_errors.var()
    assert abs(np.mean(sums) / n - 1) < 0.1


def test_merge_accepts_tuples_and_one_class_chunks():
    X, y = imbalanced_problem(n=600, n_minority=60, n_flipped=0)
    negatives, positives = np.flatnonzero(y < 0), np.flatnonzero(y > 0)
    one_class = build_coreset(X[negatives], y[negatives], 100, 1.0, indices=negatives)
    assert one_class.bound == "uniform" and one_class.weights.sum() == pytest.approx(540)
    merged = merge_and_reduce(
        [one_class, (X[positives], y[positives], np.ones(positives.size), positives)], 100, 1.0)
    assert merged.bound == "lemma7" and set(np.unique(merged.y)) == {-1.0, 1.0}
    np.testing.assert_array_equal(X[merged.indices], merged.X)
    small = build_coreset(X[:50], y[:50], 100, 1.0)  # fewer rows than draws: kept exactly
    assert small.bound == "exact" and np.array_equal(small.weights, np.ones(50))


def test_seeded_results_are_deterministic(solved):
    X, y, _, _ = solved
    first, again = (build_coreset(X, y, 150, 1.0, seed=4) for _ in range(2))
    other = build_coreset(X, y, 150, 1.0, seed=5)
    np.testing.assert_array_equal(first.indices, again.indices)
    np.testing.assert_array_equal(first.weights, again.weights)
    assert not np.array_equal(first.indices, other.indices)
    parts = [(X[i::3], y[i::3], np.ones(len(y[i::3]))) for i in range(3)]
    a, b = merge_and_reduce(parts, 100, 1.0, seed=2), merge_and_reduce(parts, 100, 1.0, seed=2)
    np.testing.assert_array_equal(a.indices, b.indices)
    fits = [CoresetSVMClassifier(coreset_size=200, chunk_size=700, random_state=3).fit(X, y)
            for _ in range(2)]
    np.testing.assert_array_equal(fits[0].coef_, fits[1].coef_)
    np.testing.assert_array_equal(fits[0].coreset_indices_, fits[1].coreset_indices_)


# ---------------------------------------------------------------- the classifier
def test_classifier_is_near_optimal_on_the_full_objective():
    """Corollary 10: f(P, w_S) ≤ (1 + 4ε) f(P, w*); here within 15% at m = 300."""
    X, y = imbalanced_problem()
    labels = np.where(y > 0, "pulsar", "noise")
    full = SVC(kernel="linear", C=1.0, tol=1e-6).fit(X, labels)
    f_star = svm_objective(X, y, None, 1.0, full.coef_[0], full.intercept_[0])
    ratios = []
    for seed in range(3):
        model = CoresetSVMClassifier(coreset_size=300, C=1.0, random_state=seed).fit(X, labels)
        assert list(model.classes_) == ["noise", "pulsar"]
        assert model.n_coreset_ == len(model.coreset_indices_) <= 300
        ratios.append(svm_objective(X, y, None, 1.0, model.coef_[0], model.intercept_[0]) / f_star)
        assert set(model.predict(X)) <= {"noise", "pulsar"}
        assert model.score(X, labels) >= full.score(X, labels) - 0.01
    assert max(ratios) < 1.15


def test_classifier_rbf_and_chunks_match_full_svc_accuracy():
    rng = np.random.default_rng(11)
    X = rng.normal(size=(1500, 4))
    y = np.where((X[:, :2] ** 2).sum(1) + 0.3 * rng.normal(size=1500) > 1.4, 1, 0)
    full = SVC(kernel="rbf", gamma=0.5, C=1.0).fit(X[:1000], y[:1000]).score(X[1000:], y[1000:])
    for chunk_size in (None, 250):
        model = CoresetSVMClassifier(coreset_size=300, C=1.0, kernel="rbf", gamma=0.5,
                                     chunk_size=chunk_size, random_state=0)
        assert model.fit(X[:1000], y[:1000]).score(X[1000:], y[1000:]) >= full - 0.05
        assert not hasattr(model, "coef_") and model.dual_coef_.shape[0] == 1


def test_theorem9_size_and_sample_weight():
    X, y = imbalanced_problem(n=500, n_minority=50)
    model = CoresetSVMClassifier(coreset_size=None, epsilon=0.5, delta=0.1).fit(X, y)
    assert 0 < model.coreset_size_ <= len(y) and model.n_coreset_ <= model.coreset_size_
    weights = np.r_[np.zeros(100), np.ones(400)]
    model = CoresetSVMClassifier(coreset_size=100, bound="lemma11").fit(X, y, weights)
    assert model.coreset_indices_.min() >= 100  # zero-weight rows are never drawn
    assert model.coreset_bound_ == "lemma11"


def test_one_class_coreset_warns_and_predicts_that_class():
    X, y = imbalanced_problem(n=300, n_minority=30)
    with pytest.warns(UserWarning, match="holds only class"):
        model = CoresetSVMClassifier(coreset_size=1).fit(X, y)
    assert len(np.unique(model.predict(X))) == 1 and model.n_coreset_ == 1
    assert model.objective_ == 0.0 and np.all(model.coef_ == 0)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_scikit_learn_estimator_checks():
    from sklearn.utils.estimator_checks import check_estimator

    # Weighted and repeated rows agree to libsvm's tol, not to the check's 1e-7.
    check_estimator(CoresetSVMClassifier(coreset_size=50), expected_failed_checks={
        "check_sample_weight_equivalence_on_dense_data": "libsvm stops at tol"})


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize("call, message", [
    (lambda X, y: build_coreset(X, np.where(y > 0, 2.0, 0.0), 10, 1.0), "-1 or \\+1"),
    (lambda X, y: build_coreset(np.where(np.arange(len(y))[:, None] == 7, np.nan, X), y, 10,
                                1.0), "row 7"),
    (lambda X, y: build_coreset(X, y, 10, 1.0, weights=-np.ones(len(y))), "finite, >= 0"),
    (lambda X, y: build_coreset(X, y, 0, 1.0), "positive integer"),
    (lambda X, y: build_coreset(X, y, 10, 0.0), "C must be"),
    (lambda X, y: build_coreset(X, y, 10, 1.0, reduction=ReductionSettings(bound="lemma5")),
     "bound must be"),
    (lambda X, y: build_coreset(X, y, 10, 1.0, reduction=ReductionSettings(
        kernel=Kernel.create("laplacian", 1.0))), "laplacian"),
    (lambda X, y: sensitivity_bounds(X, y, None, 1.0, solve_weighted_svm(X, y, None, 1.0),
                                     "lemma11", xi=1e9), "Lemma 11"),
    (lambda X, y: merge_and_reduce([(X, y, np.ones(len(y))), (X[:, :1], y, np.ones(len(y)))],
                                   10, 1.0), "same number of columns"),
    (lambda X, y: merge_and_reduce([], 10, 1.0), "at least one coreset"),
    (lambda X, y: sample_coreset(X, y, None, np.ones(len(y) - 1), 10), "one value per row"),
    (lambda X, y: sample_coreset(X, y, None, np.zeros(len(y)), 10), "positive wherever"),
    (lambda X, y: svm_objective(X, y, None, 1.0, np.ones(X.shape[1] + 1)), "columns"),
    (lambda X, y: CoresetSVMClassifier().fit(X, np.arange(len(y)) % 3), "binary"),
    (lambda X, y: CoresetSVMClassifier().fit(X, np.ones(len(y))), "binary"),
    (lambda X, y: CoresetSVMClassifier(coreset_size=2.5).fit(X, y), "coreset_size"),
    (lambda X, y: CoresetSVMClassifier(kernel="laplacian").fit(X, y), "kernel must be"),
    (lambda X, y: CoresetSVMClassifier(coreset_size=None, kernel="rbf").fit(X, y),
     "coreset_size=None"),
    (lambda X, y: CoresetSVMClassifier(random_state=-1).fit(X, y), "random_state"),
])
def test_bad_input_is_refused_with_a_clear_message(call, message):
    X, y = imbalanced_problem(n=60, n_minority=20, n_flipped=0)
    with pytest.raises(ValueError, match=message):
        call(X, y)


def test_classifier_model_is_a_saved_and_reloaded_kernel_expansion(tmp_path):
    from sodm_spark.baselines.coreset_svm import CoresetSVMClassifier
    from sodm_spark.models.expansion import KernelExpansion

    rng = np.random.default_rng(4)
    X = rng.normal(size=(400, 3))
    y = np.where(X[:, 0] - 0.5 * X[:, 1] + 0.2 > 0, "yes", "no")
    for kernel in ("linear", "rbf"):
        clf = CoresetSVMClassifier(coreset_size=150, C=10.0, kernel=kernel, random_state=0)
        clf.fit(X, y)
        clf.model_.save(tmp_path / kernel)
        loaded = KernelExpansion.load(tmp_path / kernel)
        np.testing.assert_allclose(loaded.decision_function(X), clf.decision_function(X),
                                   rtol=1e-9, atol=1e-9)
        np.testing.assert_array_equal(loaded.predict(X), clf.predict(X))
