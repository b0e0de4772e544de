"""DSVRG (SODM paper, Algorithm 2) on Spark: distributed SVRG for the linear-kernel ODM primal.

Each epoch: the driver broadcasts the snapshot w̃; one ``treeAggregate`` sums every
partition's loss and loss gradient at w̃ (the full gradient, Alg. 2 lines 6-9); then the
partitions take turns (round robin, lines 10-15): partition j runs SVRG steps on rows drawn
without replacement from its own data and hands w to partition j+1, one single-partition
Spark job per hop (``sc.runJob(rdd, f, partitions=[j])``), so only w (d floats) travels.
The numerics are ``sodm_spark.solvers.svrg``; this module only moves blocks and vectors.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse

from ..kernels import Kernel
from ..model import KernelExpansion
from ..solvers.svrg import epoch_rng, loss_gradient_sum, row_sq_norms, sample_rows, svrg_inner
from ..validation import check_odm_params
from .sodm import SPILL, SODMParams, StatsRecord, _map_labels, _moments, partition_blocks


@dataclass(frozen=True)
class DSVRGParams:
    lam: float = 1000.0
    theta: float = 0.1
    v: float = 0.5
    epochs: int = 30
    tol: float = 1e-6  # stop when the objective changes by at most tol (relative) in an epoch
    step: float | None = None  # default: 1/(2 L_max), see solvers.svrg.default_step
    n_partitions: int | None = None  # default: the cluster's default parallelism
    partitioner: str = "stratified"  # sparse input is dealt at random (no landmarks in 10^5 dims)
    strata: int = 20
    seed: int = 0

    def validate(self) -> None:
        check_odm_params(self.lam, self.theta, self.v)
        if int(self.epochs) != self.epochs or self.epochs < 1:
            raise ValueError(f"epochs must be a positive integer, got {self.epochs!r}.")
        if self.step is not None and not 0 < self.step < 1:
            raise ValueError(f"step must lie in (0, 1), got {self.step!r}.")
        if self.n_partitions is not None and self.n_partitions < 1:
            raise ValueError(f"n_partitions must be positive, got {self.n_partitions!r}.")


@dataclass
class EpochStats(StatsRecord):
    epoch: int
    seconds: float
    objective: float
    elapsed: float = 0.0  # since the fit started, partitioning included, test scoring excluded
    test_accuracy: float | None = None


@dataclass
class DSVRGFit:
    w: np.ndarray
    model: KernelExpansion
    epochs: list = field(default_factory=list)
    train_seconds: float = 0.0
    partition_seconds: float = 0.0
    n_rows: int = 0
    step: float = 0.0


def _max_sq_norm(item):
    X = item[1][0]
    return float(row_sq_norms(X).max()) if X.shape[0] else 0.0


def _loss_and_gradient(item, w, config):
    X, y = item[1][0], item[1][1]
    loss, grad = loss_gradient_sum(w, X, y, config["lam"], config["theta"], config["v"])
    return loss, grad


def _hop(items, w, snapshot, mean_grad, step, config, epoch):
    """One partition's turn: SVRG steps over its own rows without replacement (Alg. 2 l. 14)."""
    out = w
    for key, (X, y, _, _) in items:
        rows = sample_rows(X.shape[0], X.shape[0], epoch_rng([config["seed"], key], epoch))
        out = svrg_inner(out, snapshot, mean_grad, X, y, rows, step, config["lam"],
                         config["theta"], config["v"])
    yield out


