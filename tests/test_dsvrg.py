"""DSVRG (SODM Algorithm 2) on Spark against single-node SVRG and the exact dual solver."""
import numpy as np
import pytest
import scipy.sparse as sp

from sodm_spark.core.kernels import Kernel
from sodm_spark.solvers import solve_odm_dual
from sodm_spark.solvers.dcd_settings import DCDSettings, ODMHyperparameters
from sodm_spark.solvers.odm_primal import newton_primal
from sodm_spark.solvers.svrg import SVRGSchedule, primal_objective, svrg
from sodm_spark.spark.dsvrg.fit import DSVRGParams, fit_dsvrg
from sodm_spark.spark.io import Block
from sodm_spark.spark.io import numpy_to_blocks

from conftest import make_problem

LAM, THETA, V = 2.0, 0.2, 0.5


@pytest.fixture(scope="module")
def linear_data():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(600, 12)) * (rng.random((600, 12)) < 0.4)  # many zeros
    y = np.where(X @ rng.normal(size=12) + 0.3 * rng.normal(size=600) > 0, 1.0, -1.0)
    return X, y


def test_dsvrg_svrg_newton_and_exact_dual_agree(engine, linear_data):
    X, y = linear_data
    dual = solve_odm_dual(X, y, Kernel.create("linear"), ODMHyperparameters(LAM, THETA, V),
                          settings=DCDSettings(violation_tol=1e-10, dtype=np.float64))
    exact = -dual.objective
    newton = newton_primal(X, y, LAM, THETA, V, fit_intercept=False)
    assert newton.objective == pytest.approx(exact, rel=1e-9)
    single = svrg(X, y, ODMHyperparameters(LAM, THETA, V),
                  SVRGSchedule(epochs=60, relative_change_tol=1e-10), fit_intercept=False)
    assert abs(single.objective - exact) <= 1e-4 * abs(exact)
    sc = engine
    epochs = []
    fit = fit_dsvrg(sc, numpy_to_blocks(sc, X, y), DSVRGParams(LAM, THETA, V, epochs=60,
                                                               relative_change_tol=1e-10, n_partitions=3,
                                                               fit_intercept=False),
                    classes=[-1.0, 1.0], n_features=12, on_epoch=epochs.append)
    assert abs(fit.epochs[-1].objective - exact) <= 1e-4 * abs(exact)
    assert primal_objective(fit.w, X, y, LAM, THETA, V) == pytest.approx(fit.epochs[-1].objective)
    # the objective falls epoch after epoch
    objectives = [entry.objective for entry in epochs]
    assert all(b <= a + 1e-12 for a, b in zip(objectives, objectives[1:]))
    np.testing.assert_allclose(fit.model.decision_function(X), X @ fit.w)
    assert fit.intercept == 0.0 and fit.model.intercept is None


@pytest.mark.parametrize("sparse", [False, True])
def test_dsvrg_with_intercept_reaches_the_exact_primal_on_uncentred_rows(engine, sparse, tmp_path):
    """Rows in [2, 3]^12 split at the cube's centre: DSVRG (steps on centred rows) reaches
    the exact primal objective with the unpenalized bias within 1e-3, the model carries the
    intercept through save/load, and the same fit without a bias is visibly worse."""
    from sodm_spark.models.expansion import KernelExpansion
    rng = np.random.default_rng(8)
    X = 2.0 + rng.random((900, 12))
    y = np.where((X - 2.5) @ rng.normal(size=12) + 0.05 * rng.normal(size=900) > 0, 1.0, -1.0)
    lam = 100.0
    exact = newton_primal(X, y, lam, THETA, V)
    sc = engine
    blocks = csr_blocks(sc, X, y, n_slices=3) if sparse else numpy_to_blocks(sc, X, y, n_slices=3)
    fit = fit_dsvrg(sc, blocks, DSVRGParams(lam, THETA, V, epochs=40, relative_change_tol=1e-9, n_partitions=3),
                    classes=[-1.0, 1.0], n_features=12)
    assert fit.epochs[-1].objective == pytest.approx(exact.objective, rel=1e-3)
    assert primal_objective(np.append(fit.w, fit.intercept), X, y, lam, THETA, V,
                            fit_intercept=True) == pytest.approx(fit.epochs[-1].objective,
                                                                 rel=1e-9)
    assert fit.intercept == pytest.approx(exact.intercept, rel=2e-2)
    np.testing.assert_allclose(fit.model.decision_function(X), X @ fit.w + fit.intercept)
    fit.model.save(tmp_path / "model")
    loaded = KernelExpansion.load(tmp_path / "model")
    np.testing.assert_array_equal(loaded.intercept, [fit.intercept])
    np.testing.assert_array_equal(loaded.decision_function(X), fit.model.decision_function(X))
    plain = fit_dsvrg(sc, blocks, DSVRGParams(lam, THETA, V, epochs=40, relative_change_tol=1e-9,
                                              n_partitions=3, fit_intercept=False),
                      classes=[-1.0, 1.0], n_features=12)
    accuracy = lambda model: np.mean(model.predict(X) == y)
    assert accuracy(fit.model) >= accuracy(plain.model) + 0.02


