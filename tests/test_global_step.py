"""The global step of a SODM fit on Spark (sodm_spark.spark.sodm.global_step): the Nyström ODM
whose sums are added over the level's partitions is the brute-force optimum of the same rows
and centres, it is kept only where the validation slice ranks it higher, and the job shows
its plan and its outcome."""
import json
from dataclasses import replace

import numpy as np
import pytest
import scipy.optimize
from conftest import make_problem

from jobs import train_sodm
from sodm_spark.core.kernels import Kernel, kernel_matrix
from sodm_spark.models import nystroem_cg, nystroem_odm
from sodm_spark.spark.io import numpy_to_blocks
from sodm_spark.spark.sodm import global_step
from sodm_spark.spark.sodm.fit import fit_sodm
from sodm_spark.spark.sodm.params import SODMParams

# stop_level=1: the step runs after a level above 0 whatever the stop rule predicts level 0
# to cost (it never runs after level 0, whose one partition is the exact ODM of every row)
BASE = SODMParams(gamma=0.3, lam=50.0, levels=2, p=3, strata=4, seed=3, tol=1e-4,
                  scale="none", global_centres=40, stop_level=1)


def _brute_force(K, G, y, params):
    """F's minimum over α by L-BFGS from the whole float64 kernels (rows × centres ``K``,
    centres × centres ``G``), with ``objective(α)``, F itself, attached."""
    weight = nystroem_odm.loss_weight(params.lam, params.theta, len(y))

    def value_and_gradient(alpha):
        margins = y * (K @ alpha)
        below = np.maximum(0.0, 1.0 - params.theta - margins)
        above = np.maximum(0.0, margins - 1.0 - params.theta)
        value = 0.5 * alpha @ G @ alpha + weight * np.sum(below ** 2 + params.v * above ** 2)
        return value, G @ alpha + weight * K.T @ (y * (2 * params.v * above - 2 * below))

    found = scipy.optimize.minimize(value_and_gradient, np.zeros(G.shape[0]), jac=True,
                                    method="L-BFGS-B", options={"maxiter": 100_000,
                                                                "ftol": 1e-15, "gtol": 1e-11})
    found.objective = lambda alpha: value_and_gradient(alpha)[0]
    return found


@pytest.fixture(scope="module")
def data():
    X, y = make_problem(m=900, d=5, seed=61)
    X_val, y_val = make_problem(m=300, d=5, seed=62)
    return X, y, X_val, y_val


def test_the_spark_global_step_is_the_brute_force_nystroem_optimum(spark, data, monkeypatch):
    """The normal-matrix form on the driver (the place the plan takes for rows this few) and
    over the executors: the same bits, after level 2's 9 partitions (read as 8 blocks of
    consecutive ones, frame_rdd.consecutive_groups); the optimum of F by brute force."""
    X, y, X_val, y_val = data
    sc = spark.sparkContext
    monkeypatch.setattr(global_step, "keeps_global", lambda level, glob: True)
    params = replace(BASE, global_step="always", min_improvement=1.0, stop_level=2)
    planned = global_step.plan_global
    fit = fit_sodm(sc, numpy_to_blocks(sc, X, y), params, [-1.0, 1.0], validation=(X_val, y_val))
    assert fit.global_step["place"] == "driver" and fit.levels[-1].partitions == 9
    monkeypatch.setattr(global_step, "plan_global", lambda *arguments: replace(
        planned(*arguments), place="executors"))
    executors = fit_sodm(sc, numpy_to_blocks(sc, X, y), params, [-1.0, 1.0],
                         validation=(X_val, y_val))
    assert executors.global_step["place"] == "executors"
    np.testing.assert_array_equal(executors.model.coef, fit.model.coef)
    np.testing.assert_array_equal(executors.model.support_vectors, fit.model.support_vectors)
    report = fit.global_step
    assert report["ran"] and report["kept"] and report["centres"] == 40
    assert report["reason"] == "global_step='always'"
    # started from the level's model (its values at the centres, smoothed into their span):
    # it beats α = 0 on F here
    assert report["start"] == "the level's model in the centres' span"
    centres = fit.model.support_vectors.astype(np.float64)
    coef = fit.model.coef[:, 0]
    # every centre is a training row (as the chunks hold them: float32)
    rows = X.astype(np.float32).astype(np.float64)
    assert all(np.any(np.all(rows == c, axis=1)) for c in centres)
    kernel = Kernel("rbf", gamma=0.3)
    found = nystroem_odm.objective(kernel, centres, coef, rows, y, params.lam, params.theta,
                                   params.v)
    # the report's ½‖w‖² stands for αᵀK_ZZα: equal but for the rounding of K_ZZ's weakest kept
    # directions (eigenvalues down to 1e-10 of the largest)
    assert report["objective"] == pytest.approx(found, rel=1e-7)
    # the brute force: L-BFGS on F(α) of the same rows and centres
    K = kernel_matrix(kernel, rows, centres)
    reference = _brute_force(K, kernel_matrix(kernel, centres), y, params)
    assert found <= reference.fun * (1 + 1e-9)
    np.testing.assert_allclose(K @ coef, K @ reference.x, atol=1e-4 * np.max(np.abs(K @ coef)))
    # the model returned is the global step's: its validation accuracy is the report's
    scores = fit.model.decision_function(X_val)
    assert np.mean(np.where(scores > 0, 1.0, -1.0) == y_val) == \
        pytest.approx(report["validation_accuracy"])


