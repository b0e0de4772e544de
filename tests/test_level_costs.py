"""The levels' cost model (spark/sodm/plan.py: prior_seconds before any level, the measured
levels scaling it after; docs/design.md §2.7): what the solver does costs what the model says,
and the stored measurements of benchmarks/bench_level_costs.py stay within a factor of 1.5 of
the model's predictions where docs/results/level_costs.json claims so."""
import json
import math
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from sodm_spark.selection.stopping import LevelCost, predict_seconds
from sodm_spark.spark.memory import ExecutorMemory
from sodm_spark.spark.sodm import plan
from sodm_spark.spark.sodm.params import SODMParams
from sodm_spark.spark.sodm.plan import LevelShape, modelled_seconds, prior_seconds

RESULT = Path(__file__).resolve().parents[1] / "docs" / "results" / "level_costs.json"
GEMM = 100e9  # a machine's float32 GEMM speed on one core, for the rules below


@pytest.fixture
def gemm(monkeypatch):
    def use(speed: float = GEMM) -> None:
        monkeypatch.setattr(plan, "gemm_flops_per_second", lambda: speed)
    use()
    return use


def test_the_sweeps_cost_the_rows_visits_not_the_whole_kernel_every_sweep(gemm):
    """Shrinking leaves few rows active: the sweeps cost visits × (a visit + reading a row),
    so at a fixed number of visits twice the rows cost about twice, not four times, as long
    as a visit costs more than reading its row; the kernel's fill grows with m²."""
    small = LevelShape(1, 2000, 10.0, 1)
    large = replace(small, rows=4000)
    sweeps = [modelled_seconds(s, 100.0) - modelled_seconds(s, 0.0) for s in (small, large)]
    read = 4000 * 2 * plan.PRIOR_SECONDS_PER_BYTE_READ
    assert sweeps[1] / sweeps[0] == pytest.approx(
        2.0 * (plan.PRIOR_SECONDS_PER_VISIT + read) /
        (plan.PRIOR_SECONDS_PER_VISIT + read / 2), rel=1e-9)
    assert sweeps[1] / sweeps[0] < 2.5
    # float32 entries are twice the bytes of int16 ones to fill and to read
    assert modelled_seconds(replace(large, storage="float32"), 100.0) > \
        modelled_seconds(large, 100.0)
    # scored rows and more visits cost more; the prior is the model at a solve's visits
    assert modelled_seconds(replace(large, scored_rows=10_000)) > modelled_seconds(large)
    assert modelled_seconds(large, 200.0) > modelled_seconds(large, 100.0)
    assert prior_seconds(large) == modelled_seconds(large, plan.PRIOR_ACTIVE_SWEEPS)


def test_the_constants_are_seconds_at_the_reference_speed_and_scale_with_the_measured_one(gemm):
    """A core half as fast now (a loaded machine, a slower CPU) makes every part of a level
    twice as long: the GEMM by its measured speed, the rest by the constants' scaling."""
    shape = LevelShape(9, 5000, 175.0, 2, scored_rows=10_000)
    gemm(plan.PRIOR_REFERENCE_GEMM_FLOPS)
    at_reference = prior_seconds(shape)
    gemm(plan.PRIOR_REFERENCE_GEMM_FLOPS / 2)
    assert prior_seconds(shape) == pytest.approx(2 * at_reference)


def test_the_prior_counts_the_rounds_of_tasks_and_the_threads_of_a_lone_task(gemm):
    one = LevelShape(1, 3000, 175.0, 2)
    level = plan.PRIOR_SECONDS_PER_LEVEL  # at the reference speed: the level's own cost
    assert prior_seconds(replace(one, partitions=9)) - level == pytest.approx(
        5 * (prior_seconds(one) - level))  # 9 partitions, 2 at a time
    # a lone task's GEMMs run on every core; the rest of its work on one
    alone = replace(one, tasks=1, threads=2)
    saved = 3000.0 ** 2 * 175.0 / GEMM / 2 + 10_000 * 3000.0 * 2 * 175.0 / GEMM / 2
    assert prior_seconds(replace(alone, scored_rows=10_000)) == pytest.approx(
        prior_seconds(replace(one, tasks=1, scored_rows=10_000)) - saved)
    # ten classes: plain sweeps of the float32 matrix for every class, and its fill in float32
    ten = replace(one, classes=10)
    assert modelled_seconds(ten, 100.0) - modelled_seconds(ten, 0.0) == pytest.approx(
        100.0 * 10 * 3000.0 ** 2 * plan.PRIOR_MULTICLASS_SECONDS_PER_ENTRY)
    assert prior_seconds(ten) == modelled_seconds(ten, plan.PRIOR_MULTICLASS_SWEEPS)


