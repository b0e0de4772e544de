"""Automatic stopping: the memory budget per level, the stop rule, the validation
slice, and the best level's model — pure rules against hand-computed values, then SODM fits
in local mode against runs that stop at a fixed level."""
from dataclasses import replace

import numpy as np
import pytest

from sodm_spark.core.resources import share_per_task
from sodm_spark.selection import stopping
from sodm_spark.selection.stopping import (REACHED_STOP_LEVEL, SMALL_IMPROVEMENT, TIME_BUDGET,
                                           LevelCost, StopRule, best_level, choose_level,
                                           holdout_mask, paired_gain, predict_seconds,
                                           predicted_gain, replay, validation_share)
from sodm_spark.solvers.kernel_rows import solver_memory_mb
from sodm_spark.spark.memory import (ExecutorMemory, MemoryBudgetError, executor_memory,
                                     level_cache_mb)
from sodm_spark.spark.io import numpy_to_blocks
from sodm_spark.spark.sodm.fit import fit_sodm
from sodm_spark.spark.sodm.params import SODMParams

from conftest import make_problem

# --- the budget rule ---------------------------------------------------------------------------


def test_a_level_shares_the_executor_memory_among_the_tasks_that_run_at_once():
    memory = ExecutorMemory(memory_mb=12000.0, cores=4)
    assert memory.task_mb(27) == 3000.0  # 27 partitions, 4 at a time
    assert memory.task_mb(4) == 3000.0
    assert memory.task_mb(2) == 6000.0  # two tasks: half each
    assert memory.task_mb(1) == 12000.0  # level 0: its one task has it all
    # Spark's per-worker cap (spark.executor.pyspark.memory / cores) is a hard limit
    capped = ExecutorMemory(memory_mb=12000.0, cores=4, per_worker_limit_mb=3000.0)
    assert capped.task_mb(1) == 3000.0
    # --memory-mb fixes the budget of every task
    assert ExecutorMemory(12000.0, 4, configured_task_mb=500.0).task_mb(1) == 500.0
    assert share_per_task(100.0, 0, 0) == 100.0  # degenerate counts never divide by zero


def test_local_mode_budget_is_the_ram_less_the_driver_heap_over_running_tasks(spark):
    from sodm_spark.core.resources import RESERVE_MB, physical_memory_mb, size_mb

    sc = spark.sparkContext
    memory = executor_memory(sc)
    heap = size_mb(sc.getConf().get("spark.driver.memory", "1g"))
    assert memory.cores == sc.defaultParallelism == 2
    assert memory.memory_mb == pytest.approx(physical_memory_mb() - heap - RESERVE_MB)
    assert memory.task_mb(1) == pytest.approx(2 * memory.task_mb(9))


def test_the_cache_is_what_the_budget_leaves_and_a_level_that_cannot_fit_is_named():
    need = solver_memory_mb(5000, 100)
    assert level_cache_mb(1, 5000, 100, need + 400.0, None, 3) == pytest.approx(400.0)
    assert level_cache_mb(1, 5000, 100, need + 400.0, 100.0, 3) == 100.0  # a user's cap wins
    with pytest.raises(MemoryBudgetError, match=r"level 1: .*5000 rows .*--stop-level 2"):
        level_cache_mb(1, 5000, 100, need - 1.0, None, 3)


# --- the stop rule on constructed validation curves ---------------------------------------------


def _levels(n, *wrong):
    """Per-row correctness of levels on n validation rows, each given by the rows it gets
    wrong."""
    correct = []
    for rows in wrong:
        right = np.ones(n, dtype=bool)
        right[list(rows)] = False
        correct.append(right)
    return correct


def test_the_paired_gain_counts_only_the_rows_that_changed():
    before, after = _levels(1000, range(0, 40), range(10, 40))  # 10 rows fixed, none broken
    gain, stderr = paired_gain(before, after)
    assert gain == pytest.approx(0.01) and stderr == pytest.approx(np.sqrt(11) / 1000)
    # unpaired, the same two accuracies (0.96, 0.97) on 1,000 rows each are 0.8 points apart
    # at one standard error; paired, the 10 changed rows put the gain 3 standard errors up
    unpaired = np.sqrt(0.96 * 0.04 / 1000 + 0.97 * 0.03 / 1000)
    assert gain < unpaired * 1.3 and gain > 3 * stderr
    # rows that flip both ways cancel in the gain and count in its error
    gain, stderr = paired_gain(*_levels(1000, range(0, 40), range(20, 60)))
    assert gain == 0.0 and stderr == pytest.approx(np.sqrt(41) / 1000)
    with pytest.raises(ValueError, match="same rows"):
        paired_gain(np.ones(3, bool), np.ones(4, bool))


