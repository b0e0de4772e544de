"""Reduced-set compression of kernel models against closed forms."""
from dataclasses import replace

import numpy as np
import pytest

from sodm_spark import ODMClassifier
from sodm_spark.core.kernels import Kernel
from sodm_spark.data.big_data import make_tabular
from sodm_spark.models import compression
from sodm_spark.models.compression import (METHODS, compare, compress, fit_coefficients,
                                           principal_projection)
from sodm_spark.models.expansion import KernelExpansion

from conftest import make_problem

pytestmark = pytest.mark.numerics  # rerun under other BLAS kernels: tests/test_blas_kernels.py


def test_linear_kernel_projection_is_the_least_squares_weight_vector():
    # with k(x, z) = xᵀz the RKHS is R^d: f = wᵀx with w = Xᵀα, and the projection onto the
    # span of the chosen points is the least-squares fit of w by Zᵀβ
    rng = np.random.default_rng(0)
    X, alpha = rng.normal(size=(300, 8)), rng.normal(size=(300, 1))
    model = KernelExpansion(X, alpha, Kernel.create("linear"), np.array([-1.0, 1.0]))
    small = compress(model, 5, method="largest", ridge=0.0, fit="rkhs")
    Z = small.support_vectors
    beta, *_ = np.linalg.lstsq(Z.T, X.T @ alpha, rcond=None)
    np.testing.assert_allclose(small.coef, beta, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("method", METHODS)
def test_the_compressed_model_interpolates_f_at_its_points(method):
    X, y = make_problem(m=400, d=4, seed=5)
    expansion = ODMClassifier(gamma=0.5, lam=100.0).fit(X, y).model_
    small = compress(expansion, 60, method=method, ridge=0.0, fit="rkhs")
    assert small.support_vectors.shape == (60, 4) and small.coef.shape == (60, 1)
    Z = small.support_vectors
    np.testing.assert_allclose(small.decision_function(Z), expansion.decision_function(Z),
                               rtol=0, atol=1e-6 * np.abs(expansion.decision_function(Z)).max())


@pytest.mark.parametrize("method", METHODS)
def test_the_data_fit_is_least_squares_on_the_support_vectors(method):
    X, y = make_problem(m=400, d=4, seed=6)
    expansion = ODMClassifier(gamma=0.5, lam=100.0).fit(X, y).model_
    small = compress(expansion, 40, method=method, ridge=0.0)  # fit="data" is the default
    sv, Z = expansion.support_vectors, small.support_vectors
    beta, *_ = np.linalg.lstsq(expansion.kernel.block(sv, Z), expansion.decision_function(sv),
                               rcond=None)
    f = expansion.decision_function(sv)
    np.testing.assert_allclose(small.decision_function(sv), expansion.kernel.block(sv, Z) @ beta,
                               rtol=0, atol=1e-4 * np.abs(f).max())


def test_multi_class_models_keep_one_column_per_class_and_their_accuracy():
    rng = np.random.default_rng(3)
    centres = rng.normal(scale=2.0, size=(4, 3))
    y = np.repeat([0.0, 1.0, 2.0, 3.0], 250)
    X = centres[y.astype(int)] + rng.normal(size=(1000, 3))
    expansion = ODMClassifier(gamma=0.3, lam=100.0).fit(X[:800], y[:800]).model_
    small = compress(expansion, 80)
    report = compare(expansion, small, X[800:], y[800:])
    assert small.coef.shape == (80, 4)
    assert report["support_vectors_before"] > 500 and report["support_vectors_after"] == 80
    assert report["accuracy_after"] >= report["accuracy_before"] - 0.02
    assert report["relative_rms_error"] < 0.1


def test_a_model_already_small_enough_is_returned_and_bad_arguments_refused():
    X, y = make_problem(m=50, d=3)
    model = KernelExpansion(X, y[:, None], Kernel.create("rbf", 1.0), np.array([-1.0, 1.0]))
    assert compress(model, 50) is model
    with pytest.raises(ValueError, match="max_sv must be a positive integer"):
        compress(model, 0)
    with pytest.raises(ValueError, match="unknown compression method"):
        compress(model, 10, method="nearest")


def test_the_job_compresses_and_reports_before_and_after(spark, tmp_path, capsys):
    import json
    import sys
    from pathlib import Path

    from sklearn.datasets import dump_svmlight_file

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "jobs"))
    import train_sodm

    X, y = make_problem(m=900, d=5, seed=81)
    X_test, y_test = make_problem(m=300, d=5, seed=82)
    dump_svmlight_file(X, y, str(tmp_path / "train.svm"), zero_based=False)
    dump_svmlight_file(X_test, y_test, str(tmp_path / "test.svm"), zero_based=False)
    assert train_sodm.main(["--data", str(tmp_path / "train.svm"), "--test-data",
                            str(tmp_path / "test.svm"), "--levels", "1", "--gamma", "0.2",
                            "--max-sv", "60", "--model-out", str(tmp_path / "model"),
                            "--metrics-out", str(tmp_path / "m.json")]) == 0
    metrics = json.loads((tmp_path / "m.json").read_text())
    report = metrics["compression"]
    assert report["support_vectors_after"] == 60 == metrics["n_sv"]
    assert report["support_vectors_before"] > 60
    assert report["validation"]["accuracy_after"] >= report["validation"]["accuracy_before"] - 0.05
    assert metrics["test_accuracy"] == report["test"]["accuracy_after"]
    assert metrics["test_accuracy"] >= metrics["test_accuracy_uncompressed"] - 0.03
    model = KernelExpansion.load(tmp_path / "model")
    assert model.support_vectors.shape[0] == 60
    assert np.mean(model.predict(X_test) == y_test) == metrics["test_accuracy"]
    assert "compressed" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        train_sodm.parse_args(["--max-sv", "0"])


