"""Which model of a level is written with max_sv="auto" (sodm_spark.selection.compression_choice,
sodm_spark.spark.sodm.written_model; docs/design.md §6, step 8): the smallest compression within
one standard error of the whole level on the validation slice, else the whole level."""
import math

import numpy as np
import pytest

from conftest import make_problem
from sodm_spark.selection.compression_choice import (Schedule, Tried, candidate_record,
                                                     choose_compression, compression_work,
                                                     difference, judged_like)
from sodm_spark.selection.metrics import Evaluation

N_ROWS = 1000


def _level_right(seed=0):
    """The whole level's per-row correctness on a slice of N_ROWS rows: 90% right."""
    return np.random.default_rng(seed).random(N_ROWS) < 0.9


def _changed(level, lost, gained, seed=1):
    """A compression's correctness: ``lost`` rows the level gets right now wrong, ``gained``
    rows it gets wrong now right (McNemar's c and b)."""
    rng = np.random.default_rng(seed)
    right, wrong = np.flatnonzero(level), np.flatnonzero(~level)
    changed = level.copy()
    changed[rng.choice(right, lost, replace=False)] = False
    changed[rng.choice(wrong, gained, replace=False)] = True
    return changed


def _within_by_hand(lost, gained):
    """McNemar's rule written out: the level above by (c − b)/n, standard error √(b + c + 1)/n."""
    return (lost - gained) / N_ROWS <= math.sqrt(lost + gained + 1) / N_ROWS


def _compressions(level, changes, seconds=None):
    """``compress(points)`` of a fake compression: ``changes[points]`` = (lost, gained) rows;
    each takes ``seconds[points]`` (1 s unless given) and does points² work."""
    calls = []

    def compress(points):
        calls.append(points)
        lost, gained = changes[points]
        spent = 1.0 if seconds is None else seconds[points]
        return Tried(points, _changed(level, lost, gained), spent, 0.0, float(points) ** 2)

    return compress, calls


def test_the_smallest_compression_within_one_standard_error_is_chosen():
    level = _level_right()
    changes = {8: (40, 0), 16: (10, 5), 32: (6, 3), 64: (0, 0)}
    # by hand: 8 and 16 points fall more than one standard error below the level, 32 do not
    assert [_within_by_hand(*changes[p]) for p in (8, 16, 32)] == [False, False, True]
    compress, calls = _compressions(level, changes)
    choice = choose_compression(level, Schedule(8, 10_000), compress, lambda p: float(p) ** 2)
    assert calls == [8, 16, 32]  # 64 points were never needed
    assert choice.chosen is choice.tried[-1] and choice.chosen.points == 32
    records = [candidate_record(level, tried) for tried in choice.tried]
    assert [r["accepted"] for r in records] == [False, False, True]
    for record, points in zip(records, (8, 16, 32)):
        lost, gained = changes[points]
        assert record["difference"] == pytest.approx((lost - gained) / N_ROWS)
        assert record["standard_error"] == pytest.approx(math.sqrt(lost + gained + 1) / N_ROWS)
        assert record["accuracy"] == pytest.approx(np.mean(level) - (lost - gained) / N_ROWS)
    whole = candidate_record(level, None, 5000, (120.0, True))
    assert whole == {"points": 5000, "compressed": False, "metric": "accuracy",
                     "accuracy": pytest.approx(np.mean(level)), "difference": 0.0,
                     "standard_error": 0.0, "accepted": True, "rows_per_second": 120.0,
                     "estimated": True}


def test_no_compression_within_one_standard_error_leaves_the_whole_model():
    level = _level_right()
    changes = {points: (30, 2) for points in (8, 16, 32, 64, 128)}
    compress, calls = _compressions(level, changes)
    # 100 support vectors: 64 points would pass half of them
    choice = choose_compression(level, Schedule(8, 100), compress, lambda p: float(p) ** 2)
    assert calls == [8, 16, 32] and choice.chosen is None
    assert "64 points would reach half the 100 support vectors" in choice.stopped


