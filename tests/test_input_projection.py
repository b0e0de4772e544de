"""The input map of wide dense rows (sodm_spark.models.input_projection) against scikit-learn's
PCA and the closed form of the projected RBF kernel, and a fit that takes it on Spark."""
import numpy as np
import pytest
import scipy.sparse
from sklearn.decomposition import PCA

from sodm_spark.core.kernels import Kernel
from sodm_spark.models import input_projection
from sodm_spark.models.input_projection import (components_for, fit_input_projection,
                                                kernel_agreement, principal_directions)

pytestmark = pytest.mark.numerics  # rerun under other BLAS kernels: tests/test_blas_kernels.py


def _near_subspace(n, d=300, rank=12, noise=0.05, seed=0):
    """Rows of d features near a rank-dimensional subspace, and a label that depends on it."""
    rng = np.random.default_rng(seed)
    latent = rng.normal(size=(n, rank))
    mixing = np.random.default_rng(99).normal(size=(rank, d)) / np.sqrt(rank)
    X = latent @ mixing + noise * rng.normal(size=(n, d))
    y = np.where(latent[:, 0] * latent[:, 1] + 0.5 * latent[:, 2] > 0, 1.0, -1.0)
    return X, y


def test_the_directions_and_their_shares_are_scikit_learns_pca():
    X, _ = _near_subspace(1000)
    center, directions, shares = principal_directions(X)
    pca = PCA(n_components=20, svd_solver="full").fit(X)
    np.testing.assert_allclose(center, pca.mean_, atol=1e-12)
    np.testing.assert_allclose(shares[:20], pca.explained_variance_ratio_, rtol=1e-9)
    # the same subspace (directions are defined up to sign): equal projection matrices
    ours, theirs = directions[:, :12], pca.components_[:12].T
    np.testing.assert_allclose(ours @ ours.T, theirs @ theirs.T, atol=1e-9)


def test_components_for_is_the_fewest_that_keep_the_share():
    shares = np.array([0.5, 0.3, 0.1, 0.06, 0.04])
    assert components_for(shares, 0.5) == 1
    assert components_for(shares, 0.8) == 2
    assert components_for(shares, 0.81) == 3
    assert components_for(shares, 0.95) == 4
    assert components_for(shares, 1.0) == 5


def test_the_projected_kernel_is_the_raw_one_times_the_dropped_distance():
    # ‖x − z‖² = ‖P(x − z)‖² + ‖(I − P)(x − z)‖², so k(Px, Pz) = k(x, z)·exp(γ‖(I − P)(x − z)‖²)
    X, _ = _near_subspace(1200)
    kernel = Kernel.create("rbf", 1.0 / (300 * X.var()))
    projection, report = fit_input_projection(X, kernel, 300)
    assert projection is not None
    V = projection.components
    np.testing.assert_allclose(V.T @ V, np.eye(V.shape[1]), atol=1e-10)
    A, B = X[:50], X[600:650]
    dropped = (A - projection.center) - (A - projection.center) @ V @ V.T
    dropped_b = (B - projection.center) - (B - projection.center) @ V @ V.T
    residual = ((dropped[:, None, :] - dropped_b[None, :, :]) ** 2).sum(axis=2)
    projected = kernel.block(projection.projected(A), projection.projected(B))
    np.testing.assert_allclose(projected, kernel.block(A, B) * np.exp(kernel.gamma * residual),
                               rtol=1e-9)
    # the report's agreement, brute force over the same pairs
    raw = kernel.block(X[:600], X[600:1200])
    mapped = kernel.block(projection.projected(X[:600]), projection.projected(X[600:1200]))
    assert report["mean_relative_difference"] == pytest.approx(
        np.abs(mapped - raw).mean() / raw.mean(), rel=1e-9)
    assert report == {**report, **kernel_agreement(X, projection, kernel, pairs=600)}


