"""DataFrames into blocks through Arrow (``mapInArrow``), never as per-row Python objects.

Features are an ML vector column, an ``array`` of numbers, or plain numeric columns; each task
turns its record batches into float64 matrices (:func:`batch_matrix`), numbers its rows
(:func:`numbered_batches`: ids ``(partition << ROW_ID_SHIFT) + row``) and ships them as
``np.save`` payloads of at most :data:`CHUNK_ROWS` rows, which become Blocks of at most
:data:`~.blocks.MAX_BLOCK_BYTES`.
:mod:`sodm_spark.spark.predict` scores DataFrames with the same column and batch helpers.
"""
from __future__ import annotations

import io

import numpy as np
import scipy.sparse

from ...core.errors import InputError
from ...core.validation import shown_classes
from ...core.weights import weightless_classes_message
from ..engine import context_of, partition_count, rows_of
from ..task import task_partition
from .blocks import (MAX_BLOCK_BYTES, ROW_ID_SHIFT, Block, DataFormatError, feature_bytes,
                     to_feature_dtype)

#: Rows per Arrow payload when moving a DataFrame partition to numpy (also capped by bytes).
CHUNK_ROWS = 8192


def is_vector_type(dtype):
    """Whether a Spark SQL type is an ML/MLlib vector (without importing pyspark.ml)."""
    return type(dtype).__name__ == "VectorUDT"