def csr_blocks(sc, X, y, n_slices=4):
    bounds = np.linspace(0, X.shape[0], n_slices + 1).astype(int)
    return sc.parallelize([Block(sp.csr_matrix(X[a:b]), y[a:b], np.arange(a, b, dtype=np.int64))
                           for a, b in zip(bounds[:-1], bounds[1:])], n_slices)


def test_sparse_and_dense_blocks_give_the_same_w(engine, linear_data):
    X, y = linear_data
    sc = engine
    params = DSVRGParams(LAM, THETA, V, epochs=5, relative_change_tol=0.0, n_partitions=2, partitioner="random")
    dense = fit_dsvrg(sc, numpy_to_blocks(sc, X, y, n_slices=4), params, [-1.0, 1.0], 12)
    sparse = fit_dsvrg(sc, csr_blocks(sc, X, y), params, [-1.0, 1.0], 12)
    np.testing.assert_allclose(sparse.w, dense.w, rtol=1e-10, atol=1e-12)


def test_same_seed_gives_bit_identical_w_and_other_seed_the_same_optimum(spark, linear_data):
    X, y = linear_data
    sc = spark.sparkContext
    runs = [fit_dsvrg(sc, numpy_to_blocks(sc, X, y), DSVRGParams(LAM, THETA, V, epochs=4,
                                                                  relative_change_tol=0.0, seed=seed),
                      [-1.0, 1.0], 12) for seed in (3, 3, 4)]
    assert np.array_equal(runs[0].w, runs[1].w)
    assert not np.array_equal(runs[0].w, runs[2].w)


def test_bad_input(engine, linear_data):
    X, y = linear_data
    sc = engine
    with pytest.raises(ValueError, match="labels hold 3 classes.*DSVRG is a binary classifier"):
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
    params = DSVRGParams(LAM, THETA, V, epochs=40, relative_change_tol=1e-10, strata=5)
    kept = fit_dsvrg(sc, numpy_to_blocks(sc, X, y, n_slices=2).cache(), params, [-1.0, 1.0], 6)
    assert kept.layout.startswith("2 input chunks kept")
    order = np.argsort(y, kind="stable")
    dealt = fit_dsvrg(sc, numpy_to_blocks(sc, X[order], y[order], n_slices=2), params,
                      [-1.0, 1.0], 6)
    assert dealt.layout.startswith("stratified dealing into 2")
    for fit in (kept, dealt):
        assert abs(fit.epochs[-1].objective - exact) <= 1e-4 * abs(exact)


# --- resident blocks: partitions' stacked rows kept in executor scratch files between jobs ---

def scratch_dirs(sc):
    """The resident stores present in the executors' local directories (as a task sees them)."""
    from pathlib import Path

    roots = set(sc.parallelize(range(2), 2).map(
        lambda _: __import__("os").environ["SPARK_LOCAL_DIRS"].split(",")[0]).collect())
    return sorted(path for root in roots for path in Path(root).glob("sodm-dsvrg-*"))


