"""SODM's rows made ready for the levels (SODM paper, Algorithm 1; docs/design.md §2.1-2.3).

Labels become ±1 (two classes) or class numbers (3+); one pass counts the rows and the
variance ``gamma="scale"`` needs; a seeded slice of rows is held out for validation. Then the
partitioning (:mod:`sodm_spark.spark.partitioning`, shared with DSVRG): landmark strata of
Eqns 7-8 dealt evenly, or a comparator's partitions (k-means, DiP, random, cascade), shuffle
sub-blocks to the top level's K = p^L partitions. The functions shipped to tasks are
module-level and take plain values, so closures never capture a driver object.

Rows are dense or CSR: if any block holds CSR rows, all are made CSR, the feature scaling is
max-abs instead of min-max (:mod:`sodm_spark.core.column_stats`: zeros stay zeros), and the
landmarks and strata are computed on the sparse rows; the k-means partitioners refuse them (a
centre of sparse rows is a dense vector as wide as the features).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np
import scipy.sparse

from ...core.column_stats import ColumnStats, scale_rows
from ...core.errors import SettingsError
from ...core.kernels import Kernel, gamma_value
from ...core.labels import coded_labels, raw_labels
from ...core.sparse_rows import DENSE_PRODUCT_DENSITY, as_float_rows, dense_enough, stack_rows
from ...core.weights import BALANCED, class_weights_for, combined_weights
from ...models import input_projection
from ...selection.stopping import (exact_share, holdout_mask, holdout_values,
                                   oversampled_share, validation_share)
from ..frames import ordered_sum
from ..io import Block, check_blocks
from ..memory import executor_memory
from ..partitioning import landmark_candidates_wanted, partition_blocks
from ..session import PERSIST
from .checkpoint import block_fingerprint, merge_fingerprints
from .params import SODMParams
from .plan import auto_level_count, check_levels_fit_rows


# --- task functions (module level: shipped to executors without driver state) ----------------

def _coded_block(block, classes):
    """A block's raw labels coded: ±1 with ``classes[1]`` as +1, or class numbers 0..C-1
    (float) in the order of ``classes`` (3+ classes)."""
    return Block(block.X, coded_labels(block.y, classes), block.row_ids, _weights_of(block))


def _weights_of(block):
    """A block's row weights (a weight column's), or None."""
    return block[3] if len(block) > 3 else None


def _with_rows(block, X=None, rows=None):
    """The block with features ``X`` (same rows), or only the rows ``rows`` (a mask)."""
    weights = _weights_of(block)
    if rows is None:
        return Block(X, block[1], block[2], weights)
    return Block(block[0][rows], block[1][rows], block[2][rows],
                 None if weights is None else weights[rows])


def _class_counts(block, n_classes):
    """Rows per class of a coded block (±1 → [-1, +1], or class numbers), as floats."""
    y = block[1]
    index = (y > 0).astype(np.int64) if n_classes == 2 else y.astype(np.int64)
    return np.bincount(index, minlength=n_classes).astype(np.float64)


def _held_out_rows(block, seed, fraction, candidate_fraction):
    """(X, ±1 y, hash values) of the rows of a (X, ±1 y, ids) block held out for validation,
    a seeded sample of its other rows as landmark candidates (one pass for both), and the
    held-out rows' weights (None without a weight column)."""
    X, y, ids = block[:3]
    weights = _weights_of(block)
    values = holdout_values(ids, seed)
    rows = values < fraction
    held = X[rows]
    kept = X[~rows]
    candidates = kept[_block_draws(ids, seed, 7, kept.shape[0]) < candidate_fraction]
    return held, y[rows], values[rows], candidates, None if weights is None else weights[rows]


def _kept_rows(block, seed, fraction):
    return _with_rows(block, rows=~holdout_mask(block[2], seed, fraction))


def _moments(block):
    """(rows, cells, Σx, Σx²) of a block, summed in float64 whatever the rows' dtype."""
    X = block[0]
    if scipy.sparse.issparse(X):
        return np.array([X.shape[0], X.shape[0] * X.shape[1], X.sum(dtype=np.float64),
                         X.multiply(X).sum(dtype=np.float64)])
    return np.array([X.shape[0], X.size, X.sum(dtype=np.float64),
                     np.einsum("ij,ij->", X, X, dtype=np.float64)])


def _column_stats(block):
    return ColumnStats(block[0])


def _scaled(block, scaling):
    """(X mapped by the feature scaling (offset, scale, columns) in its own float dtype, y,
    ids): :func:`sodm_spark.core.column_stats.scale_rows`."""
    return _with_rows(block, scale_rows(block[0], *scaling))