def test_the_next_gain_shrinks_as_the_last_two_gains_did():
    # one merge measured: its gain times the ratio of the two levels' errors
    levels = _levels(1000, range(0, 60), range(0, 40))  # 6% -> 4% error
    gain, stderr = paired_gain(*levels)
    assert predicted_gain(levels) == pytest.approx(gain * 40 / 60)
    assert predicted_gain(levels, confidence=1.0) == pytest.approx(
        (gain + stderr) * 40 / 60)
    assert predicted_gain(levels[:1]) is None
    # two merges (+2 then +1 points): the last gain times their ratio, 1/2
    three = _levels(1000, range(0, 60), range(0, 40), range(0, 30))
    assert predicted_gain(three) == pytest.approx(0.01 * 0.5)
    assert predicted_gain(three, confidence=1.0) == pytest.approx(
        (0.01 + np.sqrt(11) / 1000) * 0.5)
    # a learning curve e = 2% + 8%·3^-level: every merge gains a third of the one before,
    # whatever the 2% no merge removes, and the prediction is the next merge's gain exactly
    curve = [0.02 + 0.08 * 3.0 ** -k for k in range(4)]  # 10%, 4.67%, 2.89%, 2.30%
    wrong = [range(0, round(10_000 * e)) for e in curve]
    measured = _levels(10_000, *wrong)
    assert predicted_gain(measured[:3]) == pytest.approx(curve[2] - curve[3], abs=2e-4)
    # a growing gain is not extrapolated beyond the last one; a merge after one that gained
    # nothing keeps its own gain
    assert predicted_gain(_levels(1000, range(0, 60), range(0, 55), range(0, 45))) == \
        pytest.approx(0.01)
    assert predicted_gain(_levels(1000, range(0, 60), range(0, 60), range(0, 50))) == \
        pytest.approx(0.01)
    # no merge can gain more than the error left on these rows
    assert predicted_gain(_levels(1000, range(0, 60), [])) == 0.0
    # a merge that lost accuracy predicts no gain
    assert predicted_gain(_levels(1000, range(0, 40), range(0, 60))) < 0
    assert predicted_gain(_levels(1000, range(0, 80), range(0, 40), range(0, 45))) == 0.0


@pytest.mark.parametrize("wrong, expected", [
    ([range(0, 80)], None),  # one level: no merge measured yet
    ([range(0, 80), range(0, 40)], None),  # +4 points: go on
    ([range(0, 80), range(0, 80)], SMALL_IMPROVEMENT),  # no row changed: at most 0.1 next
    ([range(0, 80), range(1, 80)], None),  # +0.1 on 1 row: (0.1 + 0.14) × 79/80 ≥ 0.2
    # +0.1 then nothing: a mean of 0.05 ± 0.09 points
    ([range(0, 80), range(1, 80), range(1, 80)], SMALL_IMPROVEMENT),
    # a merge that lost 0.5 points after one that gained 4: the gains stopped (even one
    # standard error up, the last merge lost), so the next one is not expected to gain
    ([range(0, 80), range(0, 40), range(0, 45)], SMALL_IMPROVEMENT),
    # +4 then +0.5 points: the next merge 1/8 of that, 0.06 (0.1 one standard error up)
    ([range(0, 80), range(0, 40), range(0, 35)], SMALL_IMPROVEMENT),
    ([range(0, 80), range(0, 40), range(0, 40), range(0, 45)], SMALL_IMPROVEMENT),
    ([range(0, 80), range(0, 40), range(0, 30)], None),  # +1 point: go on
    ([range(0, 80), range(0, 2), range(0, 1)], SMALL_IMPROVEMENT),  # 0.1 points left to gain
])
def test_the_stop_rule_on_constructed_levels(wrong, expected):
    rule = StopRule(min_improvement=0.002)
    assert rule.reason_to_stop(_levels(1000, *wrong), elapsed=1.0, next_seconds=1.0) == expected


def test_a_higher_confidence_runs_more_levels():
    levels = _levels(1000, range(0, 80), range(0, 80))  # no row changed
    assert StopRule(confidence=1.0).reason_to_stop(levels, 1.0, 1.0) == SMALL_IMPROVEMENT
    assert StopRule(confidence=3.0).reason_to_stop(levels, 1.0, 1.0) is None
    with pytest.raises(ValueError, match="confidence"):
        StopRule(confidence=-1.0).validate()


def test_the_time_budget_counts_the_predicted_next_level():
    rule = StopRule(min_improvement=None, time_budget=100.0)
    levels = _levels(100, range(0, 50), range(0, 60))
    assert rule.reason_to_stop(levels, elapsed=60.0, next_seconds=39.0) is None
    assert rule.reason_to_stop(levels, elapsed=60.0, next_seconds=41.0) == TIME_BUDGET
    assert rule.reason_to_stop(levels[:1], elapsed=60.0, next_seconds=None) is None
    with pytest.raises(ValueError, match="min_improvement must be >= 0"):
        StopRule(min_improvement=-0.1).validate()
    with pytest.raises(ValueError, match="time_budget must be a positive"):
        StopRule(time_budget=0.0).validate()


def test_a_level_cheaper_than_a_quarter_of_the_time_so_far_is_never_skipped():
    rule = StopRule(min_improvement=0.002)
    levels = _levels(1000, range(0, 80), range(0, 80))  # no row changed: at most 0.1 next
    assert rule.reason_to_stop(levels, elapsed=8.0, next_seconds=1.9) is None
    assert rule.reason_to_stop(levels, elapsed=8.0, next_seconds=2.1) == SMALL_IMPROVEMENT
    assert rule.reason_to_stop(levels, elapsed=8.0, next_seconds=None) == SMALL_IMPROVEMENT
    # the time budget still binds a cheap level
    assert StopRule(time_budget=9.0).reason_to_stop(levels, 8.0, 1.9) == TIME_BUDGET


