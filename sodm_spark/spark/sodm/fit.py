"""SODM (SODM paper, Algorithm 1) on Spark: partition, solve locally, merge level by level.

The SODM paper: Wang, Cao, Zhang, Shi & Jin, "Scalable Optimal Margin Distribution Machine"
(docs/design.md §2 describes this module's algorithm in the package's terms, §6 the data flow).

:func:`fit_sodm` runs a fit as named stages, top to bottom: prepare the rows (labels, the
validation slice, the top level's K = p^L partitions: :mod:`.prepare`); plan what every level
reads (:class:`~.levels.LevelRun`); start from the top level solved, or from the last level a
checkpoint holds; run the levels (:mod:`.levels`: decide, merge, solve, until the warm start is
already optimal (Algorithm 1, line 5), ``stop_level``, or the automatic stopping rule); finish:
choose the level, try the global step (:mod:`.global_step`), collect or compress the model
(:mod:`.written_model`), score the test rows and calibrate on the validation slice
(:mod:`.scored_model`). All numerics are in ``sodm_spark.solvers`` and
``sodm_spark.partition``. With ``FitOptions.timeline`` the stages are timed into a
:class:`~sodm_spark.core.timeline.Timeline` (docs/design.md §6).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable

import numpy as np

from ...core import defaults
from ...core.errors import SettingsError
from ...core.labels import coded_classes
from ...core.sparse_rows import as_float_rows, stack_rows
from ...core.timeline import Timeline, add_stage, timed
from ...models.compression import SPARSE_KMEANS, local_fit_share, most_points
from ...selection.compression_choice import BUDGET_SHARE
from ...selection.stopping import choose_level
from ..engine import Engine, ordered_sum
from ..memory import executor_memory
from .checkpoint import LevelCheckpoint, block_fingerprint, merge_fingerprints
from .global_only import fit_without_levels
from .global_plan import after_levels_budget
from .global_step import public_report, run_global_step
from .level_model import LocalFit, fit_rows_collectable, training_row_bytes
from .levels import (LevelRun, LevelScoring, LevelsSoFar, first_level, restored_level,
                     restored_levels, run_levels, validated)
from .params import LevelStats, SODMFit, SODMParams
from .prepare import PreparedData, partition_prepared, prepare_sodm
from .scored_model import FinalModel, calibrated, scored_on_test, taking_projected_rows
from .tasks import FitTargets, LevelTaskSettings
from .written_model import ModelRequest, SliceJudge, chosen_model

if TYPE_CHECKING:
    from pyspark import RDD

#: Every level's model is scored on the test rows too (for the levels table) when that costs at
#: most this many multiply-adds a level (test rows × training rows × features: a fraction of a
#: second here); beyond, only with ``test_every_level``. Scoring is inside the level's tasks, so
#: it is training time: 10,000 test rows at 60,000 × 784 took 7.6 task-seconds at level 3,
#: more than its solves.
TEST_EVERY_LEVEL_WORK = 1e10


@dataclass(frozen=True)
class FitOptions:
    """How :func:`fit_sodm` runs and reports, besides the parameters of the fit (its keyword
    arguments of the same names; docs/design.md §2.4 for checkpoints, §6 step 8 for
    ``max_sv``)."""

    on_level: Callable | None = None  # called with each LevelStats as its level finishes
    on_plan: Callable | None = None  # called with each plan (LevelPlan, GlobalPlan) before
    checkpoint_dir: object = None  # where every finished level is recorded; None: nowhere
    resume: bool = False  # continue from the last level checkpoint_dir holds
    # "auto", "none"/None or N (models.compression.resolve_max_sv); the job's default
    max_sv: object = defaults.MAX_SV
    compress_method: str = defaults.COMPRESS_METHOD  # how a compression chooses its points
    test_every_level: bool | None = None  # None: when cheap (TEST_EVERY_LEVEL_WORK)
    # records the fit's stages (docs/design.md §6: the preparation's, the partitioning, each
    # level, the global step, the compression, the test scoring, the calibration); None: none
    timeline: Timeline | None = None
    # (why, how the slice judged a searched point) when the search found only the majority
    # class: the global step fits every row instead of the levels (.global_only); None: levels
    skip_levels: tuple | None = None
    # how the search's chosen point solved in each of its rounds (plan.SearchedSolve): the
    # first level's prior visits of a row (plan.searched_visits); (): no search ran
    searched: tuple = ()


@dataclass(frozen=True)
class ChosenLevel:
    """The level whose model the fit returns, and what the levels left of it."""

    entry: LevelStats
    solved: RDD
    scores: np.ndarray | None  # its own f on the scored rows (validation, then test), or None
    local_fit: LocalFit | None  # the fit targets its tasks left for a compression
    judged: tuple[list, list]  # (the validated levels, how the slice judged each), for the
    # global step


def fit_sodm(sc: Engine, blocks, params: SODMParams, classes, test=None, validation=None,
             prepared: PreparedData | None = None, options: FitOptions | None = None,
             **keywords) -> SODMFit:
    """Fit SODM on ``blocks`` (RDD of (X, y, row_ids) with raw labels from ``classes``), stage
    by stage as docs/design.md §6 describes them.

    Two classes: one ODM (``classes[1]`` is +1). More: the one-vs-rest ODMs of every class,
    solved together in each partition against one kernel matrix, with the same partitions,
    merges and stopping for all; the model has one coefficient column per class.

    How it runs is ``options`` (a :class:`FitOptions`), or its fields given as keywords.
    ``test`` is an optional (X_test, y_test) pair on the driver: the final model's test
    accuracy is ``SODMFit.test_accuracy``, and with ``test_every_level`` every level's model is
    scored too (inside the level's tasks, as the validation rows are: it costs test rows ×
    training rows kernel entries per level; None: when that is at most
    :data:`TEST_EVERY_LEVEL_WORK`). ``on_plan(LevelPlan)`` is called before each
    level (its predicted seconds) and ``on_level(LevelStats)`` as each level finishes (the job
    prints both). ``max_sv`` ("auto", "none"/None or N,
    :func:`~sodm_spark.models.compression.resolve_max_sv`) compresses the model before it
    reaches the driver (:mod:`.level_model`); the report is ``SODMFit.compression``.
    With ``params.auto_stop`` a validation slice — ``validation`` = (X, y) if given, else rows
    held out of ``blocks`` (``validation_fraction``, at most ``validation_max_rows``) — is
    scored after every level, the fit stops by :class:`~sodm_spark.selection.stopping.StopRule` or
    before a level whose kernels would not be cached (on-demand kernel blocks cost the kernel
    work again in every sweep), and the model is the level
    :func:`~sodm_spark.selection.stopping.choose_level` keeps. With ``checkpoint_dir`` every
    finished level is recorded there
    (:mod:`.checkpoint`); ``resume=True`` continues from the last recorded level instead of
    starting over, and gives the model (and the stopping decisions) an uninterrupted run
    would have given. ``prepared`` (from :func:`prepare_sodm`, partitioned; its kernel may
    differ from ``params``' after a search) skips the preparation: ``blocks``, ``classes``,
    ``test`` and ``validation`` are then ignored, and the fit's clock started with it.
    """
    options = replace(options or FitOptions(), **keywords)
    prepared, params = _prepared(sc, blocks, params, classes, test, validation, prepared,
                                 options)
    attempt = None
    if options.skip_levels is not None and prepared.parts is not None and not options.resume:
        fit, attempt = fit_without_levels(sc, prepared, params, options, options.skip_levels)
        if fit is not None:
            prepared.parts.unpersist()
            return fit
    checkpoint = _level_checkpoint(sc, prepared, params, options)
    restored = _restored_or_partitioned(sc, prepared, params, checkpoint, options.resume,
                                        options.timeline)
    partition_seconds = prepared.partition_seconds or time.perf_counter() - prepared.started
    # the time budget counts a resumed fit's checkpointed levels too
    started = prepared.started - (0.0 if restored is None else restored.last.elapsed)
    run = _level_run(sc, prepared, params, options, checkpoint, started)
    if restored is not None:
        levels = restored
    else:
        assert prepared.sizes is not None  # not restored: _restored_or_partitioned dealt the rows
        levels = first_level(sc, run, prepared.parts, prepared.sizes)
    levels, stop_reason = run_levels(sc, run, levels)
    fit = _finish(sc, run, levels, stop_reason, prepared, options, partition_seconds)
    if attempt is not None and fit.global_step is None:  # the step tried instead, not kept
        fit.global_step = public_report(attempt)
    return fit


# --- prepare and plan ------------------------------------------------------------------------

def _prepared(sc: Engine, blocks, params: SODMParams, classes, test, validation,
              prepared: PreparedData | None, options: FitOptions):
    """(the rows prepared, unless a search prepared them: docs/design.md §6, step 3; the
    parameters with the levels the preparation resolved from the rows)."""
    if prepared is None:
        prepared = prepare_sodm(sc, blocks, params, classes, test, validation, partition=False,
                                fingerprint=options.checkpoint_dir is not None,
                                timeline=options.timeline)
    if params.levels is None:  # as the preparation resolved them from the rows
        params = replace(params, levels=prepared.params.levels,
                         stop_level=prepared.params.stop_level)
    elif params.levels != prepared.params.levels:
        raise SettingsError(f"the prepared data hold levels={prepared.params.levels}, the fit "
                            f"asks for levels={params.levels}; prepare with the same levels.")
    if prepared.sparse and options.compress_method == "kmeans" and \
            most_points(options.max_sv) is not None:
        raise SettingsError(SPARSE_KMEANS + ".")
    return prepared, params


def _level_checkpoint(sc: Engine, prepared: PreparedData, params: SODMParams,
                      options: FitOptions) -> LevelCheckpoint | None:
    """The checkpoint of the fit's levels (docs/design.md §2.4), or None; one that already
    exists is refused unless the fit resumes it."""
    if options.checkpoint_dir is None:
        return None
    if prepared.fingerprint is None:  # prepared elsewhere (a search): one more pass
        sc.setJobDescription("SODM checkpoint: fingerprint the data")
        with timed(options.timeline, "fingerprint"):
            prepared.fingerprint = ordered_sum(prepared.labelled, block_fingerprint,
                                               merge_fingerprints)
    checkpoint = LevelCheckpoint(options.checkpoint_dir, params.settings(), prepared.n_rows,
                                 prepared.n_features, prepared.classes, prepared.fingerprint)
    if checkpoint.exists() and not options.resume:
        raise SettingsError(f"{options.checkpoint_dir} already holds a checkpoint; pass "
                            "resume=True (--resume) to continue it, or choose an empty "
                            "checkpoint_dir (--checkpoint-dir).")
    return checkpoint


def _restored_or_partitioned(sc: Engine, prepared: PreparedData, params: SODMParams,
                             checkpoint: LevelCheckpoint | None, resume: bool,
                             timeline: Timeline | None = None) -> LevelsSoFar | None:
    """The levels a checkpoint holds, when the fit resumes one (the training rows are then
    dealt to its partitions, and the labelled input is released); else None, the top level's
    partitions dealt unless a search already dealt them (docs/design.md §6, step 5). Either is
    the ``partitioning`` stage of ``timeline``."""
    if resume and checkpoint is not None and checkpoint.exists():
        sc.setJobDescription("SODM resume: deal rows to their checkpointed partitions")
        with timed(timeline, "partitioning"):
            restored = restored_levels(sc, prepared.training, checkpoint)
        prepared.labelled.unpersist()
        return restored
    if prepared.parts is None:
        partition_prepared(sc, prepared, params, timeline)
    return None


def _level_run(sc: Engine, prepared: PreparedData, params: SODMParams, options: FitOptions,
               checkpoint: LevelCheckpoint | None, started: float) -> LevelRun:
    """What every level of the fit reads (docs/design.md §6, step 6)."""
    # what a row costs in memory and per kernel entry: its width, or for sparse rows its values
    width = prepared.row_width or prepared.n_features
    return LevelRun(params=params, kernel=prepared.kernel,
                    task_settings=_task_settings(sc, prepared, params, options.max_sv),
                    scoring=_level_scoring(sc, prepared, width, options.test_every_level),
                    width=width, memory=executor_memory(sc, params.memory_mb, params.device),
                    cores=max(1, sc.defaultParallelism), started=started,
                    command_started=None if options.timeline is None else options.timeline.origin,
                    checkpoint=checkpoint, on_plan=options.on_plan, searched=options.searched,
                    on_level=_timed_levels(options.on_level, options.timeline, started))


def _timed_levels(on_level: Callable | None, timeline: Timeline | None,
                  started: float) -> Callable | None:
    """``on_level`` that first records each level as a stage of ``timeline``: its seconds
    (the solve, the merge's shuffle and the scoring in its tasks), ended when its record was
    made (``elapsed`` on the fit's clock, ``started``)."""
    if timeline is None:
        return on_level

    def recorded(entry: LevelStats) -> None:
        timeline.add(f"level {entry.level}", entry.seconds,
                     started + entry.elapsed - entry.seconds)
        if on_level is not None:
            on_level(entry)

    return recorded


def _task_settings(sc, prepared: PreparedData, params: SODMParams,
                   max_sv) -> LevelTaskSettings:
    """What every level's tasks read besides the kernel: the local solve, the seed, the class
    weights and the compression's fit targets, whose rows travel with the stats when they fit
    the driver's result limit."""
    fit_share = local_fit_share(max_sv, prepared.n_rows)
    with_rows = fit_rows_collectable(sc, fit_share * prepared.n_rows,
                                     training_row_bytes(prepared))
    return LevelTaskSettings(
        params.local_solve, n_classes=prepared.classes.size if prepared.multi else 0,
        seed=params.seed, fit_targets=FitTargets(fit_share, with_rows),
        class_weights=prepared.class_weights)


def _level_scoring(sc, prepared: PreparedData, width: float,
                   test_every_level: bool | None) -> LevelScoring:
    """The rows every level's tasks score: the validation slice, and the test rows when
    ``test_every_level`` (None: when that costs at most :data:`TEST_EVERY_LEVEL_WORK`)."""
    validation, test = prepared.validation_pair, prepared.test_pair
    if test_every_level is None:
        test_every_level = test is not None and \
            len(test[1]) * prepared.n_rows * width <= TEST_EVERY_LEVEL_WORK
    scored = [] if validation is None else [validation[0]]
    test_labels = None
    if test_every_level and test is not None:
        scored.append(test[0])
        test_labels = test[1]
    rows = sc.broadcast(as_float_rows(stack_rows(scored), np.float32)) if scored else None
    return LevelScoring(rows, validation, prepared.validation_weights, test_labels,
                        coded_classes(prepared.classes.size))


# --- finish ----------------------------------------------------------------------------------

def _finish(sc, run: LevelRun, levels: LevelsSoFar, stop_reason: str, prepared: PreparedData,
            options: FitOptions, partition_seconds: float) -> SODMFit:
    """The fit's result after its last level: the level chosen, its model (or the global
    step's) collected or compressed, scored on the test rows and calibrated on the validation
    slice (docs/design.md §6, steps 7-8), taking the rows the fit was given; the ``test
    scoring`` and ``calibration`` stages of ``options.timeline``."""
    chosen = _chosen_level(sc, run, levels, prepared.training)
    if run.scoring.rows is not None:
        run.scoring.rows.unpersist()
    final = _final_model(sc, run, chosen, prepared, options)
    train_seconds = time.perf_counter() - run.started
    timeline = options.timeline
    with timed(None if prepared.test_pair is None else timeline, "test scoring"):
        test_accuracy = scored_on_test(sc, run, final, chosen, prepared)
    with timed(timeline if run.scoring.n_validation else None, "calibration"):
        model = calibrated(final, chosen, run, prepared)
    model = taking_projected_rows(model, prepared.projection)
    levels.kept.release()
    sc.setJobDescription(None)
    return SODMFit(model=model, levels=levels.history, train_seconds=train_seconds,
                   partition_seconds=partition_seconds, n_rows=prepared.n_rows,
                   stopped_at=levels.level, stop_reason=stop_reason,
                   best_level=chosen.entry.level, validation_rows=run.scoring.n_validation,
                   test_accuracy=test_accuracy,
                   compression=None if final.compression is None else final.compression.to_dict(),
                   input_map=prepared.input_map_report,
                   global_step=public_report(final.global_report),
                   class_weights=prepared.class_weights)


def _chosen_level(sc, run: LevelRun, levels: LevelsSoFar, training) -> ChosenLevel:
    """The level whose model the fit returns: the last one solved, or with automatic stopping
    the one :func:`~sodm_spark.selection.stopping.choose_level` keeps; a level no longer kept
    (a fit resumed right after it) is read back from its checkpoint."""
    judged = validated(levels.history, run.scoring, run.params)
    level = levels.level
    if run.params.auto_stop and judged[0]:
        level = choose_level(*judged, run.params.confidence)
    kept = levels.kept
    if level not in kept.solved:
        # a level solved but no longer kept is one a resumed fit has only in its checkpoint
        assert run.checkpoint is not None
        _, _, kept.solved[level], _ = restored_level(sc, training, run.checkpoint, level)
    entry = next(e for e in levels.history if e.level == level)
    return ChosenLevel(entry, kept.solved[level], kept.scores.get(level), kept.fits.get(level),
                       judged)


def _final_model(sc, run: LevelRun, chosen: ChosenLevel, prepared: PreparedData,
                 options: FitOptions) -> FinalModel:
    """The global step's model where the validation slice keeps it (docs/design.md §2.9),
    else the chosen level's, collected or compressed (§6, step 8; the level's record gets the
    points written, ``written_points``); with the feature scaling. The stages of
    ``options.timeline``: ``global step`` where it ran, then ``compression`` (or ``model
    collection``)."""
    begun = time.perf_counter()
    budget = after_levels_budget(begun - run.started, run.params.time_budget)
    global_model, global_report = run_global_step(sc, chosen, prepared, run.params, run.cores,
                                                  run.on_plan, budget)
    if global_report is not None and global_report.get("ran"):
        add_stage(options.timeline, "global step", time.perf_counter() - begun, begun)
    if global_model is not None:
        model, compression = global_model, None
    else:
        begun = time.perf_counter()
        # every compression together within a share of the fit so far (compression_choice)
        request = ModelRequest(options.max_sv, options.compress_method, run.params.seed,
                               BUDGET_SHARE * (begun - run.started))
        model, compression = chosen_model(sc, chosen.solved, chosen.entry.n_sv, prepared,
                                          request, chosen.local_fit, _slice_judge(chosen, run))
        add_stage(options.timeline, "model collection" if compression is None else
                  "compression", time.perf_counter() - begun, begun)
        chosen.entry.written_points = int(model.support_vectors.shape[0])
    if prepared.scaling is not None:  # the model takes raw rows
        offset, feature_scale, columns = prepared.scaling
        model = replace(model, feature_offset=offset, feature_scale=feature_scale,
                        feature_columns=columns)
    return FinalModel(model, compression, global_report, global_model is not None)


def _slice_judge(chosen: ChosenLevel, run: LevelRun) -> SliceJudge | None:
    """How the validation slice judged the chosen level, for its compressions to be judged
    alike (None: no slice, or the level was not judged on it)."""
    levels, judged = chosen.judged
    if run.scoring.validation is None or chosen.entry.level not in levels:
        return None
    rows, labels = run.scoring.validation
    return SliceJudge(rows, labels, run.scoring.coded, judged[levels.index(chosen.entry.level)])
