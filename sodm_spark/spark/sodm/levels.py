"""The levels of a SODM fit, one stage each (SODM paper, Algorithm 1; docs/design.md §2.4, §2.7
and §6, step 6).

:func:`~.fit.fit_sodm` starts from the top level solved (:func:`first_level`) or from the last
level a checkpoint holds (:func:`restored_levels`); :func:`run_levels` then repeats one loop
until a stop reason: decide (:func:`next_step`: Algorithm 1's line 5, ``stop_level``, the
memory budget, automatic stopping), merge (:func:`merged`: every p partitions into one, γ
scaled for the warm start, §2.5) and solve (:func:`solved_level`: every partition in its task,
the level judged on the validation slice, kept while it may still be chosen, checkpointed). What
every level reads is one :class:`LevelRun`; what the fit holds after a level is one
:class:`LevelsSoFar`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, NamedTuple

import numpy as np

from ...core.errors import InputError
from ...core.kernels import Kernel
from ...core.labels import accuracy_of_scores, correct_rows
from ...core.sparse_rows import stack_rows
from ...selection.stopping import (NEXT_LEVEL_BLOCKED, REACHED_STOP_LEVEL, WARM_START_OPTIMAL,
                                   level_evaluations, next_level_blocked, seconds_before_fit,
                                   unbeaten_levels, validation_fields)
from ..engine import map_with_reports
from ..memory import MemoryBudgetError
from ..engine import PERSIST
from .checkpoint import LevelCheckpoint, assemble_partition, deal_by_layout
from .level_model import LocalFit
from .params import LevelPlan, LevelStats, SODMParams
from .plan import plan_level
from .tasks import (LevelTaskSettings, PartitionStats, checkpoint_layout, merge_key,
                    solve_partitions)

if TYPE_CHECKING:
    from pyspark import RDD, Broadcast


@dataclass(frozen=True)
class LevelScoring:
    """The rows every level's tasks score while their partitions are at hand (docs/design.md
    §2.4, §2.7): the validation slice, then the test rows where every level is scored."""

    rows: Broadcast | None  # float32: the validation rows, then the test rows; None: no rows
    validation: tuple | None  # (X, coded y) of the validation slice
    validation_weights: np.ndarray | None  # each validation row's weight; None: unweighted
    test_labels: np.ndarray | None  # coded y of the test rows; None: not scored every level
    coded: np.ndarray  # the coded classes those labels hold (±1, or class numbers)

    @property
    def n_validation(self) -> int:
        return 0 if self.validation is None else len(self.validation[1])

    @property
    def n_scored(self) -> int:
        """The rows every level's tasks score: the validation slice's and the test rows'."""
        return self.n_validation + (0 if self.test_labels is None else len(self.test_labels))


@dataclass(frozen=True)
class LevelRun:
    """What every level of one fit reads, built once by :func:`~.fit.fit_sodm`."""

    params: SODMParams  # with the levels the preparation resolved
    kernel: Kernel
    task_settings: LevelTaskSettings  # each level's plan sets its kernel cache
    scoring: LevelScoring
    width: float  # a row's cost in memory and per kernel entry: its width, or a sparse row's
    memory: object  # the executor's memory (spark/memory.py: executor_memory)
    cores: int
    # the fit's clock (perf_counter): a resumed fit's starts earlier by the time its
    # checkpointed levels took, which the time budget and the records count too
    started: float
    # the start of the command the fit runs in (perf_counter: the job's timeline's origin,
    # core.timeline.command_started), which the stop rule's cheap-level test counts from;
    # None: the fit's own clock (SODMClassifier, a notebook, a test; docs/design.md §2.7)
    command_started: float | None = None
    checkpoint: LevelCheckpoint | None = None
    on_plan: Callable | None = None  # called with each LevelPlan before its level runs
    on_level: Callable | None = None  # called with each LevelStats as its level finishes
    searched: tuple = ()  # the search's rounds (plan.SearchedSolve): the first level's visits


@dataclass
class KeptLevels:
    """The solved levels :func:`~sodm_spark.selection.stopping.choose_level` may still return
    (docs/design.md §2.7), by level: the solved RDD, its decision values on the scored rows
    and the fit targets its tasks left for a compression (docs/design.md §2.6)."""

    solved: dict = field(default_factory=dict)
    scores: dict = field(default_factory=dict)
    fits: dict = field(default_factory=dict)

    def keep(self, level: int, solved, scores, fit: LocalFit | None) -> None:
        self.solved[level], self.scores[level], self.fits[level] = solved, scores, fit

    def keep_only(self, levels: set) -> None:
        """Release every level but ``levels``: a level once beaten stays beaten."""
        for older in [level for level in self.solved if level not in levels]:
            self.solved.pop(older).unpersist()
            self.scores.pop(older, None)
            self.fits.pop(older, None)

    def release(self) -> None:
        for solved in self.solved.values():
            solved.unpersist()


