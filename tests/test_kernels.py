import numpy as np
import pytest
from sklearn.metrics.pairwise import (laplacian_kernel, linear_kernel, polynomial_kernel,
                                      rbf_kernel)
from sklearn.svm import SVC

from sodm_spark.core.kernels import Kernel, decision_values, iter_kernel_blocks, kernel_matrix

pytestmark = pytest.mark.numerics  # rerun under other BLAS kernels: tests/test_blas_kernels.py

rng = np.random.default_rng(1)
X = rng.normal(size=(37, 6))
Z = rng.normal(size=(23, 6))

REFERENCES = {
    "linear": lambda a, b: linear_kernel(a, b),
    "rbf": lambda a, b: rbf_kernel(a, b, gamma=0.3),
    "poly": lambda a, b: polynomial_kernel(a, b, degree=3, gamma=0.3, coef0=1.0),
    "laplacian": lambda a, b: laplacian_kernel(a, b, gamma=0.3),
}


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_kernel_matches_scikit_learn(name):
    kernel = Kernel.create(name, gamma=0.3, degree=3, coef0=1.0)
    expected = REFERENCES[name](X, Z)
    np.testing.assert_allclose(kernel_matrix(kernel, X, Z), expected, rtol=1e-12, atol=1e-12)
    as_float32 = kernel_matrix(kernel, X, Z, dtype=np.float32)
    assert as_float32.dtype == np.float32
    np.testing.assert_allclose(as_float32, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(kernel.diagonal(X), np.diag(REFERENCES[name](X, X)), rtol=1e-12)


def test_row_blocks_respect_the_budget_and_equal_one_block():
    kernel = Kernel.create("rbf", gamma=0.5)
    budget_mb = 23 * 8 * 5 / 2**20  # five rows of 23 float64 columns
    blocks = list(iter_kernel_blocks(kernel, X, Z, block_mb=budget_mb))
    assert len(blocks) == 8 and all(block.shape[0] <= 5 for _, block in blocks)
    np.testing.assert_allclose(np.vstack([b for _, b in blocks]), kernel_matrix(kernel, X, Z),
                               rtol=1e-14)
    coef = rng.normal(size=(23, 2))
    np.testing.assert_allclose(decision_values(kernel, X, Z, coef, block_mb=budget_mb),
                               rbf_kernel(X, Z, gamma=0.5) @ coef, rtol=1e-12)


@pytest.mark.parametrize("gamma", ["scale", "auto"])
def test_gamma_strings_match_svc(gamma):
    y = (X[:, 0] > 0).astype(int)
    svc = SVC(gamma=gamma).fit(X * 3.0, y)
    assert Kernel.create("rbf", gamma, X=X * 3.0).gamma == pytest.approx(svc._gamma, rel=1e-12)


def test_unknown_kernel_lists_known_ones():
    with pytest.raises(ValueError, match="known kernels are linear, rbf, poly, laplacian"):
        Kernel.create("sigmoid")


def test_zero_variance_with_scale_is_refused():
    with pytest.raises(ValueError, match="zero variance"):
        Kernel.create("rbf", "scale", X=np.ones((5, 3)))


@pytest.mark.parametrize("bad", [0, -1.0, np.nan, "huge"])
def test_bad_gamma_is_refused(bad):
    with pytest.raises(ValueError, match="gamma"):
        Kernel.create("rbf", bad, X=X)
