"""What one Spark task runs on one SODM partition (SODM paper, Algorithm 1, the levels).

A partition is (key, (X, y, row ids, γ[, stats])): y is ±1, or class numbers for 3+ classes.
:func:`solve_partition` solves its local ODM (Eqn 1 with the partition's own m·c, i.e. the
block-diagonal problem of Eqn 4) warm-started from its current γ; :func:`merge_key` and
:func:`merge_children` merge every p consecutive partitions (k → k // p) and scale their
concatenated γ; the rest give a partition's share of f and its support vectors. All numerics
are in ``sodm_spark.solvers``; the functions are module-level and take plain values, so
closures never capture a driver object.
"""
from __future__ import annotations

import os
import time

import numpy as np
import scipy.sparse
from threadpoolctl import threadpool_limits

from ..kernels import Kernel, decision_values
from ..solvers import solve_odm_dual
from ..solvers.odm_dcd import DCDResult, kernel_fits_cache
from ..solvers.odm_multiclass import one_vs_rest_signs, solve_odm_multiclass


def _support_rows(gamma):
    """Rows with dual weight: γ_i ≠ 0 (binary) or any class's γ_ic ≠ 0 (multi-class)."""
    return gamma != 0.0 if gamma.ndim == 1 else np.any(gamma != 0.0, axis=1)


def _coefficients(y, gamma):
    """The expansion's coefficients: γ_i y_i (binary, ±1 y) or γ_ic y_ic with y_ic = ±1 one
    class against the rest (multi-class, y the class numbers): (m,) or (m, C)."""
    if gamma.ndim == 1:
        return gamma * y
    return gamma * one_vs_rest_signs(y.astype(np.int64), gamma.shape[1])


def _concat_pieces(pieces):
    """Concatenate sub-blocks in a fixed order (shuffle output order is not deterministic)."""
    pieces = sorted(pieces, key=lambda piece: piece[0])
    rows = [p[1] for p in pieces]
    X = scipy.sparse.vstack(rows, format="csr") if scipy.sparse.issparse(rows[0]) \
        else np.concatenate(rows)
    return (X, np.concatenate([p[2] for p in pieces]),
            np.concatenate([p[3] for p in pieces]),
            np.concatenate([p[4] for p in pieces]) if len(pieces[0]) > 4 else None)


def grouped_blocks(records):
    """(key, concatenated block) for each key of a shuffled partition, keys in order."""
    groups = {}
    for key, piece in records:
        groups.setdefault(key, []).append(piece)
    for key in sorted(groups):
        yield key, _concat_pieces(groups[key])


def solve_partition(item, kernel_dict, config, level, threads, validation_X=None):
    """One local ODM (Eqn 1 on the partition's m rows), warm-started from its γ.

    ``threads`` BLAS threads: PySpark pins Python workers to spark.task.cpus (1) threads, which
    leaves cores idle at the top levels, where fewer partitions than cores remain. With
    ``validation_X`` the task also returns this partition's share of the validation rows'
    decision values (the level's f is the sum over partitions), saving a job per level.
    """
    key, (X, y, ids, gamma) = item
    start = time.perf_counter()
    kernel = Kernel.from_dict(kernel_dict)
    with threadpool_limits(max(1, min(threads, os.cpu_count() or 1))):
        if config.get("n_classes"):
            result = _solve_classes(X, y, gamma, kernel, config, [config["seed"], level, key])
        else:
            result = solve_odm_dual(X, y, kernel, config["lam"],
                                    config["theta"], config["v"], tol=config["tol"],
                                    max_iter=config["max_iter"], gamma0=gamma,
                                    seed=[config["seed"], level, key],
                                    cache_mb=config["cache_mb"])
        validation_scores = None if validation_X is None else _scores(
            kernel, validation_X, X, y, result.gamma)
    stats = {"key": key, "rows": X.shape[0], "objective": result.objective,
             "validation_scores": validation_scores,
             "kernel_mode": result.kernel_mode,
             "sweeps": result.n_sweeps, "n_sv": int(_support_rows(result.gamma).sum()),
             "converged": result.converged,
             "warm_start_violation": result.history[0] if result.history else 0.0,
             "seconds": time.perf_counter() - start}
    return key, (X, y, ids, result.gamma, stats)


