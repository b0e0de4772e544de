"""SODM (SODM paper, Algorithm 1) on Spark: partition, solve locally, merge level by level.

The SODM paper: Wang, Cao, Zhang, Shi & Jin, "Scalable Optimal Margin Distribution Machine"
(docs/design.md §2 describes this module's algorithm in the package's terms).

The data live in an RDD of numpy blocks. Partitioning (landmark strata of Eqns 7-8 dealt
evenly, or a comparator's partitions; :mod:`.prepare`) shuffles sub-blocks to K = p^L
partitions; every level solves each partition's local ODM (Eqn 1 with the partition's own m·c,
i.e. the block-diagonal problem of Eqn 4) in one task, warm-started from its current γ, then
merges every p consecutive partitions with one shuffle of blocks (:mod:`.tasks`). The
levels stop when the warm start is already optimal (Algorithm 1, line 5), at ``stop_level``,
or by the automatic stopping rule; finished levels can be checkpointed and resumed. All
numerics are in ``sodm_spark.solvers`` and ``sodm_spark.partition``.
"""
from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from ...core.errors import SettingsError
from ...core.labels import accuracy_of_scores, coded_classes, correct_rows, raw_labels
from ...core.sparse_rows import as_float_rows, stack_rows
from ...models.calibration import fit_calibration
from ...models.compression import (SPARSE_KMEANS, compare_scores, local_fit_share, most_points,
                                   resolve_max_sv)
from ...selection.stopping import (NEXT_LEVEL_BLOCKED, REACHED_STOP_LEVEL, WARM_START_OPTIMAL,
                                   choose_level, level_evaluations, next_level_blocked,
                                   unbeaten_levels, validation_fields)
from ..frames import map_with_reports, ordered_sum
from ..memory import MemoryBudgetError, executor_memory
from ..session import PERSIST
from .checkpoint import (LevelCheckpoint, assemble_partition, block_fingerprint, deal_by_layout,
                         merge_fingerprints)
from .level_model import (LocalFit, collect_level, compress_level,
                          fit_rows_collectable, level_scores)
from .params import LevelStats, SODMFit, SODMParams
from .global_step import public_report, run_global_step
from .plan import plan_level
from .prepare import PreparedData, partition_prepared, prepare_sodm
from .tasks import (FitTargets, LevelTaskSettings, checkpoint_layout, merge_key,
                    solve_partitions)

#: With a compressed model, the uncompressed one is scored on the test rows too (the report's
#: "before") when that costs at most this many kernel multiply-adds (test rows × support
#: vectors × features: a few seconds here); beyond, only with ``test_every_level``.
CHEAP_SCORING_WORK = 1e12
#: Every level's model is scored on the test rows too (for the levels table) when that costs at
#: most this many multiply-adds a level (test rows × training rows × features: a fraction of a
#: second here); beyond, only with ``test_every_level``. Scoring is inside the level's tasks, so
#: it is training time: 10,000 test rows at 60,000 × 784 took 7.6 task-seconds at level 3,
#: more than its solves.
TEST_EVERY_LEVEL_WORK = 1e10