def test_a_level_cheap_against_the_whole_command_is_never_skipped():
    """The reported case: 5.2 s of training after 20 s of start-up and reading, the next level
    predicted 2.1 s. Against the whole command (25.2 s) it is cheap and runs; against the
    fit's 5.2 s alone it is not, and the rule would stop for the small expected gain."""
    rule = StopRule(min_improvement=0.002)
    levels = _levels(1000, range(0, 80), range(0, 80))  # no row changed: at most 0.1 next
    assert rule.reason_to_stop(levels, elapsed=5.2, next_seconds=2.1, before_fit=20.0) is None
    assert rule.reason_to_stop(levels, elapsed=5.2, next_seconds=2.1) == SMALL_IMPROVEMENT
    assert rule.reason_to_stop(levels, 5.2, 2.1, before_fit=0.0) == SMALL_IMPROVEMENT
    # the share is of the whole: 2.1 s is cheap from 8.4 s of command on, not before
    assert rule.reason_to_stop(levels, 5.2, 2.1, before_fit=3.3) is None
    assert rule.reason_to_stop(levels, 5.2, 2.1, before_fit=3.1) == SMALL_IMPROVEMENT
    # the time budget bounds the training alone: the command's seconds do not count
    assert StopRule(time_budget=8.0).reason_to_stop(levels, 5.2, 2.1, before_fit=20.0) is None
    assert StopRule(time_budget=7.0).reason_to_stop(levels, 5.2, 2.1, before_fit=20.0) == \
        TIME_BUDGET


def test_the_seconds_before_a_fit_count_only_for_a_fit_in_a_command():
    from types import SimpleNamespace

    from sodm_spark.spark.sodm.levels import before_fit

    now = 1_000_000.0
    assert stopping.seconds_before_fit(now - 20.0, now) == pytest.approx(20.0)  # a job
    assert stopping.seconds_before_fit(None, now) == 0.0  # no command: SODMClassifier, a test
    # a notebook's process started hours before the fit: its own clock
    assert stopping.seconds_before_fit(now - 3 * 3600.0, now) == 0.0
    assert stopping.seconds_before_fit(now - stopping.LONGEST_LEAD_SECONDS, now) == \
        stopping.LONGEST_LEAD_SECONDS
    # a resumed fit's clock starts before the command (it counts the checkpointed levels)
    assert stopping.seconds_before_fit(now + 5.0, now) == 0.0
    assert before_fit(SimpleNamespace(command_started=now - 20.0, started=now)) == \
        pytest.approx(20.0)
    assert before_fit(SimpleNamespace(command_started=None, started=now)) == 0.0


def _replayed_records(before_fit_seconds):
    """Two levels that tie on the slice, level 0 predicted 2.1 s after 5.2 s of the fit."""
    records = []
    for level, elapsed, predicted in ((2, 2.0, 1.0), (1, 5.2, 1.5), (0, 7.0, 2.1)):
        record = {"level": level, "validation_wrong": list(range(80)), "elapsed": elapsed,
                  "predicted_seconds": predicted, "kernel": "cached", "partitions": 3 ** level,
                  "tasks": min(2, 3 ** level)}
        if before_fit_seconds is not None:
            record["before_fit_seconds"] = before_fit_seconds
        records.append(record)
    return records


def test_replay_counts_the_recorded_seconds_before_the_fit_and_old_records_as_before():
    rule = StopRule()
    # recorded by a job: level 0 is cheap against the 25.2 s of the command, and runs
    assert replay(_replayed_records(20.0), 1000, rule, cores=2)[0] == [2, 1, 0]
    # a record made before the field existed replays on the fit's seconds alone, as it did
    old = replay(_replayed_records(None), 1000, rule, cores=2)
    assert old[0] == [2, 1] and old[2] == SMALL_IMPROVEMENT
    assert replay(_replayed_records(0.0), 1000, rule, cores=2) == old  # a fit outside a job


def test_the_model_kept_weighs_every_validated_level_not_only_the_last_two():
    # levels 2, 1, 0 at 0.86, 0.84, 0.839 on 1,000 rows: level 2 beats both later ones by
    # 20+ rows, far beyond one standard error; the last two alone would keep level 1
    right = _levels(1000, range(0, 140), range(0, 160), range(0, 161))
    assert choose_level([2, 1, 0], right) == 2
    # a later level within one standard error of the best is kept (more merged)
    right = _levels(1000, range(0, 140), range(0, 160), range(0, 141))
    assert choose_level([2, 1, 0], right) == 0


@pytest.mark.parametrize("seed", range(20))
def test_the_model_kept_is_the_last_level_no_other_level_surely_beats(seed):
    # checked against the rule's definition pair by pair, on random correctness with levels
    # of different accuracies that share most of their mistakes
    rng = np.random.default_rng(seed)
    n, count = 500, int(rng.integers(1, 6))
    base = rng.random(n)
    right = [base + 0.15 * rng.random(n) > rng.uniform(0.1, 0.3) for _ in range(count)]
    levels = list(range(count, 0, -1))
    chosen = levels.index(choose_level(levels, right, confidence=1.0))

    def beats(a, b):  # level a's accuracy above level b's by more than one standard error
        gained = np.count_nonzero(right[a] & ~right[b])
        lost = np.count_nonzero(right[b] & ~right[a])
        return gained - lost > np.sqrt(gained + lost + 1.0)

    assert not any(beats(other, chosen) for other in range(count))
    for later in range(chosen + 1, count):
        assert any(beats(other, later) for other in range(count))


def test_the_model_kept_is_the_last_level_unless_the_one_before_is_surely_better():
    # 0.1 points worse (1 row): within one standard error, the more merged level stays
    assert choose_level([3, 2], _levels(1000, range(0, 40), range(0, 41))) == 2
    assert choose_level([3, 2], _levels(1000, range(0, 40), range(0, 30))) == 2
    # 1 point worse on 10 rows: the level before
    assert choose_level([3, 2], _levels(1000, range(0, 40), range(0, 50))) == 3
    assert choose_level([2, 1, 0], _levels(1000, range(0, 40), range(0, 30),
                                           range(0, 50))) == 1
    assert choose_level([4], _levels(10, [])) == 4
    with pytest.raises(ValueError):
        choose_level([], [])


