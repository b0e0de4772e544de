"""Batch scoring of a DataFrame with a kernel model through Arrow (``jobs/predict.py``).

The driver writes the model's support vectors and coefficients as ``.npy`` files
(:meth:`sodm_spark.models.scoring.SupportSet.save`) to a temporary directory and ships them with
``SparkContext.addFile``; every ``mapInArrow`` task maps them a block at a time and scores its
Arrow batches (one float64 matrix each, no Python object per row) against one block of support
vectors after another: float32 kernel blocks, boundary rows again in float64
(:mod:`sodm_spark.models.scoring`). A task so holds one batch, one support-vector block and one
kernel block whatever the model's size, and the workers of a host share the files' pages.

The rows stay in the input's partitions (no shuffle) unless the model is expensive
(:func:`scoring_partitions`); every core works all the same: the tasks of a last, partial wave
(one Parquet file of a single row group is one busy partition) share the idle cores as BLAS
threads (:func:`thread_plan`), a job started before the scoring has the Python workers up and
the scorer warm (:func:`python_workers_started`), and Arrow batches of
:data:`SCORING_BATCH_ROWS` rows let the JVM read while Python scores. The output has the key
(the input's key column, or a row id ``(partition << 40) + row`` numbered on the input's own
partitions before any repartition, so it follows the input's order), the
prediction (the label value) and the raw scores (``rawPrediction`` as MLlib has it: [-f, f]
for two classes, one score per class otherwise).

An ML-vector features column (the LIBSVM reader of the prediction job gives sparse vectors) is scored as CSR
rows, built from the vectors' own Arrow arrays: text rows with 10^5+ features are never
densified, and a model trained on sparse rows scores them by sparse products.
"""
from __future__ import annotations

import atexit
import functools
import math
import os
import shutil
import tempfile
import uuid
from collections import deque
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import scipy.sparse

from ..core import sparse_rows
from ..core.errors import InputError, SettingsError, reported_to_driver
from ..core.feature_names import columns_by_name
from ..core.labels import labels_from_scores
from ..core.sparse_rows import memory_width
from ..models import scoring
from ..models.expansion import KernelExpansion
from .io import ROW_ID_SHIFT, numeric_array_column
from .io.arrow import is_vector_type, vector_order
from .memory import executor_cores
from .engine import context_of, distributes_files, has_accumulators, partition_count
from .task import task_partition
from .frames import inline_file
from .scoring_rows import BatchLayout, checked_rows, input_columns
from .session import background_job

RAW_COLUMN, PREDICTION_COLUMN, ROW_ID_COLUMN = "rawPrediction", "prediction", "row_id"
PROBABILITY_COLUMN = "probability"  # a calibrated model's class probabilities
# Partitions: the input's, and for a model that costs more than 1e7 flops per row (2 · support
# vectors · features: about 6,400 SVs of 784 features) at most SCORING_TASK_FLOPS of kernel GEMM
# per task (about 10-30 s of one core), so that tasks stay short.
SCORING_TASK_FLOPS = 1e12
COUNT_ABOVE_FLOPS_PER_ROW = 1e7
# Rows per Arrow batch while scoring: small batches let the JVM read and convert the next batch
# while Python scores this one. The 10,000 test rows of Fashion-MNIST (one Parquet row group, one
# busy task) with an 8,000-point model: 2.76-2.80 s at Spark's 10,000, 2.35-2.40 s at 2,500,
# 2.23-2.67 s at 1,000, 3.14-3.42 s at 500.
SCORING_BATCH_ROWS = 2_500
ARROW_BATCH_CONF = "spark.sql.execution.arrow.maxRecordsPerBatch"


def _warm_up_scoring(kernel, width: int):
    """A warm-up ``mapInArrow`` function: score a tiny support set of ``kernel`` on ``width``
    inputs in both precisions and build an output batch, as a scoring task does, and return
    nothing, so that the worker has imported the scorer and pyarrow's pandas shim (0.5 s here)
    and loaded the compiled kernels (0.7 s)."""
    def warm_up(batches):
        import pyarrow as pa

        from ..models.expansion import InputMap  # noqa: F401
        from ..models.scoring import SupportSet

        rows = np.linspace(0.0, 1.0, 4 * width).reshape(4, width)
        support = SupportSet.from_arrays(rows[:2], np.array([1.0, -1.0]), kernel)
        for precision in scoring.PRECISIONS:
            scores, _ = support.raw_scores(rows, precision)
            _output_batch(pa.array(np.arange(4)), scores, np.array([-1.0, 1.0]))
        deque(batches, maxlen=0)  # the input's rows are read and dropped
        return iter(())
    return warm_up