def _normal_equations_problem():
    """3,000 rows, 150 points, two smooth targets: K_SZ, K_ZZ, ρ and the normal matrix
    A = K_ZS K_SZ + ρ·K_ZZ with its right-hand side b = K_ZS t, all in float64."""
    rng = np.random.default_rng(21)
    kernel = Kernel.create("rbf", 0.3)
    rows, points = rng.normal(size=(3000, 5)), rng.normal(size=(150, 5))
    targets = np.stack([np.sin(rows[:, 0]) + rows[:, 1] ** 2, np.cos(rows[:, 2])], axis=1)
    fitted, gram = kernel.block(rows, points), kernel.block(points, points)
    normal = fitted.T @ fitted
    ridge = 1e-4
    rho = ridge * np.trace(normal) / np.trace(gram)
    normal += rho * gram
    return kernel, rows, points, targets, fitted, gram, rho, normal, fitted.T @ targets


def test_conjugate_gradients_reach_the_normal_equations_solution():
    # With K_SZ in float64 the iteration is exact up to float64 rounding, so the stopping rule
    # bounds the answer whatever BLAS kernel runs the products. It stops once every recursive
    # residual is below tol·‖b‖; the true residual b − Aβ differs from the recursive one by at
    # most about k·u64·‖A‖·max‖β_j‖ (Greenbaum, "Estimating the attainable accuracy of
    # recursively computed residual methods", 1997; k ≤ 500 steps, u64 = 2^-53). Then for any
    # β the prediction error is ‖K_SZ(β − β*)‖ ≤ ‖b − Aβ‖ / √λ_min(A), since
    # K_ZS K_SZ ≼ A, and the direct solve obeys the same bound with its own residual.
    kernel, rows, points, targets, fitted, gram, rho, normal, rhs = _normal_equations_problem()
    tol, steps = 1e-9, 500
    iterated = compression._conjugate_gradients(fitted, gram, compression._cholesky(gram, 1e-7),
                                                targets, rho, steps, tol)
    direct = fit_coefficients(kernel, points, rows, targets, ridge=1e-4, solver="direct")
    residual = np.linalg.norm(normal @ iterated - rhs, axis=0)
    rounding = steps * 2.0 ** -53 * np.linalg.norm(normal, 2) * 2 * np.linalg.norm(direct, axis=0)
    assert np.all(residual <= tol * np.linalg.norm(rhs, axis=0) + rounding), residual
    smallest = np.linalg.eigvalsh(normal)[0]
    direct_residual = np.linalg.norm(normal @ direct - rhs, axis=0)
    bound = (tol * np.linalg.norm(rhs, axis=0) + rounding + direct_residual) / np.sqrt(smallest)
    assert np.all(np.linalg.norm(fitted @ (iterated - direct), axis=0) <= bound)