def test_best_level_is_the_highest_validation_accuracy_the_later_on_ties():
    assert best_level([(3, 0.90), (2, 0.95), (1, 0.94)]) == 2
    assert best_level([(3, 0.90), (2, 0.95), (1, 0.95)]) == 1
    with pytest.raises(ValueError):
        best_level([])


def test_the_next_level_is_its_model_scaled_by_how_far_the_last_level_was_from_its_own():
    assert predict_seconds([], 12.0) is None
    # the last level took what the model said: the next takes what the model says
    assert predict_seconds([LevelCost(5.0, 5.0)], 12.0) == pytest.approx(12.0)
    # nine times its model (a loaded machine, rows that need more sweeps): three times
    assert predict_seconds([LevelCost(45.0, 5.0)], 12.0) == pytest.approx(36.0)
    assert predict_seconds([LevelCost(40.0, 5.0), LevelCost(5.0, 20.0)], 12.0) == \
        pytest.approx(6.0)  # the last level's


def test_the_validation_slice_is_ten_percent_and_ten_thousand_from_100_000_rows_on():
    assert validation_share(0.1, 10_000, 60_000) == pytest.approx(0.1)  # 6,000 rows
    for rows in (100_000, 600_000, 2_398_187, 10**8):
        assert validation_share(0.1, 10_000, rows) * rows == pytest.approx(10_000)
    assert validation_share(0.1, 500, 60_000) * 60_000 == pytest.approx(500)


def test_the_validation_rows_depend_on_the_row_id_and_seed_only():
    ids = np.arange(200_000)
    held = holdout_mask(ids, seed=3, fraction=0.1)
    assert abs(held.mean() - 0.1) < 0.004  # 0.1 ± 6 standard errors
    # the same answer row by row, whatever blocks the rows come in
    shuffled = np.random.default_rng(0).permutation(ids)
    np.testing.assert_array_equal(holdout_mask(shuffled, 3, 0.1), held[shuffled])
    assert (holdout_mask(ids, 4, 0.1) != held).mean() > 0.15  # another seed, other rows
    assert not np.array_equal(held[:1000], held[1000:2000])


# --- SODM fits ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def data():
    X, y = make_problem(m=1200, d=5, seed=51)
    X_val, y_val = make_problem(m=400, d=5, seed=52)
    return X, y, X_val, y_val


BASE = SODMParams(gamma=0.3, lam=50.0, levels=2, p=3, strata=4, seed=3, tol=1e-4)


def _same_model(a, b):
    np.testing.assert_array_equal(a.support_vectors, b.support_vectors)
    np.testing.assert_array_equal(a.coef, b.coef)


@pytest.mark.parametrize("flip", [False, True])
def test_the_model_returned_is_the_best_levels(engine, data, flip, monkeypatch):
    """A merge that cannot pay (min_improvement 1.0) stops after two levels; the model is the
    one a run stopped at the better of the two gives. Flipped validation labels make the
    better level the worse model, so both branches (last, previous) are exercised. (Level 0
    costs little beside the first fit of a session, which compiles the solver: the rule that
    runs a cheap level anyway is switched off, or the stop would depend on the clock.)"""
    monkeypatch.setattr(stopping, "CHEAP_LEVEL_SHARE", 0.0)
    X, y, X_val, y_val = data
    sc = engine
    validation = (X_val, -y_val if flip else y_val)
    fit = fit_sodm(sc, numpy_to_blocks(sc, X, y), replace(BASE, min_improvement=1.0),
                   [-1.0, 1.0], validation=validation)
    assert [entry.level for entry in fit.levels] == [2, 1]
    assert fit.stopped_at == 1 and fit.stop_reason == SMALL_IMPROVEMENT
    accuracies = [(entry.level, entry.validation_accuracy) for entry in fit.levels]
    right = [np.isin(np.arange(len(y_val)), e.validation_wrong, invert=True)
             for e in fit.levels]
    assert [np.mean(r) for r in right] == [a for _, a in accuracies]
    assert fit.best_level == choose_level([2, 1], right)
    # the accuracy recorded for the best level is the model's own on the validation rows
    chosen = dict(accuracies)[fit.best_level]
    predicted = np.where(fit.model.decision_function(X_val) > 0, 1.0, -1.0)
    assert np.mean(predicted == validation[1]) == pytest.approx(chosen, abs=1.5 / len(y_val))
    fixed = fit_sodm(sc, numpy_to_blocks(sc, X, y),
                     replace(BASE, auto_stop=False, stop_level=fit.best_level), [-1.0, 1.0])
    _same_model(fit.model, fixed.model)


