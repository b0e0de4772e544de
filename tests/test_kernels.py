"""Each kernel class (sodm_spark.core.kernels and the kernels it registers) against
scikit-learn's kernel functions, on dense and CSR rows; the registry, serialization and
pickling of kernels; gamma's resolution."""
import pickle
from dataclasses import replace

import cloudpickle
import numpy as np
import pytest
import scipy.sparse
from sklearn.gaussian_process.kernels import Matern
from sklearn.metrics.pairwise import (laplacian_kernel, linear_kernel, polynomial_kernel,
                                      rbf_kernel)
from sklearn.svm import SVC

from sodm_spark.core.distance_kernels import MaternKernel, RBFKernel
from sodm_spark.core.kernels import (Kernel, decision_values, iter_kernel_blocks, kernel_class,
                                     kernel_matrix, kernel_names)

pytestmark = pytest.mark.numerics  # rerun under other BLAS kernels: tests/test_blas_kernels.py

rng = np.random.default_rng(1)
X = rng.normal(size=(37, 6))
Z = rng.normal(size=(23, 6))

# scikit-learn's function of every kernel at gamma 0.3, degree 3, coef0 1
REFERENCES = {
    "linear": lambda a, b: linear_kernel(a, b),
    "rbf": lambda a, b: rbf_kernel(a, b, gamma=0.3),
    "poly": lambda a, b: polynomial_kernel(a, b, degree=3, gamma=0.3, coef0=1.0),
    "laplacian": lambda a, b: laplacian_kernel(a, b, gamma=0.3),
    # gamma = 1/ℓ² (MaternKernel's docstring); scikit-learn's kernels take dense rows
    "matern": lambda a, b: Matern(length_scale=0.3 ** -0.5, nu=1.5)(_dense(a), _dense(b)),
}


def _dense(rows):
    return rows.toarray() if scipy.sparse.issparse(rows) else rows


def test_every_registered_kernel_has_a_reference_here():
    assert set(kernel_names()) == set(REFERENCES)


