"""Nyström features against scikit-learn's Nystroem and the closed-form approximation."""
import numpy as np
import pytest
from sklearn.kernel_approximation import Nystroem

from sodm_spark.baselines.nystroem import features, normalization, sample_landmarks
from sodm_spark.core.kernels import Kernel

pytestmark = pytest.mark.numerics  # rerun under other BLAS kernels: tests/test_blas_kernels.py


def test_features_equal_scikit_learns_for_the_same_landmarks_and_approximate_k():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 5))
    kernel = Kernel.create("rbf", 0.3)
    Z = sample_landmarks(X, 40, seed=2)
    assert Z.shape == (40, 5) and len({tuple(z) for z in Z}) == 40
    reference = Nystroem(kernel="rbf", gamma=0.3, n_components=40).fit(Z)  # Z, shuffled
    components = reference.components_
    np.testing.assert_allclose(
        features(kernel, X, components, normalization(kernel, components)),
        reference.transform(X), rtol=1e-7, atol=1e-9)
    phi = features(kernel, X, Z, normalization(kernel, Z))
    # φ φᵀ is the Nyström approximation K_XZ K_ZZ⁻¹ K_ZX
    K_xz = kernel.block(X, Z)
    np.testing.assert_allclose(phi @ phi.T, K_xz @ np.linalg.solve(kernel.block(Z, Z), K_xz.T),
                               rtol=1e-6, atol=1e-8)
