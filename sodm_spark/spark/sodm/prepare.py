"""SODM's rows made ready for the levels (SODM paper, Algorithm 1; docs/design.md §2.1-2.3).

Labels become ±1 (two classes) or class numbers (3+); one pass counts the rows and the
variance ``gamma="scale"`` needs; a seeded slice of rows is held out for validation. Then the
partitioning (:mod:`sodm_spark.spark.partitioning`, shared with DSVRG): landmark strata of
Eqns 7-8 dealt evenly, or a comparator's partitions (k-means, DiP, random, cascade), shuffle
sub-blocks to the top level's K = p^L partitions. :func:`prepare_sodm` runs it as named
steps (labels, the first pass, the levels, the validation slice, the kernel's inputs, the class
weights); the functions shipped to tasks are :mod:`.prepare_tasks`'.

Rows are dense or CSR: if any block holds CSR rows, all are made CSR, the feature scaling is
max-abs instead of min-max (:mod:`sodm_spark.core.column_stats`: zeros stay zeros), and the
landmarks and strata are computed on the sparse rows; the k-means partitioners refuse them (a
centre of sparse rows is a dense vector as wide as the features).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import scipy.sparse

from ...core.column_stats import ColumnStats, scale_rows
from ...core.errors import InputError, SettingsError
from ...core.kernels import Kernel, gamma_value, kernel_class
from ...core.timeline import Timeline, add_stage, timed
from ...core.labels import coded_labels, raw_labels
from ...core.sparse_rows import DENSE_PRODUCT_DENSITY, as_float_rows, dense_enough, stack_rows
from ...core.weights import BALANCED, class_weights_for, combined_weights
from ...models import input_projection
from ...selection.stopping import exact_share, oversampled_share, validation_share
from ..engine import ordered_sum
from ..io import check_blocks
from ..memory import executor_memory
from ..partitioning import landmark_candidates_wanted, partition_blocks
from ..engine import PERSIST
from .checkpoint import block_fingerprint, merge_fingerprints
from .params import SODMParams
from .plan import auto_level_count, check_levels_fit_rows
from .prepare_tasks import (as_csr, class_counts, coded_block, column_stats, held_out_rows,
                            kept_rows, moments, projected_block, sampled_rows, scaled_block)

if TYPE_CHECKING:
    from pyspark import RDD

    from ...models.expansion import InputMap
    from ..frame_rdd import FrameRDD


def checked_classes(blocks, n_features: int, with_rows: bool = False,
                    with_stats: bool = False, where=None):
    """The sorted label values of ``blocks`` after one checking job (NaN/inf rows are named,
    after ``where`` when given); with ``with_rows``, (the label values, the number of rows);
    with ``with_stats``, (the label values, the :class:`~sodm_spark.spark.io.BlockStats`)."""
    stats = check_blocks(blocks, n_features, max_labels=100, where=where)
    if stats.label_counts is None:
        raise InputError("the label column holds more than 100 distinct values; SODM is a "
                         "classifier (is the label column the right one, or is it a "
                         "regression target?).")
    classes = np.array(list(stats.label_counts), dtype=np.float64)
    if with_stats:
        return classes, stats
    return (classes, stats.n_rows) if with_rows else classes


def row_count_and_variance(blocks) -> tuple[int, int, float]:
    """(rows, features, variance over all entries) of a Block RDD in one pass — what
    ``gamma="scale"`` needs, without collecting the data."""
    n_rows, count, total, squares = ordered_sum(blocks, moments, np.add)
    n_rows = int(n_rows)
    return n_rows, int(round(count / n_rows)), float(squares / count - (total / count) ** 2)


@dataclass
class PreparedData:
    """What every fit of the same rows shares (:func:`prepare_sodm`): the labelled training
    rows, the validation and test pairs, the resolved kernel and, once partitioned, the top
    level's partitions. A hyperparameter search and the fit after it use one of these. The
    RDDs are FrameRDDs on Spark Connect, with the same operations (docs/design.md §6.1)."""

    params: SODMParams  # as given, with the levels resolved (``levels=None``: from the rows)
    labelled: RDD | FrameRDD  # of Blocks (X, y, ids): ±1 y, or class numbers for 3+ classes
    training: RDD | FrameRDD  # the same without the held-out validation rows
    classes: np.ndarray
    kernel: Kernel
    n_rows: int  # training rows (validation rows excluded)
    n_features: int
    validation_pair: tuple | None  # (X, ±1 y or class numbers) on the driver
    test_pair: tuple | None
    started: float  # perf_counter when preparation began (the fit's clock)
    candidates: np.ndarray | None = None  # sampled rows for landmarks / k-means centers
    parts: RDD | FrameRDD | None = None  # (key, Chunk) of the top level's partitions, once dealt
    sizes: np.ndarray | None = None
    partition_seconds: float = 0.0
    fingerprint: dict | None = None  # of all rows, for checkpoints (.checkpoint)
    scaling: tuple | None = None  # (offset, scale, columns): the rows given to the kernel are
    # scale_rows(x, ...) (min-max onto [0, 1], or max-abs of sparse rows); test and validation
    # pairs are mapped
    row_width: float = 0.0  # memory of a row in float64 columns (sparse_rows.memory_width)
    sparse: bool = False  # the rows are CSR
    # the scaled rows' principal directions the kernel takes instead of the features
    # (sodm_spark.models.input_projection; None: the features themselves); the training rows,
    # candidates, test and validation pairs are mapped, and the model stores it
    projection: InputMap | None = None
    input_map_report: dict | None = None  # the rule's figures (input_projection)
    # one weight per class in coded order (sodm_spark.core.weights), None: unweighted; the
    # partitions' duals, the search and the validation scores weight their rows by them
    class_weights: tuple | None = None
    validation_row_weights: np.ndarray | None = None  # the held-out rows' weight column

    @property
    def validation_weights(self) -> np.ndarray | None:
        """Each validation row's weight (its weight column's times its class's), or None: the
        scores the stop rule, the search and the global step compare are weighted so."""
        if self.validation_pair is None:
            return None
        return combined_weights(self.validation_row_weights, self.class_weights,
                                self.validation_pair[1])

    @property
    def kernel_features(self) -> int:
        """Inputs of the kernel: the projection's components, else the features."""
        return self.n_features if self.projection is None else \
            _projected_width(self.projection)

    @property
    def multi(self) -> bool:
        return self.classes.size > 2