def _projected(block, projection):
    """(X mapped onto the fit's principal directions, in X's float dtype, y, ids)."""
    return _with_rows(block, projection.projected(block[0]))


def _block_draws(ids, seed, salt, n):
    """``n`` uniform draws seeded by (seed, salt, the block's first row id): stable per block,
    whatever the block layout."""
    key = int(ids[0]) if ids.size else 0
    return np.random.default_rng([seed, salt, key]).random(n)


def _sampled_rows(block, seed, fraction):
    """A seeded sample of a (X, y, ids) block's rows, the same whatever the block layout."""
    X, _, ids = block[:3]
    return X[_block_draws(ids, seed, 11, X.shape[0]) < fraction]


def _as_csr(block):
    """The block with CSR rows (dense ones converted: a fit with any sparse block is sparse)."""
    X = block[0]
    return _with_rows(block, X if scipy.sparse.issparse(X)
                      else scipy.sparse.csr_matrix(X, dtype=np.float64))


# --- driver -----------------------------------------------------------------------------------

def checked_classes(blocks, n_features: int, with_rows: bool = False,
                    with_stats: bool = False, where=None):
    """The sorted label values of ``blocks`` after one checking job (NaN/inf rows are named,
    after ``where`` when given); with ``with_rows``, (the label values, the number of rows);
    with ``with_stats``, (the label values, the :class:`~sodm_spark.spark.io.BlockStats`)."""
    stats = check_blocks(blocks, n_features, max_labels=100, where=where)
    if stats.label_counts is None:
        raise ValueError("the label column holds more than 100 distinct values; SODM is a "
                         "classifier (is the label column the right one, or is it a "
                         "regression target?).")
    classes = np.array(list(stats.label_counts), dtype=np.float64)
    if with_stats:
        return classes, stats
    return (classes, stats.n_rows) if with_rows else classes


def row_count_and_variance(blocks) -> tuple[int, int, float]:
    """(rows, features, variance over all entries) of a Block RDD in one pass — what
    ``gamma="scale"`` needs, without collecting the data."""
    n_rows, count, total, squares = ordered_sum(blocks, _moments, np.add)
    n_rows = int(n_rows)
    return n_rows, int(round(count / n_rows)), float(squares / count - (total / count) ** 2)


@dataclass
class PreparedData:
    """What every fit of the same rows shares (:func:`prepare_sodm`): the labelled training
    rows, the validation and test pairs, the resolved kernel and, once partitioned, the top
    level's partitions. A hyperparameter search and the fit after it use one of these."""

    params: SODMParams  # as given, with the levels resolved (``levels=None``: from the rows)
    labelled: object  # RDD of (X, y, ids): ±1 y, or class numbers for 3+ classes
    training: object  # the same without the held-out validation rows
    classes: np.ndarray
    kernel: Kernel
    n_rows: int  # training rows (validation rows excluded)
    n_features: int
    validation_pair: tuple | None  # (X, ±1 y or class numbers) on the driver
    test_pair: tuple | None
    started: float  # perf_counter when preparation began (the fit's clock)
    candidates: np.ndarray | None = None  # sampled rows for landmarks / k-means centers
    parts: object = None  # RDD of the top level's partitions, once partitioned
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
    projection: object = None
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
            int(self.projection.components.shape[1])

    @property
    def multi(self) -> bool:
        return self.classes.size > 2