def test_the_matrix_free_global_step_on_spark_is_the_brute_force_optimum(spark, data,
                                                                          monkeypatch):
    """The form the plan takes at thousands of centres (conjugate gradients on kernel products,
    each pass a Spark job over the rows as one block a task), forced here on 40 centres and
    over the executors (the driver is the place the plan takes for rows this few)."""
    X, y, X_val, y_val = data
    sc = spark.sparkContext
    monkeypatch.setattr(global_step, "keeps_global", lambda level, glob: True)
    planned = global_step.plan_global

    def matrix_free(*arguments):
        return replace(planned(*arguments), form="matrix-free", passes=200, place="executors")

    monkeypatch.setattr(global_step, "plan_global", matrix_free)
    params = replace(BASE, global_step="always", min_improvement=1.0)
    fit = fit_sodm(sc, numpy_to_blocks(sc, X, y), params, [-1.0, 1.0], validation=(X_val, y_val))
    assert fit.global_step["place"] == "executors"
    report = fit.global_step
    assert report["ran"] and report["kept"] and report["form"] == "matrix-free"
    assert report["passes"] <= 200 and len(report["cg_iterations"]) == report["newton_steps"]
    centres = fit.model.support_vectors.astype(np.float64)
    coef = fit.model.coef[:, 0]
    rows = X.astype(np.float32).astype(np.float64)
    kernel = Kernel("rbf", gamma=0.3)
    K = kernel_matrix(kernel, rows, centres)
    # the slice ranks every λ of the path higher here (keeps_global patched): the path walks
    # to its last λ, each from the previous one's α, and the model is that λ's optimum
    assert [step["lam"] for step in report["path"]] == \
        [params.lam * f for f in nystroem_cg.PATH_FACTORS]
    assert report["lam"] == params.lam * nystroem_cg.PATH_FACTORS[-1]
    assert report["passes"] == sum(step["passes"] for step in report["path"])
    # F with the penalty's jitter (nystroem_cg.centre_factor), from the whole float64 kernel
    reference = _brute_force(K, kernel_matrix(kernel, centres) + report["jitter"] * np.eye(40),
                             y, replace(params, lam=report["lam"]))
    # float32 kernel entries in the passes: F within their first-order effect of the minimum
    assert reference.objective(coef) == pytest.approx(reference.fun, rel=1e-6)
    assert report["objective"] == pytest.approx(reference.objective(coef), rel=1e-5)