class HeldOut(NamedTuple):
    """The training rows once the validation slice is held out of them (docs/design.md §2.7)."""

    training: RDD | FrameRDD  # the labelled rows without the slice
    validation_pair: tuple | None  # (X, raw y) of the slice; None: none held out
    row_weights: np.ndarray | None  # the slice's weight column
    candidates: np.ndarray | None  # landmark candidates, sampled in the same pass
    stats: ColumnStats  # of the training rows


class KernelInputs(NamedTuple):
    """The training rows as the kernel takes them (docs/design.md §6, step 3; §2.8)."""

    training: RDD | FrameRDD  # CSR if any block was, scaled, mapped onto the input map
    candidates: np.ndarray | None  # the landmark candidates, mapped alike
    scaling: tuple | None  # (offset, scale, columns) of the feature scaling, or None
    kernel: Kernel  # with γ resolved on the scaled rows
    projection: InputMap | None  # the input map, or None
    input_map_report: dict | None  # the input map's rule (None: not tried)


def prepare_sodm(sc, blocks, params: SODMParams, classes, test=None, validation=None,
                 hold_out: bool | None = None, partition: bool = True,
                 fingerprint: bool = False, timeline: Timeline | None = None) -> PreparedData:
    """Label the rows, hold out the validation slice, resolve the kernel and the levels
    (``params.levels=None``: :func:`~.plan.auto_level_count` of the rows) and (``partition``) deal
    the rows into the top level's p^L partitions; ``fingerprint``: hash the rows in the
    first pass too (:func:`.checkpoint.block_fingerprint`, for checkpoints). ``timeline``
    (:class:`~sodm_spark.core.timeline.Timeline`, or None) records the preparation's stages:
    ``column statistics`` (the first pass), ``validation slice``, ``input map`` (where its rule
    was tried), ``class weights`` (a pass, for "balanced") and ``partitioning``.

    Rows are held out (``validation_fraction`` of them, at most ``validation_max_rows``, by a
    seeded hash of the row id) when ``validation`` is not given and ``hold_out`` is true
    (default: automatic stopping has more than one level to choose between).
    """
    started = time.perf_counter()
    classes = _fit_classes(classes)
    labelled = blocks.map(lambda b: coded_block(b, classes))
    if not blocks.is_cached:  # several passes follow: parse the input once
        labelled.persist(PERSIST)
    with timed(timeline, "column statistics"):
        stats, data_fingerprint = _first_pass(labelled, fingerprint)
    params = _with_levels(sc, params, stats)
    assert params.levels is not None  # _with_levels resolves levels=None from the rows
    check_levels_fit_rows(stats.n, params.p, params.levels)
    if hold_out is None:  # one level to solve leaves nothing to choose between
        hold_out = params.auto_stop and params.levels > params.stop_level
    held = HeldOut(labelled, validation, None, None, stats)
    if validation is None and hold_out:
        with timed(timeline, "validation slice"):
            held = _held_out(sc, labelled, params, classes, stats)
    # enough rows in all, maybe too few once the validation rows are out
    check_levels_fit_rows(held.stats.n, params.p, params.levels,
                          held_out=stats.n - held.stats.n)
    inputs = _kernel_inputs(sc, held, params, timeline)
    stats, projection = held.stats, inputs.projection
    with timed(timeline if params.class_weight == BALANCED else None, "class weights"):
        class_weights = _class_weights(inputs.training, params, classes)
    prepared = PreparedData(
        params=params, labelled=labelled, training=inputs.training, classes=classes,
        kernel=inputs.kernel, class_weights=class_weights,
        validation_row_weights=held.row_weights, n_rows=stats.n, n_features=stats.d,
        started=started, candidates=inputs.candidates, fingerprint=data_fingerprint,
        scaling=inputs.scaling,
        row_width=row_width(stats) if projection is None else _projected_width(projection),
        sparse=stats.sparse and projection is None, projection=projection,
        input_map_report=inputs.input_map_report,
        test_pair=None if test is None else _plus_minus(test, classes, stats.d, "test",
                                                        inputs.scaling, projection),
        validation_pair=None if held.validation_pair is None else _plus_minus(
            held.validation_pair, classes, stats.d, "validation", inputs.scaling, projection))
    if partition:
        partition_prepared(sc, prepared, params, timeline)
    return prepared