def _solve_classes(X, y, gamma, kernel, config, seed):
    """The C one-vs-rest duals of one partition (y: class numbers), warm-started from γ (m, C):
    together against one kernel matrix when it fits the cache
    (:func:`~sodm_spark.solvers.odm_multiclass.solve_odm_multiclass`), else one on-demand
    binary solve per class. Returns a DCDResult whose objective is the classes' sum."""
    n_classes, m = config["n_classes"], X.shape[0]
    if gamma.ndim == 1:  # a fresh partition: no warm start yet
        gamma = np.zeros((m, n_classes))
    y_index = y.astype(np.int64)
    if kernel_fits_cache(m, X.shape[1], config["cache_mb"]):
        joint = solve_odm_multiclass(X, y_index, n_classes, kernel, config["lam"],
                                     config["theta"], config["v"], tol=config["tol"],
                                     max_iter=config["max_iter"], gamma0=gamma, seed=seed)
        return DCDResult(gamma=joint.gamma, u=joint.u, objective=float(joint.objectives.sum()),
                         n_sweeps=joint.n_sweeps, violation=joint.violation,
                         converged=joint.converged, kernel_mode="cached",
                         history=joint.history, kernel_rows_computed=m)
    results = [solve_odm_dual(X, np.where(y_index == c, 1.0, -1.0), kernel, config["lam"],
                              config["theta"], config["v"], tol=config["tol"],
                              max_iter=config["max_iter"], gamma0=gamma[:, c],
                              seed=[*seed, c], cache_mb=config["cache_mb"], mode="blocked")
               for c in range(n_classes)]
    return DCDResult(gamma=np.stack([r.gamma for r in results], axis=1),
                     u=np.stack([r.u for r in results], axis=1),
                     objective=float(sum(r.objective for r in results)),
                     n_sweeps=max(r.n_sweeps for r in results),
                     violation=max(r.violation for r in results),
                     converged=all(r.converged for r in results), kernel_mode="blocked",
                     history=[max(r.history[0] if r.history else 0.0 for r in results)],
                     kernel_rows_computed=sum(r.kernel_rows_computed for r in results))


def merge_key(item, p):
    key, (X, y, ids, gamma, _) = item
    return key // p, (key % p, X, y, ids, gamma)


def merge_children(records, scale, support_only):
    for key, (X, y, ids, gamma) in grouped_blocks(records):
        if support_only:  # Ca-ODM: only support vectors move up a level
            keep = _support_rows(gamma)
            X, y, ids, gamma = X[keep], y[keep], ids[keep], gamma[keep]
        yield key, (X, y, ids, gamma * scale)


def _scores(kernel, X_eval, X, y, gamma):
    """This partition's share of f on ``X_eval``, in float32: a level's accuracy only needs
    the sign of f, and float32 halves the GEMM time (the saved model predicts in float64)."""
    support = _support_rows(gamma)
    return decision_values(kernel, X_eval, X[support], _coefficients(y, gamma)[support],
                           dtype=np.float32)


def partial_scores(item, X_test, kernel_dict):
    _, (X, y, _, gamma, _) = item
    return _scores(Kernel.from_dict(kernel_dict), X_test, X, y, gamma)


def partition_support_vectors(item):
    _, (X, y, ids, gamma, _) = item
    support = _support_rows(gamma)
    return ids[support], X[support], _coefficients(y, gamma)[support]


def checkpoint_layout(item):
    key, (_, _, ids, gamma, _) = item
    return key, ids, gamma