def fit_sodm(sc, blocks, params: SODMParams, classes, test=None, on_level=None,
             checkpoint_dir=None, resume: bool = False, validation=None,
             on_plan=None, prepared: PreparedData | None = None, max_sv=None,
             compress_method: str = "random", test_every_level: bool | None = None) -> SODMFit:
    """Fit SODM on ``blocks`` (RDD of (X, y, row_ids) with raw labels from ``classes``).

    Two classes: one ODM (``classes[1]`` is +1). More: the one-vs-rest ODMs of every class,
    solved together in each partition against one kernel matrix, with the same partitions,
    merges and stopping for all; the model has one coefficient column per class.

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
    if prepared is None:
        prepared = prepare_sodm(sc, blocks, params, classes, test, validation, partition=False,
                                fingerprint=checkpoint_dir is not None)
    if params.levels is None:  # as the preparation resolved them from the rows
        params = replace(params, levels=prepared.params.levels,
                         stop_level=prepared.params.stop_level)
    elif params.levels != prepared.params.levels:
        raise ValueError(f"the prepared data hold levels={prepared.params.levels}, the fit "
                         f"asks for levels={params.levels}; prepare with the same levels.")
    if prepared.sparse and compress_method == "kmeans" and most_points(max_sv) is not None:
        raise ValueError(SPARSE_KMEANS + ".")
    classes, multi, kernel = prepared.classes, prepared.multi, prepared.kernel
    n_rows, n_features = prepared.n_rows, prepared.n_features
    # what a row costs in memory and per kernel entry: its width, or for sparse rows its values
    width = prepared.row_width or n_features
    training, started = prepared.training, prepared.started
    test_pair, validation_pair = prepared.test_pair, prepared.validation_pair
    validation_weights = prepared.validation_weights  # its rows' class and row weights
    fit_share = local_fit_share(max_sv, n_rows)
    # what every level's tasks read (the kernel cache is set per level, by its plan); the fit
    # rows travel with the stats when they fit the driver's result limit
    task_settings = LevelTaskSettings(
        params.local_solve, n_classes=classes.size if multi else 0, seed=params.seed,
        fit_targets=FitTargets(fit_share, fit_rows_collectable(sc, fit_share * n_rows,
                                                               _row_bytes(prepared))),
        class_weights=prepared.class_weights)

    checkpoint = None
    if checkpoint_dir is not None:
        if prepared.fingerprint is None:  # prepared elsewhere (a search): one more pass
            sc.setJobDescription("SODM checkpoint: fingerprint the data")
            prepared.fingerprint = ordered_sum(prepared.labelled, block_fingerprint,
                                               merge_fingerprints)
        checkpoint = LevelCheckpoint(checkpoint_dir, params.settings(), n_rows, n_features,
                                     classes, prepared.fingerprint)
        if checkpoint.exists() and not resume:
            raise SettingsError(f"{checkpoint_dir} already holds a checkpoint; pass resume=True "
                                "(--resume) to continue it, or choose an empty checkpoint_dir "
                                "(--checkpoint-dir).")
    restored = None
    if resume and checkpoint is not None and checkpoint.exists():
        sc.setJobDescription("SODM resume: deal rows to their checkpointed partitions")
        restored = _restore(sc, training, checkpoint)
        parts = None
        prepared.labelled.unpersist()
    else:
        if prepared.parts is None:
            partition_prepared(sc, prepared, params)
        parts, sizes = prepared.parts, prepared.sizes
    partition_seconds = prepared.partition_seconds or time.perf_counter() - started

    n_validation = 0 if validation_pair is None else len(validation_pair[1])
    coded = coded_classes(classes.size)  # the labels of the validation and test pairs
    scored = [] if validation_pair is None else [validation_pair[0]]
    if test_every_level is None:
        test_every_level = test_pair is not None and \
            len(test_pair[1]) * n_rows * width <= TEST_EVERY_LEVEL_WORK
    if test_every_level and test_pair is not None:
        scored.append(test_pair[0])
    eval_X = sc.broadcast(as_float_rows(stack_rows(scored), np.float32)) if scored else None
    levels, solved, previous = [], None, parts
    cores = max(1, sc.defaultParallelism)
    level = params.levels
    memory = executor_memory(sc, params.memory_mb, params.device)
    kept = {}  # level -> its solved RDD: those choose_level may still return
    kept_scores = {}  # level -> its decision values on the eval rows (validation, test)
    kept_fits = {}  # level -> its LocalFit for a compression, from its tasks
    if restored is not None:
        level, levels, solved, sizes = restored
        kept[level] = solved
        entry = levels[-1]
        started -= entry.elapsed  # the time budget counts the interrupted run's levels too
    plan = None if restored is not None else plan_level(level, sizes, width, params,
                                                         memory, levels, cores)
    stop_reason = ""
    while True:
        if restored is None:
            if on_plan is not None:
                on_plan(plan)
            settings = task_settings.with_cache(plan.cache_mb, plan.storage)
            solved, entry, sizes, scores, kept_fits[level] = _solve_level(
                sc, previous, level, params, kernel, settings, cores, eval_X, plan.tasks)
            entry.memory_mb, entry.predicted_seconds = plan.memory_mb, plan.predicted_seconds
            entry.tasks = plan.tasks
            if validation_pair is not None:
                correct = correct_rows(scores[:n_validation], validation_pair[1], coded)
                entry.validation_accuracy = float(np.mean(correct))
                entry.validation_wrong = np.flatnonzero(~correct).tolist()
                vars(entry).update(validation_fields(  # judged by params.metric, weighted
                    scores[:n_validation], validation_pair[1], params.metric, params.seed,
                    validation_weights))
            if test_every_level and test_pair is not None:
                entry.test_accuracy = accuracy_of_scores(scores[n_validation:], test_pair[1],
                                                         coded)
            entry.elapsed = time.perf_counter() - started
            levels.append(entry)
            kept[level], kept_scores[level] = solved, scores
            # the levels choose_level may still return: the last two, and every validated
            # level no other one beats (a beaten level stays beaten)
            still_eligible = {level, level + 1}
            if params.auto_stop:
                still_eligible.update(unbeaten_levels(
                    *_validated(levels, validation_pair, params, validation_weights),
                    params.confidence))
            for older in [key for key in kept if key not in still_eligible]:
                kept.pop(older).unpersist()
                kept_scores.pop(older, None)
                kept_fits.pop(older, None)
            if checkpoint is not None:
                sc.setJobDescription(f"SODM level {level}: checkpoint")
                checkpoint.save_level(level, solved.map(checkpoint_layout).collect(), entry.to_dict())
            if on_level is not None:
                on_level(entry)
        restored = None
        warm_started = level < params.levels
        plan = None
        if warm_started and entry.warm_start_violation <= task_settings.solve.violation_tol:
            stop_reason = WARM_START_OPTIMAL  # Algorithm 1, line 5
        elif level <= params.stop_level:
            stop_reason = REACHED_STOP_LEVEL
        else:
            merged = np.bincount(np.arange(sizes.size) // params.p, weights=sizes).astype(np.int64)
            try:
                plan = plan_level(level - 1, merged, width, params, memory, levels, cores)
            except MemoryBudgetError as error:
                if not params.auto_stop:
                    raise
                stop_reason = f"next level does not fit the memory budget: {error}"
            if plan is not None and params.auto_stop:
                stop_reason = params.stop_rule.reason_to_stop(
                    _validated(levels, validation_pair, params, validation_weights)[1],
                    time.perf_counter() - started, plan.predicted_seconds) or ""
                if not stop_reason and next_level_blocked(plan.kernel, plan.tasks,
                                                          plan.partitions, cores):
                    stop_reason = (f"{NEXT_LEVEL_BLOCKED} (level {plan.level}: {plan.advice}; "
                                   f"predicted {plan.predicted_seconds:,.0f} s; auto_stop=False "
                                   "(--no-auto-stop) runs it)")
        if stop_reason:
            break
        n_level_partitions = params.p ** level
        sizes = merged
        sc.setJobDescription(f"SODM level {level}: merge into {n_level_partitions // params.p}")
        scale = 1.0 / params.p if params.warm_start == "scaled" else 1.0
        support_only = params.partitioner == "cascade"
        previous = (solved.map(lambda item: merge_key(item, params.p, scale, support_only))
                    .partitionBy(n_level_partitions // params.p, lambda key: key))
        level -= 1
    chosen = level
    validated_levels, validated_correct = _validated(levels, validation_pair, params,
                                                     validation_weights)
    if params.auto_stop and validated_levels:
        chosen = choose_level(validated_levels, validated_correct, params.confidence)
    if chosen not in kept:  # resumed right after the best level: read it back
        _, _, kept[chosen], _ = _restore(sc, training, checkpoint, chosen)
    if eval_X is not None:
        eval_X.unpersist()
    best = next(e for e in levels if e.level == chosen)
    global_model, global_report = run_global_step(sc, kept[chosen], prepared, params, chosen,
                                                  validated_levels, validated_correct, cores,
                                                  on_plan, best.partitions)
    if global_model is not None:
        model, compression = global_model, None
    else:
        model, compression = _level_model(sc, kept[chosen], best, prepared, max_sv,
                                          compress_method, params.seed, kept_fits.get(chosen))
    if prepared.scaling is not None:  # the model takes raw rows
        offset, scale, columns = prepared.scaling
        model = replace(model, feature_offset=offset, feature_scale=scale,
                        feature_columns=columns)
    train_seconds = time.perf_counter() - started
    full = kept_scores.get(chosen)  # the chosen level's own scores on the eval rows
    full_test = None if full is None or not test_every_level else full[n_validation:]
    test_accuracy = None
    if test_pair is not None:
        X_test, y_test = test_pair[0], raw_labels(test_pair[1], classes)
        cheap = len(y_test) * best.n_sv * width <= CHEAP_SCORING_WORK
        global_test = None
        if global_report is not None and global_report["ran"]:
            global_test = global_report["model"].input_scores(X_test)
            global_report["test_accuracy"] = accuracy_of_scores(global_test, y_test, classes)
        if global_model is not None:  # the model is the global step's; the level is reported
            full_test = None
        elif full_test is None and compression is None:
            # the model written is the level itself, on the driver already: scored here with
            # every core (10,000 rows against 27,467 support vectors of 784 features: 26.5 s as
            # a job over level 1's three partitions, 10.4 s here)
            full_test = model.input_scores(X_test)
        elif full_test is None and cheap:  # the uncompressed level, the report's "before"
            full_test = level_scores(sc, kept[chosen], X_test, kernel, "score the test set")
        if full_test is not None:  # the chosen level's own model
            best.test_accuracy = accuracy_of_scores(full_test, y_test, classes)
        if global_model is not None:
            scores = global_test
        else:
            scores = full_test if compression is None else model.input_scores(X_test)
        test_accuracy = accuracy_of_scores(scores, y_test, classes)
        if compression is not None:
            compression["test"] = {"accuracy_after": test_accuracy, "rows": len(y_test)} \
                if full_test is None else compare_scores(full_test, scores, y_test, classes)
    if n_validation:  # the model's own scores on the held-out slice: its calibration's rows
        y_validation = raw_labels(validation_pair[1], classes)
        own = full[:n_validation] if global_model is None and compression is None and \
            full is not None else model.input_scores(validation_pair[0])
        model = replace(model, calibration=fit_calibration(  # params.calibration's method
            params.calibration, own, np.searchsorted(classes, y_validation), len(classes)))
        if compression is not None and full is not None:
            compression["validation"] = compare_scores(full[:n_validation], own, y_validation,
                                                       classes)
    if prepared.projection is not None:  # scored above on projected rows; it takes raw ones
        projection = prepared.projection
        if model.projection_components is not None:  # the compression projected them again
            projection = projection.followed_by(model.projection_center,
                                                model.projection_components)
        model = replace(model, projection_center=projection.center,
                        projection_components=projection.components)
    for rdd in kept.values():
        rdd.unpersist()
    sc.setJobDescription(None)
    return SODMFit(model=model, levels=levels, train_seconds=train_seconds,
                   partition_seconds=partition_seconds, n_rows=n_rows, stopped_at=level,
                   stop_reason=stop_reason, best_level=chosen,
                   validation_rows=n_validation,
                   test_accuracy=test_accuracy, compression=compression,
                   input_map=prepared.input_map_report,
                   global_step=public_report(global_report),
                   class_weights=prepared.class_weights)


def _level_model(sc, solved, entry, prepared, max_sv, method, seed, local_fit=None):
    """(the model of the chosen level, the compression report or None)."""
    n_points = resolve_max_sv(max_sv, entry.n_sv)
    if n_points is None:
        return collect_level(sc, solved, prepared.kernel, prepared.classes, entry.n_sv,
                             prepared.kernel_features, _row_bytes(prepared),
                             prepared.multi), None
    start = time.perf_counter()
    model, fit_rows, targets, passes = compress_level(
        sc, solved, prepared.kernel, prepared.classes, entry.n_sv, n_points, method, seed,
        local_fit=local_fit)
    return model, {"max_sv": max_sv, "method": method, "support_vectors_before": entry.n_sv,
                   "support_vectors_after": int(model.support_vectors.shape[0]),
                   "fit_rows": fit_rows, "fit_targets": targets, "passes_over_level": passes,
                   "seconds": time.perf_counter() - start}


def _row_bytes(prepared) -> float:
    """Bytes of a training row on the way to the driver: dense rows are float32, a sparse
    row's values 12 bytes each (8 a memory column)."""
    return 8 * prepared.row_width if prepared.sparse else 4 * prepared.kernel_features