@dataclass
class LevelsSoFar:
    """The fit after its last solved level: what the next decision, merge and the finish
    read."""

    level: int  # the last level solved
    solved: RDD  # its partitions, solved
    sizes: np.ndarray  # its partitions' rows
    history: list  # the LevelStats of every level solved, in order (a resumed fit's included)
    kept: KeptLevels

    @property
    def last(self) -> LevelStats:
        return self.history[-1]


class SolvedLevel(NamedTuple):
    """One level's tasks, summed on the driver."""

    solved: RDD  # the solved partitions
    entry: LevelStats
    sizes: np.ndarray
    scores: np.ndarray | None  # the level's f on the scored rows (the sum of its partitions')
    local_fit: LocalFit | None


def first_level(sc, run: LevelRun, parts, sizes: np.ndarray) -> LevelsSoFar:
    """The top level planned and solved on its p^L partitions ``parts`` of ``sizes`` rows; a
    plan over the memory budget raises here, before any level runs."""
    plan = plan_level(run.params.levels, sizes, run.width, run.params, run.memory, [],
                      run.cores, run.scoring.n_scored, run.task_settings.n_classes,
                      run.searched)
    return solved_level(sc, run, parts, plan, [], KeptLevels())


def run_levels(sc, run: LevelRun, levels: LevelsSoFar) -> tuple[LevelsSoFar, str]:
    """Algorithm 1's loop from ``levels``: decide, merge, solve, until a reason to stop: (the
    fit after its last level, that reason)."""
    while True:
        plan, stop_reason = next_step(run, levels)
        if stop_reason:
            return levels, stop_reason
        assert plan is not None  # next_step gives a plan whenever it gives no reason to stop
        levels = solved_level(sc, run, merged(sc, levels, run.params), plan, levels.history,
                              levels.kept)


def solved_level(sc, run: LevelRun, partitions, plan: LevelPlan, history: list,
                 kept: KeptLevels) -> LevelsSoFar:
    """The level ``plan`` announces solved on ``partitions`` (the top level's, or the merge of
    the level before), judged on the scored rows, kept while it may be chosen, checkpointed and
    reported."""
    if run.on_plan is not None:
        run.on_plan(plan)
    level = _solve(sc, run, partitions, plan)
    _judge(level.entry, level.scores, run.scoring, run.params)
    level.entry.elapsed = time.perf_counter() - run.started
    level.entry.before_fit_seconds = before_fit(run)
    history.append(level.entry)
    kept.keep(plan.level, level.solved, level.scores, level.local_fit)
    kept.keep_only(_still_eligible(plan.level, history, run))
    if run.checkpoint is not None:
        sc.setJobDescription(f"SODM level {plan.level}: checkpoint")
        run.checkpoint.save_level(plan.level, level.solved.map(checkpoint_layout).collect(),
                                  level.entry.to_dict())
    if run.on_level is not None:
        run.on_level(level.entry)
    return LevelsSoFar(plan.level, level.solved, level.sizes, history, kept)