@pytest.mark.parametrize("flip", [False, True])
def test_replaying_a_fit_of_every_level_decides_as_automatic_stopping(engine, data, flip,
                                                                     monkeypatch):
    """The rule replayed on the records of a fit that ran every level (the stopping
    benchmark's evaluation) stops and chooses as a fit with automatic stopping does. (The
    levels of these 1,200 rows cost less than a quarter of either fit so far, by seconds the two
    fits measure apart: the rule that runs a cheap level anyway is switched off, or the two
    would differ by the clock; its replay is checked on constructed records above.)"""
    monkeypatch.setattr(stopping, "CHEAP_LEVEL_SHARE", 0.0)
    X, y, X_val, y_val = data
    sc = engine
    validation = (X_val, -y_val if flip else y_val)
    stopped = fit_sodm(sc, numpy_to_blocks(sc, X, y), BASE, [-1.0, 1.0], validation=validation)
    every = fit_sodm(sc, numpy_to_blocks(sc, X, y), replace(BASE, auto_stop=False), [-1.0, 1.0],
                     validation=validation)
    assert [e.level for e in every.levels] == [2, 1, 0]
    solved, chosen, _ = replay([e.to_dict() for e in every.levels], len(y_val),
                               BASE.stop_rule, sc.defaultParallelism)
    assert solved == [e.level for e in stopped.levels] and chosen == stopped.best_level
    for mine, theirs in zip(stopped.levels, every.levels):
        assert mine.validation_wrong == theirs.validation_wrong


def test_a_fit_in_a_command_weighs_its_levels_against_the_whole_command(engine, data):
    """A job's fit (given the command's timeline) records the seconds the command ran before
    it and counts them: after 1,000 s of a command every level is cheap, so no merge is
    skipped for its small expected gain (min_improvement 1.0: none can pay). A fit given no
    timeline (SODMClassifier, a notebook) counts its own seconds only, and a command's start
    more than an hour before the fit (a process that ran other work first) is not counted."""
    import time

    from sodm_spark.core.timeline import Timeline

    X, y, X_val, y_val = data
    sc = engine
    params = replace(BASE, min_improvement=1.0)
    in_command = fit_sodm(sc, numpy_to_blocks(sc, X, y), params, [-1.0, 1.0],
                          validation=(X_val, y_val),
                          timeline=Timeline(time.perf_counter() - 1000.0))
    assert [e.level for e in in_command.levels] == [2, 1, 0]
    assert in_command.stop_reason == REACHED_STOP_LEVEL
    assert all(1000.0 <= e.before_fit_seconds < 1100.0 for e in in_command.levels)
    assert len({e.before_fit_seconds for e in in_command.levels}) == 1
    for timeline in (None, Timeline(time.perf_counter() - 2 * 3600.0)):
        alone = fit_sodm(sc, numpy_to_blocks(sc, X, y), params, [-1.0, 1.0],
                         validation=(X_val, y_val), timeline=timeline)
        assert all(e.before_fit_seconds == 0.0 for e in alone.levels)
        assert "before_fit_seconds" in alone.levels[0].to_dict()


def test_a_training_set_of_100_000_rows_or_more_holds_out_exactly_10_000(spark):
    from sodm_spark.selection.stopping import holdout_values
    from sodm_spark.spark.sodm.prepare import prepare_sodm

    sc = spark.sparkContext
    for n in (60_000, 100_000, 130_000):
        X, y = make_problem(m=n, d=3, seed=n)
        prepared = prepare_sodm(sc, numpy_to_blocks(sc, X, y),
                                SODMParams(levels=2, scale="none"), [-1.0, 1.0],
                                partition=False)
        X_val = prepared.validation_pair[0]
        if n < 100_000:  # 10% of the rows, a Bernoulli draw: 6,000 ± 77
            assert abs(X_val.shape[0] - 0.1 * n) < 5 * np.sqrt(0.1 * n)
            continue
        # the 10,000 rows of least hash value, whatever the blocks
        held = np.argsort(holdout_values(np.arange(n), 0))[:10_000]
        assert X_val.shape[0] == 10_000 and prepared.n_rows == n - 10_000
        np.testing.assert_array_equal(np.sort(X_val[:, 0]), np.sort(X[held, 0]))
        assert prepared.training.map(lambda b: b[0].shape[0]).sum() == n - 10_000
        prepared.labelled.unpersist()


def test_held_out_rows_are_left_out_of_training_and_scored(engine, data):
    X, y, _, _ = data
    sc = engine
    fit = fit_sodm(sc, numpy_to_blocks(sc, X, y), replace(BASE, min_improvement=0.0),
                   [-1.0, 1.0])
    held = holdout_mask(np.arange(X.shape[0]), BASE.seed, BASE.validation_fraction)
    assert fit.validation_rows == held.sum() and fit.n_rows == (~held).sum()
    assert all(entry.rows == (~held).sum() for entry in fit.levels)
    assert all(0.5 < entry.validation_accuracy <= 1.0 for entry in fit.levels)
    # what was scored is those rows: the returned model's accuracy on them is the best level's
    best = next(e for e in fit.levels if e.level == fit.best_level)
    predicted = np.where(fit.model.decision_function(X[held]) > 0, 1.0, -1.0)
    assert np.mean(predicted == y[held]) == pytest.approx(best.validation_accuracy,
                                                          abs=1.5 / held.sum())


def test_a_time_budget_stops_before_the_predicted_level(engine, data):
    X, y, X_val, y_val = data
    sc = engine
    fit = fit_sodm(sc, numpy_to_blocks(sc, X, y), replace(BASE, time_budget=1e-3), [-1.0, 1.0],
                   validation=(X_val, y_val))
    assert [entry.level for entry in fit.levels] == [2]
    assert fit.stop_reason == TIME_BUDGET and fit.best_level == 2


def test_no_auto_stop_runs_to_the_stop_level_and_returns_the_last(engine, data):
    X, y, _, _ = data
    sc = engine
    fit = fit_sodm(sc, numpy_to_blocks(sc, X, y),
                   replace(BASE, auto_stop=False, stop_level=1, min_improvement=1.0), [-1.0, 1.0])
    assert [entry.level for entry in fit.levels] == [2, 1]
    assert fit.stop_reason == REACHED_STOP_LEVEL and fit.best_level == 1
    assert fit.validation_rows == 0 and fit.n_rows == X.shape[0]
    assert all(entry.validation_accuracy is None for entry in fit.levels)