def fit_dsvrg(sc, blocks, params: DSVRGParams, classes, n_features: int, test=None,
              on_epoch=None, w0=None) -> DSVRGFit:
    """DSVRG on ``blocks`` (RDD of Blocks, dense or CSR X, two label values in ``classes``).

    The model is the linear kernel expansion with one "support vector" w and coefficient 1,
    i.e. f(x) = wᵀx, so it saves, loads and predicts like every other model here.
    """
    params.validate()
    classes = np.asarray(classes)
    if classes.size != 2:
        raise ValueError(f"DSVRG is a binary classifier; the labels hold {classes.size} classes "
                         f"({', '.join(map(str, classes[:10]))}).")
    started = time.perf_counter()
    positive = classes[1]
    labelled = blocks.map(lambda b: _map_labels(b, positive)).persist(SPILL)
    n_rows = int(labelled.map(_moments).treeReduce(np.add)[0])
    n_partitions = params.n_partitions or max(1, sc.defaultParallelism)
    if n_partitions > n_rows:
        raise ValueError(f"{n_partitions} partitions but only {n_rows} rows; use fewer.")
    sparse_input = bool(labelled.map(lambda b: scipy.sparse.issparse(b[0])).first())
    partitioner = "random" if sparse_input else params.partitioner
    sc.setJobDescription(f"DSVRG partition: {partitioner} into {n_partitions}")
    parts, _ = partition_blocks(
        sc, labelled, SODMParams(kernel="linear", partitioner=partitioner, strata=params.strata,
                                 seed=params.seed, levels=0),
        Kernel.create("linear"), n_rows, n_partitions)
    labelled.unpersist()
    partition_seconds = time.perf_counter() - started
    config = {"lam": params.lam, "theta": params.theta, "v": params.v, "seed": params.seed}
    scale = params.lam / (1 - params.theta) ** 2
    step = params.step or 1.0 / (2.0 * (1.0 + scale * max(1.0, params.v)
                                        * parts.map(_max_sq_norm).max()))
    keys = sorted(parts.keys().collect())  # partition k holds key k (partition_blocks)

    w = np.zeros(n_features) if w0 is None else np.array(w0, dtype=np.float64)

    def full_pass(w):
        """(P(w), mean loss gradient) with one treeAggregate over all partitions."""
        b = sc.broadcast(w)
        loss, grad = parts.map(lambda item: _loss_and_gradient(item, b.value, config)) \
            .treeReduce(lambda a, c: (a[0] + c[0], a[1] + c[1]))
        b.unpersist(blocking=False)
        return 0.5 * float(w @ w) + loss / n_rows, grad / n_rows

    test_y = None if test is None else np.where(np.asarray(test[1]) == positive, 1.0, -1.0)
    scoring = 0.0
    sc.setJobDescription("DSVRG epoch 0: full gradient")
    objective, mean_grad = full_pass(w)
    history = []
    for epoch in range(1, params.epochs + 1):
        epoch_start = time.perf_counter()
        snapshot = w.copy()
        for key in keys:  # round robin: one single-partition job per hop
            sc.setJobDescription(f"DSVRG epoch {epoch}: partition {key}'s turn")
            w = sc.runJob(parts, lambda items, w=w, e=epoch: _hop(
                items, w, snapshot, mean_grad, step, config, e), partitions=[key])[0]
        sc.setJobDescription(f"DSVRG epoch {epoch}: full gradient")
        previous = objective
        objective, mean_grad = full_pass(w)
        entry = EpochStats(epoch, time.perf_counter() - epoch_start, objective)
        entry.elapsed = time.perf_counter() - started - scoring
        if test is not None:
            scoring_start = time.perf_counter()
            entry.test_accuracy = float(np.mean(np.where(test[0] @ w > 0, 1.0, -1.0) == test_y))
            scoring += time.perf_counter() - scoring_start
        history.append(entry)
        if on_epoch is not None:
            on_epoch(entry)
        if not np.isfinite(objective):
            raise FloatingPointError(f"DSVRG diverged at epoch {epoch}: pass a smaller step.")
        if abs(previous - objective) <= params.tol * abs(objective):
            break
    parts.unpersist()
    sc.setJobDescription(None)
    model = KernelExpansion(w[None, :], np.ones((1, 1)), Kernel.create("linear"), classes)
    return DSVRGFit(w=w, model=model, epochs=history,
                    train_seconds=time.perf_counter() - started - scoring,
                    partition_seconds=partition_seconds, n_rows=n_rows, step=step)
