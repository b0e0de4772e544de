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
from ..partition import nearest_landmark, partitions_look_like_whole, select_landmarks
from ..solvers.svrg import epoch_rng, loss_gradient_sum, row_sq_norms, sample_rows, svrg_inner
from ..validation import check_odm_params
from .sodm import SPILL, SODMParams, StatsRecord, partition_blocks


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
    layout: str = ""  # how the rows were laid out into partitions


CHUNK_BYTES = 8 << 20


def _chunks(index, blocks, positive):
    """An input partition's rows as (index, (X, ±1 y, ids)) chunks of at most ~8 MB.

    Spark hands a cached partition to Python several times faster as many mid-sized pickles
    than as one large one, and DSVRG reads every partition twice per epoch.
    """
    for block in blocks:
        n = block.X.shape[0]
        if n == 0:
            continue
        nbytes = block.X.data.nbytes if scipy.sparse.issparse(block.X) else block.X.nbytes
        step = max(1, int(CHUNK_BYTES * n // max(nbytes, 1)))
        y = np.where(block.y == positive, 1.0, -1.0)
        for start in range(0, n, step):
            rows = slice(start, start + step)
            yield index, (block.X[rows], y[rows], block.row_ids[rows])


def _stack(chunks):
    """One (X, y) from a partition's chunks, in order; CSR stays CSR."""
    Xs = [chunk[0] for chunk in chunks]
    if len(Xs) == 1:
        return Xs[0], chunks[0][1]
    X = scipy.sparse.vstack(Xs, format="csr") if scipy.sparse.issparse(Xs[0]) \
        else np.concatenate(Xs)
    return X, np.concatenate([chunk[1] for chunk in chunks])


def _survey(index, items, wanted, seed):
    """One pass over a partition's chunks: rows, positives, max ‖x‖², sparse?, and (dense) a
    seeded uniform sample of at most ``wanted`` rows (smallest random keys) for Eqn 8."""
    n_rows = n_positive = 0
    max_sq_norm, sparse = 0.0, False
    keys, rows = np.empty(0), []
    for number, (_, (X, y, _)) in enumerate(items):
        n_rows += X.shape[0]
        n_positive += int(np.sum(y > 0))
        max_sq_norm = max(max_sq_norm, float(row_sq_norms(X).max()))
        sparse = scipy.sparse.issparse(X)
        if not sparse:
            chunk_keys = np.random.default_rng([seed, 7, index, number]).random(X.shape[0])
            best = np.argsort(chunk_keys)[:wanted]
            keys = np.concatenate([keys, chunk_keys[best]])
            rows.append(X[best])
    if n_rows == 0:
        return
    sample = None
    if not sparse:
        sample = np.concatenate(rows)[np.argsort(keys, kind="stable")[:wanted]]
    yield index, n_rows, n_positive, max_sq_norm, sparse, sample


def _strata_by_class(index, items, landmarks, n_strata):
    """Rows per (stratum of Eqn 7, class) of one partition, flattened to 2·S counts."""
    counts = np.zeros(2 * n_strata, dtype=np.int64)
    for _, (X, y, _) in items:
        strata = np.zeros(X.shape[0], dtype=np.int64) if landmarks is None else \
            nearest_landmark(X, landmarks, Kernel.create("linear"))
        counts += np.bincount(2 * strata + (y > 0), minlength=2 * n_strata)
    yield index, counts


def _loss_and_gradient(item, w, config):
    X, y = item[1][0], item[1][1]
    loss, grad = loss_gradient_sum(w, X, y, config["lam"], config["theta"], config["v"])
    return loss, grad


def _hop(items, w, snapshot, mean_grad, step, config, epoch):
    """One partition's turn: SVRG steps over its own rows without replacement (Alg. 2 l. 14)."""
    out = w
    by_key = {}
    for key, value in items:
        by_key.setdefault(key, []).append(value)
    for key in sorted(by_key):
        X, y = _stack(by_key[key])
        rows = sample_rows(X.shape[0], X.shape[0], epoch_rng([config["seed"], key], epoch))
        out = svrg_inner(out, snapshot, mean_grad, X, y, rows, step, config["lam"],
                         config["theta"], config["v"])
    yield out


def _uniform_sample(survey, wanted, seed):
    """``wanted`` rows uniform over all partitions, from each partition's uniform sample."""
    sizes = np.array([entry[1] for entry in survey])
    take = np.random.default_rng([seed, 3]).multivariate_hypergeometric(
        sizes, min(wanted, int(sizes.sum())))
    return np.concatenate([entry[5][:count] for entry, count in zip(survey, take)])


def stratified_layout(sc, chunked, params: "DSVRGParams", survey):
    """Alg. 2's partitions: the input's own partitions when they already look like the whole
    (:func:`partitions_look_like_whole` over landmark strata × class), else rows dealt by
    stratum (:func:`partition_blocks`). ``chunked`` is the persisted RDD of (partition index,
    (X, ±1 y, ids)) chunks. Returns (RDD of (key, block) with key k in Spark partition k, a
    description for the log, whether the rows were dealt)."""
    sparse = survey[0][4]
    n_rows = sum(entry[1] for entry in survey)
    n_partitions = params.n_partitions or max(1, sc.defaultParallelism)
    # Sparse rows in 10^5 dimensions get no landmarks: their strata are the two classes.
    landmarks = None
    if not sparse and params.partitioner == "stratified":
        sample = _uniform_sample(survey, 50 * params.strata, params.seed)
        landmarks = sample[select_landmarks(sample, Kernel.create("linear"), params.strata)]
    n_strata = 1 if landmarks is None else landmarks.shape[0]
    same_count = params.n_partitions in (None, len(survey))
    if same_count and len(survey) >= min(n_partitions, n_rows):
        sc.setJobDescription("DSVRG: do the input partitions already look like the whole?")
        landmarks_b = sc.broadcast(landmarks)
        counts = dict(chunked.mapPartitionsWithIndex(
            lambda i, it: _strata_by_class(i, it, landmarks_b.value, n_strata)).collect())
        landmarks_b.unpersist(blocking=False)
        if partitions_look_like_whole(np.stack([counts[entry[0]] for entry in survey])):
            return chunked, (f"{len(survey)} input partitions kept: each already holds every "
                             "stratum in its overall share"), False
    if n_partitions > n_rows:
        raise ValueError(f"DSVRG asks for {n_partitions} partitions but the data have only "
                         f"{n_rows} rows; pass at most {n_rows} (--partitions / n_partitions).")
    partitioner = "random" if sparse else params.partitioner
    parts, _, _ = partition_blocks(
        sc, chunked.values(), SODMParams(kernel="linear", partitioner=partitioner,
                                         strata=params.strata, seed=params.seed, levels=0),
        Kernel.create("linear"), n_rows, n_partitions)
    chunked.unpersist()
    return parts, f"{partitioner} dealing into {n_partitions} partitions", True


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
    sc.setJobDescription("DSVRG: rows, labels, norms and a landmark sample")
    chunked = blocks.mapPartitionsWithIndex(lambda i, it: _chunks(i, it, positive),
                                            preservesPartitioning=True).persist(SPILL)
    survey = sorted(chunked.mapPartitionsWithIndex(
        lambda i, it: _survey(i, it, 50 * params.strata, params.seed)).collect(),
        key=lambda entry: entry[0])
    if not survey:
        chunked.unpersist()
        raise ValueError("DSVRG got no rows: the training data is empty.")
    n_rows = sum(entry[1] for entry in survey)
    parts, layout, owned = stratified_layout(sc, chunked, params, survey)
    partition_seconds = time.perf_counter() - started
    config = {"lam": params.lam, "theta": params.theta, "v": params.v, "seed": params.seed}
    scale = params.lam / (1 - params.theta) ** 2
    step = params.step or 1.0 / (2.0 * (1.0 + scale * max(1.0, params.v)
                                        * max(entry[3] for entry in survey)))
    # partition k holds key k in both layouts; empty input partitions take no turn
    keys = [entry[0] for entry in survey] if not owned else list(range(parts.getNumPartitions()))

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
                    partition_seconds=partition_seconds, n_rows=n_rows, step=step,
                    layout=layout)