def test_conjugate_gradients_in_single_precision_reach_the_objective_float32_allows():
    # The default CG keeps K_SZ in float32 here (K_ZZ is well enough conditioned), so β itself
    # and the predictions' last digits depend on the BLAS kernel's order of summation; what a
    # user gets is the data fit, the objective q(β) = ‖K_SZ β − t‖² + ρ·βᵀK_ZZ β, compared
    # with the float64 direct solve β*. Storing K_SZ in float32 and summing its products over N
    # points and n rows perturbs them by a relative ε = u32·(2 + √N + √n) (probabilistic
    # rounding analysis: Higham & Mary, "A new approach to probabilistic rounding error
    # analysis", 2019). The minimizer of a problem whose K_SZ is off by |E| ≤ ε·K_SZ (the RBF
    # kernel is positive) is worse on q by at most Σ_β ‖Eβ‖·(‖K_SZ β − t‖ + ‖(K_SZ+E)β − t‖)
    # over β ∈ {its minimizer, β*}, which is about 4·ε·‖K_SZ |β*|‖·‖K_SZ β* − t‖. And since
    # K_ZS K_SZ ≼ A, the predictions differ from β*'s by at most √(q(β) − q(β*)) in norm.
    kernel, rows, points, targets, fitted, gram, rho, normal, rhs = _normal_equations_problem()
    iterated = fit_coefficients(kernel, points, rows, targets, ridge=1e-4, solver="cg",
                                max_iter=500, tol=1e-9)
    best = np.linalg.solve(normal, rhs)

    def objective(beta):
        return np.sum((fitted @ beta - targets) ** 2, axis=0) + \
            rho * np.einsum("ij,ij->j", beta, gram @ beta)

    n, n_points = fitted.shape
    relative = 2.0 ** -24 * (2 + np.sqrt(n_points) + np.sqrt(n))
    allowed = 4 * relative * np.linalg.norm(fitted @ np.abs(best), axis=0) * \
        np.linalg.norm(fitted @ best - targets, axis=0)
    gap = objective(iterated) - objective(best)
    # the bound is below 1% of the objective, which 20 steps miss by 10-30%
    assert np.all(allowed < 0.01 * objective(best))
    assert np.all(gap <= allowed), (gap, allowed)
    assert np.all(np.linalg.norm(fitted @ (iterated - best), axis=0) <= np.sqrt(allowed))


def test_conjugate_gradients_keep_low_dimensional_rows_with_the_default_budget():
    # min-max scaled rows of the 12-column table and gamma = 1/(d·var): the points' Gram
    # matrix has eigenvalues far below float32's resolution, where a float32 K_SZ made CG
    # diverge (a compressed 2,000,000-row model came out with every coefficient NaN)
    X, _ = make_tabular(0, 11000)
    X = ((X - X.min(0)) / (X.max(0) - X.min(0))).astype(np.float64)
    rng = np.random.default_rng(3)
    kernel = Kernel.create("rbf", float(1.0 / (12 * X.var())))
    sv, rows, held_out = X[:3000], X[3000:9000], X[9000:]
    points = sv[rng.choice(3000, 600, replace=False)]
    coef = rng.normal(size=(3000, 1)) * 1e3
    target = kernel.block(rows, sv) @ coef
    exact = kernel.block(held_out, sv) @ coef
    error = {}
    for solver in ("direct", "cg"):
        beta = fit_coefficients(kernel, points, rows, target, solver=solver)
        assert np.all(np.isfinite(beta)), solver
        error[solver] = np.sqrt(np.mean((kernel.block(held_out, points) @ beta - exact) ** 2))
    # a rough target (random coefficients): the direct solve reproduces f to 0.07% of its
    # RMS, 40 preconditioned steps to 2.5% (float32 K_SZ: 19%)
    assert error["cg"] <= 0.05 * np.sqrt(np.mean(exact ** 2)), error


