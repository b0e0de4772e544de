"""Single-executor runners (docs/design.md §4): a comparator fitted inside one Spark task.

The estimator is named by import path and built from plain parameters inside the task, so the
closure holds no driver object. The task concatenates every block of the data (moved to one
partition) and returns the fitted estimator to the driver (a transient result, not a saved
model: models are saved as arrays + JSON by ``KernelExpansion.save``). The coreset SVM can also
run merge-and-reduce over the partitions (the coreset SVM paper, Sec. 4.2): one coreset per
partition in parallel, reduced on the driver.
"""
from __future__ import annotations

import time
from importlib import import_module

import numpy as np
import scipy.sparse

from ..core.errors import InputError, SettingsError, reported_to_driver
from ..core.labels import plus_minus
from ..core.validation import check_two_classes

ESTIMATORS = {
    "csvrg": "sodm_spark.baselines.csvrg:CSVRGClassifier",
    "cvm": "sodm_spark.baselines.cvm:CVMClassifier",
    "cvr": "sodm_spark.baselines.cvm:CVRRegressor",
    "coreset-svm": "sodm_spark.baselines.coreset_svm:CoresetSVMClassifier",
}


def build_estimator(method: str, params: dict):
    module, name = ESTIMATORS[method].split(":")
    return getattr(import_module(module), name)(**params)


def _all_rows(blocks):
    blocks = list(blocks)
    if not blocks:
        raise InputError("the training data is empty.")
    Xs = [b.X for b in blocks]
    X = scipy.sparse.vstack(Xs, format="csr").toarray() if scipy.sparse.issparse(Xs[0]) \
        else np.concatenate(Xs)
    order = np.argsort(np.concatenate([b.row_ids for b in blocks]), kind="stable")
    return X[order], np.concatenate([b.y for b in blocks])[order]


@reported_to_driver  # the estimator's refusal of the data reaches the job as its message
def _fit_task(blocks, method, params):
    X, y = _all_rows(blocks)
    start = time.perf_counter()
    estimator = build_estimator(method, params).fit(X, y)
    yield estimator, time.perf_counter() - start, X.shape[0]


def fit_in_one_task(blocks, method: str, params: dict):
    """(fitted estimator, seconds inside the task, rows) — the whole fit in one Spark task.

    Rows are put in row-id order first, so the fit does not depend on how Spark split them.
    """
    if method not in ESTIMATORS:
        raise SettingsError(f"unknown method {method!r}; known: {', '.join(ESTIMATORS)}.")
    return blocks.coalesce(1).mapPartitions(lambda it: _fit_task(it, method, params)).collect()[0]


@reported_to_driver
def _coreset_task(index, blocks, positive, size, C, kernel, seed):
    """Algorithm 1 of the coreset SVM paper on one partition: its weighted coreset (global row
    ids)."""
    from ..baselines.coreset_svm_solver import ReductionSettings, build_coreset

    blocks = [b for b in blocks if b.X.shape[0]]
    if not blocks:
        return
    X, y, ids = (np.concatenate([b.X for b in blocks]), np.concatenate([b.y for b in blocks]),
                 np.concatenate([b.row_ids for b in blocks]))
    order = np.argsort(ids, kind="stable")
    y_pm = plus_minus(y[order], positive)
    yield build_coreset(X[order], y_pm, size, C, seed=[seed, 1, index], indices=ids[order],
                        reduction=ReductionSettings(kernel=kernel))


def fit_coreset_svm_partitioned(blocks, classes, kernel, coreset_size: int, C: float,
                                seed: int = 0):
    """Merge-and-reduce over Spark partitions (the coreset SVM paper, Sec. 4.2): one coreset per
    partition in parallel, then pairwise reduction and the weighted SVM (Eqn 2) on the driver.

    ``kernel`` is a resolved :class:`~sodm_spark.core.kernels.Kernel` (numeric gamma). Returns
    (KernelExpansion with intercept, the final WeightedCoreset).
    """
    from ..baselines.coreset_svm_solver import (ReductionSettings, merge_and_reduce,
                                                solve_weighted_svm)
    from ..models.expansion import KernelExpansion

    classes = np.asarray(classes)
    check_two_classes(classes, "fit_coreset_svm_partitioned", "the coreset SVM")
    positive = classes[1]
    coresets = blocks.mapPartitionsWithIndex(lambda index, it: _coreset_task(
        index, it, positive, coreset_size, C, kernel, seed)).collect()
    coreset = merge_and_reduce(coresets, coreset_size, C, seed=[seed, 2],
                               reduction=ReductionSettings(kernel=kernel))
    solution = solve_weighted_svm(coreset.X, coreset.y, coreset.weights, C, kernel)
    model = KernelExpansion(solution.support_vectors, solution.dual_coef[:, None], kernel,
                            classes, np.array([solution.intercept]))
    return model, coreset