def test_a_measured_level_scales_the_next_levels_model(gemm):
    assert predict_seconds([], 10.0) is None
    assert predict_seconds([LevelCost(8.0, 8.0)], 10.0) == pytest.approx(10.0)
    # four times its model: the next level twice its own (the ratio's square root)
    assert predict_seconds([LevelCost(32.0, 8.0)], 10.0) == pytest.approx(20.0)
    assert predict_seconds([LevelCost(2.0, 8.0)], 10.0) == pytest.approx(5.0)
    assert predict_seconds([LevelCost(2.0, 8.0), LevelCost(8.0, 8.0)], 10.0) == \
        pytest.approx(10.0)  # the last level's ratio
    assert predict_seconds([LevelCost(3.0, 0.0)], 10.0) == pytest.approx(10.0)


def _measured(partitions, rows, seconds, sweeps):
    """A level's record as plan_level reads it (LevelStats' fields)."""
    return SimpleNamespace(partitions=partitions, max_rows=rows, rows=partitions * rows,
                           tasks=min(partitions, 2), kernel="cached", storage="int16",
                           sweeps_total=sweeps * partitions, sweeps_max=sweeps,
                           seconds=seconds, predicted_seconds=1.0)


def test_the_next_level_is_predicted_from_the_sweeps_the_last_one_needed(gemm):
    """A merged level's rows are visited about as often as its children's were (a warm start
    cuts the visits by WARM_VISITS): a first level that needed 500 sweeps predicts a dearer
    next level than one that needed 10, in the same seconds (the model gives the first more
    work, so its measured over modelled seconds are less, but only their square root
    counts)."""
    memory = ExecutorMemory(memory_mb=16000.0, cores=2)
    params = SODMParams(levels=3)
    sizes = np.full(9, 5991)

    def predicted(sweeps, seconds):
        return plan.plan_level(2, sizes, 175.0, params, memory,
                               [_measured(27, 1997, seconds, sweeps)], 2, 16_000).predicted_seconds

    assert predicted(500, 30.0) > 1.5 * predicted(10, 30.0)
    assert predicted(10, 30.0) > predicted(10, 10.0)
    first = _measured(27, 1997, 10.0, 100)
    plan_ = plan.plan_level(2, sizes, 175.0, params, memory, [first], 2, 16_000)
    shape = LevelShape(9, 5991, 175.0, 2, 1, "cached", plan_.cache_mb, "int16", 16_000, 0)
    last, visits = plan.measured_cost(first, shape, 2)
    assert visits == pytest.approx(plan.ACTIVE_SHARE * 100)
    assert plan_.predicted_seconds == pytest.approx(
        predict_seconds([last], modelled_seconds(shape, plan.WARM_VISITS * visits)))


def test_a_searched_fit_predicts_its_first_level_from_the_searchs_visits(gemm):
    """After a search the first level's prior takes the visits of a row the chosen point
    needed on the round's pieces nearest the level's partitions in size (log scale): counted
    visits where the search counted them, else its sweeps times the active share; C ≥ 3
    classes its joint sweeps times theirs. Without a search, the prior's."""
    rounds = (plan.SearchedSolve(2_500, 25.0, 43), plan.SearchedSolve(10_000, 9.0, 21))
    assert plan.searched_visits(rounds, 3_581) == 25.0
    assert plan.searched_visits(rounds, 6_000) == 9.0  # nearer 10,000 than 2,500 in ratio
    assert plan.searched_visits(rounds, 53_920) == 9.0
    assert plan.searched_visits((plan.SearchedSolve(2_500, None, 40),), 3_000) == \
        pytest.approx(plan.ACTIVE_SHARE * 40)
    assert plan.searched_visits(rounds, 3_581, classes=10) == \
        pytest.approx(plan.MULTICLASS_ACTIVE_SHARE * 43)
    assert plan.searched_visits((), 3_581) is None
    memory = ExecutorMemory(memory_mb=16000.0, cores=2)
    params, sizes = SODMParams(levels=4), np.full(81, 3581)
    searched = plan.plan_level(4, sizes, 36.0, params, memory, [], 2, 10_000, 0, rounds)
    given = plan.plan_level(4, sizes, 36.0, params, memory, [], 2, 10_000)
    shape = LevelShape(81, 3581, 36.0, 2, 1, "cached", searched.cache_mb, "int16", 10_000, 0)
    assert searched.searched_visits == 25.0 and given.searched_visits is None
    assert searched.predicted_seconds == pytest.approx(modelled_seconds(shape, 25.0))
    assert given.predicted_seconds == pytest.approx(prior_seconds(shape))
    # a measured level predicts the next one; the search's visits are the first level's only
    after = plan.plan_level(3, np.full(27, 10_743), 36.0, params, memory,
                            [_measured(81, 3581, 30.0, 47)], 2, 10_000, 0, rounds)
    assert after.searched_visits is None and not after.estimated


