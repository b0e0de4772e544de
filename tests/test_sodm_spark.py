"""SODM on Spark (local mode, small data) against the exact local solver and the paper's claims
(scale="none": the levels solve the rows as given, the exact reference's rows)."""
from dataclasses import replace

import numpy as np
import pytest

from sodm_spark.core.kernels import Kernel
from sodm_spark.partition import nearest_landmark
from sodm_spark.solvers import solve_odm_dual
from sodm_spark.solvers.dcd_settings import DCDSettings, ODMHyperparameters
from sodm_spark.spark.partitioning import partition_blocks, whole_partitions
from sodm_spark.spark.io import numpy_to_blocks
from sodm_spark.spark.sodm.fit import fit_sodm
from sodm_spark.spark.sodm.params import SODMParams

from conftest import make_problem

GAMMA = 0.2


@pytest.fixture(scope="module")
def data():
    X, y = make_problem(m=540, d=5, seed=21)
    X_test, y_test = make_problem(m=300, d=5, seed=22)
    return X, y, X_test, y_test


def exact(X, y, params, tol=1e-9):
    kernel = Kernel.create(params.kernel, params.gamma)
    return solve_odm_dual(X, y, kernel, ODMHyperparameters(params.lam, params.theta, params.v),
                          settings=DCDSettings(violation_tol=tol, dtype=np.float64))


def test_levels_zero_equals_the_exact_solver(engine, data):
    X, y, _, _ = data
    # float32 kernels: compared with the exact solver to 1e-6 (int16 entries are 1.5e-5 off)
    params = SODMParams(scale="none", auto_stop=False, gamma=GAMMA, lam=100.0, levels=0, tol=1e-9,
                        kernel_storage="float32")
    fit = fit_sodm(engine, numpy_to_blocks(engine, X, y), params,
                   classes=[-1.0, 1.0])
    reference = exact(X, y, params)
    assert len(fit.levels) == 1 and fit.levels[0].partitions == 1
    assert fit.levels[0].objective == pytest.approx(reference.objective, rel=1e-6)
    support = np.flatnonzero(reference.gamma)
    np.testing.assert_allclose(fit.model.coef[:, 0], (reference.gamma * y)[support], atol=1e-6)


def test_unscaled_rows_far_from_the_origin_are_solved_as_rows_near_it(engine, data):
    """The rbf kernel is translation invariant: rows shifted by 100 must give the float32 fit
    of the rows as they are (the exact float64 reference); the kernel's GEMM form in float32
    lost the distances' digits there and the dual diverged. The model takes the raw rows."""
    X, y, X_test, y_test = data
    params = SODMParams(scale="none", auto_stop=False, gamma=GAMMA, lam=1e5, levels=0,
                        tol=1e-6, kernel_storage="float32")
    fit = fit_sodm(engine, numpy_to_blocks(engine, X + 100.0, y),
                   params, classes=[-1.0, 1.0])
    reference = exact(X, y, params)
    assert fit.levels[0].objective == pytest.approx(reference.objective, rel=1e-4)
    near = reference.gamma * y
    kernel = Kernel.create("rbf", GAMMA)
    expected = kernel.block(X_test, X[near != 0]) @ near[near != 0]
    np.testing.assert_allclose(fit.model.decision_function(X_test + 100.0).ravel(), expected,
                               atol=1e-3 * np.abs(near).sum())


@pytest.mark.parametrize("partitioner", ["stratified", "random", "dip", "kmeans"])
def test_merging_to_one_partition_reaches_the_exact_objective(engine, data, partitioner):
    X, y, X_test, y_test = data
    params = SODMParams(scale="none", auto_stop=False, gamma=GAMMA, lam=100.0, levels=2, p=3, strata=6, tol=1e-9,
                        partitioner=partitioner, seed=5, kernel_storage="float32")
    fit = fit_sodm(engine, numpy_to_blocks(engine, X, y), params,
                   classes=[-1.0, 1.0], test=(X_test, y_test))
    reference = exact(X, y, params)
    assert [entry.level for entry in fit.levels] == [2, 1, 0]
    assert fit.levels[-1].partitions == 1 and fit.levels[-1].rows == 540
    assert fit.levels[-1].objective == pytest.approx(reference.objective, rel=1e-6)
    assert all(0.5 < entry.test_accuracy <= 1.0 for entry in fit.levels)