def test_the_level_stays_unless_the_slice_ranks_the_global_model_higher(engine, data):
    X, y, X_val, y_val = data
    sc = engine
    params = replace(BASE, global_step="always", min_improvement=1.0)
    level_only = fit_sodm(sc, numpy_to_blocks(sc, X, y), replace(params, global_step="none"),
                          [-1.0, 1.0], validation=(X_val, y_val))
    assert level_only.global_step is None
    for labels in (y_val, -y_val):  # flipped labels turn the ranking round
        fit = fit_sodm(sc, numpy_to_blocks(sc, X, y), params, [-1.0, 1.0],
                       validation=(X_val, labels))
        report = fit.global_step
        assert report["ran"]
        kept = report["validation_accuracy"] > report["level_validation_accuracy"]
        assert report["kept"] == kept
        if kept:
            assert fit.model.support_vectors.shape[0] == 40
        else:  # the level's own model, as a fit without the step returns it
            np.testing.assert_array_equal(fit.model.coef, level_only.model.coef)


def test_the_global_step_does_not_run_for_more_classes_or_after_level_zero(engine):
    X, y = make_problem(m=300, d=4, seed=63)
    labels = np.where(y > 0, 1.0, 0.0) + (X[:, 2] > 1.0)  # three classes
    sc = engine
    fit = fit_sodm(sc, numpy_to_blocks(sc, X, labels),
                   replace(BASE, levels=1, stop_level=0, global_step="always"), [0.0, 1.0, 2.0])
    assert fit.global_step == {"reason": "not run: more than two classes", "ran": False}
    fit = fit_sodm(sc, numpy_to_blocks(sc, X, y), replace(BASE, levels=1, stop_level=0,
                                                          global_step="always",
                                                          min_improvement=0.0),
                   [-1.0, 1.0])
    assert fit.best_level == 0 and fit.global_step is None


def test_always_without_a_validation_slice_says_why_the_step_did_not_run(engine):
    """One level solved (levels = stop_level) holds out no validation slice: the step could
    never be kept, so it does not run, and the report says so instead of saying nothing."""
    X, y = make_problem(m=300, d=4, seed=64)
    fit = fit_sodm(engine, numpy_to_blocks(engine, X, y),
                   replace(BASE, levels=1, stop_level=1, global_step="always"), [-1.0, 1.0])
    assert fit.best_level == 1 and fit.validation_rows == 0
    assert not fit.global_step["ran"]
    assert fit.global_step["reason"].startswith("not run: no validation slice to judge it")
    # with validation rows the same fit runs the step
    X_val, y_val = make_problem(m=100, d=4, seed=65)
    fit = fit_sodm(engine, numpy_to_blocks(engine, X, y),
                   replace(BASE, levels=1, stop_level=1, global_step="always"), [-1.0, 1.0],
                   validation=(X_val, y_val))
    assert fit.global_step["ran"]


def test_the_job_shows_the_global_steps_plan_and_outcome(spark, tmp_path, capsys):
    metrics = tmp_path / "metrics.json"
    assert train_sodm.main(["--rows", "1500", "--levels", "2", "--stop-level", "1", "--gamma", "0.2",
                            "--lam", "1e3", "--global-step", "always", "--global-centres", "50",
                            "--metrics-out", str(metrics)]) == 0
    out = capsys.readouterr().out
    assert "-> global step (global_step='always'): Nyström ODM on " in out
    assert "x 50 centres x" in out and "global step: 50 centres, " in out
    report = json.loads(metrics.read_text())["global_step"]
    assert report["centres"] == 50 and report["passes"] >= 2
    assert "model" not in report


def test_the_estimator_reports_the_global_step_and_returns_its_model_when_kept(spark, data):
    from sodm_spark import SODMClassifier

    X, y, _, _ = data
    frame = spark.createDataFrame([(row.tolist(), float(label > 0)) for row, label in zip(X, y)],
                                  ["features", "label"])
    model = SODMClassifier(levels=2, stopLevel=1, gamma=0.3, lam=50.0, strata=4, seed=3,
                           globalStep="always", globalCentres=40).fit(frame)
    report = model.globalStepReport
    assert report["ran"] and report["centres"] == 40 and "model" not in report
    kept = report["validation_accuracy"] > report["level_validation_accuracy"]
    assert report["kept"] == kept
    assert (model.expansion.support_vectors.shape[0] == 40) == kept
    plain = SODMClassifier(levels=2, stopLevel=1, gamma=0.3, lam=50.0, strata=4, seed=3,
                           globalStep="none").fit(frame)
    assert plain.globalStepReport is None