def test_the_rule_maps_rows_near_a_subspace_and_keeps_the_others():
    X, _ = _near_subspace(1200)
    rbf = Kernel.create("rbf", 1.0 / (300 * X.var()))
    projection, report = fit_input_projection(X, rbf, 300)
    # 12 latent directions hold all but the noise's 300·0.05² of the variance
    assert 12 <= report["components"] <= 100 and report["variance_kept"] >= 0.95
    assert projection.components.shape == (300, report["components"])
    assert report["mean_relative_difference"] < 0.05
    # and what it refuses, with the reason
    for rows, kernel, width, why in (
            (X[:, :200], rbf, 200, "fewer than 256 features"),
            (X, Kernel.create("laplacian", 0.1), 300, "laplacian"),
            (scipy.sparse.csr_matrix(X), rbf, 300, "sparse rows"),
            (np.random.default_rng(1).normal(size=(1200, 300)), rbf, 300, "more than a third"),
            (X[:150], rbf, 300, "too few")):
        none, report = fit_input_projection(rows, kernel, width)
        assert none is None and why in report["reason"], report


def test_a_projection_followed_by_another_is_one_projection():
    # a fit's map, then a compression's map of the projected rows: the model stores one
    from sodm_spark.models.expansion import InputMap

    X, _ = _near_subspace(600)
    first, _ = fit_input_projection(X, Kernel.create("rbf", 1e-3), 300)
    inner = first.projected(X)
    center, directions, _ = principal_directions(inner)
    both = first.followed_by(center, directions[:, :5])
    expected = (inner - center) @ directions[:, :5]
    np.testing.assert_allclose(both.projected(X), expected, atol=1e-9)
    np.testing.assert_allclose(InputMap(offset=np.zeros(300), scale=np.full(300, 2.0),
                                        center=both.center, components=both.components)(X / 2),
                               expected, atol=1e-9)


def test_a_fit_on_wide_rows_is_the_exact_odm_of_their_principal_components(engine):
    from sodm_spark.solvers import solve_odm_dual
    from sodm_spark.solvers.dcd_settings import DCDSettings, ODMHyperparameters
    from sodm_spark.spark.io import numpy_to_blocks
    from sodm_spark.spark.sodm.fit import fit_sodm
    from sodm_spark.spark.sodm.params import SODMParams

    X, y = _near_subspace(900, seed=3)
    X_test, _ = _near_subspace(200, seed=4)
    gamma = 1.0 / (300 * X.var())
    # float32 kernels: the exact ODM is compared to 1e-6 (int16 storage is 1.5e-5 per entry)
    params = SODMParams(scale="none", auto_stop=False, gamma=gamma, lam=100.0, levels=0,
                        tol=1e-9, kernel_storage="float32")
    sc = engine
    fit = fit_sodm(sc, numpy_to_blocks(sc, X, y), params, classes=[-1.0, 1.0])
    # 900 rows: the sample is every row, so the map is the PCA of X that keeps 95%
    pca = PCA(n_components=input_projection.VARIANCE_KEPT, svd_solver="full").fit(X)
    assert fit.model.projection_components.shape == (300, pca.n_components_)
    assert fit.input_map["components"] == pca.n_components_
    kernel = Kernel.create("rbf", gamma)
    reference = solve_odm_dual(pca.transform(X), y, kernel,
                               ODMHyperparameters(100.0, params.theta, params.v),
                               settings=DCDSettings(violation_tol=1e-9, dtype=np.float64))
    assert fit.levels[0].objective == pytest.approx(reference.objective, rel=1e-6)
    expected = kernel.block(pca.transform(X_test), pca.transform(X)) @ (reference.gamma * y)
    np.testing.assert_allclose(fit.model.decision_function(X_test), expected, atol=1e-6)

    kept = fit_sodm(sc, numpy_to_blocks(sc, X, y), SODMParams(
        scale="none", auto_stop=False, gamma=gamma, lam=100.0, levels=0, tol=1e-9,
        input_map="none", kernel_storage="float32"), classes=[-1.0, 1.0])
    assert kept.model.projection_components is None and kept.input_map is None
    assert kept.model.support_vectors.shape[1] == 300