def test_cascade_last_level_is_the_exact_odm_of_the_rows_it_kept(engine, data, tmp_path):
    """Ca-ODM's level 0 solves only the support vectors passed up, so its reference is the
    exact ODM of those rows (read from the checkpoint of level 1), not of all rows."""
    X, y, _, _ = data
    params = SODMParams(scale="none", auto_stop=False, gamma=GAMMA, lam=5.0, theta=0.6, levels=2, p=3,
                        strata=6, tol=1e-9, partitioner="cascade", seed=5)
    fit = fit_sodm(engine, numpy_to_blocks(engine, X, y), params,
                   classes=[-1.0, 1.0], checkpoint_dir=tmp_path / "ckpt")
    assert [entry.level for entry in fit.levels] == [2, 1, 0]
    with np.load(tmp_path / "ckpt" / "level-1.npz") as level_1:  # every row's id and γ
        kept = np.sort(level_1["ids"][level_1["gamma"] != 0])
    assert 0 < kept.size < X.shape[0] and fit.levels[-1].rows == kept.size
    reference = exact(X[kept], y[kept], params)
    assert fit.levels[-1].objective == pytest.approx(reference.objective, rel=1e-6)


def test_warm_started_top_level_needs_fewer_sweeps_than_a_cold_start(engine):
    X, y = make_problem(m=1500, d=5, seed=3)
    params = SODMParams(scale="none", auto_stop=False, gamma=GAMMA, lam=1000.0, levels=2, p=3, strata=10, tol=1e-4)
    fit = fit_sodm(engine, numpy_to_blocks(engine, X, y), params,
                   classes=[-1.0, 1.0])
    cold = exact(X, y, params, tol=1e-4)
    assert fit.levels[-1].sweeps_max < cold.n_sweeps
    assert fit.levels[-1].objective == pytest.approx(cold.objective, rel=1e-5)


def test_stratified_partitions_hold_every_stratum_evenly(engine):
    X, y = make_problem(m=2000, d=4, seed=8)
    sc = engine
    params = SODMParams(scale="none", auto_stop=False, gamma=GAMMA, levels=2, p=3, strata=7, seed=1)
    kernel = Kernel.create("rbf", GAMMA)
    parts, landmarks, _ = partition_blocks(sc, numpy_to_blocks(sc, X, y, n_slices=5), kernel,
                                           n_rows=2000, n_partitions=9, dealing=params.partitioning)
    collected = dict(parts.mapPartitions(whole_partitions).map(lambda kv: (kv[0], kv[1][0])).collect())
    assert sorted(collected) == list(range(9)) and landmarks.shape == (7, 4)
    totals = np.bincount(nearest_landmark(X, landmarks, kernel), minlength=7)
    sizes = []
    for key, X_part in collected.items():
        counts = np.bincount(nearest_landmark(X_part, landmarks, kernel), minlength=7)
        assert np.all(np.abs(counts - totals / 9) < 1.0), (key, counts, totals / 9)
        sizes.append(X_part.shape[0])
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 2000
    # every row lands in exactly one partition
    rows = np.concatenate(list(collected.values()))
    assert np.unique(rows, axis=0).shape[0] == np.unique(X, axis=0).shape[0]


def test_same_seed_gives_bit_identical_models(spark, data):
    X, y, _, _ = data
    sc = spark.sparkContext
    params = SODMParams(scale="none", auto_stop=False, gamma=GAMMA, lam=100.0, levels=2, p=2, strata=4, seed=9)
    first, second = (fit_sodm(sc, numpy_to_blocks(sc, X, y), params, classes=[-1.0, 1.0])
                     for _ in range(2))
    assert np.array_equal(first.model.coef, second.model.coef)
    assert np.array_equal(first.model.support_vectors, second.model.support_vectors)


def test_cascade_moves_only_support_vectors_up(engine):
    X, y = make_problem(m=600, d=3, seed=11, noise=0.0)
    sc = engine
    params = SODMParams(scale="none", auto_stop=False, gamma=1.0, lam=5.0, theta=0.6, levels=1, p=3, partitioner="cascade")
    fit = fit_sodm(sc, numpy_to_blocks(sc, X, y), params, classes=[-1.0, 1.0])
    assert fit.levels[0].n_sv < 600  # some rows sit inside the margin band
    assert fit.levels[1].rows == fit.levels[0].n_sv


def test_stop_level_keeps_the_partial_model(engine, data):
    X, y, X_test, y_test = data
    sc = engine
    params = SODMParams(scale="none", auto_stop=False, gamma=GAMMA, lam=100.0, levels=2, p=3, stop_level=1)
    fit = fit_sodm(sc, numpy_to_blocks(sc, X, y), params, classes=[-1.0, 1.0],
                   test=(X_test, y_test))
    assert [entry.level for entry in fit.levels] == [2, 1]
    predicted = fit.model.predict(X_test)
    assert np.mean(predicted == y_test) == pytest.approx(fit.levels[-1].test_accuracy)


