"""DSVRG (SODM Algorithm 2) on Spark against single-node SVRG and the exact dual solver."""
import numpy as np
import pytest
import scipy.sparse as sp

from sodm_spark.kernels import Kernel
from sodm_spark.solvers import solve_odm_dual
from sodm_spark.solvers.odm_primal import newton_primal
from sodm_spark.solvers.svrg import primal_objective, svrg
from sodm_spark.spark.dsvrg import DSVRGParams, fit_dsvrg
from sodm_spark.spark.io import Block
from sodm_spark.spark.session import numpy_to_blocks

from conftest import make_problem

LAM, THETA, V = 2.0, 0.2, 0.5


@pytest.fixture(scope="module")
def linear_data():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(600, 12)) * (rng.random((600, 12)) < 0.4)  # many zeros
    y = np.where(X @ rng.normal(size=12) + 0.3 * rng.normal(size=600) > 0, 1.0, -1.0)
    return X, y


def test_dsvrg_svrg_newton_and_exact_dual_agree(spark, linear_data):
    X, y = linear_data
    dual = solve_odm_dual(X, y, Kernel.create("linear"), LAM, THETA, V, tol=1e-10,
                          dtype=np.float64)
    exact = -dual.objective
    newton = newton_primal(X, y, LAM, THETA, V)
    assert newton.objective == pytest.approx(exact, rel=1e-9)
    single = svrg(X, y, LAM, THETA, V, epochs=60, tol=1e-10)
    assert abs(single.objective - exact) <= 1e-4 * abs(exact)
    sc = spark.sparkContext
    epochs = []
    fit = fit_dsvrg(sc, numpy_to_blocks(sc, X, y), DSVRGParams(LAM, THETA, V, epochs=60,
                                                               tol=1e-10, n_partitions=3),
                    classes=[-1.0, 1.0], n_features=12, on_epoch=epochs.append)
    assert abs(fit.epochs[-1].objective - exact) <= 1e-4 * abs(exact)
    assert primal_objective(fit.w, X, y, LAM, THETA, V) == pytest.approx(fit.epochs[-1].objective)
    # the objective falls epoch after epoch
    objectives = [entry.objective for entry in epochs]
    assert all(b <= a + 1e-12 for a, b in zip(objectives, objectives[1:]))
    np.testing.assert_allclose(fit.model.decision_function(X), X @ fit.w)


def csr_blocks(sc, X, y, n_slices=4):
    bounds = np.linspace(0, X.shape[0], n_slices + 1).astype(int)
    return sc.parallelize([Block(sp.csr_matrix(X[a:b]), y[a:b], np.arange(a, b, dtype=np.int64))
                           for a, b in zip(bounds[:-1], bounds[1:])], n_slices)


def test_sparse_and_dense_blocks_give_the_same_w(spark, linear_data):
    X, y = linear_data
    sc = spark.sparkContext
    params = DSVRGParams(LAM, THETA, V, epochs=5, tol=0.0, n_partitions=2, partitioner="random")
    dense = fit_dsvrg(sc, numpy_to_blocks(sc, X, y, n_slices=4), params, [-1.0, 1.0], 12)
    sparse = fit_dsvrg(sc, csr_blocks(sc, X, y), params, [-1.0, 1.0], 12)
    np.testing.assert_allclose(sparse.w, dense.w, rtol=1e-10, atol=1e-12)


def test_same_seed_gives_bit_identical_w_and_other_seed_the_same_optimum(spark, linear_data):
    X, y = linear_data
    sc = spark.sparkContext
    runs = [fit_dsvrg(sc, numpy_to_blocks(sc, X, y), DSVRGParams(LAM, THETA, V, epochs=4,
                                                                  tol=0.0, seed=seed),
                      [-1.0, 1.0], 12) for seed in (3, 3, 4)]
    assert np.array_equal(runs[0].w, runs[1].w)
    assert not np.array_equal(runs[0].w, runs[2].w)


def test_bad_input(spark, linear_data):
    X, y = linear_data
    sc = spark.sparkContext
    with pytest.raises(ValueError, match="binary classifier; the labels hold 3 classes"):
        fit_dsvrg(sc, numpy_to_blocks(sc, X, y), DSVRGParams(), [0.0, 1.0, 2.0], 12)
    with pytest.raises(ValueError, match="lam"):
        fit_dsvrg(sc, numpy_to_blocks(sc, X, y), DSVRGParams(lam=0.0), [-1.0, 1.0], 12)
    with pytest.raises(ValueError, match="step must lie in"):
        fit_dsvrg(sc, numpy_to_blocks(sc, X, y), DSVRGParams(step=2.0), [-1.0, 1.0], 12)


def test_representative_input_partitions_are_kept_and_sorted_ones_are_dealt(spark):
    """Alg. 2 wants partitions that look like the whole: i.i.d. input already does (no shuffle);
    input sorted by label does not, so its rows are dealt by stratum."""
    X, y = make_problem(m=2000, d=6, seed=12)
    sc = spark.sparkContext
    exact = newton_primal(X, y, LAM, THETA, V).objective
    params = DSVRGParams(LAM, THETA, V, epochs=40, tol=1e-10, strata=5)
    kept = fit_dsvrg(sc, numpy_to_blocks(sc, X, y, n_slices=2).cache(), params, [-1.0, 1.0], 6)
    assert kept.layout.startswith("2 input partitions kept")
    order = np.argsort(y, kind="stable")
    dealt = fit_dsvrg(sc, numpy_to_blocks(sc, X[order], y[order], n_slices=2), params,
                      [-1.0, 1.0], 6)
    assert dealt.layout.startswith("stratified dealing into 2")
    for fit in (kept, dealt):
        assert abs(fit.epochs[-1].objective - exact) <= 1e-4 * abs(exact)