@pytest.mark.parametrize("layout", ["kept", "dealt", "sparse"])
def test_resident_blocks_give_the_same_w_as_reading_the_rdd(spark, linear_data, layout):
    X, y = linear_data
    sc = spark.sparkContext
    params = DSVRGParams(LAM, THETA, V, epochs=4, relative_change_tol=0.0, seed=2,
                         n_partitions=2 if layout == "dealt" else None)
    make = (lambda: csr_blocks(sc, X, y, 3)) if layout == "sparse" else \
        (lambda: numpy_to_blocks(sc, X, y, n_slices=3))
    plain = fit_dsvrg(sc, make(), DSVRGParams(**{**params.__dict__, "resident": False}),
                      [-1.0, 1.0], 12)
    resident = fit_dsvrg(sc, make(), params, [-1.0, 1.0], 12)
    assert (resident.layout.startswith("3 input chunks kept")) == (layout != "dealt")
    assert np.array_equal(resident.w, plain.w)
    assert plain.resident_hits == 0
    # local mode: every task after a partition's first read finds its block
    assert resident.resident_hits >= 4 * 4 and resident.resident_misses == 0
    assert scratch_dirs(sc) == []  # the fit's files are gone


def test_a_block_resident_for_another_fit_or_with_other_rows_is_not_used(tmp_path,
                                                                         monkeypatch):
    from sodm_spark.spark.dsvrg import blocks as dsvrg

    monkeypatch.setattr(dsvrg, "_resident_root", lambda: str(tmp_path))
    rng = np.random.default_rng(0)
    X1, X2 = rng.normal(size=(50, 4)), rng.normal(size=(50, 4))
    y = np.where(rng.random(50) < 0.5, 1.0, -1.0)
    fp1, fp2 = dsvrg._fingerprint(X1, y), dsvrg._fingerprint(X2, y)
    where = dsvrg._write_resident("fit-a", 0, X1, y, fp1)
    assert where == str(tmp_path / "sodm-dsvrg-fit-a" / "0")
    X, y_read = dsvrg._open_block(where, fp1)
    assert np.array_equal(X, X1) and np.array_equal(y_read, y)
    assert dsvrg._open_block(str(tmp_path / "sodm-dsvrg-fit-b" / "0"), fp1) is None  # other fit
    assert dsvrg._open_block(where, fp2) is None  # other rows under the same name
    assert dsvrg._open_block(where, None) is None  # nothing recorded yet
    assert dsvrg._open_block(None, fp1) is None  # never written (no space, say)
    assert dsvrg._write_resident("fit-a", 0, X2, y, fp2) == where  # a stale block is replaced
    assert np.array_equal(dsvrg._open_block(where, fp2)[0], X2)
    S = sp.csr_matrix(X1 * (X1 > 0.5))
    sparse_where = dsvrg._write_resident("fit-a", 1, S, y, dsvrg._fingerprint(S, y))
    read = dsvrg._open_block(sparse_where, dsvrg._fingerprint(S, y))[0]
    assert sp.issparse(read) and (read != S).nnz == 0
    dsvrg._drop_resident(["fit-a"], [])
    assert not (tmp_path / "sodm-dsvrg-fit-a").exists()


def test_a_resident_block_changed_mid_fit_is_read_again_from_the_rdd(spark, linear_data):
    """A stale or damaged file fails its fingerprint: the partition is a miss, read from the
    persisted RDD (and made resident again), and w is the same as without resident blocks."""
    X, y = linear_data
    sc = spark.sparkContext
    params = DSVRGParams(LAM, THETA, V, epochs=4, relative_change_tol=0.0, seed=1)

    def spoil(entry):
        if entry.epoch == 1:
            for path in scratch_dirs(sc)[0].glob("*/X.npy"):
                block = np.load(path)
                np.save(path, block + 1.0)

    plain = fit_dsvrg(sc, numpy_to_blocks(sc, X, y, n_slices=2),
                      DSVRGParams(**{**params.__dict__, "resident": False}), [-1.0, 1.0], 12)
    spoiled = fit_dsvrg(sc, numpy_to_blocks(sc, X, y, n_slices=2), params, [-1.0, 1.0], 12,
                        on_epoch=spoil)
    assert spoiled.resident_misses == 2  # both partitions, once
    assert np.array_equal(spoiled.w, plain.w)