def test_a_next_level_over_the_memory_budget_ends_an_auto_stopped_run(engine, data):
    X, y, X_val, y_val = data
    sc = engine
    # room for the 400-row partitions' cached kernels, not even blocks for 1,200 rows
    budget = (solver_memory_mb(400, 5) + solver_memory_mb(1200, 5)) / 2
    params = replace(BASE, levels=1, memory_mb=budget, min_improvement=0.0)
    fit = fit_sodm(sc, numpy_to_blocks(sc, X, y), params, [-1.0, 1.0], validation=(X_val, y_val))
    assert [entry.level for entry in fit.levels] == [1]
    assert fit.stop_reason.startswith("next level does not fit the memory budget: level 0")
    with pytest.raises(MemoryBudgetError, match="level 0"):
        fit_sodm(sc, numpy_to_blocks(sc, X, y), replace(params, auto_stop=False), [-1.0, 1.0])


def test_resume_keeps_the_stopping_decisions(engine, data, tmp_path, monkeypatch):
    """Killed after level 1 was recorded (simulated by stop_level=1), the resumed fit makes
    the uninterrupted run's decision at once and returns its best level — read back from the
    checkpoint when that is the level before. Cheap levels are not run regardless of the
    gain: whether level 0 is cheap depends on the seconds each run has spent (a resumed run
    counts the interrupted one's), which differ between the runs on a loaded machine."""
    monkeypatch.setattr(stopping, "CHEAP_LEVEL_SHARE", 0.0)
    X, y, X_val, y_val = data
    sc = engine
    for flip in (False, True):
        validation = (X_val, -y_val if flip else y_val)
        params = replace(BASE, min_improvement=1.0)
        whole = fit_sodm(sc, numpy_to_blocks(sc, X, y), params, [-1.0, 1.0],
                         validation=validation)
        checkpoint = tmp_path / f"ckpt-{flip}"
        fit_sodm(sc, numpy_to_blocks(sc, X, y), replace(params, stop_level=1), [-1.0, 1.0],
                 validation=validation, checkpoint_dir=checkpoint)
        resumed = fit_sodm(sc, numpy_to_blocks(sc, X, y), params, [-1.0, 1.0],
                           validation=validation, checkpoint_dir=checkpoint, resume=True)
        assert [e.level for e in resumed.levels] == [e.level for e in whole.levels]
        assert (resumed.stopped_at, resumed.stop_reason, resumed.best_level) == \
            (whole.stopped_at, whole.stop_reason, whole.best_level)
        _same_model(resumed.model, whole.model)


def test_too_few_rows_left_after_the_hold_out_names_it(engine):
    X, y = make_problem(m=12, d=3, seed=5)
    sc = engine
    params = replace(BASE, levels=2, validation_fraction=0.9)
    with pytest.raises(ValueError, match=r"9 partitions but only \d rows are left after holding "
                                         r"out \d+ for validation; .*--no-auto-stop"):
        fit_sodm(sc, numpy_to_blocks(sc, X, y), params, [-1.0, 1.0])
    # a single level has nothing to choose between: nothing is held out
    single = fit_sodm(sc, numpy_to_blocks(sc, X, y), replace(BASE, levels=0), [-1.0, 1.0])
    assert single.validation_rows == 0 and single.n_rows == 12


def test_memory_readings_and_spark_size_strings():
    from sodm_spark.core.resources import available_memory_mb, physical_memory_mb, size_mb

    assert 0 < available_memory_mb() <= physical_memory_mb()
    assert [size_mb(text) for text in ("2g", "512m", "1024k", "100", "1t", "3gb")] == \
        [2048.0, 512.0, 1.0, 100.0, 1024.0 ** 2, 3072.0]


def test_the_rule_fires_with_the_defaults_where_merging_cannot_pay(engine, monkeypatch):
    """Algorithm 1, line 5 on data where it must fire by itself: two well separated blobs,
    where every level already classifies every validation row; no threshold is forced.
    (These levels of a few hundred rows cost less than a quarter of the fit so far: the rule
    that runs a cheap level anyway is switched off, or the stop would depend on the clock.)"""
    monkeypatch.setattr(stopping, "CHEAP_LEVEL_SHARE", 0.0)
    rng = np.random.default_rng(12)
    y = np.where(rng.random(2800) < 0.5, 1.0, -1.0)
    X = rng.normal(scale=0.5, size=(2800, 4)) + 3.0 * y[:, None]
    X, y, validation = X[:2400], y[:2400], (X[2400:], y[2400:])
    sc = engine
    params = SODMParams(gamma=0.3, lam=50.0, levels=3, p=2, strata=4, seed=3, tol=1e-4)
    assert params.auto_stop and params.stop_level == 0  # the defaults
    fit = fit_sodm(sc, numpy_to_blocks(sc, X, y), params, [-1.0, 1.0], validation=validation)
    assert [entry.level for entry in fit.levels] == [3, 2]
    assert [entry.validation_accuracy for entry in fit.levels] == [1.0, 1.0]
    assert fit.stop_reason == SMALL_IMPROVEMENT and fit.stopped_at == 2
    assert fit.best_level == 2  # ties go to the later level
    fixed = fit_sodm(sc, numpy_to_blocks(sc, X, y), replace(params, auto_stop=False,
                                                            stop_level=2), [-1.0, 1.0],
                     validation=validation)
    _same_model(fit.model, fixed.model)


