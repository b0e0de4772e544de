"""SODM (SODM paper, Algorithm 1) on Spark: partition, solve locally, merge level by level.

The data live in an RDD of numpy blocks. Partitioning (landmark strata of Eqns 7-8 dealt
evenly, or a comparator's partitions; :mod:`.sodm_prepare`) shuffles sub-blocks to K = p^L
partitions; every level solves each partition's local ODM (Eqn 1 with the partition's own m·c,
i.e. the block-diagonal problem of Eqn 4) in one task, warm-started from its current γ, then
merges every p consecutive partitions with one shuffle of blocks (:mod:`.sodm_tasks`). The
levels stop when the warm start is already optimal (Algorithm 1, line 5), at ``stop_level``,
or by the automatic stopping rule; finished levels can be checkpointed and resumed. All
numerics are in ``sodm_spark.solvers`` and ``sodm_spark.partition``.
"""
from __future__ import annotations

import time
from dataclasses import asdict

import numpy as np

from ..model import KernelExpansion
from ..solvers.odm_dcd import kernel_mode_for
from ..stopping import (REACHED_STOP_LEVEL, WARM_START_OPTIMAL, LevelCost, best_level,
                        predict_seconds)
from .checkpoint import (LevelCheckpoint, assemble_partition, block_fingerprint, deal_by_layout,
                         merge_fingerprints)
from .memory import MemoryBudgetError, executor_memory, level_cache_mb
from .sodm_params import SPILL, LevelPlan, LevelStats, SODMFit, SODMParams
from .sodm_prepare import PreparedData, partition_prepared, prepare_sodm
from .sodm_tasks import (checkpoint_layout, merge_children, merge_key, partial_scores,
                         partition_support_vectors, solve_partition)