def _output_batch(keys, scores, classes, calibration=None):
    """The Arrow batch a scoring task yields: key, prediction (the label) and rawPrediction,
    and with the model's ``calibration`` the class probabilities (KernelExpansion's)."""
    import pyarrow as pa

    labels = labels_from_scores(scores, classes)
    raw = np.concatenate([-scores, scores], axis=1) if scores.shape[1] == 1 else scores
    columns = [raw] if calibration is None else [raw, calibration.probabilities(scores)]
    lists = [pa.ListArray.from_arrays(pa.array(np.arange(0, c.size + 1, c.shape[1],
                                                         dtype=np.int32)), pa.array(c.ravel()))
             for c in columns]
    return pa.RecordBatch.from_arrays(
        [keys, pa.array(labels.astype(np.float64)), *lists],
        names=["key", PREDICTION_COLUMN, RAW_COLUMN, PROBABILITY_COLUMN][:2 + len(lists)])


def python_workers_started(spark, model: KernelExpansion):
    """``with python_workers_started(spark, model) as warming:`` start the Python workers of
    Arrow tasks on every core and warm the scorer up in them (:func:`_warm_up_scoring`), in a
    job run from a background thread while the driver plans the scoring: a worker's start,
    imports and first kernel block took 2.3-3.3 s of a 10,000-row scoring job here, and Spark
    reuses the workers (``spark.python.worker.reuse``) for the scoring tasks, which run through
    the same Arrow runner. Call ``warming.wait()`` before the scoring job; leaving the block
    (a refused input, say) cancels the warm-up and joins its thread
    (:func:`sodm_spark.spark.session.background_job`)."""
    cores = max(1, context_of(spark).defaultParallelism)
    width = 1 if sparse_rows.is_sparse(model.support_vectors) else \
        max(1, int(model.support_vectors.shape[1]))
    warm_up = spark.range(cores, numPartitions=cores).mapInArrow(
        _warm_up_scoring(model.kernel, width), "id long")
    return background_job(spark, warm_up.collect, "scoring-warm-up")


