import functools
import os
import pickle
import subprocess
import sys
import warnings

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_iris, make_circles
from sklearn.gaussian_process.kernels import Matern
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC
from sklearn.utils.estimator_checks import parametrize_with_checks

from sodm_spark import ODMClassifier
from sodm_spark.core.distance_kernels import MaternKernel
from sodm_spark.models.expansion import KernelExpansion

from conftest import make_problem, model_files

pytestmark = pytest.mark.numerics  # rerun under other BLAS kernels: tests/test_blas_kernels.py


def _expected_failures(estimator):
    """The checks ODMClassifier fails, as scikit-learn's SVC does, and why: the defaults'
    gamma='scale' is 1/(d·Var X) of the rows as given, and a solve stops at a violation of
    tol = 1e-2, so repeating rows (changing Var X) is not exactly weighting them.
    tests/test_weights.py checks that equivalence with a fixed gamma and a tight tol."""
    reason = ("gamma='scale' and tol=1e-2: repeated rows change Var X; equivalence is tested "
              "in tests/test_weights.py")
    return {"check_sample_weight_equivalence_on_dense_data": reason,
            "check_sample_weight_equivalence_on_sparse_data": reason}


#: check_array_api_input (numpy rows with scikit-learn's array API dispatch on: the results
#: must not change) runs only where SCIPY_ARRAY_API was set before scipy was first imported;
#: it runs in a Python of its own with that setting, not skipped in this one.
ARRAY_API_CHECK = """
import os, pickle, sys
assert os.environ["SCIPY_ARRAY_API"] == "1"
estimator, check = pickle.loads(sys.stdin.buffer.read())
check(estimator)
"""


def _check_name(check):
    function = check.func if isinstance(check, functools.partial) else check
    return function.__name__


# Every check scikit-learn has for classifiers.
@parametrize_with_checks([ODMClassifier(), ODMClassifier(kernel="laplacian", dtype="float64")],
                         expected_failed_checks=_expected_failures)
def test_scikit_learn_estimator_checks(estimator, check):
    if _check_name(check) != "check_array_api_input":
        check(estimator)
        return
    env = dict(os.environ, SCIPY_ARRAY_API="1")
    done = subprocess.run([sys.executable, "-c", ARRAY_API_CHECK], env=env, timeout=300,
                          input=pickle.dumps((estimator, check)), capture_output=True)
    assert done.returncode == 0, done.stderr.decode()[-3000:]


def test_accuracy_is_close_to_svc_on_breast_cancer():
    X, y = load_breast_cancer(return_X_y=True)
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.3, random_state=0,
                                                        stratify=y)
    scaler = StandardScaler().fit(X_train)
    X_train, X_test = scaler.transform(X_train), scaler.transform(X_test)
    odm = ODMClassifier(lam=1000.0, theta=0.1, v=0.5).fit(X_train, y_train)
    svc = SVC().fit(X_train, y_train)
    assert odm.score(X_test, y_test) >= svc.score(X_test, y_test) - 0.03
    assert odm.score(X_test, y_test) > 0.93


@pytest.mark.parametrize("labels", [(0, 1), (-1, 1), (1, 2), ("benign", "malignant")])
def test_any_two_labels_are_mapped_and_restored(labels):
    X, y_pm = make_problem(m=80, seed=4)
    y = np.where(y_pm > 0, labels[1], labels[0])
    reference = ODMClassifier(gamma=0.5).fit(X, y_pm)
    model = ODMClassifier(gamma=0.5).fit(X, y)
    assert list(model.classes_) == list(labels)
    np.testing.assert_array_equal(model.decision_function(X), reference.decision_function(X))
    assert set(model.predict(X)) <= set(labels)
    np.testing.assert_array_equal(model.predict(X) == labels[1], reference.predict(X) == 1)