# --- the evaluation the docs report ---------------------------------------------------------------


def test_the_stop_rule_replayed_on_the_stored_records_gives_the_documented_tables():
    """docs/results/stopping.json holds the every-level runs of benchmarks/bench_stopping.py;
    the default rule replayed on them must give the table of docs/benchmarks.md and the README
    (a change of the rule without new figures fails here)."""
    import json
    import re
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "benchmarks"))
    from bench_stopping import judge

    runs = json.loads((root / "docs" / "results" / "stopping.json").read_text())["runs"]
    judged = [judge(run, StopRule(), cores=2) for run in runs]
    by_set = {}
    for row in judged:
        by_set.setdefault(row["dataset"], []).append(row)
    assert len(by_set) >= 6 and all(len(rows) == 3 for rows in by_set.values())
    table = (root / "docs" / "benchmarks.md").read_text()
    names = {"fashion-mnist": "fashion-mnist, binary", "fashion-mnist-10": "fashion-mnist-10",
             "letter": "letter", "satellite": "satellite", "shuttle": "shuttle",
             "nonlinear": "sphere, generated"}
    for name, rows in by_set.items():
        line = next(line for line in table.splitlines() if line.startswith(f"| {names[name]}"))
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        assert cells[2] == ", ".join(str(r["chosen"]) for r in rows), line
        assert cells[3] == ", ".join(str(r["best"]) for r in rows), line
        assert float(cells[4]) == pytest.approx(max(r["lost_points"] for r in rows), abs=0.006)
        assert float(cells[5]) == pytest.approx(np.mean([r["lost_points"] for r in rows]),
                                                abs=6e-4)
        share = sum(r["seconds"] for r in rows) / sum(r["every_level_seconds"] for r in rows)
        assert float(cells[8]) == pytest.approx(share, abs=0.006), line
    lost = [r["lost_points"] for r in judged]
    share = sum(r["seconds"] for r in judged) / sum(r["every_level_seconds"] for r in judged)
    totals = f"| {max(lost):.2f} / {np.mean(lost):.3f} | {share:.2f} |"
    assert re.search(rf"\| all 18 runs \| \| {re.escape(totals[2:])}",
                     (root / "README.md").read_text())
    assert f"| all 18 runs | | | | {max(lost):.2f} | {np.mean(lost):.3f} |" in table


# --- another decision metric than accuracy (SODMParams.metric) ---------------------------------


def _imbalanced_levels():
    """Two levels on an 80/20 slice: level 2 predicts the majority class for every row (0.80
    accuracy) with a ranking at chance; level 1 ranks the rows well but puts
    its threshold low (0.66 accuracy)."""
    rng = np.random.default_rng(31)
    y = np.where(np.arange(1000) < 200, 1.0, -1.0)
    majority = -1.0 - 0.01 * rng.random(1000)
    ranked = (y > 0) * 2.5 + rng.normal(size=1000) * 0.6 - 0.1
    return y, majority, ranked


def test_accuracy_and_auc_keep_different_levels_where_they_disagree():
    from sodm_spark.selection.metrics import Evaluation

    y, majority, ranked = _imbalanced_levels()
    right = [np.where(s > 0, 1.0, -1.0) == y for s in (majority, ranked)]
    assert np.mean(right[0]) == 0.8 and np.mean(right[1]) < 0.75
    assert choose_level([2, 1], right) == 2  # accuracy: the majority-class level
    judged = [Evaluation(s, y, metric="auc") for s in (majority, ranked)]
    assert judged[0].value < 0.6 < 0.95 < judged[1].value
    assert choose_level([2, 1], judged) == 1
    # the look-ahead in AUC units: the gain times the error ratio, capped by the error left
    gain, stderr = stopping.paired_difference(*judged)
    ratio = (1 - judged[1].value) / (1 - judged[0].value)
    assert predicted_gain(judged, 1.0) == pytest.approx(
        min(1 - judged[1].value, ratio * (gain + stderr)))
    # the rule takes the levels judged by its own metric, and says so when given others
    rule = StopRule(metric="auc", min_improvement=0.5)
    assert rule.reason_to_stop(judged, 1.0, 1.0) == SMALL_IMPROVEMENT
    with pytest.raises(ValueError, match="judges by auc; the levels were judged by accuracy"):
        rule.reason_to_stop(right, 1.0, 1.0)
    with pytest.raises(ValueError, match="metric must be one of accuracy, auc, logloss, f1, "
                                         "balanced_accuracy, got 'roc'"):
        StopRule(metric="roc")


def test_levels_record_and_replay_their_decision_values_for_another_metric():
    y, majority, ranked = _imbalanced_levels()
    assert stopping.validation_fields(majority, y, "accuracy") == {}  # as fits always recorded
    records = []
    for level, scores in ((2, majority), (1, ranked)):
        right = np.where(scores > 0, 1.0, -1.0) == y
        records.append({"level": level, "validation_wrong": np.flatnonzero(~right).tolist(),
                        **stopping.validation_fields(scores, y, "auc", seed=3),
                        "elapsed": 10.0, "predicted_seconds": 100.0, "kernel": "cached",
                        "partitions": 3 ** level, "tasks": 2})
    from sklearn.metrics import roc_auc_score

    assert records[1]["validation_auc"] == pytest.approx(roc_auc_score(y, ranked), abs=1e-12)
    assert records[1]["validation_decisions"] == ranked.tolist()
    levels, judged = stopping.level_evaluations(records, 1000, "auc", y, seed=3)
    assert levels == [2, 1] and [j.value for j in judged] == [r["validation_auc"]
                                                                for r in records]
    rule = StopRule(metric="auc")
    assert replay(records, 1000, rule, cores=2, labels=y, seed=3)[1] == 1
    assert replay(records, 1000, StopRule(), cores=2)[1] == 2  # by accuracy, as before
    with pytest.raises(ValueError, match="level 2 recorded no validation decision values"):
        stopping.level_evaluations([{"level": 2, "validation_wrong": []}], 1000, "f1", y)