def _fit_classes(classes) -> np.ndarray:
    """The label values a fit codes, checked: at least two; 3+ sorted, as class numbers
    follow them."""
    classes = np.asarray(classes)
    if classes.size < 2:
        raise InputError(f"SODM needs at least two classes; the labels hold {classes.size} "
                         f"class ({', '.join(map(str, classes[:10]))}): check the label "
                         "column.")
    return np.unique(classes) if classes.size > 2 else classes


def _first_pass(labelled, fingerprint: bool) -> tuple[ColumnStats, dict | None]:
    """(the rows' column statistics, their fingerprint for checkpoints or None) in one pass."""
    if not fingerprint:
        return ordered_sum(labelled, column_stats, ColumnStats.merge), None
    return ordered_sum(labelled, lambda b: (column_stats(b), block_fingerprint(b)),
                       lambda a, b: (ColumnStats.merge(a[0], b[0]),
                                     merge_fingerprints(a[1], b[1])))


def _with_levels(sc, params: SODMParams, stats: ColumnStats) -> SODMParams:
    """``params`` with the level count resolved: as given, or (``levels=None``) from the rows'
    number, width and the memory (docs/design.md §2.7)."""
    if params.levels is not None:
        return params
    # row_width is a float for sparse rows (their memory width), which auto_level_count
    # compares and charges like a width; its ``n_features: int`` annotation is too narrow
    levels = auto_level_count(stats.n, params.p, row_width(stats),
                              executor_memory(sc, params.memory_mb, params.device), params)
    return replace(params, levels=levels, stop_level=min(params.stop_level, levels))


def _held_out(sc, labelled, params: SODMParams, classes, stats: ColumnStats) -> HeldOut:
    """The validation slice held out by a seeded hash of the row id (docs/design.md §2.7),
    and the landmark candidates sampled in the same pass; no slice when it would hold no row
    or every row."""
    n_all, seed = stats.n, params.seed
    assert params.levels is not None  # resolved (_with_levels) before the slice is held out
    share = validation_share(params.validation_fraction, params.validation_max_rows, n_all)
    wanted = landmark_candidates_wanted(params.partitioner, params.strata, n_all,
                                        params.p ** params.levels, params.landmark_candidates)
    candidate_share = min(1.0, 1.2 * wanted / n_all)
    sc.setJobDescription("SODM: hold out the validation rows, sample landmark candidates")
    drawn = oversampled_share(share, params.validation_max_rows, n_all)
    pieces = labelled.map(lambda b: held_out_rows(b, seed, drawn, candidate_share)).collect()
    X_val, y_val, w_val, share = _trimmed_slice(pieces, share, drawn,
                                                params.validation_max_rows)
    if not 0 < X_val.shape[0] < n_all:
        return HeldOut(labelled, None, None, None, stats)
    return HeldOut(training=labelled.map(lambda b: kept_rows(b, seed, share)),
                   validation_pair=(X_val, raw_labels(y_val, classes)), row_weights=w_val,
                   candidates=stack_rows([piece[3] for piece in pieces]) if wanted else None,
                   stats=stats.without(X_val))