def test_the_doubling_stops_at_the_driver_s_memory_and_the_time_budget():
    level = _level_right()
    changes = {points: (30, 2) for points in (8, 16, 32, 64)}
    compress, calls = _compressions(level, changes)
    choice = choose_compression(level, Schedule(8, 10_000, most_points=20), compress,
                                lambda p: float(p) ** 2)
    assert calls == [8, 16] and "32 points' N x N matrices" in choice.stopped
    # 8 points took 1 s; 16 are predicted 1 s × 16²/8² = 4 s: past a budget of 4.5 s in all
    compress, calls = _compressions(level, changes, seconds={8: 1.0, 16: 3.0, 32: 0.0})
    choice = choose_compression(level, Schedule(8, 10_000, budget_seconds=4.5), compress,
                                lambda p: float(p) ** 2)
    assert calls == [8] and "predicted 4.0 s" in choice.stopped
    # a budget of 5 s lets them run (taking 3 s); 32 points are then predicted 3 s × 4 = 12 s
    compress, calls = _compressions(level, changes, seconds={8: 1.0, 16: 3.0, 32: 0.0})
    choice = choose_compression(level, Schedule(8, 10_000, budget_seconds=5.0), compress,
                                lambda p: float(p) ** 2)
    assert calls == [8, 16] and "32 points, predicted 12.0 s" in choice.stopped
    assert choice.chosen is None


def test_compressions_are_judged_by_the_fit_s_metric_as_the_level_was():
    rng = np.random.default_rng(5)
    labels = np.where(rng.random(800) < 0.5, 1.0, -1.0)
    level_scores = labels + rng.normal(scale=1.0, size=800)
    level = Evaluation(level_scores, labels, metric="auc")
    noisy = judged_like(level, level_scores + rng.normal(scale=2.0, size=800), labels,
                        np.array([-1.0, 1.0]))
    assert isinstance(noisy, Evaluation) and noisy.metric == "auc"
    gap, error, accepted = difference(level, noisy)
    assert gap == pytest.approx(level.value - noisy.value) and gap > 0
    assert accepted == (gap <= error)
    record = candidate_record(level, Tried(40, noisy, 1.0, 0.01, 1.0))
    assert record["value"] == pytest.approx(noisy.value) and record["metric"] == "auc"
    # accuracy judged as per-row correctness: the coded labels against the scores' signs
    right = judged_like(np.ones(800, dtype=bool), level_scores, labels, np.array([-1.0, 1.0]))
    np.testing.assert_array_equal(right, np.where(level_scores > 0, 1.0, -1.0) == labels)


def test_the_work_of_a_compression_grows_as_its_solve_does():
    # normal equations while rows · N² is small, conjugate gradients and N³ beyond
    assert compression_work(1000, 100, 10) == 1000 * 100 * 10 + 1000 * 100 ** 2
    big = compression_work(126_000, 16_000, 100) / compression_work(126_000, 8_000, 100)
    assert 6.0 < big < 8.0


# --- in a fit ----------------------------------------------------------------------------------

def _fit(engine, monkeypatch, first, max_sv="auto", budget_share=None):
    """A one-level fit of 1,200 rows (about 1,180 support vectors) judged on 600 validation
    rows, compressing above 300 support vectors from ``first`` points."""
    from sodm_spark.models import compression
    from sodm_spark.spark.io import numpy_to_blocks
    from sodm_spark.spark.sodm import fit as sodm_fit
    from sodm_spark.spark.sodm.fit import fit_sodm
    from sodm_spark.spark.sodm.params import SODMParams

    monkeypatch.setattr(compression, "AUTO_ABOVE", 300)
    monkeypatch.setattr(compression, "AUTO_POINTS", first)
    if budget_share is not None:
        monkeypatch.setattr(sodm_fit, "BUDGET_SHARE", budget_share)
    X, y = make_problem(m=1200, d=4, seed=8)
    X_test, y_test = make_problem(m=500, d=4, seed=9)
    sc = engine
    params = SODMParams(gamma=0.5, lam=100.0, levels=1, stop_level=1, global_step="none")
    fit = fit_sodm(sc, numpy_to_blocks(sc, X, y), params, [-1.0, 1.0], test=(X_test, y_test),
                   validation=make_problem(m=600, d=4, seed=30), max_sv=max_sv)
    return fit, (X_test, y_test)