def scoring_partitions(current: int, n_support: int, n_features: float, rows: int) -> int:
    """How many tasks score the ``rows``: the input's ``current`` partitions (their cores
    shared by :func:`thread_plan`, no shuffle), and for an expensive model at least rows /
    (SCORING_TASK_FLOPS / flops per row), so that its tasks stay short. ``n_features``: what a
    kernel entry costs, a width (a float for sparse support vectors: their memory width)."""
    partitions = max(current, 1)
    flops_per_row = 2.0 * n_support * n_features
    if flops_per_row > COUNT_ABOVE_FLOPS_PER_ROW:
        rows_per_task = max(1, int(SCORING_TASK_FLOPS // flops_per_row))
        partitions = max(partitions, math.ceil(rows / rows_per_task))
    return partitions


def thread_plan(rows_per_partition, cores: int, task_cpus: int = 1) -> list[int]:
    """BLAS threads for each partition's scoring task. Tasks run ``cores`` at a time in
    partition order; the partitions with rows fill whole waves of ``cores`` tasks with
    ``task_cpus`` threads each, and the ones of a last, partial wave share its cores (one
    Parquet file of a single row group is one partition with rows and one without: its task
    gets every core). Empty partitions get ``task_cpus``."""
    busy = [index for index, rows in enumerate(rows_per_partition) if rows > 0]
    plan = [task_cpus] * len(rows_per_partition)
    cores = max(cores, task_cpus)
    last_wave = busy[(len(busy) // cores) * cores:]
    for index in last_wave:
        plan[index] = max(task_cpus, cores // len(last_wave))
    return plan


def feature_columns(df, features_col, exclude, model: KernelExpansion):
    """(the feature Columns to select, their kind, the columns left out): an ML vector column
    (kept as its struct of sparse or dense arrays), an array column, or numeric columns. A
    model that keeps its feature names takes named columns by name (any order; a column it
    was not trained on left out, and returned so that the caller names it; a missing one
    refused naming it: :mod:`sodm_spark.core.feature_names`), and so the elements of a vector
    or array column whose ML attributes name them; rows without names are positional."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import NumericType

    n_features, model_names = model.n_features_in, model.feature_names
    fields = {field.name: field for field in df.schema.fields}
    if features_col in fields:
        dtype = fields[features_col].dataType
        order = vector_order(fields[features_col], model_names)
        if is_vector_type(dtype) and order is None:
            return [F.col(features_col).alias("features")], "vector", []
        features = numeric_array_column(features_col, dtype)
        if features is not None:
            if order is not None:  # the vector's elements by their ML attributes' names
                features = F.array(*[features[j] for j in order[0]])
            return [features.alias("features")], "array", [] if order is None else order[1]
        raise InputError(f"the features column {features_col!r} has type "
                         f"{dtype.simpleString()}; expected an ML vector or an array of numbers.")
    columns = [c for c in df.columns if c not in exclude]
    extra: list[str] = []
    if model.categories is not None:  # its input columns: numeric ones, then the strings
        return input_columns(df, columns, model.categories)
    if model_names is not None:
        positions, extra = columns_by_name(model_names, columns, "the data")
        columns = [columns[j] for j in positions]
    bad = [c for c in columns if not isinstance(fields[c].dataType, NumericType)]
    if bad:
        raise InputError(f"there is no features column {features_col!r}, and column(s) "
                         f"{bad[:10]} are not numeric; pass features_col (--features-col), or "
                         "keep only the key, label and numeric feature columns.")
    if len(columns) != n_features:
        raise InputError(f"the data have {len(columns)} feature columns "
                         f"({', '.join(columns[:5])}{', ...' if len(columns) > 5 else ''}); the "
                         f"model was trained on {n_features}. Give the training data's feature "
                         "columns, in the same order.")
    return [F.col(c).cast("double").alias(f"f{j}") for j, c in enumerate(columns)], "columns", \
        extra


def _rows_per_partition(selected, partitions: int, sized: bool = False):
    """(rows of each of the ``partitions`` partitions of ``selected``, and with ``sized`` the
    fewest and most values of a non-null ``features`` array over every row, else None), in one
    job of the JVM alone (no Python task; counts of a file source come from its metadata where
    it has them)."""
    from pyspark.sql import functions as F

    aggregates = [F.count(F.lit(1)).alias("count")]
    if sized:
        size = F.when(F.col("features").isNotNull(), F.size("features"))
        aggregates += [F.min(size).alias("low"), F.max(size).alias("high")]
    counts, lows, highs = [0] * partitions, [], []
    for row in selected.groupBy(F.spark_partition_id().alias("p")).agg(*aggregates).collect():
        counts[row["p"]] = int(row["count"])
        if sized and row["low"] is not None:
            lows.append(int(row["low"]))
            highs.append(int(row["high"]))
    return counts, ((min(lows), max(highs)) if lows else None)


def _row_ids():
    """``(partition << ROW_ID_SHIFT) + row`` as a Column, from Spark's own
    ``monotonically_increasing_id`` (``(partition << 33) + row``) of the same partition."""
    from pyspark.sql import functions as F

    partition = F.spark_partition_id().cast("long")
    return F.monotonically_increasing_id() + partition * ((1 << ROW_ID_SHIFT) - (1 << 33))


def _score_batches(spec, layout: BatchLayout, precision, classes, block_bytes, threads,
                   rows_scored=None, values_ignored=None, values_unseen=None):
    """The ``mapInArrow`` function (closes over plain values only): column 0 the key, the rows
    checked as :func:`~.scoring_rows.checked_rows` reads them (``values_ignored`` counts the
    values it leaves out; ``rows_scored`` the rows scored, for progress).

    BLAS gets ``threads[partition]`` threads (:func:`thread_plan`): with a thread per core in
    every task, two tasks on two cores ran 2.6× slower. When the float32 pass sends most of a batch
    back to float64 (a model whose coefficients cancel, as a compressed one's do: its error
    bound exceeds most |f|), the task scores in float64 from then on.
    """
    @reported_to_driver  # a refused row fails the job with its own message
    def score(batches):
        from threadpoolctl import threadpool_limits

        with threadpool_limits(threads[task_partition()]):
            yield from score_limited(batches)

    def score_limited(batches):
        from pyspark import SparkFiles

        from ..models.scoring import SupportSet

        current = precision
        inline = spec.get("inline")  # a Spark Connect session's model: in the closure
        support = SupportSet.open(spec, SparkFiles.get if inline is None else
                                  functools.partial(inline_file, inline))
        input_map = spec["input_map"]
        for batch in batches:
            n = batch.num_rows
            if n == 0:
                continue
            X = checked_rows(batch, layout, values_ignored, values_unseen)
            # the model's scaling and projection, as KernelExpansion's, in float64: the float64
            # pass must see the rows the model would (float32 input values are exact in it)
            X = input_map(X if scipy.sparse.issparse(X) else np.asarray(X, dtype=np.float64))
            scores, rescored = support.raw_scores(X, current, block_bytes)
            if 2 * rescored > n:
                current = "float64"
            yield _output_batch(batch.column(0), scores, classes, spec.get("calibration"))
            if rows_scored is not None:
                rows_scored.add(n)
    return score


def _scoring_tasks(sc, selected, model: KernelExpansion, kind: str, features_col: str):
    """(the rows ``selected`` in the scoring's tasks, how many, each task's BLAS threads:
    :func:`thread_plan`), after one job that counts each partition's rows (and the values of
    an array column: rows all of another width than the model's are refused here)."""
    n_support, n_features = model.support_vectors.shape[0], model.n_features_in
    current = partition_count(selected)
    # a kernel entry costs a product over the support set's width (the projected inputs of a
    # compressed model), or over a sparse row's values
    cost_width = memory_width(model.support_vectors) if sparse_rows.is_sparse(
        model.support_vectors) else int(model.support_vectors.shape[1])
    counts, sizes = _rows_per_partition(selected, current, sized=kind == "array")
    if sizes is not None and sizes[0] == sizes[1] != n_features:  # said before any scoring;
        # rows of mixed lengths, and nulls, are named by the tasks, which check every row
        raise InputError(f"the rows have {sizes[0]} features in {features_col!r}; the model "
                         f"was trained on {n_features}. Score data with the training data's "
                         "feature columns, in the same order.")
    partitions = scoring_partitions(current, n_support, cost_width, sum(counts))
    if partitions > current:  # round robin; the row ids were fixed above
        selected = selected.repartition(partitions)
        counts = [sum(counts) // partitions + (i < sum(counts) % partitions)
                  for i in range(partitions)]
    task_cpus = int(sc.getConf().get("spark.task.cpus", "1"))
    return selected, partitions, thread_plan(counts, executor_cores(sc), task_cpus)


def _output_schema(df, key_col, calibrated: bool):
    """The scored DataFrame's schema: the key (``key_col``'s type, or a long row id), the
    prediction, rawPrediction and, for a ``calibrated`` model, the class probabilities."""
    from pyspark.sql.types import ArrayType, DoubleType, LongType, StructField, StructType

    key_type = df.schema[key_col].dataType if key_col else LongType()
    return StructType([StructField("key", key_type), StructField(PREDICTION_COLUMN, DoubleType()),
                       StructField(RAW_COLUMN, ArrayType(DoubleType()))]
                      + ([StructField(PROBABILITY_COLUMN, ArrayType(DoubleType()))]
                         if calibrated else []))


class ScoringCounters(NamedTuple):
    """Accumulators the scoring tasks add to (None: not counted): the rows scored (progress),
    the values left out beyond the model's features, the values of string columns not seen
    in training."""

    rows: Any = None
    ignored: Any = None
    unseen: Any = None


@contextmanager
def score_dataframe(df, model: KernelExpansion, features_col: str = "features",
                    key_col: str | None = None, label_col: str | None = "label",
                    precision: str = "float32", counters: ScoringCounters | None = None,
                    block_bytes: int | None = None, any_vector_size: bool = False):
    """``with score_dataframe(df, model) as (scored, partitions):`` a DataFrame of (key,
    prediction, rawPrediction) for every row of ``df``, scored by ``partitions`` tasks.

    ``any_vector_size`` is for rows read from LIBSVM text, whose vectors are as long as the
    largest index in the file: values in columns beyond the model's (features no training row
    had, so no support vector has them and no prediction depends on them) are left out and
    counted in ``counters.ignored``. A model that encodes string columns
    (``KernelExpansion.categories``) takes its input columns by name and encodes them in the
    tasks, the values not seen in training counted in ``counters.unseen``.

    Features: ``features_col`` (vector or array) if ``df`` has it, else every numeric column
    except ``key_col`` and ``label_col``; a model with feature names takes them by name
    (:func:`feature_columns`, whose third value names the columns it leaves out).
    ``counters.rows``: an accumulator the tasks add their rows to (progress); ``block_bytes`` caps a support-vector block (default
    :data:`sodm_spark.models.scoring.SV_BLOCK_BYTES`). Use ``scored`` inside the ``with`` block: the
    model's files are removed when it ends, also on an error.
    """
    if precision not in scoring.PRECISIONS:
        raise SettingsError(f"precision must be one of {', '.join(scoring.PRECISIONS)}, "
                            f"got {precision!r}.")
    sc = context_of(df.sparkSession)
    if key_col is not None and key_col not in df.columns:
        raise InputError(f"the data have no key column {key_col!r}; their columns are "
                         f"{df.columns[:20]}.")
    n_features = model.n_features_in
    exclude = {c for c in (key_col, label_col) if c}
    selection, kind, _ = feature_columns(df, features_col, exclude, model)
    key = df[key_col] if key_col else _row_ids()  # numbered before any repartition
    selected, partitions, threads = _scoring_tasks(
        sc, df.select(key.alias("key"), *selection), model, kind, features_col)
    schema = _output_schema(df, key_col, model.calibration is not None)
    classes = np.asarray(model.classes, dtype=np.float64)
    counters = counters or ScoringCounters()
    rows_scored = counters.rows
    if rows_scored is None and has_accumulators(sc):
        rows_scored = sc.accumulator(0)
    folder = tempfile.mkdtemp(prefix="sodm-predict-")
    names = []
    try:
        support = scoring.SupportSet.from_arrays(model.support_vectors, model.coef, model.kernel,
                                                 model.intercept)
        # file names are SparkFiles keys: unique in the session
        spec = support.save(folder, prefix=f"sodm-predict-{uuid.uuid4().hex[:12]}-")
        names = [name for name in spec["names"].values() if name]
        spec["input_map"], spec["calibration"] = model.input_map, model.calibration
        if not distributes_files(sc):  # no addFile (Spark Connect): they travel in the closure
            spec["inline"] = {name: Path(folder, name).read_bytes() for name in names}
            names = []
        for name in names:
            sc.addFile(os.path.join(folder, name))
        layout = BatchLayout(kind, n_features, key_col, any_vector_size, model.categories)
        scored = selected.mapInArrow(
            _score_batches(spec, layout, precision, classes, block_bytes or scoring.SV_BLOCK_BYTES,
                           threads, rows_scored, counters.ignored, counters.unseen), schema)
        with _arrow_batch_rows(df.sparkSession, SCORING_BATCH_ROWS):
            yield scored.withColumnRenamed("key", key_col or ROW_ID_COLUMN), partitions
    finally:
        _release_files(folder, names)
        _remove_driver_copies(names)


@contextmanager
def _arrow_batch_rows(spark, rows: int):
    """The session's Arrow batches at most ``rows`` rows inside the ``with`` block (never more
    than the session's own setting), its own setting back after it."""
    before = spark.conf.get(ARROW_BATCH_CONF)
    if int(before) > 0:
        rows = min(rows, int(before))
    spark.conf.set(ARROW_BATCH_CONF, str(rows))
    try:
        yield
    finally:
        spark.conf.set(ARROW_BATCH_CONF, before)


def _release_files(folder, names):
    """Empty the model's files now and remove their folder when the interpreter exits: Spark
    keeps every ``addFile`` registered for the rest of the session and has each later task
    fetch the ones it has not fetched yet (a scoring that never ran its job), so the paths must
    stay readable while the session lives."""
    for name in names:
        with suppress(OSError):
            open(os.path.join(folder, name), "wb").close()
    atexit.register(shutil.rmtree, folder, True)


def _remove_driver_copies(names):
    """Delete the driver's own copies of files ``addFile`` fetched (in local mode the tasks'
    too); the executors' copies on a cluster go with the application."""
    from pyspark import SparkFiles

    for name in names:
        with suppress(OSError):  # never fetched here, or already gone
            os.remove(SparkFiles.get(name))