# --- the stored measurements -----------------------------------------------------------------


def _result():
    return json.loads(RESULT.read_text())


def _within(ratio: float, factor: float) -> bool:
    return abs(math.log(ratio)) <= math.log(factor)


def test_the_stored_predictions_are_this_models(gemm):
    """docs/results/level_costs.json was made with the constants here: the prior of every
    first level, recomputed from its stored shape at the stored GEMM speed, is the prediction
    the run printed (a change of a constant without new measurements fails here)."""
    result = _result()
    for run in result["runs"]:
        gemm(run["gemm_gflops_per_core"] * 1e9)  # what the run's fit measured
        first = run["levels"][0]
        assert prior_seconds(LevelShape(**first["shape"])) == pytest.approx(
            first["predicted_seconds"], rel=1e-6), run["case"]


def test_the_prior_is_within_the_claimed_factor_of_the_measured_first_levels(gemm):
    result = _result()
    claims = result["claims"]
    for run in result["runs"]:
        gemm(run["gemm_gflops_per_core"] * 1e9)
        first = run["levels"][0]
        ratio = prior_seconds(LevelShape(**first["shape"])) / first["seconds"]
        if run["case"] in claims["first_level_within_1.5"]:
            assert _within(ratio, 1.5), (run["case"], ratio)
        assert _within(ratio, claims["first_level_worst_factor"]), (run["case"], ratio)


def test_the_later_levels_are_within_the_claimed_factor_of_their_measured_seconds(gemm):
    """Every later level predicted again from the stored record of the level before it (its
    seconds and sweeps), as plan_level predicts it."""
    result = _result()
    claims, ratios = result["claims"], []
    for run in result["runs"]:
        gemm(run["gemm_gflops_per_core"] * 1e9)
        levels = run["levels"]
        for index in range(1, len(levels)):
            before, entry = levels[index - 1], levels[index]
            record = SimpleNamespace(
                partitions=before["shape"]["partitions"], max_rows=before["shape"]["rows"],
                rows=0, tasks=before["shape"]["tasks"], kernel=before["kernel"],
                storage=before["storage"], sweeps_total=before["sweeps_total"],
                sweeps_max=before["sweeps_max"], seconds=before["seconds"])
            shape = LevelShape(**entry["shape"])
            last, visits = plan.measured_cost(record, shape, 2)
            predicted = predict_seconds([last], modelled_seconds(shape,
                                                                 plan.WARM_VISITS * visits))
            assert predicted == pytest.approx(entry["predicted_seconds"], rel=1e-6)
            ratios.append(predicted / entry["seconds"])
            if run["case"] in claims["later_levels_within_1.5"]:
                assert _within(predicted / entry["seconds"], 1.5), (run["case"], entry)
    assert max(abs(math.log(r)) for r in ratios) <= math.log(claims["later_levels_worst_factor"])


def test_the_gemm_speed_is_the_fastest_probe(monkeypatch):
    """A core another process holds for a moment slows one product, not the machine: the
    speed the plan scales its constants by is the fastest of the probes, timed one by one."""
    durations = iter([0.40, 0.02, 0.35, 0.50, 0.03, 0.30, 0.45])
    clock = [0.0]

    def perf_counter():
        return clock[0]

    def product_done(*_):
        clock[0] += next(durations)

    class Timed:
        def __matmul__(self, other):
            return self

        @property
        def T(self):
            return self

    monkeypatch.setattr(plan.time, "perf_counter", perf_counter)
    monkeypatch.setattr(plan.time, "sleep", lambda seconds: None)
    calls = []
    real_random = np.random.default_rng

    class Rng:
        def __init__(self, seed):
            self.rng = real_random(seed)

        def random(self, shape, dtype):
            return Probe(calls)

    class Probe(Timed):
        def __init__(self, log):
            self.log = log

        def __matmul__(self, other):
            self.log.append(1)
            if len(self.log) > 1:  # the first product warms up, untimed
                product_done()
            return self

    monkeypatch.setattr(plan.np.random, "default_rng", Rng)
    speed = plan.measure_gemm()
    assert len(calls) == 1 + plan.GEMM_PROBES
    assert speed == pytest.approx(2 * 512 * 1024 * 784 / 0.02)
    assert plan.gemm_flops_per_second() == speed