def test_turns_over_several_input_partitions_give_the_same_w(spark, linear_data):
    """Consecutive partitions resident on one executor take their turns in one Spark job (all
    of them in local mode): the hops, in the same order, and so w, are those of one job per
    partition (without resident blocks)."""
    X, y = linear_data
    sc = spark.sparkContext
    fits = [fit_dsvrg(sc, numpy_to_blocks(sc, X, y, n_slices=4).cache(),
                      DSVRGParams(LAM, THETA, V, epochs=3, relative_change_tol=0.0, n_partitions=n,
                                  resident=resident), [-1.0, 1.0], 12)
            for n, resident in ((4, True), (None, True), (None, False))]
    assert fits[1].layout == ("4 input chunks kept: each already holds every stratum in "
                              "its overall share; 1 turn per epoch")
    assert fits[2].layout.endswith("; 4 turns per epoch")
    assert np.array_equal(fits[0].w, fits[1].w) and np.array_equal(fits[1].w, fits[2].w)


def test_csr_blocks_without_zeros_are_solved_dense(engine):
    """A CSR block at least half full is stacked dense (core.sparse_rows.DENSE_FROM_DENSITY):
    the fit from CSR rows with no zeros is then the fit from the same dense rows, bit for bit."""
    from sodm_spark.core.sparse_rows import dense_if_full
    rng = np.random.default_rng(12)
    X = 1.0 + rng.random((400, 6))
    y = np.where(X @ rng.normal(size=6) > np.median(X @ rng.normal(size=6)), 1.0, -1.0)
    assert isinstance(dense_if_full(sp.csr_matrix(X)), np.ndarray)
    half_empty = sp.csr_matrix(X * (rng.random(X.shape) < 0.3))
    assert sp.issparse(dense_if_full(half_empty))
    sc = engine
    params = DSVRGParams(LAM, THETA, V, epochs=3, relative_change_tol=0.0, n_partitions=2)
    dense = fit_dsvrg(sc, numpy_to_blocks(sc, X, y, n_slices=2), params, [-1.0, 1.0], 6)
    sparse = fit_dsvrg(sc, csr_blocks(sc, X, y, n_slices=2), params, [-1.0, 1.0], 6)
    np.testing.assert_array_equal(sparse.w, dense.w)
    assert sparse.intercept == dense.intercept


def test_input_chunks_are_named_by_their_rows_not_by_where_spark_put_them():
    """Keys (seeds, round-robin order) follow the rows: the same blocks give the same keyed
    chunks whether Spark hands them over in one task or in several, in any order."""
    from sodm_spark.spark.dsvrg.blocks import CHUNK_BYTES, input_chunks as _input_chunks
    from sodm_spark.spark.io import Block

    rng = np.random.default_rng(0)
    rows_per_chunk = CHUNK_BYTES // (8 * 4)
    blocks = []
    for start, n in ((0, rows_per_chunk + 5), (10**6, 7), (2 * 10**6, 2 * rows_per_chunk)):
        blocks.append(Block(rng.random((n, 4)), rng.choice([3.0, 5.0], n),
                            np.arange(start, start + n, dtype=np.int64)))
    together = dict(_input_chunks(blocks, 5.0))
    apart = {}
    for block in reversed(blocks):
        apart.update(_input_chunks([block], 5.0))
    assert sorted(together) == sorted(apart) == [0, rows_per_chunk, 10**6, 2 * 10**6,
                                                 2 * 10**6 + rows_per_chunk]
    for key, (X, y, ids) in together.items():
        assert ids[0] == key and set(np.unique(y)) <= {-1.0, 1.0}
        np.testing.assert_array_equal(apart[key][0], X)