def numeric_array_column(column_name, dtype):
    """The column ``column_name`` of type ``dtype`` as an array Column when it is an ML/MLlib
    vector (``array<double>``) or an array of numbers (``array<float>`` kept as it is — half the
    bytes through Arrow, and every value exact —, others ``array<double>``), else None."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, FloatType, NumericType

    if is_vector_type(dtype):
        from pyspark.ml.functions import vector_to_array
        return vector_to_array(F.col(column_name), "float64")
    if isinstance(dtype, ArrayType) and isinstance(dtype.elementType, FloatType):
        return F.col(column_name)
    if isinstance(dtype, ArrayType) and isinstance(dtype.elementType, NumericType):
        return F.col(column_name).cast("array<double>")
    return None


def vector_names(field) -> list[str] | None:
    """The element names of a vector or array column from its ML attributes (the metadata
    ``VectorAssembler`` writes: ``ml_attr.attrs`` lists each element's ``idx`` and ``name``),
    in element order; None when the column has none, or not one name per element."""
    attributes = (field.metadata or {}).get("ml_attr", {})
    by_index = {}
    for group in (attributes.get("attrs") or {}).values():
        for attribute in group:
            if "idx" in attribute and "name" in attribute:
                by_index[int(attribute["idx"])] = str(attribute["name"])
    size = attributes.get("num_attrs", len(by_index))
    if not by_index or sorted(by_index) != list(range(size)):
        return None
    return [by_index[index] for index in range(size)]


def vector_order(field, model_names) -> tuple[list[int], list[str]] | None:
    """(the positions of a model's features among the elements of the vector or array column
    ``field``, the elements it leaves out) when both the model and the column's ML attributes
    name them and the names are not already the model's order (a missing one refused naming
    it: :func:`~sodm_spark.core.feature_names.columns_by_name`); else None, positional."""
    from ...core.feature_names import columns_by_name

    given = vector_names(field)
    if model_names is None or given is None or list(given) == list(model_names):
        return None
    return columns_by_name(list(model_names), given, f"the features column {field.name!r}")


def table_features(df, features_col, not_features) -> tuple[list[str] | None, list[str] | None]:
    """(the feature names of ``df``, their Spark SQL types) as a fit reads them
    (:func:`dataframe_to_blocks`): the listed columns when ``features_col`` is a list, the ML
    attributes' names of a vector or array ``features_col`` (None when it has none: its
    elements are positional), else every column but ``not_features`` (the label and weight
    columns)."""
    fields = {field.name: field for field in df.schema.fields}
    if isinstance(features_col, str) and features_col in fields:
        names = vector_names(fields[features_col])
        return names, None if names is None else ["double"] * len(names)
    names = list(features_col) if isinstance(features_col, (list, tuple)) else \
        [name for name in df.columns if name not in not_features]
    return names, [fields[name].dataType.simpleString() if name in fields else "double"
                   for name in names]


def batch_matrix(batch, kind, first, d):
    """The (n, d) features of an Arrow record batch: column ``first`` a list of length d
    (``kind`` "array"; float32 for a list<float>, else float64) or columns first..first+d-1
    doubles ("columns", float64)."""
    n = batch.num_rows
    if kind == "array":
        flat = batch.column(first).flatten().to_numpy(zero_copy_only=False)
        dtype = np.float32 if flat.dtype == np.float32 else np.float64
        return np.asarray(flat, dtype=dtype).reshape(n, d)
    X = np.empty((n, d), dtype=np.float64)
    for j in range(d):
        X[:, j] = batch.column(first + j).to_numpy(zero_copy_only=False)
    return X


def vector_rows(column, d):
    """The rows of an Arrow ML-vector column (the struct Spark passes a VectorUDT as: ``type``
    0 sparse / 1 dense, ``size``, ``indices``, ``values``) as a CSR matrix of width ``d`` —
    sparse vectors are never densified (LIBSVM rows with 10^5+ features) —, each row's
    length (``size`` of a sparse vector, the number of values of a dense one; -1 for a null),
    and how many values lay in columns ``d`` and beyond (left out of the matrix)."""
    import pyarrow.compute as pc

    n = len(column)
    nulls = np.asarray(column.is_null(), dtype=bool)
    kinds = np.asarray(pc.fill_null(column.field("type"), 1).to_numpy(zero_copy_only=False))
    values_list, indices_list = column.field("values"), column.field("indices")
    value_counts = np.asarray(pc.fill_null(pc.list_value_length(values_list), 0)
                              .to_numpy(zero_copy_only=False), dtype=np.int64)
    value_counts[nulls] = 0
    sizes = np.asarray(pc.fill_null(column.field("size"), -1).to_numpy(zero_copy_only=False),
                       dtype=np.int64)
    dense = kinds == 1
    sizes[dense] = value_counts[dense]
    sizes[nulls] = -1
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(value_counts, out=indptr[1:])
    values = np.asarray(pc.list_flatten(values_list).to_numpy(zero_copy_only=False),
                        dtype=np.float64)
    sparse_entries = np.repeat(~dense, value_counts)
    indices = np.empty(values.size, dtype=np.int64)
    indices[sparse_entries] = np.asarray(pc.list_flatten(indices_list).to_numpy(
        zero_copy_only=False), dtype=np.int64)
    # a dense vector's values are its columns 0, 1, ...: their positions within the row
    within = np.arange(values.size) - np.repeat(indptr[:-1], value_counts)
    indices[~sparse_entries] = within[~sparse_entries]
    beyond = indices >= d
    n_beyond = int(beyond.sum())
    if n_beyond:
        rows = np.repeat(np.arange(n), value_counts)[~beyond]
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
        values, indices = values[~beyond], indices[~beyond]
    return scipy.sparse.csr_matrix((values, indices, indptr), shape=(n, d)), sizes, n_beyond


def numbered_batches(batches):
    """This ``mapInArrow`` task's non-empty record batches as ``(batch, first_id, first_row)``:
    the row id of the batch's first row, ``(partition << ROW_ID_SHIFT) + row``, and that row's
    number within the partition."""

    base = task_partition() << ROW_ID_SHIFT
    local = 0
    for batch in batches:
        n = batch.num_rows
        if n == 0:
            continue
        yield batch, base + local, local
        local += n


def _serialize_block(X, y, ids, weights=None):
    buffer = io.BytesIO()
    for array in (X, y, ids) if weights is None else (X, y, ids, weights):
        np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def _deserialize_block(payload):
    buffer = io.BytesIO(payload)
    arrays = [np.load(buffer, allow_pickle=False) for _ in range(3)]
    if buffer.tell() < len(payload):  # a weight column's values follow
        arrays.append(np.load(buffer, allow_pickle=False))
    return Block(*arrays)


def _arrow_to_payloads(kind, d, chunk_rows, dtype=np.float64, weighted=False,
                       categories=None):
    """The ``mapInArrow`` function: record batches ``[label, (weight,) features...]`` -> np.save
    payloads.

    ``kind`` is ``"array"`` (the first feature column is list<double> of length ``d``) or
    ``"columns"`` (d double columns); features are stored in ``dtype``; ``weighted``: column 1
    holds each row's weight; ``categories``: the string columns that follow, encoded
    (:class:`~.string_columns.TableCategories`). Row ids are ``(partitionId << 40) + local
    row``.
    """
    def to_payloads(batches):
        import pyarrow as pa

        for batch, first_id, _ in numbered_batches(batches):
            n = batch.num_rows
            y = np.asarray(batch.column(0).to_numpy(zero_copy_only=False), dtype=np.float64)
            weights = None if not weighted else np.asarray(
                batch.column(1).to_numpy(zero_copy_only=False), dtype=np.float64)
            X = batch_matrix(batch, kind, 1 + weighted, d)
            if categories is not None:  # then the string columns, by name (.string_columns)
                X = np.hstack([X, categories.features(batch, first_id)])
            for start in range(0, n, chunk_rows):
                stop = min(n, start + chunk_rows)
                ids = np.arange(first_id + start, first_id + stop, dtype=np.int64)
                payload = _serialize_block(
                    to_feature_dtype(X[start:stop], dtype), np.ascontiguousarray(y[start:stop]),
                    ids, None if weights is None else np.ascontiguousarray(weights[start:stop]))
                yield pa.RecordBatch.from_arrays([pa.array([payload], type=pa.binary())],
                                                 names=["payload"])
    return to_payloads


def _payloads_to_blocks(rows):
    """One partition's payload rows -> Blocks of at most MAX_BLOCK_BYTES (consecutive payloads
    joined while they fit)."""
    pending: list = []
    size = 0
    for row in rows:
        part = _deserialize_block(row[0])
        nbytes = feature_bytes(part.X)
        if pending and size + nbytes > MAX_BLOCK_BYTES:
            yield _joined(pending)
            pending, size = [], 0
        pending.append(part)
        size += nbytes
    if pending:
        yield _joined(pending)


def _joined(parts):
    if len(parts) == 1:
        return parts[0]
    return Block(np.ascontiguousarray(np.concatenate([p.X for p in parts])),
                 np.concatenate([p.y for p in parts]),
                 np.concatenate([p.row_ids for p in parts]),
                 None if parts[0].weights is None else
                 np.concatenate([p.weights for p in parts]))


def _array_features(df, label, features_col, dtype, where):
    """``(DataFrame [label, (weight,) features array], d)`` (:func:`numeric_array_column`;
    ``label`` the leading Columns) after one job that checks every row's array (no nulls, one
    length)."""
    from pyspark.sql import functions as F

    feats = numeric_array_column(features_col, dtype)
    if feats is None:
        raise InputError(f"{where}: the features column {features_col!r} has type "
                         f"{dtype.simpleString()}; expected an ML vector or an array of "
                         "numbers (or pass features_col=[...] naming numeric columns).")
    prepared = df.select(*label, feats.alias("features"))
    stats = prepared.agg(F.count(F.lit(1)).alias("n"),
                         F.min(F.size("features")).alias("lo"),
                         F.max(F.size("features")).alias("hi"),
                         F.sum(F.col("features").isNull().cast("int")).alias("nulls")).first()
    if stats["n"] == 0:
        raise DataFormatError(f"{where} has no rows. Check the input path or filter.")
    if stats["nulls"]:
        raise DataFormatError(f"{where}: {stats['nulls']} row(s) have a null "
                              f"{features_col!r} value. Drop or fill those rows first.")
    if stats["lo"] != stats["hi"]:
        raise DataFormatError(f"{where}: the {features_col!r} arrays have different "
                              f"lengths ({stats['lo']} to {stats['hi']}). Every row needs "
                              "the same number of features.")
    return prepared, int(stats["hi"])


def _column_features(df, label, features_col, label_col, schema, where, strings=False):
    """``(DataFrame [label, (weight,) f0..f{d-1} doubles, (string columns)], d, the string
    columns)``: the named numeric columns, or every column other than those of ``label_col``
    (the label and weight columns' names); ``strings``: string columns kept as they are."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BooleanType, NumericType, StringType

    columns = df.columns
    if isinstance(features_col, (list, tuple)):
        feature_cols = list(features_col)
        missing = [c for c in feature_cols if c not in columns]
        if missing:
            raise InputError(f"{where} has no column(s) {missing}; its columns are "
                             f"{columns[:20]}.")
    else:
        feature_cols = [c for c in columns if c not in label_col]
    text = [c for c in feature_cols if strings and isinstance(schema[c], StringType)]
    non_numeric = [c for c in feature_cols if c not in text
                   and not isinstance(schema[c], (NumericType, BooleanType))]
    if non_numeric:
        raise InputError(
            f"{where}: column(s) {non_numeric[:10]} are not numeric "
            f"({', '.join(schema[c].simpleString() for c in non_numeric[:10])}), and there "
            f"is no features column {features_col!r}. Provide a vector/array features "
            "column, or keep only the label and numeric feature columns.")
    if not feature_cols:
        raise InputError(f"{where} has no feature columns besides {', '.join(label_col)}.")
    numeric = [c for c in feature_cols if c not in text]
    prepared = df.select(*label, *[F.col(c).cast("double").alias(f"f{j}")
                                   for j, c in enumerate(numeric)], *text)
    if prepared.limit(1).count() == 0:
        raise DataFormatError(f"{where} has no rows. Check the input path or filter.")
    return prepared, len(numeric), numeric, text


def _weight_column(df, weight_col, label_col, schema, where):
    """The Column of ``weight_col``'s weights as doubles, after one job that refuses a null,
    NaN, infinite or negative weight (naming how many rows and the first such value), a
    column whose weights are all 0, and weights under which a class of ``label_col`` has no
    row of positive weight (naming it: :func:`~sodm_spark.core.weights.weightless_classes_message`).
    Rows of weight 0 are left out by the caller."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import NumericType

    if weight_col not in schema:
        raise InputError(f"{where} has no weight column {weight_col!r}; its columns are "
                         f"{list(schema)[:20]}. Pass the column that holds each row's weight.")
    if not isinstance(schema[weight_col], NumericType):
        raise InputError(f"{where}: the weight column {weight_col!r} has type "
                         f"{schema[weight_col].simpleString()}, not a number.")
    weight = F.col(weight_col).cast("double")
    bad = weight.isNull() | F.isnan(weight) | (weight < 0) | (F.abs(weight) == float("inf"))
    label = F.col(label_col).cast("double")
    stats = df.agg(F.sum(bad.cast("int")).alias("bad"),
                   F.first(F.when(bad, F.coalesce(weight.cast("string"), F.lit("null"))),
                           ignorenulls=True).alias("example"),
                   F.sum((weight > 0).cast("int")).alias("positive"),
                   F.array_sort(F.collect_set(label)).alias("classes"),
                   F.array_sort(F.collect_set(F.when(weight > 0, label))).alias("weighted")
                   ).first()
    if stats["bad"]:
        raise DataFormatError(f"{where}: {stats['bad']} row(s) of the weight column "
                              f"{weight_col!r} are not a finite number >= 0 (one is "
                              f"{stats['example']}). Fix or drop those rows.")
    if not stats["positive"]:
        raise DataFormatError(f"{where}: every weight in column {weight_col!r} is 0 (or "
                              "there are no rows): nothing to fit.")
    weighted = set(stats["weighted"])
    weightless = [c for c in stats["classes"] if c not in weighted]
    if weightless:
        raise DataFormatError(weightless_classes_message(
            [shown_classes([c]) for c in weightless],
            [shown_classes([c]) for c in stats["weighted"]], stats["positive"],
            f"{where}: the weight column {weight_col!r}"))
    return weight


def dataframe_to_blocks(df, features_col="features", label_col="label", *,
                        where="the DataFrame", min_partitions=None, dtype=np.float64,
                        weight_col=None, strings=None):
    """A DataFrame as ``(RDD[Block], d)`` via Arrow: Blocks of at most MAX_BLOCK_BYTES of
    features in ``dtype`` (float64 or float32).

    Features are ``features_col`` when it is an ML/MLlib vector column (converted with
    ``pyspark.ml.functions.vector_to_array``) or an ``array`` of numbers; a list of column
    names; or, when ``features_col`` is not a column, every column other than ``label_col``
    (all must be numeric). Labels are cast to float64 as they are. One validation job counts
    rows and checks that every features array has the same length; nulls inside arrays or
    plain columns become NaN (refused by :func:`check_blocks`). Row ids are
    ``(partition_index << 40) + row number in the partition``, deterministic as long as the
    DataFrame's partitioning is (file scans are).

    ``where`` names the data in error messages (the readers pass the path); with
    ``min_partitions`` a DataFrame with fewer partitions is repartitioned (round robin).
    ``weight_col``: a numeric column of row weights (each finite and >= 0, checked by one
    job), carried in the Blocks' ``weights``; rows of weight 0 are left out. ``strings`` (a
    :class:`~.string_columns.StringEncoding`): string feature columns are encoded by the tasks
    (:func:`~.string_columns.frame_categories`), after the numeric ones, and
    ``(RDD[Block], d, the encoding or None)`` is returned.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import NumericType

    from .string_columns import frame_categories

    columns = df.columns
    if label_col not in columns:
        raise InputError(f"{where} has no label column {label_col!r}; its columns are "
                         f"{columns[:20]}{' ...' if len(columns) > 20 else ''}. Pass "
                         "label_col=... naming the label column.")
    schema = {field.name: field.dataType for field in df.schema.fields}
    if not isinstance(schema[label_col], NumericType):
        raise InputError(f"{where}: the label column {label_col!r} has type "
                         f"{schema[label_col].simpleString()}, not a number. Map the labels to "
                         "numbers (e.g. 0/1 or -1/+1) first.")
    leading = [F.col(label_col).cast("double").alias("label")]
    if weight_col is not None:
        weight = _weight_column(df, weight_col, label_col, schema, where)
        df = df.filter(weight > 0)  # a row of weight 0 is not in the fit
        leading.append(weight.alias("weight"))
    numeric, text = [], []
    if isinstance(features_col, str) and features_col in columns:
        kind = "array"
        prepared, d = _array_features(df, leading, features_col, schema[features_col], where)
    else:
        kind = "columns"
        prepared, d, numeric, text = _column_features(
            df, leading, features_col, [label_col] + ([weight_col] if weight_col else []),
            schema, where, strings is not None)
    sc = context_of(df.sparkSession)
    if min_partitions is not None and partition_count(prepared) < min_partitions:
        prepared = prepared.repartition(min_partitions)
    # counted on ``prepared`` itself: its rows are numbered as the payloads' are
    categories = frame_categories(prepared, numeric, text, strings, where,
                                  numbered_batches) if text else None
    width = d if categories is None else len(categories.encoding.feature_names)
    itemsize = np.dtype(dtype).itemsize
    chunk_rows = max(1, min(CHUNK_ROWS, MAX_BLOCK_BYTES // (itemsize * max(width, 1))))
    payloads = prepared.mapInArrow(_arrow_to_payloads(kind, d, chunk_rows, dtype,
                                                      weight_col is not None, categories),
                                   "payload binary")
    blocks = rows_of(payloads, sc).mapPartitions(_payloads_to_blocks)
    if strings is None:
        return blocks, d
    return blocks, width, None if categories is None else categories.encoding
