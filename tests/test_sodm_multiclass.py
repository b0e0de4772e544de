"""Multi-class SODM on Spark (local mode, small data) against the exact one-vs-rest solves.

Reference: the C binary exact solves (:func:`solve_odm_dual`, one class against the rest)
on all training rows; merged to one partition, SODM must reach each class's optimum
(scale="none": the levels solve the rows as given, the reference's rows).
"""
import numpy as np
import pytest

from sodm_spark.core.kernels import Kernel
from sodm_spark.solvers import solve_odm_dual
from sodm_spark.solvers.dcd_settings import DCDSettings, ODMHyperparameters
from sodm_spark.spark.io import numpy_to_blocks
from sodm_spark.spark.sodm.fit import fit_sodm
from sodm_spark.spark.sodm.params import SODMParams

GAMMA, LAM = 0.3, 100.0
LABELS = np.array([3.0, 7.0, 9.0, 11.0])


def four_classes(n_per_class=120, seed=0, rare=None):
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=1.5, size=(4, 3))
    sizes = [n_per_class] * 4 if rare is None else [n_per_class] * 3 + [rare]
    X = np.concatenate([c + rng.normal(size=(n, 3)) for c, n in zip(centres, sizes)])
    y = np.repeat(LABELS, sizes)
    order = rng.permutation(y.size)
    return X[order], y[order]


def one_vs_rest_optimum(X, y, params):
    kernel = Kernel.create("rbf", GAMMA)
    return [solve_odm_dual(X, np.where(y == label, 1.0, -1.0), kernel,
                           ODMHyperparameters(params.lam, params.theta, params.v),
                           settings=DCDSettings(violation_tol=1e-10, dtype=np.float64,
                                                mode="cached", max_iter=5000))
            for label in LABELS]


@pytest.mark.parametrize("partitioner, label_strata", [("stratified", False),
                                                        ("stratified", True), ("random", False)])
def test_merged_to_one_partition_every_class_reaches_its_optimum(engine, partitioner,
                                                                  label_strata):
    X_all, y_all = four_classes(n_per_class=180)
    X, y, X_test, y_test = X_all[:480], y_all[:480], X_all[480:], y_all[480:]
    params = SODMParams(scale="none", auto_stop=False, gamma=GAMMA, lam=LAM, levels=2, p=2, strata=4,
                        tol=1e-9, max_iter=5000, partitioner=partitioner,
                        label_strata=label_strata, seed=2)
    sc = engine
    fit = fit_sodm(sc, numpy_to_blocks(sc, X, y), params, classes=LABELS, test=(X_test, y_test))
    references = one_vs_rest_optimum(X, y, params)
    assert [entry.level for entry in fit.levels] == [2, 1, 0]
    assert fit.levels[-1].objective == pytest.approx(sum(r.objective for r in references),
                                                     rel=1e-6)
    model = fit.model
    assert model.coef.shape[1] == 4 and list(model.classes) == list(LABELS)
    scores = model.decision_function(X_test)
    kernel = Kernel.create("rbf", GAMMA)
    for c, reference in enumerate(references):
        y_pm = np.where(y == LABELS[c], 1.0, -1.0)
        expected = kernel.block(X_test, X) @ (reference.gamma * y_pm)
        np.testing.assert_allclose(scores[:, c], expected, rtol=0,
                                   atol=1e-6 * np.abs(expected).max())
    predicted = model.predict(X_test)
    assert set(np.unique(predicted)) <= set(LABELS)
    assert fit.levels[-1].test_accuracy == pytest.approx(np.mean(predicted == y_test))
    assert all(entry.test_accuracy > 0.6 for entry in fit.levels)


def test_a_class_missing_from_some_partitions_and_auto_stop(engine):
    """Nine rows of the last class: most of the 9 bottom partitions hold none of them."""
    X, y = four_classes(n_per_class=90, seed=3, rare=9)
    params = SODMParams(scale="none", gamma=GAMMA, lam=LAM, levels=2, p=3, strata=3, tol=1e-6, seed=4)
    sc = engine
    fit = fit_sodm(sc, numpy_to_blocks(sc, X, y), params, classes=LABELS[::-1])  # any order
    assert list(fit.model.classes) == list(LABELS)  # columns follow the sorted labels
    assert fit.levels[0].partitions == 9
    assert all(entry.validation_accuracy is not None for entry in fit.levels)
    assert fit.best_level in [entry.level for entry in fit.levels]
    assert fit.model.coef.shape[1] == 4
    assert np.mean(fit.model.predict(X) == y) > 0.7


def test_resumed_multi_class_run_equals_the_uninterrupted_one(engine, tmp_path):
    from dataclasses import replace

    X, y = four_classes(n_per_class=100, seed=5)
    sc = engine
    params = SODMParams(scale="none", auto_stop=False, gamma=GAMMA, lam=LAM, levels=2, p=2, strata=3, seed=6,
                        tol=1e-4)
    whole = fit_sodm(sc, numpy_to_blocks(sc, X, y), params, LABELS)
    first = fit_sodm(sc, numpy_to_blocks(sc, X, y), replace(params, stop_level=2), LABELS,
                     checkpoint_dir=tmp_path / "ckpt")
    assert [entry.level for entry in first.levels] == [2]
    resumed = fit_sodm(sc, numpy_to_blocks(sc, X, y, n_slices=3), params, LABELS,
                       checkpoint_dir=tmp_path / "ckpt", resume=True)
    assert [e.level for e in resumed.levels] == [e.level for e in whole.levels] == [2, 1, 0]
    np.testing.assert_array_equal(resumed.model.support_vectors, whole.model.support_vectors)
    np.testing.assert_array_equal(resumed.model.coef, whole.model.coef)
    assert resumed.model.coef.shape[1] == 4
