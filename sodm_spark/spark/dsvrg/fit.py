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

import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import scipy.sparse

from ...core import defaults
from ...core.array_namespace import check_device
from ...core.errors import InputError, SettingsError, refused_as_settings
from ...core.kernels import Kernel
from ...core.labels import plus_minus
from ...core.validation import check_odm_params, check_positive_int, check_two_classes
from ...core.weights import ClassWeight, canonical_class_weight, class_weights_for
from ...models.calibration import CALIBRATIONS
from ...models.expansion import KernelExpansion
from ...partition import nearest_landmark, partitions_look_like_whole, select_landmarks
from ...solvers.svrg import row_sq_norms
from ..partitioning import (LANDMARK_CANDIDATES, Partitioning, partition_blocks,
                            whole_partitions)
from ..engine import ENGINE_ERRORS, PERSIST
from .blocks import (ResidentBlocks, drop_everywhere, first_read, input_chunks,
                     keyed_by_first_row, partition_chunks)
from .epochs import DSVRGTaskSettings, EpochStats, PrimalSetup, initial_w, run_epochs

if TYPE_CHECKING:
    from pyspark import RDD, Broadcast

    from ..frame_rdd import FrameRDD

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DSVRGParams:
    """Algorithm 2's settings: the ODM problem's λ, θ, v (their defaults the package's one set,
    core/defaults.py), the epochs and their stop, the partitions, the intercept, the weights
    and the held-out slice the probabilities are fitted on."""

    lam: float = defaults.LAM
    theta: float = defaults.THETA
    v: float = defaults.V
    epochs: int = 30
    # stop when the objective changes by at most this share of itself in an epoch
    relative_change_tol: float = 1e-6
    step: float | None = None  # default: solvers.svrg.step_for(L_max, rows)
    n_partitions: int | None = None  # default: the cluster's default parallelism
    partitioner: str = "stratified"  # sparse input is dealt at random (no landmarks in 10^5 dims)
    strata: int = 20
    seed: int = 0
    resident: bool = True  # keep partitions' blocks in executor scratch files between jobs
    # unpenalized bias b, f(x) = wᵀx + b (solvers.svrg docstring)
    fit_intercept: bool = defaults.FIT_INTERCEPT
    # None, "balanced" or (label, weight) pairs: each class's rows weighted in the loss
    # (sodm_spark.core.weights)
    class_weight: ClassWeight = None
    # the model's class probabilities, fitted on rows held out as SODM's validation slice is
    # (sodm_spark.spark.dsvrg.holdout; SODMParams' defaults): "sigmoid", "isotonic" or "none"
    calibration: str = defaults.CALIBRATION
    validation_fraction: float = 0.1
    validation_max_rows: int = 10_000
    # SODMParams.device, checked and kept: DSVRG's steps are vectors on the CPU whatever it is
    device: str = defaults.DEVICE

    @refused_as_settings()  # the pure checks it calls (check_odm_params, ...) too
    def __post_init__(self):
        object.__setattr__(self, "class_weight", canonical_class_weight(self.class_weight))
        object.__setattr__(self, "device", check_device(self.device))
        self.validate()

    def validate(self) -> None:
        """Refuse a bad setting, naming it (run once, as the parameters are built)."""
        check_odm_params(self.lam, self.theta, self.v)
        check_positive_int(self.epochs, "epochs")
        if not 0.0 <= self.relative_change_tol < np.inf:
            raise SettingsError(f"relative_change_tol (the epochs' tol) must be a number >= 0, got "
                                f"{self.relative_change_tol!r}.")
        if self.step is not None and not 0 < self.step < 1:
            raise SettingsError(f"step must lie in (0, 1), got {self.step!r}.")
        if self.n_partitions is not None and self.n_partitions < 1:
            raise SettingsError(f"n_partitions must be positive, got {self.n_partitions!r}.")
        if self.calibration not in CALIBRATIONS:
            raise SettingsError(f"calibration must be one of {', '.join(CALIBRATIONS)}, got "
                                f"{self.calibration!r}.")
        if not 0.0 < self.validation_fraction < 1.0:
            raise SettingsError(f"validation_fraction must lie in (0, 1), got "
                                f"{self.validation_fraction!r}.")
        check_positive_int(self.validation_max_rows, "validation_max_rows")