def test_labels_other_than_plus_minus_one(engine, data):
    X, y, X_test, y_test = data
    sc = engine
    params = SODMParams(scale="none", auto_stop=False, gamma=GAMMA, lam=100.0, levels=1, p=2)
    reference = fit_sodm(sc, numpy_to_blocks(sc, X, y), params, classes=[-1.0, 1.0])
    fit = fit_sodm(sc, numpy_to_blocks(sc, X, np.where(y > 0, 2.0, 1.0)), params,
                   classes=[1.0, 2.0], test=(X_test, np.where(y_test > 0, 2.0, 1.0)))
    np.testing.assert_array_equal(fit.model.coef, reference.model.coef)
    assert set(fit.model.predict(X_test)) <= {1.0, 2.0}


@pytest.mark.parametrize("params,match", [
    (dict(levels=6, p=3),
     r"729 partitions but the data have only 540 rows; use levels=5 \(--levels 5\)"),
    (dict(p=1), "p .* must be an integer >= 2"),
    (dict(levels=-1), "levels must be an integer >= 0"),
    (dict(partitioner="voronoi"), "known: stratified, random, kmeans, dip, cascade"),
    (dict(stop_level=4, levels=3), "stop_level"),
    (dict(landmark_candidates=0), "landmark_candidates must be a positive integer"),
])
def test_bad_parameters_are_refused(engine, data, params, match):
    X, y, _, _ = data
    sc = engine
    with pytest.raises(ValueError, match=match):
        fit_sodm(sc, numpy_to_blocks(sc, X, y), SODMParams(scale="none", auto_stop=False, gamma=GAMMA, **params),
                 classes=[-1.0, 1.0])


def test_one_class_is_refused(engine, data):
    X, y, _, _ = data
    sc = engine
    with pytest.raises(ValueError, match="at least two classes; the labels hold 1 class"):
        fit_sodm(sc, numpy_to_blocks(sc, X, np.ones_like(y)), SODMParams(), classes=[1.0])


def test_label_strata_deal_every_class_of_every_stratum_evenly(engine):
    X, y = make_problem(m=1800, d=4, seed=14)
    sc = engine
    params = SODMParams(scale="none", auto_stop=False, gamma=GAMMA, levels=2, p=3, strata=5, seed=2, label_strata=True)
    kernel = Kernel.create("rbf", GAMMA)
    parts, landmarks, _ = partition_blocks(sc, numpy_to_blocks(sc, X, y, n_slices=4), kernel,
                                           n_rows=1800, n_partitions=9, dealing=params.partitioning)
    code = lambda X_, y_: 2 * nearest_landmark(X_, landmarks, kernel) + (y_ > 0)
    totals = np.bincount(code(X, y), minlength=10)
    for X_part, y_part in parts.mapPartitions(whole_partitions).map(lambda kv: kv[1][:2]).collect():
        counts = np.bincount(code(X_part, y_part), minlength=10)
        assert np.all(np.abs(counts - totals / 9) < 1.0), (counts, totals / 9)


def test_resume_from_a_checkpoint_equals_the_uninterrupted_run(spark, tmp_path):
    from sodm_spark.spark.sodm.fit import fit_sodm
    from sodm_spark.spark.sodm.params import SODMParams

    X, y = make_problem(m=900, d=5, seed=31)
    sc = spark.sparkContext
    params = SODMParams(scale="none", auto_stop=False, gamma=0.3, lam=50.0, levels=2, p=3, strata=4, seed=5, tol=1e-4)
    whole = fit_sodm(sc, numpy_to_blocks(sc, X, y), params, [-1.0, 1.0])
    # a run that stops after level 2 (as if killed before level 1), then resumed
    first = fit_sodm(sc, numpy_to_blocks(sc, X, y), replace(params, stop_level=2), [-1.0, 1.0],
                     checkpoint_dir=tmp_path / "ckpt")
    assert [entry.level for entry in first.levels] == [2]
    with pytest.raises(ValueError,
                       match=r"already holds a checkpoint; pass resume=True \(--resume\)"):
        fit_sodm(sc, numpy_to_blocks(sc, X, y), params, [-1.0, 1.0],
                 checkpoint_dir=tmp_path / "ckpt")
    resumed = fit_sodm(sc, numpy_to_blocks(sc, X, y, n_slices=3), params, [-1.0, 1.0],
                       checkpoint_dir=tmp_path / "ckpt", resume=True)
    assert [entry.level for entry in resumed.levels] == [entry.level for entry in whole.levels]
    assert resumed.levels[0].objective == whole.levels[0].objective
    np.testing.assert_array_equal(resumed.model.support_vectors, whole.model.support_vectors)
    np.testing.assert_array_equal(resumed.model.coef, whole.model.coef)
    # a checkpoint of another fit is refused with what differs
    with pytest.raises(ValueError, match="belongs to another fit .*lam"):
        fit_sodm(sc, numpy_to_blocks(sc, X, y), replace(params, lam=60.0), [-1.0, 1.0],
                 checkpoint_dir=tmp_path / "ckpt", resume=True)
    # other rows of the same shape (one feature of one row changed), or the rows renumbered:
    # refused, naming the id range
    X_other = X.copy()
    X_other[700, 2] += 1e-9
    for blocks in (numpy_to_blocks(sc, X_other, y), numpy_to_blocks(sc, X, y, first_row_id=1)):
        with pytest.raises(ValueError, match=r"other data: the rows with ids in \[0, 65,536\)"):
            fit_sodm(sc, blocks, params, [-1.0, 1.0], checkpoint_dir=tmp_path / "ckpt",
                     resume=True)