def test_attributes_describe_the_kernel_expansion():
    X, y = make_problem(m=90, seed=6)
    model = ODMClassifier(gamma=0.5, lam=10.0, theta=0.3).fit(X, y)
    sv, coef = model.support_vectors_, model.dual_coef_
    assert coef.shape == (1, sv.shape[0]) and np.all(coef != 0)
    kernel = np.exp(-0.5 * ((X[:, None, :] - sv[None, :, :]) ** 2).sum(-1))
    np.testing.assert_allclose(model.decision_function(X), kernel @ coef[0], rtol=1e-10)
    assert model.n_iter_.shape == (1,) and model.n_iter_[0] >= 1 and model.converged_


def test_more_than_two_classes_are_one_vs_rest():
    X, y = load_iris(return_X_y=True)
    # one joint solve of the 3 duals (solvers.odm_multiclass) reaches each binary optimum
    model = ODMClassifier(lam=100.0, tol=1e-9, dtype="float64").fit(X, y)
    assert model.decision_function(X).shape == (150, 3) and model.n_iter_.shape == (3,)
    for k in range(3):
        binary = ODMClassifier(lam=100.0, tol=1e-9, dtype="float64").fit(
            X, np.where(y == k, 1, -1))
        np.testing.assert_allclose(model.decision_function(X)[:, k], binary.decision_function(X),
                                   atol=1e-6)
    assert model.score(X, y) > 0.9


def test_max_iter_gives_a_convergence_warning():
    X, y = make_problem(m=100, seed=8)
    with pytest.warns(ConvergenceWarning, match="max_iter=1"):
        ODMClassifier(max_iter=1, tol=1e-9).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        ODMClassifier().fit(X, y)


def test_a_small_dual_the_sweeps_leave_unconverged_is_finished_by_newton_steps():
    """Iris at the default λ = 1e5: 1,000 coordinate-descent sweeps stop above the violation
    bound; Newton steps from there reach it, at the optimum a far longer descent finds."""
    X, y = load_iris(return_X_y=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        model = ODMClassifier(random_state=0).fit(X, y)
    assert model.converged_ and np.all(model.n_iter_ > 1000)
    long = ODMClassifier(random_state=0, max_iter=100_000, tol=1e-4, dtype="float64",
                         device="auto").fit(X, y)
    assert long.converged_ and np.all(long.n_iter_ > 1000)
    np.testing.assert_allclose(model.objective_, long.objective_, rtol=1e-3)
    assert (model.predict(X) == long.predict(X)).mean() >= 0.99


def test_the_matern_kernel_fits_a_nonlinear_problem_and_its_model_round_trips(tmp_path):
    X, y = make_circles(400, noise=0.1, factor=0.5, random_state=0)
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.5, random_state=0)
    matern = ODMClassifier(kernel="matern", lam=1000.0).fit(X_train, y_train)
    assert isinstance(matern.kernel_, MaternKernel)
    # scikit-learn's SVC on the same kernel (ℓ = 1/√γ), and the linear model, which cannot
    # separate two circles
    svc = SVC(kernel=Matern(length_scale=matern.kernel_.gamma ** -0.5, nu=1.5))
    svc_accuracy = svc.fit(X_train, y_train).score(X_test, y_test)
    accuracy = matern.score(X_test, y_test)
    assert accuracy >= 0.9 and accuracy >= svc_accuracy - 0.03
    assert ODMClassifier(kernel="linear").fit(X_train, y_train).score(X_test, y_test) < 0.7
    matern.model_.save(tmp_path / "model")
    loaded = ODMClassifier.from_expansion(KernelExpansion.load(tmp_path / "model"))
    assert loaded.kernel_ == matern.kernel_
    np.testing.assert_array_equal(loaded.decision_function(X_test),
                                  matern.decision_function(X_test))
    np.testing.assert_array_equal(loaded.predict(X_test), matern.predict(X_test))