def _validated(levels, validation, params, weights=None):
    """(levels, how the slice judges each: its per-row correctness, or an Evaluation by
    ``params.metric`` with the rows' ``weights``) of the levels that were validated, in the
    order solved (a resumed fit has them from its checkpoint)."""
    return ([], []) if validation is None else level_evaluations(
        levels, len(validation[1]), params.metric, validation[1], weights, seed=params.seed)


def _solve_level(sc, previous, level, params, kernel, task_settings, cores, eval_X=None,
                 tasks=None):
    """Solve every partition of one level (one task each, or ``tasks`` tasks each solving
    several in turn): (solved RDD, LevelStats, partition sizes, the level's decision values on
    the ``eval_X`` rows or None, the level's LocalFit or None)."""
    level_start = time.perf_counter()
    n_level_partitions = params.p ** level
    sc.setJobDescription(f"SODM level {level}: solve {n_level_partitions} partitions")
    running = min(n_level_partitions, cores)
    if tasks is not None and tasks < running:
        previous, running = previous.coalesce(tasks), tasks  # partitions stay in key order
    threads = max(1, cores // running)
    rows = None if eval_X is None else eval_X.value
    # the stats come back beside the chunks: no pass reads the chunks back
    solved, reported = map_with_reports(sc, previous, lambda records, report: solve_partitions(
        records, kernel, task_settings, level, threads, rows, report))
    stats = [reported[key] for key in sorted(reported)]
    previous.unpersist()
    entry = LevelStats(level=level, partitions=len(stats), seconds=0.0,
                       objective=float(sum(s["objective"] for s in stats)),
                       n_sv=int(sum(s["n_sv"] for s in stats)),
                       sweeps_max=int(max(s["sweeps"] for s in stats)),
                       sweeps_total=int(sum(s["sweeps"] for s in stats)),
                       rows=int(sum(s["rows"] for s in stats)),
                       warm_start_violation=float(max(s["warm_start_violation"] for s in stats)),
                       kernel="+".join(sorted({s["kernel_mode"] for s in stats})),
                       storage="+".join(sorted({s["storage"] for s in stats})),
                       max_rows=int(max(s["rows"] for s in stats)),
                       scoring_seconds=float(sum(s["eval_seconds"] for s in stats)))
    scores = None if eval_X is None else np.sum([s["eval_scores"] for s in stats], axis=0)
    fits = [s for s in stats if s.get("fit_rows") is not None]
    # the level's f is the sum of its partitions' models, each a model of the whole data
    local_fit = None if not fits else LocalFit(
        np.concatenate([s["fit_rows"] for s in fits]),
        len(stats) * np.concatenate([s["fit_scores"] for s in fits]),
        None if fits[0]["fit_X"] is None else stack_rows([s["fit_X"] for s in fits]),
        np.concatenate([s["fit_support"] for s in fits]))
    entry.seconds = time.perf_counter() - level_start
    sizes = np.zeros(n_level_partitions, dtype=np.int64)
    sizes[[st["key"] for st in stats]] = [st["rows"] for st in stats]
    return solved, entry, sizes, scores, local_fit


def _restore(sc, labelled, checkpoint: LevelCheckpoint, level: int | None = None):
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
        raise ValueError(f"checkpoint {checkpoint.directory}: {ids.size - restored_rows} of its "
                         "rows are missing from the data; resume with the same data.")
    stats = [LevelStats(**{k: v for k, v in entry.items() if k in LevelStats.__dataclass_fields__})
             for entry in finished]
    sizes = np.zeros(n_partitions, dtype=np.int64)
    for key, ids_of_key, _ in pieces:
        sizes[key] = ids_of_key.size
    return level, stats, solved, sizes