def test_memory_budget_switches_to_on_demand_kernels_then_names_the_level_that_cannot_fit(spark):
    from sodm_spark.solvers.kernel_rows import solver_memory_mb
    from sodm_spark.spark.memory import MemoryBudgetError

    X, y = make_problem(m=1800, d=5, seed=33)
    sc = spark.sparkContext
    base = SODMParams(scale="none", auto_stop=False, gamma=0.3, lam=50.0, levels=1, p=3, strata=4, seed=1, tol=1e-3,
                      kernel_storage="float32")  # the budget below counts float32 kernels
    roomy = fit_sodm(sc, numpy_to_blocks(sc, X, y), base, [-1.0, 1.0])
    assert [entry.kernel for entry in roomy.levels] == ["cached", "cached"]
    # enough for the 600-row partitions' cached kernels, only blocks for the 1,800-row level
    budget = solver_memory_mb(1800, 5) + 1800 ** 2 * 4 / 2**20 / 2
    tight = fit_sodm(sc, numpy_to_blocks(sc, X, y), replace(base, memory_mb=budget),
                     [-1.0, 1.0])
    assert [entry.kernel for entry in tight.levels] == ["cached", "blocked"]
    assert tight.levels[-1].objective == pytest.approx(roomy.levels[-1].objective, rel=1e-4)
    # not even on-demand blocks fit level 0: refused before it runs, naming it
    too_small = (solver_memory_mb(600, 5) + solver_memory_mb(1800, 5)) / 2
    with pytest.raises(MemoryBudgetError, match=r"level 0: .*1800 rows .*--stop-level 1"):
        fit_sodm(sc, numpy_to_blocks(sc, X, y), replace(base, memory_mb=too_small),
                 [-1.0, 1.0])


def test_data_fingerprint_ignores_slicing_and_sees_every_change():
    from sodm_spark.spark.sodm.checkpoint import block_fingerprint, merge_fingerprints

    rng = np.random.default_rng(8)
    X, y = rng.normal(size=(300, 7)), np.where(rng.random(300) < 0.5, 1.0, -1.0)
    ids = np.arange(300, dtype=np.int64) + 65_400  # straddles two id ranges

    def fingerprint(X_, y_, ids_, cuts):
        parts = [block_fingerprint((X_[a:b], y_[a:b], ids_[a:b]))
                 for a, b in zip([0, *cuts], [*cuts, len(ids_)])]
        total = {}
        for part in reversed(parts):  # any order
            total = merge_fingerprints(total, part)
        return total

    whole = fingerprint(X, y, ids, [])
    assert sorted(whole) == [0, 1]
    assert fingerprint(X, y, ids, [17, 150, 151]) == whole
    shuffled = rng.permutation(300)
    assert fingerprint(X[shuffled], y[shuffled], ids[shuffled], [100]) == whole
    import scipy.sparse
    assert block_fingerprint((scipy.sparse.csr_matrix(X), y, ids)) == whole
    changed_feature, changed_label, changed_id = X.copy(), y.copy(), ids.copy()
    changed_feature[5, 3] = np.nextafter(changed_feature[5, 3], np.inf)  # one bit
    changed_label[299] *= -1
    changed_id[[3, 4]] = changed_id[[4, 3]]  # two rows swap their ids
    assert fingerprint(changed_feature, y, ids, [])[0] != whole[0]
    assert fingerprint(changed_feature, y, ids, [])[1] == whole[1]
    assert fingerprint(X, changed_label, ids, [])[1] != whole[1]
    assert fingerprint(X, y, changed_id, [])[0] != whole[0]