def test_model_save_and_load_round_trip(tmp_path):
    X, y = load_iris(return_X_y=True)
    labels = np.array(["setosa", "versicolor", "virginica"])[y]
    model = ODMClassifier(lam=100.0).fit(X, labels)
    model.model_.save(tmp_path / "model")
    loaded = KernelExpansion.load(tmp_path / "model")
    np.testing.assert_array_equal(loaded.decision_function(X), model.decision_function(X))
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))
    assert not list(tmp_path.glob("model/*.pkl"))


def test_load_refuses_other_versions_and_truncated_models(tmp_path):
    X, y = make_problem(m=40, seed=2)
    ODMClassifier().fit(X, y).model_.save(tmp_path / "m")
    files = model_files(tmp_path / "m")
    metadata = (files / "metadata.json").read_text()
    (files / "metadata.json").write_text(metadata.replace('"format_version": 1',
                                                          '"format_version": 99'))
    with pytest.raises(ValueError, match="version 99.*Retrain"):
        KernelExpansion.load(tmp_path / "m")
    (files / "metadata.json").unlink()
    with pytest.raises(ValueError, match="metadata.json is missing"):
        KernelExpansion.load(tmp_path / "m")


# --- bad input: each refused with what and where ---------------------------------------------

def test_nan_and_inf_rows_are_named():
    X, y = make_problem(m=30, seed=1)
    X[4, 2], X[17, 0] = np.nan, np.inf
    with pytest.raises(ValueError, match=r"NaN or infinity in rows 4, 17 .*column 2"):
        ODMClassifier().fit(X, y)
    X_good, _ = make_problem(m=30, seed=1)
    model = ODMClassifier().fit(X_good, y)
    X_good[9, 1] = -np.inf
    with pytest.raises(ValueError, match=r"row 9 "):
        model.predict(X_good)


def test_one_class_is_refused():
    X, _ = make_problem(m=20)
    with pytest.raises(ValueError, match="only one class"):
        ODMClassifier().fit(X, np.full(20, "spam"))


def test_feature_count_mismatch_at_predict():
    X, y = make_problem(m=30, d=5)
    model = ODMClassifier().fit(X, y)
    with pytest.raises(ValueError, match="X has 4 features, but ODMClassifier is expecting 5"):
        model.predict(X[:, :4])


@pytest.mark.parametrize("params,match", [
    (dict(lam=0), "lam"), (dict(lam=-5.0), "lam"), (dict(theta=1.0), r"theta .* \[0, 1\)"),
    (dict(theta=-0.2), "theta"), (dict(v=0.0), r"v .* \(0, 1\]"), (dict(v=2.0), "v "),
    (dict(kernel="sigmoid"), "known kernels are linear, poly, rbf, laplacian, matern"),
    (dict(dtype="float16"), "dtype"), (dict(random_state="x"), "random_state"),
    (dict(tol=0.0), r"tol \(the violation bound\) must be a positive number"),
    (dict(max_iter=0), "max_iter must be a positive integer"),
])
def test_bad_hyperparameters_are_refused(params, match):
    X, y = make_problem(m=30)
    with pytest.raises(ValueError, match=match):
        ODMClassifier(**params).fit(X, y)


def test_the_primal_solvers_take_tol_zero():
    # their tol bounds the objective's relative change (svrg) or the gradient (newton), so 0
    # means "run max_iter"; only the dual's violation bound must be positive
    X, y = make_problem(m=60, d=4)
    svrg = ODMClassifier(kernel="linear", solver="svrg", tol=0.0, max_iter=3).fit(X, y)
    assert svrg.n_iter_ == 3
    ODMClassifier(kernel="linear", solver="newton", tol=0.0, max_iter=5).fit(X, y)


def test_zero_variance_data_with_gamma_scale():
    with pytest.raises(ValueError, match="zero variance.*numeric gamma"):
        ODMClassifier().fit(np.ones((10, 3)), np.arange(10) % 2)
    ODMClassifier(gamma=1.0).fit(np.ones((10, 3)), np.arange(10) % 2)  # works with a number