@pytest.mark.parametrize("name", kernel_names())
def test_kernel_matches_scikit_learn(name):
    kernel = Kernel.create(name, gamma=0.3, degree=3, coef0=1.0)
    expected = REFERENCES[name](X, Z)
    np.testing.assert_allclose(kernel_matrix(kernel, X, Z), expected, rtol=1e-12, atol=1e-12)
    as_float32 = kernel_matrix(kernel, X, Z, dtype=np.float32)
    assert as_float32.dtype == np.float32
    np.testing.assert_allclose(as_float32, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(kernel.diagonal(X), np.diag(REFERENCES[name](X, X)), rtol=1e-12)


@pytest.mark.parametrize("name", [name for name in kernel_names()
                                  if kernel_class(name).sparse_refusal is None])
def test_csr_rows_give_the_blocks_of_their_dense_copies(name):
    sparse_X = scipy.sparse.random(37, 40, density=0.15, format="csr", random_state=2)
    sparse_Z = scipy.sparse.random(23, 40, density=0.15, format="csr", random_state=3)
    kernel = Kernel.create(name, gamma=0.3, degree=3, coef0=1.0)
    expected = REFERENCES[name](sparse_X.toarray(), sparse_Z.toarray())
    for right in (sparse_Z, sparse_Z.toarray()):
        np.testing.assert_allclose(kernel_matrix(kernel, sparse_X, right), expected, rtol=1e-12,
                                   atol=1e-12)
    np.testing.assert_allclose(kernel.diagonal(sparse_X),
                               np.diag(REFERENCES[name](sparse_X.toarray(), sparse_X.toarray())),
                               rtol=1e-12)


@pytest.mark.parametrize("name", [name for name in kernel_names() if kernel_class(name).radial])
def test_radial_float32_blocks_stay_in_range_where_squared_distances_cancel(name):
    # rows far from the origin: ‖x‖² + ‖z‖² − 2x·z rounds to small negative numbers in
    # float32, which the kernels clamp at 0 (a square root of one would be NaN)
    # (the float32 values themselves are far off: the fits centre such rows first)
    far = 1e3 + rng.normal(scale=1e-2, size=(40, 5))
    kernel = Kernel.create(name, gamma=1.0)
    block = kernel_matrix(kernel, far, dtype=np.float32)
    assert np.isfinite(block).all() and block.min() >= 0.0 and block.max() <= 1.0
    assert (block == 1.0).any()  # some distances rounded to 0 or below, clamped
    np.testing.assert_allclose(np.diag(kernel_matrix(kernel, far)), 1.0, atol=1e-6)


def test_the_matern_kernel_at_one_length_scale_is_its_closed_form():
    # r = ℓ: (1 + √3) exp(−√3), with ℓ = 1/√γ
    kernel = Kernel.create("matern", gamma=4.0, offset=0.25)
    x, z = np.zeros((1, 3)), np.array([[0.3, 0.4, 0.0]])  # r = 0.5 = ℓ
    expected = (1.0 + np.sqrt(3.0)) * np.exp(-np.sqrt(3.0)) + 0.25
    assert kernel.block(x, z)[0, 0] == pytest.approx(expected, rel=1e-14)
    np.testing.assert_array_equal(kernel.diagonal(z), [1.25])


# What saved models hold (KernelExpansion.save's metadata.json, the scorer's spec, the ONNX
# metadata): the five keys today, no "offset" in models saved before it existed
SAVED_KERNELS = [
    ({"name": "rbf", "gamma": 0.5, "degree": 3, "coef0": 0.0, "offset": 0.0},
     Kernel.create("rbf", 0.5)),
    ({"name": "linear", "gamma": 1.0, "degree": 3, "coef0": 0.0}, Kernel.create("linear")),
    ({"name": "poly", "gamma": 0.2, "degree": 2, "coef0": 1.0, "offset": 1.5},
     Kernel.create("poly", 0.2, degree=2, coef0=1.0, offset=1.5)),
    ({"name": "laplacian", "gamma": 0.3, "degree": 3, "coef0": 0.0},
     Kernel.create("laplacian", 0.3)),
    ({"name": "matern", "gamma": 0.7, "degree": 3, "coef0": 0.0, "offset": 2.0},
     Kernel.create("matern", 0.7, offset=2.0)),
]


@pytest.mark.parametrize("saved, kernel", SAVED_KERNELS, ids=lambda v: getattr(v, "name", ""))
def test_saved_kernel_dicts_load_as_equal_kernels(saved, kernel):
    loaded = Kernel.from_dict(saved)
    assert loaded == kernel and type(loaded) is type(kernel)
    np.testing.assert_array_equal(loaded.block(X, Z), kernel.block(X, Z))
    assert loaded.to_dict() == {"offset": 0.0, **saved}  # written back with all five keys


@pytest.mark.parametrize("name", kernel_names())
def test_kernels_pickle_compare_and_hash_by_class_and_parameters(name):
    kernel = Kernel.create(name, 0.4, degree=2, coef0=1.0, offset=0.5)
    assert isinstance(kernel, Kernel) and type(kernel) is kernel_class(name)
    # Spark tasks get kernels by cloudpickle, the driver's records by pickle
    for copy in (pickle.loads(pickle.dumps(kernel)), cloudpickle.loads(cloudpickle.dumps(kernel)),
                 Kernel(**kernel.to_dict()), Kernel.from_dict(kernel.to_dict())):
        assert copy == kernel and hash(copy) == hash(kernel) and type(copy) is type(kernel)
        np.testing.assert_array_equal(copy.block(X, Z), kernel.block(X, Z))
    wider = replace(kernel, gamma=2.0 * kernel.gamma)
    assert type(wider) is type(kernel) and wider != kernel and len({kernel, wider}) == 2


def test_aliases_name_the_same_kernel_and_a_class_keeps_its_name():
    assert Kernel.create("gaussian", 0.3) == Kernel.create("rbf", 0.3)
    assert Kernel("polynomial", 0.3).name == "poly"
    assert MaternKernel(gamma=2.0) == Kernel("matern", 2.0) != Kernel("rbf", 2.0)
    with pytest.raises(ValueError, match="RBFKernel is the 'rbf' kernel, not 'linear'"):
        RBFKernel("linear")
    with pytest.raises(TypeError, match="a kernel called 'rbf' exists already"):
        type("AnotherRBF", (Kernel,), {"__annotations__": {"name": str}, "name": "rbf"})
    assert kernel_names() == ("linear", "poly", "rbf", "laplacian", "matern")


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
@pytest.mark.parametrize("name", ["rbf", "matern"])  # γ = 1/ℓ² scales d² as rbf's γ does
def test_gamma_strings_match_svc(gamma, name):
    y = (X[:, 0] > 0).astype(int)
    svc = SVC(gamma=gamma).fit(X * 3.0, y)
    assert Kernel.create(name, gamma, X=X * 3.0).gamma == pytest.approx(svc._gamma, rel=1e-12)


def test_unknown_kernel_lists_known_ones():
    expected = "known kernels are linear, poly, rbf, laplacian, matern"
    with pytest.raises(ValueError, match=expected):
        Kernel.create("sigmoid")
    with pytest.raises(ValueError, match=expected):  # the constructor reads the same registry
        Kernel("sigmoid", 1.0)


def test_zero_variance_with_scale_is_refused():
    with pytest.raises(ValueError, match="zero variance"):
        Kernel.create("rbf", "scale", X=np.ones((5, 3)))


@pytest.mark.parametrize("bad", [0, -1.0, np.nan, "huge"])
def test_bad_gamma_is_refused(bad):
    with pytest.raises(ValueError, match="gamma"):
        Kernel.create("rbf", bad, X=X)