def _solve(sc, run: LevelRun, partitions, plan: LevelPlan) -> SolvedLevel:
    """Every partition of the level solved (one task each, or ``plan.tasks`` tasks each solving
    several in turn), their :class:`~.tasks.PartitionStats` summed into the level's."""
    level_start = time.perf_counter()
    level, n_partitions = plan.level, run.params.p ** plan.level
    sc.setJobDescription(f"SODM level {level}: solve {n_partitions} partitions")
    running = min(n_partitions, run.cores)
    if plan.tasks is not None and plan.tasks < running:
        partitions, running = partitions.coalesce(plan.tasks), plan.tasks  # keys stay in order
    threads = max(1, run.cores // running)
    rows = None if run.scoring.rows is None else run.scoring.rows.value
    kernel, settings = run.kernel, run.task_settings.with_cache(plan.cache_mb, plan.storage)
    # the stats come back beside the chunks: no pass reads the chunks back
    solved, reported = map_with_reports(sc, partitions, lambda records, report: solve_partitions(
        records, kernel, settings, level, threads, rows, report))
    stats = [reported[key] for key in sorted(reported)]
    partitions.unpersist()
    scores = None if rows is None else np.sum([s.eval_scores for s in stats], axis=0)
    local_fit = _local_fit(stats)
    entry = _level_stats(plan, stats, time.perf_counter() - level_start)
    sizes = np.zeros(n_partitions, dtype=np.int64)
    sizes[[s.key for s in stats]] = [s.rows for s in stats]
    return SolvedLevel(solved, entry, sizes, scores, local_fit)


def _level_stats(plan: LevelPlan, stats: list[PartitionStats], seconds: float) -> LevelStats:
    """The level's record: its partitions' statistics summed, beside its plan's."""
    return LevelStats(level=plan.level, partitions=len(stats), seconds=seconds,
                      objective=float(sum(s.objective for s in stats)),
                      n_sv=int(sum(s.n_sv for s in stats)),
                      sweeps_max=int(max(s.sweeps for s in stats)),
                      sweeps_total=int(sum(s.sweeps for s in stats)),
                      rows=int(sum(s.rows for s in stats)),
                      warm_start_violation=float(max(s.warm_start_violation for s in stats)),
                      kernel="+".join(sorted({s.kernel_mode for s in stats})),
                      storage="+".join(sorted({s.storage for s in stats})),
                      max_rows=int(max(s.rows for s in stats)),
                      scoring_seconds=float(sum(s.eval_seconds for s in stats)),
                      memory_mb=plan.memory_mb, predicted_seconds=plan.predicted_seconds,
                      tasks=plan.tasks)


def _local_fit(stats: list[PartitionStats]) -> LocalFit | None:
    """The compression's fit targets the partitions left, or None. The level's f is the sum of
    its partitions' models, each a model of the whole data: a row's own partition's f times
    their count estimates it (docs/design.md §2.6)."""
    fits = [s for s in stats if s.fit_rows is not None]
    if not fits:
        return None
    return LocalFit(np.concatenate([s.fit_rows for s in fits]),
                    len(stats) * np.concatenate([s.fit_scores for s in fits]),
                    None if fits[0].fit_X is None else stack_rows([s.fit_X for s in fits]),
                    np.concatenate([s.fit_support for s in fits]))


def _judge(entry: LevelStats, scores, scoring: LevelScoring, params: SODMParams) -> None:
    """Record on ``entry`` how the level's ``scores`` fare on the validation slice (accuracy,
    the rows it gets wrong, and by ``params.metric``, weighted) and on the test rows."""
    n_validation = scoring.n_validation
    if scoring.validation is not None:
        labels = scoring.validation[1]
        correct = correct_rows(scores[:n_validation], labels, scoring.coded)
        entry.validation_accuracy = float(np.mean(correct))
        entry.validation_wrong = np.flatnonzero(~correct).tolist()
        vars(entry).update(validation_fields(scores[:n_validation], labels, params.metric,
                                             params.seed, scoring.validation_weights))
    if scoring.test_labels is not None:
        entry.test_accuracy = accuracy_of_scores(scores[n_validation:], scoring.test_labels,
                                                 scoring.coded)


def _still_eligible(level: int, history: list, run: LevelRun) -> set:
    """The levels choose_level may still return: the last two (the last one merges next), and
    with automatic stopping every validated level no other one beats."""
    eligible = {level, level + 1}
    if run.params.auto_stop:
        eligible.update(unbeaten_levels(*validated(history, run.scoring, run.params),
                                        run.params.confidence))
    return eligible


def validated(history: list, scoring: LevelScoring, params: SODMParams) -> tuple[list, list]:
    """(levels, how the slice judges each: its per-row correctness, or an Evaluation by
    ``params.metric`` with the rows' weights) of the levels that were validated, in the order
    solved (a resumed fit has them from its checkpoint)."""
    if scoring.validation is None:
        return [], []
    return level_evaluations(history, scoring.n_validation, params.metric,
                             scoring.validation[1], scoring.validation_weights, seed=params.seed)


def next_step(run: LevelRun, levels: LevelsSoFar) -> tuple[LevelPlan | None, str]:
    """(the plan of the level below, "") or (None, why the fit stops after this level): its
    warm start was already optimal (Algorithm 1, line 5), it is ``stop_level``, the next level
    does not fit the memory budget (a failure without automatic stopping) or the stop rule
    says so (docs/design.md §2.7)."""
    params, level = run.params, levels.level
    assert params.levels is not None  # a fit's levels are resolved before the first is solved
    warm_started = level < params.levels
    if warm_started and levels.last.warm_start_violation <= run.task_settings.solve.violation_tol:
        return None, WARM_START_OPTIMAL
    if level <= params.stop_level:
        return None, REACHED_STOP_LEVEL
    merged_sizes = np.bincount(np.arange(levels.sizes.size) // params.p,
                               weights=levels.sizes).astype(np.int64)
    try:
        plan = plan_level(level - 1, merged_sizes, run.width, params, run.memory,
                          levels.history, run.cores, run.scoring.n_scored,
                          run.task_settings.n_classes)
    except MemoryBudgetError as error:
        if not params.auto_stop:
            raise
        return None, f"next level does not fit the memory budget: {error}"
    return plan, _automatic_stop(run, levels, plan) if params.auto_stop else ""


def _automatic_stop(run: LevelRun, levels: LevelsSoFar, plan: LevelPlan) -> str:
    """Why automatic stopping ends the fit before ``plan``'s level, or "": the stop rule's
    predicted gain or time budget, or a level whose kernels would not be cached with every core
    busy (on-demand kernel blocks cost the kernel work again in every sweep)."""
    reason = run.params.stop_rule.reason_to_stop(
        validated(levels.history, run.scoring, run.params)[1],
        time.perf_counter() - run.started, plan.predicted_seconds, before_fit(run)) or ""
    assert plan.tasks is not None  # plan_level sets the tasks of every plan it makes
    if not reason and next_level_blocked(plan.kernel, plan.tasks, plan.partitions, run.cores):
        reason = (f"{NEXT_LEVEL_BLOCKED} (level {plan.level}: {plan.advice}; "
                  f"predicted {plan.predicted_seconds:,.0f} s; auto_stop=False "
                  "(--no-auto-stop) runs it)")
    return reason


def before_fit(run: LevelRun) -> float:
    """Seconds the command ran before the fit's clock started (its start-up, the reading),
    which the stop rule adds to the fit's own seconds to weigh a level's cost
    (:func:`~sodm_spark.selection.stopping.seconds_before_fit`: 0 without a command)."""
    return seconds_before_fit(run.command_started, run.started)


def merged(sc, levels: LevelsSoFar, params: SODMParams):
    """The last level's partitions merged p at a time (Algorithm 1, line 12): chunk k re-keyed
    to k // p with γ times the warm-start factor (docs/design.md §2.5), in one shuffle; Ca-ODM
    (``partitioner="cascade"``) moves only the support vectors up."""
    p, n_partitions = params.p, params.p ** levels.level
    sc.setJobDescription(f"SODM level {levels.level}: merge into {n_partitions // p}")
    warm_start_factor = 1.0 / p if params.warm_start == "scaled" else 1.0
    support_only = params.partitioner == "cascade"
    return (levels.solved.map(lambda item: merge_key(item, p, warm_start_factor, support_only))
            .partitionBy(n_partitions // p, lambda key: key))


def restored_levels(sc, labelled, checkpoint: LevelCheckpoint) -> LevelsSoFar:
    """The fit as it stood after the last level ``checkpoint`` holds, its rows dealt from
    ``labelled`` (the training rows) to their recorded partitions."""
    level, history, solved, sizes = restored_level(sc, labelled, checkpoint)
    kept = KeptLevels()
    kept.solved[level] = solved
    return LevelsSoFar(level, solved, sizes, history, kept)


def restored_level(sc, labelled, checkpoint: LevelCheckpoint, level: int | None = None):
    """(level, the LevelStats list, solved RDD, partition sizes) rebuilt from a checkpointed
    level (default: the last)."""
    level, finished, pieces = checkpoint.load_level(level)
    keys = np.concatenate([np.full(ids.size, key, dtype=np.int64) for key, ids, _ in pieces])
    positions = np.concatenate([np.arange(ids.size) for _, ids, _ in pieces])
    ids = np.concatenate([ids for _, ids, _ in pieces])
    order = np.argsort(ids)
    lookup = sc.broadcast((ids[order], keys[order], positions[order]))
    gammas = sc.broadcast({key: gamma for key, _, gamma in pieces})
    n_partitions = max(key for key, _, _ in pieces) + 1
    solved = (labelled.flatMap(lambda item: deal_by_layout(item, *lookup.value))
              .partitionBy(n_partitions, lambda key: key)
              .mapPartitions(lambda records: assemble_partition(records, gammas.value),
                             preservesPartitioning=True)
              .persist(PERSIST))
    restored_rows = solved.map(lambda item: item[1].ids.size).sum()
    if restored_rows != ids.size:
        raise InputError(f"checkpoint {checkpoint.directory}: {ids.size - restored_rows} of its "
                         "rows are missing from the data; resume with the same data.")
    stats = [LevelStats(**{k: v for k, v in entry.items() if k in LevelStats.__dataclass_fields__})
             for entry in finished]
    sizes = np.zeros(n_partitions, dtype=np.int64)
    for key, ids_of_key, _ in pieces:
        sizes[key] = ids_of_key.size
    return level, stats, solved, sizes