@pytest.mark.parametrize("kernel", ["rbf", "matern"])  # the radial kernels
def test_rows_far_from_the_origin_are_solved_as_rows_near_it(tmp_path, kernel):
    """A radial kernel is translation invariant, so shifting every row by 100 (as scikit-learn's
    estimator checks do) must leave the float32 fit what the float64 fit near the origin is;
    in float32 the kernel's GEMM form lost the distances' digits and the dual diverged."""
    rng = np.random.RandomState(0)
    X = rng.normal(size=(100, 2))
    y = rng.randint(low=0, high=2, size=100)
    near = ODMClassifier(kernel, dtype="float64", tol=1e-6, max_iter=20_000).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        far = ODMClassifier(kernel).fit(X + 100.0, y)
    assert far.converged_ and far.objective_[0] == pytest.approx(near.objective_[0], rel=1e-3)
    np.testing.assert_allclose(far.decision_function(X + 100.0), near.decision_function(X),
                               atol=2e-2)
    assert (far.predict(X + 100.0) == near.predict(X)).mean() >= 0.98
    np.testing.assert_array_equal(far.support_vectors_, (X + 100.0)[far.support_])
    far.model_.save(tmp_path / "far")
    copy = KernelExpansion.load(model_files(tmp_path / "far"))
    np.testing.assert_allclose(copy.decision_function(X + 100.0),
                               far.decision_function(X + 100.0), rtol=1e-12)


def test_svrg_solver_matches_the_dual_solver_dense_and_sparse():
    import scipy.sparse as sp
    X, y = make_problem(m=300, d=6, seed=13)
    params = dict(kernel="linear", lam=5.0, theta=0.2, v=0.5)
    dual = ODMClassifier(**params, solver="dcd", fit_intercept=False, tol=1e-8,
                         dtype="float64").fit(X, y)
    primal = ODMClassifier(**params, solver="svrg", fit_intercept=False, tol=1e-12,
                           max_iter=200).fit(X, y)
    sparse = ODMClassifier(**params, solver="svrg", fit_intercept=False, tol=1e-12,
                           max_iter=200).fit(sp.csr_matrix(X), y)
    np.testing.assert_allclose(primal.decision_function(X), dual.decision_function(X),
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(sparse.decision_function(sp.csr_matrix(X)),
                               primal.decision_function(X), rtol=1e-9, atol=1e-12)
    assert primal.objective_[0] == pytest.approx(-dual.objective_[0], rel=1e-6)
    with pytest.raises(ValueError, match="needs kernel='linear'"):
        ODMClassifier(solver="svrg").fit(X, y)
    # sparse rows are fitted by every kernel but the laplacian (tests/test_sparse_kernel_path.py)
    with pytest.raises(ValueError, match="laplacian kernel needs L1 distances.*kernel='rbf'"):
        ODMClassifier(kernel="laplacian").fit(sp.csr_matrix(X), y)


def far_from_origin_problem(m=1500, d=10, seed=31, low=2.0):
    """Rows in [low, low+1]^d, classes split at the cube's centre (5% labels flipped): the
    separating hyperplane lies far from the origin."""
    rng = np.random.default_rng(seed)
    X = low + rng.random((m, d))
    y = np.where((X - low - 0.5) @ rng.normal(size=d) > 0, 1, 0)
    flip = rng.random(m) < 0.05
    y[flip] = 1 - y[flip]
    return X, y


def test_linear_default_has_an_intercept_and_matches_sklearn_linearsvc():
    import scipy.sparse as sp
    from sklearn.svm import LinearSVC
    X, y = far_from_origin_problem(m=3000)
    X, X_test, y, y_test = X[:1500], X[1500:], y[:1500], y[1500:]
    model = ODMClassifier(kernel="linear").fit(X, y)            # defaults: newton, intercept
    reference = LinearSVC(C=1.0, intercept_scaling=100.0, max_iter=100000).fit(X, y)
    accuracy = model.score(X_test, y_test)
    assert accuracy >= reference.score(X_test, y_test) - 0.005
    assert model.intercept_.shape == (1,) and model.intercept_[0] != 0.0
    np.testing.assert_allclose(model.decision_function(X),
                               X @ model.support_vectors_[0] + model.intercept_[0])
    plain = ODMClassifier(kernel="linear", solver="dcd", fit_intercept=False).fit(X, y)
    assert accuracy >= plain.score(X_test, y_test) + 0.02
    # SVRG reaches the exact (Newton) objective, dense and sparse
    svrg = ODMClassifier(kernel="linear", solver="svrg", tol=1e-12, max_iter=300).fit(X, y)
    assert svrg.objective_[0] == pytest.approx(model.objective_[0], rel=1e-6)
    sparse = ODMClassifier(kernel="linear", solver="svrg", tol=1e-12, max_iter=300).fit(
        sp.csr_matrix(X), y)
    assert sparse.objective_[0] == pytest.approx(model.objective_[0], rel=1e-6)
    newton_sparse = ODMClassifier(kernel="linear").fit(sp.csr_matrix(X), y)
    assert newton_sparse.objective_[0] == pytest.approx(model.objective_[0], rel=1e-9)


def test_linear_intercept_round_trips_and_multiclass(tmp_path):
    from sodm_spark.models.expansion import KernelExpansion
    X, y = far_from_origin_problem(m=600)
    labels = np.where(X[:, 0] > 2.66, "c", np.where(y == 1, "a", "b"))
    model = ODMClassifier(kernel="linear").fit(X, labels)
    assert model.intercept_.shape == (3,)
    model.model_.save(tmp_path / "m")
    loaded = ODMClassifier.from_expansion(KernelExpansion.load(tmp_path / "m"))
    np.testing.assert_array_equal(loaded.intercept_, model.intercept_)
    np.testing.assert_array_equal(loaded.decision_function(X), model.decision_function(X))
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))