def prepare_sodm(sc, blocks, params: SODMParams, classes, test=None, validation=None,
                 hold_out: bool | None = None, partition: bool = True,
                 fingerprint: bool = False) -> PreparedData:
    """Label the rows, hold out the validation slice, resolve the kernel and the levels
    (``params.levels=None``: :func:`~.plan.auto_level_count` of the rows) and (``partition``) deal
    the rows into the top level's p^L partitions; ``fingerprint``: hash the rows in the
    first pass too (:func:`.checkpoint.block_fingerprint`, for checkpoints).

    Rows are held out (``validation_fraction`` of them, at most ``validation_max_rows``, by a
    seeded hash of the row id) when ``validation`` is not given and ``hold_out`` is true
    (default: automatic stopping has more than one level to choose between).
    """
    started = time.perf_counter()
    classes = np.asarray(classes)
    if classes.size < 2:
        raise ValueError(f"SODM needs at least two classes; the labels hold {classes.size} "
                         f"class ({', '.join(map(str, classes[:10]))}): check the label "
                         "column.")
    multi = classes.size > 2
    if multi:
        classes = np.unique(classes)  # class numbers follow the sorted labels
    labelled = blocks.map(lambda b: _coded_block(b, classes))
    if not blocks.is_cached:  # several passes follow: parse the input once
        labelled.persist(PERSIST)
    if fingerprint:  # the same pass hashes the rows for the checkpoint
        stats, data_fingerprint = ordered_sum(
            labelled, lambda b: (_column_stats(b), block_fingerprint(b)),
            lambda a, b: (ColumnStats.merge(a[0], b[0]), merge_fingerprints(a[1], b[1])))
    else:
        stats, data_fingerprint = ordered_sum(labelled, _column_stats, ColumnStats.merge), None
    n_all = stats.n
    if params.levels is None:  # from the rows: their number, width and the memory
        levels = auto_level_count(n_all, params.p, row_width(stats),
                                  executor_memory(sc, params.memory_mb, params.device), params)
        params = replace(params, levels=levels, stop_level=min(params.stop_level, levels))
    n_partitions = params.p ** params.levels
    check_levels_fit_rows(n_all, params.p, params.levels)
    if hold_out is None:  # one level to solve leaves nothing to choose between
        hold_out = params.auto_stop and params.levels > params.stop_level
    training, validation_pair, candidates = labelled, validation, None
    validation_row_weights = None  # a weight column's, of held-out rows
    if validation is None and hold_out:
        fraction = validation_share(params.validation_fraction, params.validation_max_rows,
                                    n_all)
        seed = params.seed
        wanted = landmark_candidates_wanted(params.partitioner, params.strata, n_all,
                                            params.p ** params.levels,
                                            params.landmark_candidates)
        candidate_fraction = min(1.0, 1.2 * wanted / n_all)
        sc.setJobDescription("SODM: hold out the validation rows, sample landmark candidates")
        drawn = oversampled_share(fraction, params.validation_max_rows, n_all)
        pieces = labelled.map(
            lambda b: _held_out_rows(b, seed, drawn, candidate_fraction)).collect()
        X_val = stack_rows([piece[0] for piece in pieces])
        y_val = np.concatenate([piece[1] for piece in pieces])
        values = np.concatenate([piece[2] for piece in pieces])
        w_val = None if all(piece[4] is None for piece in pieces) else \
            np.concatenate([piece[4] for piece in pieces])
        if drawn > fraction:  # trimmed to exactly validation_max_rows rows
            fraction = exact_share(values, params.validation_max_rows, drawn)
            X_val, y_val = X_val[values < fraction], y_val[values < fraction]
            w_val = None if w_val is None else w_val[values < fraction]
        if 0 < X_val.shape[0] < n_all:
            validation_pair = (X_val, raw_labels(y_val, classes))
            validation_row_weights = w_val
            stats = stats.without(X_val)
            training = labelled.map(lambda b: _kept_rows(b, seed, fraction))
            candidates = stack_rows([piece[3] for piece in pieces]) if wanted else None
    n_rows = stats.n
    # enough rows in all, maybe too few once the validation rows are out
    check_levels_fit_rows(n_rows, params.p, params.levels, held_out=n_all - n_rows)
    n_features = stats.d
    if stats.sparse:  # any CSR block: every block CSR, so that partitions stack alike
        training = training.map(_as_csr)
        if params.partitioner in ("kmeans", "dip"):
            raise SettingsError(
                f"partitioner {params.partitioner!r} clusters rows by k-means, whose centres "
                f"of sparse rows are dense vectors of all {n_features:,} features; use "
                "'stratified' (its landmarks are rows, kept sparse), 'random' or 'cascade'.")
    scaling = None
    if params.scale == "minmax" and params.kernel != "linear":
        scaling = stats.scaling()  # min-max, or max-abs for sparse rows
        training = training.map(lambda b: _scaled(b, scaling))
        if candidates is not None:
            candidates = scale_rows(candidates, *scaling)
    gamma = 1.0 if params.kernel == "linear" else gamma_value(
        params.gamma, n_features, stats.variance(*(scaling[:2] if scaling else (None, None))))
    kernel = Kernel.create(params.kernel, gamma, params.degree, params.coef0,
                           offset=params.kernel_offset)
    projection, input_map_report = None, None
    if params.input_map == "auto":
        projection, input_map_report = _input_map(sc, training, candidates, stats, kernel,
                                                  params.seed)
    if projection is not None:
        training = training.map(lambda b: _projected(b, projection))
        if candidates is not None:
            candidates = projection.projected(candidates)
    class_weights = None
    if params.class_weight is not None:  # 'balanced' counts the training rows of each class
        n_classes = classes.size
        counts = None if params.class_weight != BALANCED else \
            ordered_sum(training, lambda b: _class_counts(b, n_classes), np.add)
        class_weights = tuple(class_weights_for(params.class_weight, classes, counts).tolist())
    prepared = PreparedData(
        params=params, labelled=labelled, training=training, classes=classes, kernel=kernel,
        class_weights=class_weights, validation_row_weights=validation_row_weights,
        n_rows=n_rows, n_features=n_features, started=started, candidates=candidates,
        fingerprint=data_fingerprint, scaling=scaling,
        row_width=row_width(stats) if projection is None else projection.components.shape[1],
        sparse=stats.sparse and projection is None, projection=projection,
        input_map_report=input_map_report,
        test_pair=None if test is None else _plus_minus(test, classes, n_features, "test",
                                                        scaling, projection),
        validation_pair=None if validation_pair is None else _plus_minus(
            validation_pair, classes, n_features, "validation", scaling, projection))
    if partition:
        partition_prepared(sc, prepared, params)
    return prepared


