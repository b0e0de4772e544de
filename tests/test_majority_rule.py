"""No levels for the majority class (sodm_spark.spark.sodm.global_step.search_found_only_majority
and the fit that follows it): when every searched point is within a standard error (and the
stop rule's least gain) of predicting the majority class on the validation slice, the levels
are not solved and the global step fits every training row instead."""
import numpy as np
import pytest

from sodm_spark.selection.metrics import Evaluation
from sodm_spark.spark.sodm.global_step import majority_judged, search_found_only_majority


def _labels(n=10_000, positives=0.2, seed=0):
    rng = np.random.default_rng(seed)
    return np.where(rng.random(n) < positives, 1.0, -1.0)


def _model_correct(labels, right_positives, wrong_negatives):
    """A model's correctness: the majority class (-1) everywhere but on ``right_positives``
    positive rows and ``wrong_negatives`` negative rows, which it calls positive."""
    correct = labels < 0
    positives, negatives = np.flatnonzero(labels > 0), np.flatnonzero(labels < 0)
    correct[positives[:right_positives]] = True
    correct[negatives[:wrong_negatives]] = False
    return correct


def test_points_that_learn_nothing_beyond_the_majority_class_skip_the_levels():
    labels = _labels()
    majority = majority_judged(_model_correct(labels, 0, 0), labels)
    assert np.array_equal(majority, labels < 0)
    # 17 more rows right than the majority class (the size of the gain seen on 2.4 million
    # flights: 0.8025 against 0.8008): a gain of 0.0017, below the least gain of 0.002
    points = [_model_correct(labels, 40, 23), _model_correct(labels, 10, 5),
              _model_correct(labels, 0, 0)]
    reason = search_found_only_majority(points, labels, confidence=1.0, min_improvement=0.002)
    assert reason is not None and "+0.0017" in reason and "3 points" in reason
    # one point that learns (80 rows more right, 0.8 points: 8 standard errors) keeps the levels
    learning = points + [_model_correct(labels, 100, 20)]
    assert search_found_only_majority(learning, labels, 1.0, 0.002) is None
    # a point above min_improvement but within a standard error also counts as nothing learned
    noisy = [_model_correct(labels, 600, 575)]  # +0.0025, standard error √1176/n = 0.0034
    assert search_found_only_majority(noisy, labels, 1.0, 0.002) is not None
    assert search_found_only_majority(noisy, labels, 0.5, 0.002) is None
    assert search_found_only_majority([], labels, 1.0, 0.002) is None


def test_the_rule_judges_by_the_fit_s_metric_and_weights():
    labels = _labels(2000, positives=0.3, seed=1)
    rng = np.random.default_rng(2)
    # scores that rank no class above the other: each class holds the values 0..9 alike
    uninformative = np.zeros(2000)
    for label in (-1.0, 1.0):
        rows = np.flatnonzero(labels == label)
        uninformative[rows] = np.arange(rows.size) % 10
    noise = Evaluation(uninformative, labels, metric="auc")
    # the majority class's constant scores: AUC 0.5, as the uninformative ones
    assert majority_judged(noise, labels).value == pytest.approx(0.5)
    assert noise.value == pytest.approx(0.5, abs=2e-3)
    assert search_found_only_majority([noise], labels, 1.0, 0.002) is not None
    informative = noise.with_scores(labels + rng.normal(size=2000))
    assert search_found_only_majority([noise, informative], labels, 1.0, 0.002) is None
    # with weights the weighted majority: the positives weigh 3, so +1 is predicted
    weights = np.where(labels > 0, 3.0, 1.0)
    weighted = Evaluation(np.full(2000, -1.0), labels, weights=weights)
    assert np.all(majority_judged(weighted, labels).scores > 0)


def _imbalanced_noise(n, seed):
    """Rows whose labels (20% positive) do not depend on them: nothing to learn."""
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 4)), np.where(rng.random(n) < 0.2, 1.0, -1.0)


def _fit(sc, X, y, params, **options):
    from sodm_spark.spark.io import numpy_to_blocks
    from sodm_spark.spark.sodm.fit import FitOptions
    from sodm_spark.spark.train import Progress, Search, train

    plans = []
    trained = train(sc, numpy_to_blocks(sc, X, y), X.shape[1],
                    params, [-1.0, 1.0], search=Search.of_defaults(),
                    progress=Progress(on_plan=plans.append),
                    level_options=FitOptions(**options))
    return trained.fit, plans


def test_no_level_runs_when_the_search_finds_only_the_majority_class(engine, monkeypatch):
    from sodm_spark.spark.sodm import global_only, global_step
    from sodm_spark.spark.sodm.params import SODMParams

    X, y = _imbalanced_noise(6000, seed=3)
    params = SODMParams(levels=2, seed=1, global_centres=60)
    found = []
    monkeypatch.setattr(global_only, "search_found_only_majority",
                        lambda *a: found.append(global_step.search_found_only_majority(*a))
                        or found[-1])
    # the slice ranks the global model above the majority class (forced: on labels that are
    # noise it may not): the fit is the global step's, and no level was solved
    monkeypatch.setattr(global_step, "keeps_global", lambda before, after: True)
    fit, plans = _fit(engine, X, y, params)
    assert found and found[-1] is not None and "over the majority class" in found[-1]
    assert fit.levels == [] and fit.best_level is None
    assert fit.stop_reason.startswith("no level solved: the search's")
    report = fit.global_step
    assert report["ran"] and report["kept"] and report["start"] == "α = 0 (no level ran)"
    assert report["reason"].startswith("no level: ") and report["rows"] == fit.n_rows
    assert len(plans) == 1 and plans[0].budget_seconds >= 60.0  # the levels' predicted time
    assert fit.model.support_vectors.shape[0] == 60
    assert fit.model.calibration is not None  # calibrated on the slice as a level's would be


def test_the_levels_run_when_the_global_model_does_not_beat_the_majority(engine, monkeypatch):
    from sodm_spark.spark.sodm import global_step
    from sodm_spark.spark.sodm.params import SODMParams

    X, y = _imbalanced_noise(6000, seed=4)
    monkeypatch.setattr(global_step, "keeps_global", lambda before, after: False)
    fit, _ = _fit(engine, X, y, SODMParams(levels=2, seed=1, global_centres=60))
    assert fit.levels  # the levels ran after the global step's attempt
    report = fit.global_step
    assert report["reason"].startswith("no level: ") and not report["kept"]


def test_the_levels_run_where_the_search_learns(engine):
    from conftest import make_problem

    from sodm_spark.spark.sodm.params import SODMParams

    X, y = make_problem(m=6000, d=4, seed=5, noise=0.3)
    fit, plans = _fit(engine, X, y, SODMParams(levels=2, seed=1))
    assert fit.levels and not any(getattr(plan, "reason", "").startswith("no level")
                                  for plan in plans)