def fit_sodm(sc, blocks, params: SODMParams, classes, test=None, on_level=None,
             checkpoint_dir=None, resume: bool = False, validation=None,
             on_plan=None, prepared: PreparedData | None = None) -> SODMFit:
    """Fit SODM on ``blocks`` (RDD of (X, y, row_ids) with raw labels from ``classes``).

    Two classes: one ODM (``classes[1]`` is +1). More: the one-vs-rest ODMs of every class,
    solved together in each partition against one kernel matrix, with the same partitions,
    merges and stopping for all; the model has one coefficient column per class.

    ``test`` is an optional (X_test, y_test) pair on the driver, scored after every level;
    ``on_plan(LevelPlan)`` is called before each level (its predicted seconds) and
    ``on_level(LevelStats)`` as each level finishes (the job prints both).
    With ``params.auto_stop`` a validation slice — ``validation`` = (X, y) if given, else rows
    held out of ``blocks`` (``validation_fraction``, at most ``validation_max_rows``) — is
    scored after every level, the fit stops by :class:`~sodm_spark.stopping.StopRule`, and the
    model is the best level's. With ``checkpoint_dir`` every finished level is recorded there
    (:mod:`.checkpoint`); ``resume=True`` continues from the last recorded level instead of
    starting over, and gives the model (and the stopping decisions) an uninterrupted run
    would have given. ``prepared`` (from :func:`prepare_sodm`, partitioned; its kernel may
    differ from ``params``' after a search) skips the preparation: ``blocks``, ``classes``,
    ``test`` and ``validation`` are then ignored, and the fit's clock started with it.
    """
    params.validate()
    if prepared is None:
        prepared = prepare_sodm(sc, blocks, params, classes, test, validation, partition=False,
                                fingerprint=checkpoint_dir is not None)
    classes, multi, kernel = prepared.classes, prepared.multi, prepared.kernel
    n_rows, n_features = prepared.n_rows, prepared.n_features
    training, started = prepared.training, prepared.started
    test_pair, validation_pair = prepared.test_pair, prepared.validation_pair
    config = {"lam": params.lam, "theta": params.theta, "v": params.v, "tol": params.tol,
              "max_iter": params.max_iter, "seed": params.seed,
              "n_classes": classes.size if multi else 0}
    kernel_dict = kernel.to_dict()

    checkpoint = None
    if checkpoint_dir is not None:
        if prepared.fingerprint is None:  # prepared elsewhere (a search): one more pass
            sc.setJobDescription("SODM checkpoint: fingerprint the data")
            prepared.fingerprint = prepared.labelled.map(block_fingerprint).treeReduce(
                merge_fingerprints)
        checkpoint = LevelCheckpoint(checkpoint_dir, asdict(params), n_rows, n_features,
                                     classes, prepared.fingerprint)
        if checkpoint.exists() and not resume:
            raise ValueError(f"{checkpoint_dir} already holds a checkpoint; pass --resume to "
                             "continue it, or choose an empty --checkpoint-dir.")
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

    test_X = None if test_pair is None else sc.broadcast(test_pair[0])
    validation_X = None if validation_pair is None else sc.broadcast(
        np.asarray(validation_pair[0], dtype=np.float32))
    levels, solved, previous = [], None, parts
    cores = max(1, sc.defaultParallelism)
    scoring_seconds = 0.0
    level = params.levels
    memory = executor_memory(sc, params.memory_mb)
    kept = {}  # level -> its solved RDD: the last two, for the best-level model
    if restored is not None:
        level, levels, solved, sizes = restored
        kept[level] = solved
        entry = levels[-1]
        started -= entry.elapsed  # the time budget counts the interrupted run's levels too
    plan = None if restored is not None else _plan_level(level, sizes, n_features, params,
                                                         memory, levels, cores)
    stop_reason = ""
    while True:
        if restored is None:
            if on_plan is not None:
                on_plan(plan)
            solved, entry, sizes, validation_scores = _solve_level(
                sc, previous, level, params, kernel_dict, dict(config, cache_mb=plan.cache_mb),
                cores, validation_X)
            entry.memory_mb, entry.predicted_seconds = plan.memory_mb, plan.predicted_seconds
            if validation_pair is not None:
                entry.validation_accuracy = _accuracy(validation_scores, validation_pair[1])
            entry.elapsed = time.perf_counter() - started - scoring_seconds
            if test_pair is not None:
                scoring_start = time.perf_counter()
                sc.setJobDescription(f"SODM level {level}: score the test set")
                scores = solved.map(lambda item: partial_scores(item, test_X.value, kernel_dict)) \
                    .treeReduce(np.add)
                entry.test_accuracy = _accuracy(scores, test_pair[1])
                scoring_seconds += time.perf_counter() - scoring_start
            levels.append(entry)
            kept[level] = solved
            for older in [key for key in kept if key > level + 1]:
                kept.pop(older).unpersist()
            if checkpoint is not None:
                sc.setJobDescription(f"SODM level {level}: checkpoint")
                checkpoint.save_level(level, solved.map(checkpoint_layout).collect(), entry.to_dict())
            if on_level is not None:
                on_level(entry)
        restored = None
        warm_started = level < params.levels
        plan = None
        if warm_started and entry.warm_start_violation <= params.tol:
            stop_reason = WARM_START_OPTIMAL  # Algorithm 1, line 5
        elif level <= params.stop_level:
            stop_reason = REACHED_STOP_LEVEL
        else:
            merged = np.bincount(np.arange(sizes.size) // params.p, weights=sizes).astype(np.int64)
            try:
                plan = _plan_level(level - 1, merged, n_features, params, memory, levels, cores)
            except MemoryBudgetError as error:
                if not params.auto_stop:
                    raise
                stop_reason = f"next level does not fit the memory budget: {error}"
            if plan is not None and params.auto_stop:
                accuracies = [e.validation_accuracy for e in levels
                              if e.validation_accuracy is not None]
                stop_reason = params.stop_rule().reason_to_stop(
                    accuracies, time.perf_counter() - started - scoring_seconds,
                    plan.predicted_seconds) or ""
        if stop_reason:
            break
        n_level_partitions = params.p ** level
        sizes = merged
        sc.setJobDescription(f"SODM level {level}: merge into {n_level_partitions // params.p}")
        scale = 1.0 / params.p if params.warm_start == "scaled" else 1.0
        support_only = params.partitioner == "cascade"
        previous = (solved.map(lambda item: merge_key(item, params.p))
                    .partitionBy(n_level_partitions // params.p, lambda key: key)
                    .mapPartitions(lambda records: merge_children(records, scale, support_only),
                                   preservesPartitioning=True))
        level -= 1
    chosen = level
    validated = [(e.level, e.validation_accuracy) for e in levels
                 if e.validation_accuracy is not None]
    if params.auto_stop and validated:
        chosen = best_level(validated)
    if chosen not in kept:  # resumed right after the best level: read it back
        _, _, kept[chosen], _ = _restore(sc, training, checkpoint, chosen)
    sc.setJobDescription("SODM: collect the model")
    pieces = kept[chosen].map(partition_support_vectors).collect()
    for rdd in kept.values():
        rdd.unpersist()
    for broadcast in (test_X, validation_X):
        if broadcast is not None:
            broadcast.unpersist()
    ids = np.concatenate([piece[0] for piece in pieces])
    order = np.argsort(ids, kind="stable")
    support_vectors = np.concatenate([piece[1] for piece in pieces])[order]
    coef = np.concatenate([piece[2] for piece in pieces])[order]
    sc.setJobDescription(None)
    model = KernelExpansion(support_vectors, coef if multi else coef[:, None], kernel, classes)
    return SODMFit(model=model, levels=levels,
                   train_seconds=time.perf_counter() - started - scoring_seconds,
                   partition_seconds=partition_seconds, n_rows=n_rows, stopped_at=level,
                   stop_reason=stop_reason, best_level=chosen,
                   validation_rows=0 if validation_pair is None else len(validation_pair[1]),
                   validation=None if validation_pair is None else (
                       validation_pair[0], _raw_labels(validation_pair[1], classes)))


def _raw_labels(y, classes):
    """±1 (binary) or class numbers (3+ classes) back to the label values."""
    return classes[(y > 0).astype(np.int64)] if classes.size == 2 else classes[y.astype(np.int64)]


def _accuracy(scores, y) -> float:
    """Share of rows right: sign of f against ±1 y, or the largest score against the class
    numbers y (multi-class)."""
    if scores.ndim == 2:
        return float(np.mean(np.argmax(scores, axis=1) == y))
    return float(np.mean(np.where(scores > 0, 1.0, -1.0) == y))


def _plan_level(level, sizes, n_features, params, memory, done, cores) -> LevelPlan:
    """Shape, kernel mode, memory and predicted seconds of the level about to run.

    Raises MemoryBudgetError when its largest partition cannot be solved within the budget.
    """
    partitions, rows = int(sizes.size), int(np.max(sizes))
    budget = memory.task_mb(partitions)
    cache_mb = level_cache_mb(level, rows, n_features, budget, params.cache_mb, params.levels)
    mode = kernel_mode_for(rows, cache_mb)
    costs = [LevelCost(e.partitions, e.max_rows or -(-e.rows // e.partitions), e.seconds)
             for e in done]
    predicted = predict_seconds(costs, partitions, rows, cores)
    if predicted is not None and mode == "blocked" and done:
        # on-demand blocks recompute the uncached share of the kernel in every sweep
        uncached = 1.0 - min(1.0, cache_mb * 2**20 / (4.0 * rows * rows))
        predicted *= 1.0 + max(1, done[-1].sweeps_max) * uncached
    return LevelPlan(level, partitions, rows, mode, budget, cache_mb, predicted)


def _solve_level(sc, previous, level, params, kernel_dict, config, cores, validation_X=None):
    """Solve every partition of one level (one task each): (solved RDD, LevelStats, partition
    sizes, the validation rows' decision values or None)."""
    level_start = time.perf_counter()
    n_level_partitions = params.p ** level
    sc.setJobDescription(f"SODM level {level}: solve {n_level_partitions} partitions")
    threads = max(1, cores // min(n_level_partitions, cores))
    solved = previous.map(lambda item: solve_partition(
        item, kernel_dict, config, level, threads,
        None if validation_X is None else validation_X.value)).persist(SPILL)
    stats = solved.map(lambda item: item[1][4]).collect()
    previous.unpersist()
    entry = LevelStats(level=level, partitions=len(stats), seconds=0.0,
                       objective=float(sum(s["objective"] for s in stats)),
                       n_sv=int(sum(s["n_sv"] for s in stats)),
                       sweeps_max=int(max(s["sweeps"] for s in stats)),
                       sweeps_total=int(sum(s["sweeps"] for s in stats)),
                       rows=int(sum(s["rows"] for s in stats)),
                       warm_start_violation=float(max(s["warm_start_violation"] for s in stats)),
                       kernel="+".join(sorted({s["kernel_mode"] for s in stats})),
                       max_rows=int(max(s["rows"] for s in stats)))
    validation_scores = None if validation_X is None else np.sum(
        [s["validation_scores"] for s in stats], axis=0)
    entry.seconds = time.perf_counter() - level_start
    sizes = np.zeros(n_level_partitions, dtype=np.int64)
    sizes[[st["key"] for st in stats]] = [st["rows"] for st in stats]
    return solved, entry, sizes, validation_scores


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
              .persist(SPILL))
    restored_rows = solved.map(lambda item: item[1][2].size).sum()
    if restored_rows != ids.size:
        raise ValueError(f"checkpoint {checkpoint.directory}: {ids.size - restored_rows} of its "
                         "rows are missing from the data; resume with the same data.")
    stats = [LevelStats(**{k: v for k, v in entry.items() if k in LevelStats.__dataclass_fields__})
             for entry in finished]
    sizes = np.zeros(n_partitions, dtype=np.int64)
    for key, ids_of_key, _ in pieces:
        sizes[key] = ids_of_key.size
    return level, stats, solved, sizes