def test_a_compression_clearly_worse_on_the_slice_leaves_the_whole_level(engine, monkeypatch,
                                                                          capsys):
    from sodm_spark.jobs.train_report import show_compression

    # two points, and no time for a second compression: only the first is judged
    fit, (X_test, y_test) = _fit(engine, monkeypatch, 2, budget_share=0.0)
    level = fit.levels[-1]
    report = fit.compression
    first, whole = report["candidates"]
    assert first["points"] == 2 and not first["accepted"]
    # the whole level is far above it: the difference is its accuracy's, well past its error
    assert first["difference"] == pytest.approx(level.validation_accuracy - first["accuracy"])
    assert first["difference"] > 3 * first["standard_error"] > 0
    assert whole == {**whole, "points": level.n_sv, "compressed": False, "accepted": True,
                     "accuracy": pytest.approx(level.validation_accuracy), "estimated": False}
    assert whole["rows_per_second"] > 0  # timed on the collected model
    assert report["compressed"] is False and report["chosen"]["compressed"] is False
    assert "would take the compressions past" in report["chosen"]["reason"]
    # the model written is the whole level: its support vectors, its own test accuracy
    assert fit.model.support_vectors.shape[0] == level.n_sv == report["support_vectors_after"]
    assert level.written_points == level.n_sv
    assert fit.test_accuracy == level.test_accuracy
    assert fit.test_accuracy == pytest.approx(np.mean(fit.model.predict(X_test) == y_test),
                                              abs=1 / len(y_test))
    assert "test" not in report and "validation" not in report  # nothing compressed to compare
    show_compression(report)
    out = capsys.readouterr().out
    assert f"the model written: the whole level, {level.n_sv:,} support vectors" in out
    assert "compressed " not in out


def test_the_smallest_accepted_compression_is_written(engine, monkeypatch):
    fit, (X_test, y_test) = _fit(engine, monkeypatch, 2)
    level = fit.levels[-1]
    report = fit.compression
    *tried, whole = report["candidates"]
    points = [candidate["points"] for candidate in tried]
    assert points == [2 * 2 ** k for k in range(len(points))]  # doubling from 2
    assert [c["accepted"] for c in tried] == [False] * (len(tried) - 1) + [True]
    for candidate in tried:  # accepted exactly when within one standard error
        assert candidate["accepted"] == (candidate["difference"] <= candidate["standard_error"])
        assert candidate["difference"] == pytest.approx(
            level.validation_accuracy - candidate["accuracy"])
    assert whole["estimated"] is True and whole["rows_per_second"] > 0
    assert report["compressed"] is True and report["chosen"]["points"] == points[-1]
    assert fit.model.support_vectors.shape[0] == points[-1] == report["support_vectors_after"]
    assert level.written_points == points[-1]
    assert report["test"]["accuracy_after"] == fit.test_accuracy == \
        np.mean(fit.model.predict(X_test) == y_test)
    assert report["validation"]["accuracy_after"] == pytest.approx(tried[-1]["accuracy"])


def test_max_sv_n_keeps_the_points_asked_for_and_reports_their_difference(engine, monkeypatch):
    fit, _ = _fit(engine, monkeypatch, 2, max_sv=2)
    (asked, whole) = fit.compression["candidates"]
    assert asked["points"] == 2 and not asked["accepted"]  # judged, and written all the same
    assert fit.compression["compressed"] is True and fit.model.support_vectors.shape[0] == 2
    assert fit.compression["chosen"]["reason"] == "max_sv=2 as asked"