def test_kernel_offset_is_a_constant_feature():
    """k + c equals the kernel of rows with a constant column √c appended (linear kernel, so
    the reference is an ordinary fit on the augmented rows)."""
    X, y = make_problem(m=200, d=5, seed=4)
    c = 2.5
    exact = dict(lam=5.0, tol=1e-10, max_iter=100000, dtype="float64")
    shifted = ODMClassifier(kernel="linear", solver="dcd", fit_intercept=False, kernel_offset=c,
                            **exact).fit(X, y)
    augmented = np.hstack([X, np.full((200, 1), np.sqrt(c))])
    reference = ODMClassifier(kernel="linear", solver="dcd", fit_intercept=False,
                              **exact).fit(augmented, y)
    np.testing.assert_allclose(shifted.decision_function(X),
                               reference.decision_function(augmented), rtol=1e-7, atol=1e-9)
    assert shifted.kernel_.offset == c
    rbf = ODMClassifier(kernel="rbf", kernel_offset=1.0).fit(X, y)
    assert rbf.kernel_.to_dict()["offset"] == 1.0


def test_intercept_and_offset_misuse_is_refused():
    X, y = make_problem(m=60, d=3, seed=1)
    with pytest.raises(ValueError, match="no intercept.*fit_intercept=False"):
        ODMClassifier(kernel="linear", solver="dcd").fit(X, y)
    with pytest.raises(ValueError, match="kernel_offset applies to the kernel dual"):
        ODMClassifier(kernel="linear", kernel_offset=1.0).fit(X, y)
    with pytest.raises(ValueError, match="offset .* >= 0"):
        ODMClassifier(kernel_offset=-1.0).fit(X, y)
    with pytest.raises(ValueError, match="solver must be one of"):
        ODMClassifier(solver="lbfgs").fit(X, y)