def _trimmed_slice(pieces, share: float, drawn: float, max_rows: int):
    """(X, coded y, weights or None, the share held out) of the slice the blocks' ``pieces``
    hold: ``drawn`` oversamples ``share`` when the slice is capped, and the rows of least hash
    value are kept, exactly ``max_rows`` of them."""
    X_val = stack_rows([piece[0] for piece in pieces])
    y_val = np.concatenate([piece[1] for piece in pieces])
    values = np.concatenate([piece[2] for piece in pieces])
    w_val = None if all(piece[4] is None for piece in pieces) else \
        np.concatenate([piece[4] for piece in pieces])
    if drawn > share:  # trimmed to exactly max_rows rows
        share = exact_share(values, max_rows, drawn)
        kept = values < share
        X_val, y_val = X_val[kept], y_val[kept]
        w_val = None if w_val is None else w_val[kept]
    return X_val, y_val, w_val, share


def _kernel_inputs(sc, held: HeldOut, params: SODMParams,
                   timeline: Timeline | None = None) -> KernelInputs:
    """The training rows and candidates as the kernel takes them: all CSR if any block is,
    scaled per column (``params.scale``), γ resolved on the scaled rows, then mapped onto the
    input map where its rule holds (docs/design.md §2.8; the ``input map`` stage of
    ``timeline``)."""
    training, candidates, stats = held.training, held.candidates, held.stats
    if stats.sparse:  # any CSR block: every block CSR, so that partitions stack alike
        _check_sparse_partitioner(params.partitioner, stats.d)
        training = training.map(as_csr)
    scaling = None
    if params.scale == "minmax" and params.kernel != "linear":
        # min-max, or max-abs for sparse rows; then each feature's weight (a string column's)
        scaling = stats.scaling(params.feature_weights)
    gamma = 1.0 if not kernel_class(params.kernel).uses_gamma else gamma_value(
        params.gamma, stats.d, stats.variance(*(scaling[:2] if scaling else (None, None))))
    if scaling is None and kernel_class(params.kernel).radial:
        # unscaled rows far from the origin are moved to their mean, after γ: 'scale' pools
        # every entry's variance, which a per-column shift changes, and reads the rows as given
        scaling = stats.centring()
    if scaling is not None:
        training = training.map(lambda b: scaled_block(b, scaling))
        if candidates is not None:
            candidates = scale_rows(candidates, *scaling)
    kernel = Kernel.create(params.kernel, gamma, params.degree, params.coef0,
                           offset=params.kernel_offset)
    projection, input_map_report = None, None
    if params.input_map == "auto":
        begun = time.perf_counter()
        projection, input_map_report = _input_map(sc, training, candidates, stats, kernel,
                                                  params.seed)
        if input_map_report is not None:  # its rule was tried (a stage only then)
            add_stage(timeline, "input map", time.perf_counter() - begun, begun)
    if projection is not None:
        training = training.map(lambda b: projected_block(b, projection))
        if candidates is not None:
            candidates = projection.projected(candidates)
    return KernelInputs(training, candidates, scaling, kernel, projection, input_map_report)


def _check_sparse_partitioner(partitioner: str, n_features: int) -> None:
    """Refuse the k-means partitioners for CSR rows (docs/design.md §2.3)."""
    if partitioner in ("kmeans", "dip"):
        raise SettingsError(
            f"partitioner {partitioner!r} clusters rows by k-means, whose centres "
            f"of sparse rows are dense vectors of all {n_features:,} features; use "
            "'stratified' (its landmarks are rows, kept sparse), 'random' or 'cascade'.")


def _class_weights(training, params: SODMParams, classes) -> tuple | None:
    """One weight per class in coded order (sodm_spark.core.weights), or None: 'balanced'
    counts the training rows of each class."""
    if params.class_weight is None:
        return None
    n_classes = classes.size
    counts = None if params.class_weight != BALANCED else \
        ordered_sum(training, lambda b: class_counts(b, n_classes), np.add)
    weights = class_weights_for(params.class_weight, classes, counts)
    assert weights is not None  # a class weight other than None gives one per class
    return tuple(weights.tolist())