@dataclass
class DSVRGFit:
    w: np.ndarray
    model: KernelExpansion
    intercept: float = 0.0
    epochs: list[EpochStats] = field(default_factory=list)
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

    Stages (docs/design.md §3): the input as chunks; one pass surveys them (and makes them
    resident); the partitions laid out (the chunks themselves, or rows dealt by stratum); the
    primal set up (μ, the weights); the epochs; everything the fit left on the executors
    released, whether it ended or failed.
    """
    classes = np.asarray(classes)
    check_two_classes(classes, "fit_dsvrg", "DSVRG")
    started = time.perf_counter()
    fit_id = uuid.uuid4().hex  # names this fit's resident files; never reused
    held = _FitResources(_input_chunks(sc, blocks, classes[1]),
                         [f"{fit_id}-input", f"{fit_id}-dealt"] if params.resident
                         else [None, None])
    try:
        survey, held.inputs = _surveyed(sc, held.source, held.stores[0], params)
        parts, layout, held.dealt = stratified_layout(sc, held.inputs, held.source.chunked,
                                                      held.source.per_partition, params, survey)
        partition_seconds = time.perf_counter() - started
        primal = _primal(sc, survey, params, classes, n_features)
        held.center = primal.settings.center
        w = initial_w(w0, primal)
        # input chunks and dealt partitions both take turns in key order; no empty key
        held.resident = _epoch_blocks(sc, held, parts)
        test_pair = None if test is None else (test[0], plus_minus(test[1], classes[1]))
        run = run_epochs(sc, held.resident, primal, params, w, test_pair, on_epoch, started)
        train_seconds = time.perf_counter() - started - run.scoring_seconds
    finally:
        _release(sc, held, params.resident)
    w, intercept = run.w[:n_features], primal.raw_intercept(run.w)
    model = KernelExpansion(w[None, :], np.ones((1, 1)), Kernel.create("linear"), classes,
                            np.array([intercept]) if primal.bias else None)
    layout += f"; {run.turns} turn{'s' * (run.turns > 1)} per epoch"
    return DSVRGFit(w=w, model=model, intercept=intercept, epochs=run.history,
                    train_seconds=train_seconds, partition_seconds=partition_seconds,
                    n_rows=primal.n_rows, step=run.step, layout=layout,
                    resident_hits=held.resident.hits, resident_misses=held.resident.misses)


class InputChunks(NamedTuple):
    """The input as the fit reads it (:mod:`.blocks`)."""

    per_partition: RDD | FrameRDD  # of (input partition, chunk) in the input's own partitions
    chunked: RDD | FrameRDD  # RDD of (key, (X, ±1 y, ids)) chunks, a task's worth each
    own_copy: bool  # per_partition is a copy persisted here (the input was not persisted)


@dataclass
class _FitResources:
    """What a fit leaves on the executors until :func:`_release` drops it."""

    source: InputChunks
    stores: list  # the names of the input's and the dealt partitions' resident files, or None
    inputs: ResidentBlocks | None = None  # the input chunks, once surveyed
    dealt: RDD | FrameRDD | None = None  # the persisted dealt chunks, when the rows were dealt
    resident: ResidentBlocks | None = None  # the blocks the epochs read
    center: Broadcast[np.ndarray] | None = None  # the Broadcast of μ


def _input_chunks(sc, blocks, positive) -> InputChunks:
    """The input cut into chunks. A resident block's miss reads them again: from the caller's
    persisted RDD if it is one (no second copy), else from a persisted copy made here."""
    own_copy = not blocks.is_cached
    per_partition = blocks.mapPartitionsWithIndex(
        lambda i, it: partition_chunks(i, it, positive), preservesPartitioning=True)
    n_tasks = max(1, min(blocks.getNumPartitions(), sc.defaultParallelism))
    if own_copy:  # coalescing cached data is cheap; coalescing a Python pipeline is not
        per_partition = per_partition.persist(PERSIST)
        chunked = per_partition.coalesce(n_tasks).mapPartitions(keyed_by_first_row)
    else:
        chunked = blocks.coalesce(n_tasks).mapPartitions(lambda it: input_chunks(it, positive))
    return InputChunks(per_partition, chunked, own_copy)


def _surveyed(sc, source: InputChunks, store, params: DSVRGParams):
    """One read of every input chunk: stacked, made resident in ``store``, surveyed. (One
    entry per chunk: its key, then :func:`_survey_block`'s figures; the chunks as
    ResidentBlocks.)"""
    sc.setJobDescription("DSVRG: rows, labels, norms and a landmark sample")
    wanted, seed = LANDMARK_CANDIDATES * params.strata, params.seed
    tagged = first_read(sc, source.chunked, store,
                        lambda key, X, y: _survey_block(key, X, y, wanted, seed))
    input_task = {entry[1]: entry[0] for entry in tagged}
    found = [entry[1:] for entry in tagged]
    if not found:
        raise InputError("DSVRG got no rows: the training data is empty.")
    survey = [(key, *value) for key, _, _, value in found]
    inputs = ResidentBlocks(sc, source.chunked, [entry[0] for entry in found], store,
                            [entry[:3] for entry in found], input_task.__getitem__)
    return survey, inputs


def _primal(sc, survey, params: DSVRGParams, classes, n_features: int) -> PrimalSetup:
    """The primal's centring (μ, with the intercept), class and row weights and total weight S
    from the survey; μ is broadcast last, once nothing can fail before the fit holds it."""
    n_rows = sum(entry[1] for entry in survey)
    bias = bool(params.fit_intercept)
    mu = sum(entry[6] for entry in survey) / n_rows if bias else np.zeros(n_features)
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
        center=sc.broadcast(mu) if bias else None, weight_scale=n_rows / total_weight,
        row_weighted=row_weighted,
        class_weights=None if class_weights is None else tuple(class_weights.tolist()))
    return PrimalSetup(settings, mu, total_weight, n_rows, n_features)


def _epoch_blocks(sc, held: _FitResources, parts) -> ResidentBlocks:
    """The blocks the epochs read: the input chunks as surveyed, or the dealt partitions
    ``parts`` (the input's resident files and persisted copy are then dropped)."""
    assert held.inputs is not None  # the survey made the input chunks resident first
    if held.dealt is None:
        return held.inputs
    if held.stores[0] is not None:
        drop_everywhere(sc, held.stores[:1], held.inputs.store_dirs(), sc.defaultParallelism)
    if held.source.own_copy:
        held.source.per_partition.unpersist()
    return ResidentBlocks(sc, parts, range(parts.getNumPartitions()), held.stores[1])


def _release(sc, held: _FitResources, resident: bool) -> None:
    """Drop what the fit left on the executors: μ's broadcast, the resident files (with
    ``resident``), the persisted copy of the input and the dealt chunks."""
    if held.center is not None:
        held.center.unpersist(blocking=False)
    sc.setJobDescription("DSVRG: dropping resident blocks")
    if resident:
        written = [b.store_dirs() for b in (held.inputs, held.resident) if b is not None]
        try:
            drop_everywhere(sc, held.stores, sorted(set(sum(written, []))),
                            max(sc.defaultParallelism, 1))
        except ENGINE_ERRORS as error:
            # a failed or cancelled cleanup job (classic: a Py4J error; Spark Connect: a
            # PySparkException) must not replace the error the fit may be raising; the files
            # left go with each executor's local directory when it stops
            logger.debug("DSVRG: resident blocks not dropped: %s", error)
    if held.source.own_copy:
        held.source.per_partition.unpersist()
    if held.dealt is not None:
        held.dealt.unpersist()
    sc.setJobDescription(None)