def _wide_rows(n, seed):
    """Rows of 60 features near a 4-dimensional subspace, a label that depends on it."""
    rng = np.random.default_rng(seed)
    latent = rng.normal(size=(n, 4))
    mixing = np.random.default_rng(99).normal(size=(4, 60))
    X = latent @ mixing / 4.0 + 0.02 * rng.normal(size=(n, 60))
    y = np.where(latent[:, 0] * latent[:, 1] + 0.3 * latent[:, 2] > 0, 1.0, -1.0)
    return X, y


def test_principal_projection_keeps_the_subspace_and_refuses_what_it_cannot_shrink():
    X, _ = _wide_rows(400, 1)
    rbf = Kernel.create("rbf", 0.1)
    projection = principal_projection(X, rbf, components=6, min_variance=0.9)
    assert projection.components.shape == (60, 6)
    np.testing.assert_allclose(projection.components.T @ projection.components, np.eye(6),
                               atol=1e-10)
    # rows of the subspace come back from their projection (up to the noise)
    back = projection.projected(X) @ projection.components.T + projection.center
    assert np.linalg.norm(back - X) < 0.05 * np.linalg.norm(X - X.mean(axis=0))
    assert principal_projection(X, Kernel.create("linear"), components=6) is None
    assert principal_projection(X[:, :12], rbf, components=6) is None  # not wider than 2r
    assert principal_projection(X[:10], rbf, components=6) is None  # too few rows
    isotropic = np.random.default_rng(2).normal(size=(400, 60))
    assert principal_projection(isotropic, rbf, components=6, min_variance=0.9) is None


def test_a_projected_compression_scores_raw_rows_and_survives_save_and_load(tmp_path,
                                                                          monkeypatch):
    X, y = _wide_rows(900, 3)
    X_test, y_test = _wide_rows(400, 4)
    expansion = ODMClassifier(gamma=0.5, lam=100.0).fit(X, y).model_
    expansion = replace(expansion, feature_offset=np.full(60, 0.5),
                        feature_scale=np.full(60, 2.0))  # raw rows x map to (x − 0.5) · 2
    raw_test = X_test / 2.0 + 0.5
    monkeypatch.setattr(compression, "PROJECTION_COMPONENTS", 6)
    small = compress(expansion, 200, method="random")
    assert small.support_vectors.shape == (200, 6) and small.n_features_in == 60
    # the decision function, written out: scale, project, kernel against the stored points
    inputs = ((raw_test - 0.5) * 2.0 - small.projection_center) @ small.projection_components
    expected = small.kernel.block(inputs, small.support_vectors.astype(np.float64)) @ small.coef
    np.testing.assert_allclose(small.decision_function(raw_test), expected[:, 0], rtol=1e-9,
                               atol=1e-9 * np.abs(expected).max())
    # the rows lie near a 4-dimensional subspace: projecting them loses nothing against the
    # same points unprojected
    whole = compress(expansion, 200, method="random", project=False)
    assert whole.projection_components is None and whole.support_vectors.shape == (200, 60)
    f, g = whole.decision_function(raw_test), small.decision_function(raw_test)
    assert np.linalg.norm(g - f) < 0.02 * np.linalg.norm(f)
    report = compare(expansion, small, raw_test, y_test)
    assert report["accuracy_after"] >= report["accuracy_before"] - 0.03
    assert report["relative_rms_error"] < 0.2
    small.save(tmp_path / "model")
    loaded = KernelExpansion.load(tmp_path / "model")
    assert loaded.n_features_in == 60
    np.testing.assert_array_equal(loaded.decision_function(raw_test),
                                  small.decision_function(raw_test))