def _input_map(sc, training, candidates, stats: ColumnStats, kernel, seed: int):
    """(the principal-component map of the scaled training rows, or None, and the rule's
    report: :func:`sodm_spark.models.input_projection.fit_input_projection`) from a seeded
    sample of at most ``SAMPLE_ROWS`` rows: the landmark candidates when there are enough of
    them, else one sampling pass. CSR rows full enough to be multiplied as dense rows
    (LIBSVM pixels) are mapped too, and come out dense; no report for other CSR rows, another
    kernel or fewer than ``MIN_FEATURES`` features (nothing was tried)."""
    mostly_full = not stats.sparse or dense_enough(int(stats.stored.sum()), stats.n, stats.d,
                                                   DENSE_PRODUCT_DENSITY)
    if not mostly_full or kernel.name != "rbf" or stats.d < input_projection.MIN_FEATURES:
        return None, None
    sample, wanted = candidates, input_projection.SAMPLE_ROWS
    if sample is None or sample.shape[0] < wanted // 2:
        sc.setJobDescription("SODM: sample rows for the input map")
        share = min(1.0, 1.1 * wanted / stats.n)
        sample = stack_rows(training.map(lambda b: _sampled_rows(b, seed, share)).collect())
    if sample.shape[0] > wanted:
        sample = sample[np.sort(np.random.default_rng([seed, 11]).choice(
            sample.shape[0], wanted, replace=False))]
    return input_projection.fit_input_projection(
        sample.toarray() if scipy.sparse.issparse(sample) else sample, kernel, stats.d)


def partition_prepared(sc, prepared: PreparedData, params: SODMParams) -> None:
    """Deal the prepared training rows into the top level's partitions (in place)."""
    n_partitions = params.p ** params.levels
    sc.setJobDescription(f"SODM partition: {params.partitioner} into {n_partitions}")
    prepared.parts, _, prepared.sizes = partition_blocks(
        sc, prepared.training, prepared.kernel, prepared.n_rows, n_partitions,
        params.partitioning, candidates=prepared.candidates, n_classes=prepared.classes.size)
    prepared.partition_seconds = time.perf_counter() - prepared.started
    prepared.labelled.unpersist()


def row_width(stats: ColumnStats) -> int | float:
    """The memory of a training row, in float64 columns: the width of dense rows (an int); for
    sparse ones, as :func:`sodm_spark.core.sparse_rows.memory_width` charges their stored values (a
    float: :func:`sodm_spark.spark.memory.rows_text` tells them apart)."""
    if not stats.sparse:
        return int(stats.d)
    return 1.5 * float(stats.stored.sum()) / max(1, stats.n) + 1.0


def _plus_minus(pair, classes, n_features, what, scaling=None, projection=None):
    """(float64 X, ±1 y) of a driver-side (X, raw y) pair checked against the training data
    (class numbers instead of ±1 for 3+ classes), X (dense or CSR) mapped by ``scaling``
    (offset, scale, columns), then by ``projection`` (an InputMap's principal directions)."""
    X, y = as_float_rows(pair[0], np.float64), np.asarray(pair[1])
    unknown = np.setdiff1d(y, classes)
    if unknown.size:
        raise ValueError(f"the {what} labels hold {unknown[:5].tolist()}, which the training "
                         f"labels {classes.tolist()} do not; use the same label coding.")
    if X.shape[1] != n_features:
        raise ValueError(f"the {what} data have {X.shape[1]} features, the training "
                         f"data {n_features}.")
    if scaling is not None:
        X = scale_rows(X, *scaling)
    if projection is not None:
        X = projection.projected(X)
    return X, coded_labels(y, classes)
