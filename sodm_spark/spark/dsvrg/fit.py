"""DSVRG (SODM paper, Algorithm 2) on Spark: distributed SVRG for the linear-kernel ODM primal.

The SODM paper: Wang, Cao, Zhang, Shi & Jin, "Scalable Optimal Margin Distribution Machine",
which takes DSVRG from Lee, Lin, Ma & Yang, "Distributed Stochastic Variance Reduced Gradient
Methods by Sampling Extra Data with Replacement" (JMLR 2017); docs/design.md §3.

Each epoch: the driver sends the snapshot w̃ to every partition, each partition j returns its
loss and loss-gradient sum h_j at w̃ (Alg. 2 lines 6-8) and the driver adds them up in
partition order (line 9); then the partitions take turns (round robin, lines 10-20): partition
j runs SVRG steps on rows drawn without replacement from its own data and hands w to partition
j+1, one single-partition Spark job per hop (``sc.runJob(rdd, f, partitions=[j])``), so only w
(d floats) travels. The numerics are ``sodm_spark.solvers.svrg``; this module lays out the
partitions and runs the epochs, moving only vectors.

Every job reads every row, so a partition's stacked block stays resident in executor-local
files between jobs, and one turn of the round robin is one Spark job over a run of partitions
resident on one host: :mod:`.blocks` (which also cuts the input into chunks); w is
bit-identical whichever path served a block and however the cluster is shaped. Rows that must
be dealt into partitions are dealt as SODM deals them (:mod:`sodm_spark.spark.partitioning`).
Class probabilities come from rows held out of the epochs (:mod:`.holdout`).
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse

from ...core.array_namespace import check_device
from ...core.errors import SettingsError
from ...core.kernels import Kernel
from ...core.labels import accuracy_of_scores, coded_classes, plus_minus
from ...core.validation import check_odm_params, check_positive_int, check_two_classes
from ...core.weights import (canonical_class_weight, class_weights_for, combined_weights,
                             row_weights)
from ...models.calibration import CALIBRATIONS
from ...models.expansion import KernelExpansion
from ...partition import nearest_landmark, partitions_look_like_whole, select_landmarks
from ...solvers.svrg import (epoch_rng, loss_gradient_sum, row_sq_norms, sample_rows, step_for,
                             svrg_inner)
from ..partitioning import (LANDMARK_CANDIDATES, Partitioning, partition_blocks,
                            whole_partitions)
from ..records import StatsRecord
from ..session import PERSIST
from .blocks import (ResidentBlocks, drop_everywhere, first_read, input_chunks,
                     keyed_by_first_row, partition_chunks)


@dataclass(frozen=True)
class DSVRGParams:
    lam: float = 1000.0
    theta: float = 0.1
    v: float = 0.5
    epochs: int = 30
    # stop when the objective changes by at most this share of itself in an epoch
    relative_change_tol: float = 1e-6
    step: float | None = None  # default: solvers.svrg.step_for(L_max, rows)
    n_partitions: int | None = None  # default: the cluster's default parallelism
    partitioner: str = "stratified"  # sparse input is dealt at random (no landmarks in 10^5 dims)
    strata: int = 20
    seed: int = 0
    resident: bool = True  # keep partitions' blocks in executor scratch files between jobs
    fit_intercept: bool = True  # unpenalized bias b, f(x) = wᵀx + b (solvers.svrg docstring)
    # None, "balanced" or (label, weight) pairs: each class's rows weighted in the loss
    # (sodm_spark.core.weights)
    class_weight: object = None
    # the model's class probabilities, fitted on rows held out as SODM's validation slice is
    # (sodm_spark.spark.dsvrg.holdout; SODMParams' defaults): "sigmoid", "isotonic" or "none"
    calibration: str = "sigmoid"
    validation_fraction: float = 0.1
    validation_max_rows: int = 10_000
    # SODMParams.device, checked and kept: DSVRG's steps are vectors on the CPU whatever it is
    device: str = "auto"

    def __post_init__(self):
        object.__setattr__(self, "class_weight", canonical_class_weight(self.class_weight))
        object.__setattr__(self, "device", check_device(self.device))
        self.validate()

    def validate(self) -> None:
        """Refuse a bad setting, naming it (run once, as the parameters are built)."""
        check_odm_params(self.lam, self.theta, self.v)
        check_positive_int(self.epochs, "epochs")
        if not 0.0 <= self.relative_change_tol < np.inf:
            raise ValueError(f"relative_change_tol (the epochs' tol) must be a number >= 0, got "
                             f"{self.relative_change_tol!r}.")
        if self.step is not None and not 0 < self.step < 1:
            raise ValueError(f"step must lie in (0, 1), got {self.step!r}.")
        if self.n_partitions is not None and self.n_partitions < 1:
            raise ValueError(f"n_partitions must be positive, got {self.n_partitions!r}.")
        if self.calibration not in CALIBRATIONS:
            raise ValueError(f"calibration must be one of {', '.join(CALIBRATIONS)}, got "
                             f"{self.calibration!r}.")
        if not 0.0 < self.validation_fraction < 1.0:
            raise ValueError(f"validation_fraction must lie in (0, 1), got "
                             f"{self.validation_fraction!r}.")
        check_positive_int(self.validation_max_rows, "validation_max_rows")


@dataclass(frozen=True)
class DSVRGTaskSettings:
    """What every DSVRG partition task reads besides w: the ODM loss, the intercept and the
    seed of the row draws (built once per fit by :func:`fit_dsvrg`)."""

    lam: float
    theta: float
    v: float
    fit_intercept: bool
    seed: int  # partition k draws its rows of epoch e from epoch_rng([seed, k], e)
    center: object = None  # Broadcast of the column means μ (with the intercept), or None
    # (weight of the -1 rows, of the +1 rows) and M/S: a row's loss gradient in a step is
    # times M·s_i/S (solvers.svrg.row_factors); None: unweighted
    class_weights: tuple | None = None
    weight_scale: float = 1.0
    row_weighted: bool = False  # y holds ±s_i, the rows' weight column (blocks.partition_chunks)

    def labels_and_weights(self, y):
        """(±1 labels, each row's s_i: its weight column's times its class's, or None)."""
        if not self.row_weighted:
            return y, row_weights(y, self.class_weights)
        signs = np.sign(y)
        return signs, combined_weights(np.abs(y), self.class_weights, signs)

    def row_factor(self, weights):
        """Each row's M·s_i/S for its weights ``weights``, or None (unweighted)."""
        return None if weights is None else weights * self.weight_scale

    def center_value(self):
        """μ on the executor (the rows are centred with it), or None."""
        return None if self.center is None else self.center.value


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
    intercept: float = 0.0
    epochs: list = field(default_factory=list)
    train_seconds: float = 0.0
    partition_seconds: float = 0.0
    n_rows: int = 0
    step: float = 0.0
    layout: str = ""  # how the rows were laid out into partitions
    resident_hits: int = 0  # partition tasks served from resident blocks
    resident_misses: int = 0  # ... that had to read the persisted RDD instead (after the first)
    validation_rows: int = 0  # held-out rows the model's calibration was fitted on


# --- partition tasks and layout ----------------------------------------------------------------

def _survey_block(key, X, y, wanted, seed):
    """Rows, positives, max ‖x‖², sparse?, (dense) a seeded uniform sample of at most
    ``wanted`` rows (smallest random keys) for Eqn 8, and the column sums (for the centring
    of the intercept fit, solvers.svrg), of one stacked partition."""
    sparse = scipy.sparse.issparse(X)
    sample = None
    if not sparse:
        keys = np.random.default_rng([seed, 7, key]).random(X.shape[0])
        sample = np.array(X[np.argsort(keys, kind="stable")[:wanted]])  # in random-key order
    # the weight of each class's rows (a weight column's: y holds ±s_i), else their counts
    weight_sums = (float(np.abs(y[y < 0]).sum()), float(np.abs(y[y > 0]).sum()))
    return (X.shape[0], int(np.sum(y > 0)), float(row_sq_norms(X).max()), sparse, sample,
            np.asarray(X.sum(axis=0), dtype=np.float64).reshape(-1), weight_sums,
            bool(np.any(np.abs(y) != 1.0)))


def _strata_by_class(X, y, landmarks, n_strata):
    """Rows per (stratum of Eqn 7, class) of one partition, flattened to 2·S counts."""
    strata = np.zeros(X.shape[0], dtype=np.int64) if landmarks is None else \
        nearest_landmark(np.asarray(X), landmarks, Kernel.create("linear"))
    return np.bincount(2 * strata + (y > 0), minlength=2 * n_strata)


def _loss_and_gradient(X, y, w, settings: DSVRGTaskSettings, with_norm=False):
    """The partition's (loss sum, gradient sum) at w; with ``with_norm`` also its largest
    ‖x_i - μ‖² (the step's L_max on centred rows, known once μ is)."""
    center = settings.center_value()
    y, weights = settings.labels_and_weights(y)
    sums = loss_gradient_sum(w, X, y, settings.lam, settings.theta, settings.v,
                             settings.fit_intercept, center, weights)
    if not with_norm:
        return sums
    factor = settings.row_factor(weights)
    if factor is None:
        return sums + (float(row_sq_norms(X, center).max()),)
    # weighted: each row's smoothness term times its factor, the intercept's 1 included
    return sums + (float(((row_sq_norms(X, center) + settings.fit_intercept) * factor).max()),)


def _hop(X, y, key, w, snapshot, mean_grad, step, settings: DSVRGTaskSettings, epoch):
    """One partition's turn: SVRG steps over its own rows without replacement (Alg. 2 l. 14)."""
    rows = sample_rows(X.shape[0], X.shape[0], epoch_rng([settings.seed, key], epoch))
    y, weights = settings.labels_and_weights(y)
    return svrg_inner(w, snapshot, mean_grad, X, y, rows, step, settings.lam, settings.theta,
                      settings.v, settings.fit_intercept, settings.center_value(),
                      settings.row_factor(weights))


def _uniform_sample(survey, wanted, seed):
    """``wanted`` rows uniform over all partitions, from each partition's uniform sample."""
    sizes = np.array([entry[1] for entry in survey])
    take = np.random.default_rng([seed, 3]).multivariate_hypergeometric(
        sizes, min(wanted, int(sizes.sum())))
    return np.concatenate([entry[5][:count] for entry, count in zip(survey, take)])


def stratified_layout(sc, inputs: ResidentBlocks, chunked, per_partition, params: DSVRGParams,
                      survey):
    """Alg. 2's partitions: the input's own chunks (:func:`.blocks.input_chunks`) when
    they already look like the whole (:func:`partitions_look_like_whole` over landmark strata ×
    class), else rows dealt by stratum (:func:`partition_blocks`). ``inputs`` runs functions
    on the input chunks, ``chunked`` is the RDD of (key, (X, ±1 y, ids)) chunks behind it and
    ``per_partition`` the same chunks as (input partition, chunk) in the input's own
    partitions, which the dealing reads (so it deals alike whatever the cluster's shape).
    Returns (RDD of (key, block): the input chunks, or the dealt partitions with key k in Spark
    partition k; a description for the log; the persisted dealt chunks, or None when the rows
    were not dealt)."""
    sparse = any(entry[4] for entry in survey)  # any block left CSR: no landmarks
    n_rows = sum(entry[1] for entry in survey)
    n_partitions = params.n_partitions or max(1, sc.defaultParallelism)
    # Sparse rows in 10^5 dimensions get no landmarks: their strata are the two classes.
    landmarks = None
    if not sparse and params.partitioner == "stratified":
        sample = _uniform_sample(survey, LANDMARK_CANDIDATES * params.strata, params.seed)
        landmarks = sample[select_landmarks(sample, Kernel.create("linear"), params.strata)]
    n_strata = 1 if landmarks is None else landmarks.shape[0]
    same_count = params.n_partitions in (None, len(survey))
    if same_count and len(survey) >= min(n_partitions, n_rows):
        sc.setJobDescription("DSVRG: do the input chunks already look like the whole?")
        counts = inputs.run(lambda _, X, y: _strata_by_class(X, y, landmarks, n_strata))
        if partitions_look_like_whole(np.stack([counts[entry[0]] for entry in survey])):
            return chunked, (f"{len(survey)} input chunks kept: each already holds every "
                             "stratum in its overall share"), None
    if n_partitions > n_rows:
        raise SettingsError(f"DSVRG asks for {n_partitions} partitions but the data have only "
                         f"{n_rows} rows; pass at most {n_rows} (--partitions / n_partitions).")
    partitioner = "random" if sparse else params.partitioner
    chunks, _, _ = partition_blocks(sc, per_partition.values(), Kernel.create("linear"), n_rows,
                                    n_partitions,
                                    Partitioning(partitioner, params.strata, params.seed))
    parts = chunks.mapPartitions(whole_partitions, preservesPartitioning=True)
    return parts, f"{partitioner} dealing into {n_partitions} partitions", chunks


def fit_dsvrg(sc, blocks, params: DSVRGParams, classes, n_features: int, test=None,
              on_epoch=None, w0=None) -> DSVRGFit:
    """DSVRG on ``blocks`` (RDD of Blocks, dense or CSR X, two label values in ``classes``).

    The model is the linear kernel expansion with one "support vector" w, coefficient 1 and
    (with ``params.fit_intercept``) the intercept b, i.e. f(x) = wᵀx + b, so it saves, loads
    and predicts like every other model here. ``w0`` holds d entries, or d+1 (w, b). With
    the intercept the steps run on centred rows x - μ (μ: the column means, summed in the
    survey pass; see solvers.svrg) and (w, b' = b + wᵀμ) is turned back into (w, b) at the end.
    """
    classes = np.asarray(classes)
    check_two_classes(classes, "fit_dsvrg", "DSVRG")
    started = time.perf_counter()
    positive = classes[1]
    # A miss reads the input again: from the caller's persisted RDD if it is one (no second
    # copy), else from a persisted copy of the chunks made here.
    own_copy = not blocks.is_cached
    per_partition = blocks.mapPartitionsWithIndex(
        lambda i, it: partition_chunks(i, it, positive), preservesPartitioning=True)
    n_tasks = max(1, min(blocks.getNumPartitions(), sc.defaultParallelism))
    if own_copy:  # coalescing cached data is cheap; coalescing a Python pipeline is not
        per_partition = per_partition.persist(PERSIST)
        chunked = per_partition.coalesce(n_tasks).mapPartitions(keyed_by_first_row)
    else:
        chunked = blocks.coalesce(n_tasks).mapPartitions(lambda it: input_chunks(it, positive))
    fit_id = uuid.uuid4().hex  # names this fit's resident files; never reused
    stores = [f"{fit_id}-input", f"{fit_id}-dealt"] if params.resident else [None, None]
    parts = inputs = blocks_ = center = dealt = None
    try:
        # One read of every input partition: stacked, made resident, surveyed.
        sc.setJobDescription("DSVRG: rows, labels, norms and a landmark sample")
        wanted, seed, store = LANDMARK_CANDIDATES * params.strata, params.seed, stores[0]
        tagged = first_read(sc, chunked, store,
                            lambda key, X, y: _survey_block(key, X, y, wanted, seed))
        input_task = {entry[1]: entry[0] for entry in tagged}
        found = [entry[1:] for entry in tagged]
        if not found:
            raise ValueError("DSVRG got no rows: the training data is empty.")
        survey = [(key, *value) for key, _, _, value in found]
        inputs = ResidentBlocks(sc, chunked, [entry[0] for entry in found], store,
                                [entry[:3] for entry in found], input_task.__getitem__)
        n_rows = sum(entry[1] for entry in survey)
        parts, layout, dealt = stratified_layout(sc, inputs, chunked, per_partition, params,
                                                 survey)
        partition_seconds = time.perf_counter() - started
        bias = bool(params.fit_intercept)
        mu = sum(entry[6] for entry in survey) / n_rows if bias else np.zeros(n_features)
        center = sc.broadcast(mu) if bias else None
        positives = sum(entry[2] for entry in survey)
        class_weights = class_weights_for(params.class_weight, classes,
                                          [n_rows - positives, positives])
        row_weighted = any(entry[8] for entry in survey)  # a weight column (not all 1)
        weight_sums = np.sum([entry[7] for entry in survey], axis=0) if row_weighted else \
            np.array([n_rows - positives, positives], dtype=np.float64)
        total_weight = float(n_rows) if class_weights is None and not row_weighted else \
            float((np.ones(2) if class_weights is None else class_weights) @ weight_sums)
        settings = DSVRGTaskSettings(
            params.lam, params.theta, params.v, fit_intercept=bias, seed=params.seed,
            center=center, weight_scale=n_rows / total_weight, row_weighted=row_weighted,
            class_weights=None if class_weights is None else tuple(class_weights.tolist()))
        w = np.zeros(n_features + bias)  # (w, b') with an intercept, b' = b + wᵀμ
        if w0 is not None:
            w0 = np.asarray(w0, dtype=np.float64).reshape(-1)
            if w0.size not in (n_features, n_features + bias):
                raise ValueError(f"w0 must hold {n_features} weights"
                                 + (f" (or {n_features + 1}: weights, then the intercept)"
                                    if bias else "") + f", got {w0.size}.")
            w[:w0.size] = w0
            if bias:
                w[n_features] += float(w[:n_features] @ mu)
        # input chunks and dealt partitions both take turns in key order; no empty key
        if dealt is not None:
            if stores[0] is not None:
                drop_everywhere(sc, stores[:1], inputs.store_dirs(), sc.defaultParallelism)
            if own_copy:
                per_partition.unpersist()
            blocks_ = ResidentBlocks(sc, parts, range(parts.getNumPartitions()), stores[1])
        else:
            blocks_ = inputs
        keys = blocks_.keys

        def full_pass(w, with_norm=False):
            """(P(w), mean loss gradient[, largest centred ‖x‖²]): every partition's sums
            (Alg. 2 lines 6-8), added up on the driver in partition order (line 9)."""
            sums = blocks_.run(lambda _, X, y: _loss_and_gradient(X, y, w, settings, with_norm))
            loss, grad = 0.0, np.zeros(w.size)
            for key in keys:
                loss += sums[key][0]
                grad += sums[key][1]
            weights = w[:n_features]
            result = (0.5 * float(weights @ weights) + loss / total_weight, grad / total_weight)
            return result + ((max(sums[key][2] for key in keys),) if with_norm else ())

        def raw_intercept(w):
            return float(w[n_features] - w[:n_features] @ mu) if bias else 0.0

        test_y = None if test is None else plus_minus(test[1], positive)
        scoring = 0.0
        sc.setJobDescription("DSVRG epoch 0: full gradient")
        objective, mean_grad, max_sq_norm = full_pass(w, with_norm=True)
        scale = params.lam / (1 - params.theta) ** 2
        # weighted: max_sq_norm already holds the intercept's 1 and each row's factor
        weighted = settings.class_weights is not None or settings.row_weighted
        l_max = 1.0 + scale * max(1.0, params.v) * (max_sq_norm + (0.0 if weighted else bias))
        step = params.step or step_for(l_max, n_rows)  # an epoch is n_rows steps
        turns = blocks_.turns()  # known once every block has been read
        layout += f"; {len(turns)} turn{'s' * (len(turns) > 1)} per epoch"
        history = []
        for epoch in range(1, params.epochs + 1):
            epoch_start = time.perf_counter()
            snapshot = w.copy()
            fixed = sc.broadcast((snapshot, mean_grad))  # w̃ and h for the whole epoch
            for turn in turns:  # round robin: one single-partition job per turn
                sc.setJobDescription(f"DSVRG epoch {epoch}: partitions {turn}'s turn")
                w = blocks_.chain(lambda k, X, y, w, e=epoch: _hop(
                    X, y, k, w, *fixed.value, step, settings, e), w, turn)
            fixed.unpersist(blocking=False)
            sc.setJobDescription(f"DSVRG epoch {epoch}: full gradient")
            previous = objective
            objective, mean_grad = full_pass(w)
            entry = EpochStats(epoch, time.perf_counter() - epoch_start, objective)
            entry.elapsed = time.perf_counter() - started - scoring
            if test is not None:
                scoring_start = time.perf_counter()
                scores = test[0] @ w[:n_features] + raw_intercept(w)
                entry.test_accuracy = accuracy_of_scores(scores, test_y, coded_classes(2))
                scoring += time.perf_counter() - scoring_start
            history.append(entry)
            if on_epoch is not None:
                on_epoch(entry)
            if not np.isfinite(objective):
                raise FloatingPointError(f"DSVRG diverged at epoch {epoch}: pass a smaller step.")
            if abs(previous - objective) <= params.relative_change_tol * abs(objective):
                break
        train_seconds = time.perf_counter() - started - scoring
        intercept = raw_intercept(w)
    finally:
        if center is not None:
            center.unpersist(blocking=False)
        sc.setJobDescription("DSVRG: dropping resident blocks")
        if params.resident:
            try:
                written = [b.store_dirs() for b in (inputs, blocks_) if b is not None]
                drop_everywhere(sc, stores, sorted(set(sum(written, []))),
                                 max(sc.defaultParallelism, 1))
            except Exception:  # the fit's own error (or a cancelled job) matters more
                pass
        if own_copy:
            per_partition.unpersist()
        if dealt is not None:
            dealt.unpersist()
        sc.setJobDescription(None)
    w = w[:n_features]
    model = KernelExpansion(w[None, :], np.ones((1, 1)), Kernel.create("linear"), classes,
                            np.array([intercept]) if bias else None)
    return DSVRGFit(w=w, model=model, intercept=intercept, epochs=history,
                    train_seconds=train_seconds,
                    partition_seconds=partition_seconds, n_rows=n_rows, step=step,
                    layout=layout, resident_hits=blocks_.hits, resident_misses=blocks_.misses)