def test_an_unknown_metric_is_refused_in_one_line_listing_the_choices(capsys):
    from sodm_spark.jobs.train_args import parse_args

    with pytest.raises(ValueError, match="^metric must be one of accuracy, auc, logloss, f1, "
                                         "balanced_accuracy, got 'precision'.$"):
        SODMParams(metric="precision")
    with pytest.raises(SystemExit):
        parse_args(["--metric", "precision"])
    err = capsys.readouterr().err.strip().splitlines()
    assert "invalid choice: 'precision'" in err[-1]
    assert all(name in err[-1] for name in ("accuracy", "auc", "logloss", "f1",
                                            "balanced_accuracy"))
    assert parse_args(["--metric", "auc"]).metric == "auc"


def test_a_fit_judged_by_auc_records_decides_and_keeps_by_auc(engine, data, monkeypatch):
    """Every level records its decision values on the slice and their AUC (scikit-learn's of
    the same values); the stop rule is given those AUC evaluations; the level kept and the
    global step's keep decision are the AUC's."""
    from sklearn.metrics import roc_auc_score

    from sodm_spark.selection.metrics import Evaluation

    monkeypatch.setattr(stopping, "CHEAP_LEVEL_SHARE", 0.0)
    given = []
    original = StopRule.reason_to_stop

    def spy(self, judged, elapsed, next_seconds, before_fit=0.0):
        given.append((self.metric, list(judged)))
        return original(self, judged, elapsed, next_seconds, before_fit)

    monkeypatch.setattr(StopRule, "reason_to_stop", spy)
    X, y, X_val, y_val = data
    sc = engine
    params = replace(BASE, metric="auc", global_step="always", global_centres=200)
    fit = fit_sodm(sc, numpy_to_blocks(sc, X, y), params, [-1.0, 1.0],
                   validation=(X_val, y_val))
    assert len(fit.levels) >= 2 and given
    for entry in fit.levels:
        decisions = np.asarray(entry.validation_decisions)
        assert entry.validation_auc == pytest.approx(roc_auc_score(y_val, decisions), abs=1e-12)
        assert entry.validation_accuracy == np.mean(np.where(decisions > 0, 1.0, -1.0) == y_val)
        assert "validation_auc" in entry.to_dict()
    for metric, judged in given:  # what the rule decided from: the levels' AUC evaluations
        assert metric == "auc" and all(isinstance(j, Evaluation) for j in judged)
        assert [j.value for j in judged] == [e.validation_auc for e in fit.levels[:len(judged)]]
    judged = [Evaluation(np.asarray(e.validation_decisions), y_val, metric="auc", seed=BASE.seed)
              for e in fit.levels]
    assert fit.best_level == choose_level([e.level for e in fit.levels], judged, BASE.confidence)
    solved, chosen, _ = replay([e.to_dict() for e in fit.levels], len(y_val), params.stop_rule,
                               sc.defaultParallelism, labels=y_val, seed=BASE.seed)
    assert solved == [e.level for e in fit.levels] and chosen == fit.best_level
    report = fit.global_step
    assert report["ran"] and report["metric"] == "auc"
    best = next(e for e in fit.levels if e.level == fit.best_level)
    assert report["level_validation_auc"] == best.validation_auc
    assert report["kept"] == (report["validation_auc"] > report["level_validation_auc"])
    if report["kept"]:  # the model is the global step's: its own AUC is the one reported
        scores = fit.model.decision_function(X_val)
        assert report["validation_auc"] == pytest.approx(roc_auc_score(y_val, scores), abs=1e-6)
    else:  # the model is the level's: the decision values it recorded
        np.testing.assert_allclose(fit.model.decision_function(X_val), best.validation_decisions,
                                   rtol=0, atol=1e-4 * np.abs(best.validation_decisions).max())


def test_resume_judges_by_the_recorded_decision_values(engine, data, tmp_path, monkeypatch):
    monkeypatch.setattr(stopping, "CHEAP_LEVEL_SHARE", 0.0)  # as the test above: not by the clock
    X, y, X_val, y_val = data
    sc = engine
    params = replace(BASE, metric="logloss", min_improvement=1.0)
    whole = fit_sodm(sc, numpy_to_blocks(sc, X, y), params, [-1.0, 1.0],
                     validation=(X_val, y_val))
    fit_sodm(sc, numpy_to_blocks(sc, X, y), replace(params, stop_level=1), [-1.0, 1.0],
             validation=(X_val, y_val), checkpoint_dir=tmp_path)
    resumed = fit_sodm(sc, numpy_to_blocks(sc, X, y), params, [-1.0, 1.0],
                       validation=(X_val, y_val), checkpoint_dir=tmp_path, resume=True)
    assert [e.validation_logloss for e in resumed.levels] == \
        [e.validation_logloss for e in whole.levels]
    assert (resumed.stopped_at, resumed.stop_reason, resumed.best_level) == \
        (whole.stopped_at, whole.stop_reason, whole.best_level)
    _same_model(resumed.model, whole.model)