def _input_map(sc, training, candidates, stats: ColumnStats, kernel, seed: int):
    """(the principal-component map of the scaled training rows, or None, and the rule's
    report: :func:`sodm_spark.models.input_projection.fit_input_projection`) from a seeded
    sample of at most ``SAMPLE_ROWS`` rows: the landmark candidates when there are enough of
    them, else one sampling pass. CSR rows full enough to be multiplied as dense rows
    (LIBSVM pixels) are mapped too, and come out dense; no report for other CSR rows, another
    kernel or fewer than ``MIN_FEATURES`` features (nothing was tried)."""
    mostly_full = True
    if stats.sparse:
        assert stats.stored is not None  # sparse statistics count each column's stored values
        mostly_full = dense_enough(int(stats.stored.sum()), stats.n, stats.d,
                                   DENSE_PRODUCT_DENSITY)
    if not mostly_full or not kernel.radial or stats.d < input_projection.MIN_FEATURES:
        return None, None
    sample, wanted = candidates, input_projection.SAMPLE_ROWS
    if sample is None or sample.shape[0] < wanted // 2:
        sc.setJobDescription("SODM: sample rows for the input map")
        share = min(1.0, 1.1 * wanted / stats.n)
        sample = stack_rows(training.map(lambda b: sampled_rows(b, seed, share)).collect())
    if sample.shape[0] > wanted:
        sample = sample[np.sort(np.random.default_rng([seed, 11]).choice(
            sample.shape[0], wanted, replace=False))]
    return input_projection.fit_input_projection(
        sample.toarray() if scipy.sparse.issparse(sample) else sample, kernel, stats.d)


def partition_prepared(sc, prepared: PreparedData, params: SODMParams,
                       timeline: Timeline | None = None) -> None:
    """Deal the prepared training rows into the top level's partitions (in place; the
    ``partitioning`` stage of ``timeline``: the landmarks, the strata, the shuffle)."""
    assert params.levels is not None  # prepare_sodm resolves the levels before dealing rows
    n_partitions = params.p ** params.levels
    sc.setJobDescription(f"SODM partition: {params.partitioner} into {n_partitions}")
    with timed(timeline, "partitioning"):
        prepared.parts, _, prepared.sizes = partition_blocks(
            sc, prepared.training, prepared.kernel, prepared.n_rows, n_partitions,
            params.partitioning, candidates=prepared.candidates,
            n_classes=prepared.classes.size)
    prepared.partition_seconds = time.perf_counter() - prepared.started
    prepared.labelled.unpersist()


def row_width(stats: ColumnStats) -> int | float:
    """The memory of a training row, in float64 columns: the width of dense rows (an int); for
    sparse ones, as :func:`sodm_spark.core.sparse_rows.memory_width` charges their stored values (a
    float: :func:`sodm_spark.spark.memory.rows_text` tells them apart)."""
    if not stats.sparse:
        return int(stats.d)
    assert stats.stored is not None  # sparse statistics count each column's stored values
    return 1.5 * float(stats.stored.sum()) / max(1, stats.n) + 1.0


def _projected_width(projection: InputMap) -> int:
    """Inputs of the kernel under a fit's input map: its components' count."""
    # input_projection's maps always project, so a fit's InputMap has components
    assert projection.components is not None
    return int(projection.components.shape[1])


def _plus_minus(pair, classes, n_features, what, scaling=None, projection=None):
    """(float64 X, ±1 y) of a driver-side (X, raw y) pair checked against the training data
    (class numbers instead of ±1 for 3+ classes), X (dense or CSR) mapped by ``scaling``
    (offset, scale, columns), then by ``projection`` (an InputMap's principal directions)."""
    X, y = as_float_rows(pair[0], np.float64), np.asarray(pair[1])
    unknown = np.setdiff1d(y, classes)
    if unknown.size:
        raise InputError(f"the {what} labels hold {unknown[:5].tolist()}, which the training "
                         f"labels {classes.tolist()} do not; use the same label coding.")
    if X.shape[1] != n_features:
        raise InputError(f"the {what} data have {X.shape[1]} features, the training "
                         f"data {n_features}.")
    if scaling is not None:
        X = scale_rows(X, *scaling)
    if projection is not None:
        X = projection.projected(X)
    return X, coded_labels(y, classes)
