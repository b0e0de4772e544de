"""Batch scoring of a DataFrame with a broadcast kernel model through Arrow (issue [12]).

``mapInArrow`` hands every task its rows as Arrow record batches; the features become one
float64 matrix per batch without a Python object per row, and
:func:`sodm_spark.scoring.raw_scores` scores it (float32 kernel blocks, boundary rows again in
float64). The output has the key (the input's key column, or a row id
``(partition << 40) + row``), the prediction (the label value) and the raw scores
(``rawPrediction`` as MLlib has it: [-f, f] for two classes, one score per class otherwise).
"""
from __future__ import annotations

import numpy as np

from ..model import KernelExpansion
from .io import batch_matrix, numbered_batches, vector_or_array_as_doubles

RAW_COLUMN, PREDICTION_COLUMN, ROW_ID_COLUMN = "rawPrediction", "prediction", "row_id"


def _features(df, features_col, exclude, n_features):
    """(list of feature Columns to select, kind): an array column, or numeric columns."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import NumericType

    schema = {field.name: field.dataType for field in df.schema.fields}
    if features_col in schema:
        dtype = schema[features_col]
        features = vector_or_array_as_doubles(features_col, dtype)
        if features is not None:
            return [features.alias("features")], "array"
        raise ValueError(f"the features column {features_col!r} has type "
                         f"{dtype.simpleString()}; expected an ML vector or an array of numbers.")
    columns = [c for c in df.columns if c not in exclude]
    bad = [c for c in columns if not isinstance(schema[c], NumericType)]
    if bad:
        raise ValueError(f"there is no features column {features_col!r}, and column(s) "
                         f"{bad[:10]} are not numeric; pass --features-col, or keep only the "
                         "key, label and numeric feature columns.")
    if len(columns) != n_features:
        raise ValueError(f"the data have {len(columns)} feature columns "
                         f"({', '.join(columns[:5])}{', ...' if len(columns) > 5 else ''}); the "
                         f"model was trained on {n_features}. Give the training data's feature "
                         "columns, in the same order.")
    return [F.col(c).cast("double").alias(f"f{j}") for j, c in enumerate(columns)], "columns"


def _score_batches(payload, kind, n_features, key_kind, precision, rows_scored):
    """The ``mapInArrow`` function (closes over plain values only)."""
    def score(batches):
        import pyarrow as pa
        from pyspark import TaskContext

        from ..kernels import Kernel
        from ..scoring import predictions, raw_scores

        support_vectors, coef, kernel_dict, intercept, classes = payload.value
        kernel = Kernel.from_dict(kernel_dict)
        for batch, first_id, local in numbered_batches(batches):
            n = batch.num_rows
            first = 1 if key_kind == "column" else 0
            if kind == "array":
                column = batch.column(first)
                lengths = np.diff(np.asarray(column.offsets))
                if column.null_count or np.any(lengths != n_features):
                    bad = int(np.flatnonzero((lengths != n_features) |
                                             np.asarray(column.is_null()))[0])
                    raise ValueError(f"row {local + bad} of partition "
                                     f"{TaskContext.get().partitionId()} has "
                                     f"{lengths[bad]} features (or none); the model was "
                                     f"trained on {n_features}.")
            X = batch_matrix(batch, kind, first, n_features)
            finite = np.isfinite(X).all(axis=1)
            if not finite.all():
                bad = int(np.flatnonzero(~finite)[0])
                raise ValueError(f"row {local + bad} of partition "
                                 f"{TaskContext.get().partitionId()} has a missing, NaN or "
                                 "infinite feature; fill or drop such rows before scoring.")
            scores, _ = raw_scores(X, support_vectors, coef, kernel, intercept, precision)
            labels = predictions(scores, classes)
            raw = np.concatenate([-scores, scores], axis=1) if scores.shape[1] == 1 else scores
            key = batch.column(0) if key_kind == "column" else \
                pa.array(np.arange(first_id, first_id + n, dtype=np.int64))
            values = pa.array(raw.ravel())
            offsets = pa.array(np.arange(0, raw.size + 1, raw.shape[1], dtype=np.int32))
            yield pa.RecordBatch.from_arrays(
                [key, pa.array(labels.astype(np.float64)),
                 pa.ListArray.from_arrays(offsets, values)],
                names=["key", PREDICTION_COLUMN, RAW_COLUMN])
            rows_scored.add(n)
    return score


def score_dataframe(df, model: KernelExpansion, features_col: str = "features",
                    key_col: str | None = None, label_col: str | None = "label",
                    precision: str = "float32", rows_scored=None):
    """A DataFrame of (key, prediction, rawPrediction) for every row of ``df``.

    Features: ``features_col`` (vector or array) if ``df`` has it, else every numeric column
    except ``key_col`` and ``label_col``. ``rows_scored`` is an optional accumulator the
    tasks add their rows to (progress).
    """
    from pyspark.sql.types import (ArrayType, DoubleType, LongType, StructField, StructType)

    spark = df.sparkSession
    if key_col is not None and key_col not in df.columns:
        raise ValueError(f"the data have no key column {key_col!r}; their columns are "
                         f"{df.columns[:20]}.")
    n_features = int(model.support_vectors.shape[1])
    exclude = {c for c in (key_col, label_col) if c}
    feature_columns, kind = _features(df, features_col, exclude, n_features)
    selected = df.select(*([df[key_col].alias("key")] if key_col else []), *feature_columns)
    if kind == "array":  # the first row says it before any scoring (the tasks check every row)
        first = selected.limit(1).collect()
        if first and first[0]["features"] is not None and len(first[0]["features"]) != n_features:
            raise ValueError(f"the rows have {len(first[0]['features'])} features in "
                             f"{features_col!r}; the model was trained on {n_features}. Score "
                             "data with the training data's feature columns, in the same order.")
    key_type = df.schema[key_col].dataType if key_col else LongType()
    schema = StructType([StructField("key", key_type), StructField(PREDICTION_COLUMN, DoubleType()),
                         StructField(RAW_COLUMN, ArrayType(DoubleType()))])
    classes = np.asarray(model.classes, dtype=np.float64)
    payload = spark.sparkContext.broadcast(
        (model.support_vectors, np.asarray(model.coef, dtype=np.float64), model.kernel.to_dict(),
         model.intercept, classes))
    if rows_scored is None:
        rows_scored = spark.sparkContext.accumulator(0)
    out = selected.mapInArrow(
        _score_batches(payload, kind, n_features, "column" if key_col else "id", precision,
                       rows_scored), schema)
    return out.withColumnRenamed("key", key_col or ROW_ID_COLUMN)
