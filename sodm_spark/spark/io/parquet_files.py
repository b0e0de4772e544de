"""Parquet tables read by pyarrow inside the tasks, whatever their layout: a column per
feature (floats, doubles, integers, booleans, decimals), one array column, or an ML vector
column; local files or any store pyarrow reaches.

Spark SQL decodes Parquet row by row in the JVM and converts it to Arrow value by value:
600,000 × 784 deformed Fashion-MNIST rows with a float32 column per pixel took 80-147 s to
become blocks here, while one Python process reads the same files into numpy in about 10 s.
So the tasks read the files themselves (:func:`read_parquet_table`), each the rows its plan
names (:mod:`.scan_plan`: Spark's own scan, so the blocks are byte for byte those of
:func:`~.arrow.dataframe_to_blocks`, or one task per row group where Spark cannot plan one),
converting every value as Spark's ``cast("double")`` does. Whatever the reader does not take
(a weight column, partition folders, a non-numeric column, a file pyarrow cannot open) goes
through Spark SQL, which words its refusal.

A bad row (a null or a wrong-length array, NaN, a value beyond what the kernels take) is
refused by its file and row within the file.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from urllib.parse import unquote, urlparse

import numpy as np

from ...core.categories import CategoryEncoding
from ...core.errors import reported_to_driver
from ...core.validation import max_abs_value
from ..engine import context_of, partition_count
from .arrow import CHUNK_ROWS, table_features, vector_names, vector_rows
from .blocks import MAX_BLOCK_BYTES, Block, DataFormatError, sql_conf, to_feature_dtype
from .scan_plan import Split, TaskPlan, cut_blocks, row_group_plan, spark_scan_plan
from .string_columns import (StringEncoding, TableCategories, encoded_features,
                             fit_table_categories, is_string_type)

_SPARK_METADATA = b"org.apache.spark.sql.parquet.row.metadata"
_VECTOR_FIELDS = {"type", "size", "indices", "values"}  # how Spark writes a VectorUDT


@dataclass(frozen=True)
class ParquetLayout:
    """How a file holds its features: ``kind`` ``"columns"`` (``features`` the feature
    columns, in the model's order), ``"array"`` or ``"vector"`` (``features`` the one column);
    ``d`` features in ``dtype`` per row, labels in ``label``."""

    kind: str
    features: tuple[str, ...]
    label: str
    d: int
    dtype: str
    # the string columns, encoded after the numeric ``features`` (kind "columns" only)
    categories: TableCategories | None = None


def _is_number(arrow_type) -> bool:
    import pyarrow.types as pt

    return pt.is_integer(arrow_type) or pt.is_floating(arrow_type) or \
        pt.is_decimal(arrow_type)


def _is_feature(arrow_type) -> bool:
    import pyarrow.types as pt

    return _is_number(arrow_type) or pt.is_boolean(arrow_type)


def feature_layout(schema, features_col, label_col: str,
                   names) -> tuple[str, tuple, tuple] | None:
    """(kind, numeric feature columns, string feature columns) of a pyarrow ``schema`` read
    with ``features_col`` (a column, or the feature columns' names) when the tasks can read
    it, ``names`` the feature columns a fit takes when ``features_col`` is not a column; else
    None (Spark SQL reads it)."""
    import pyarrow.types as pt

    fields = {field.name: field.type for field in schema}
    if label_col not in fields or not _is_number(fields[label_col]):
        return None
    if isinstance(features_col, str) and features_col in fields:
        kind = fields[features_col]
        if (pt.is_list(kind) or pt.is_large_list(kind) or pt.is_fixed_size_list(kind)) \
                and _is_number(kind.value_type):
            return "array", (features_col,), ()
        if pt.is_struct(kind) and {kind.field(i).name for i in range(kind.num_fields)} \
                == _VECTOR_FIELDS:
            return "vector", (features_col,), ()
        return None
    if not names or any(name not in fields or not (_is_feature(fields[name]) or
                                                   is_string_type(fields[name]))
                        for name in names):
        return None
    strings = tuple(name for name in names if is_string_type(fields[name]))
    return "columns", tuple(name for name in names if name not in strings), strings


def spark_type_name(arrow_type) -> str:
    """The Spark SQL type name Spark reads a Parquet column of ``arrow_type`` as."""
    import pyarrow.types as pt

    if pt.is_decimal(arrow_type):
        return f"decimal({arrow_type.precision},{arrow_type.scale})"
    named = {"bool": "boolean", "int8": "tinyint", "int16": "smallint", "int32": "int",
             "int64": "bigint", "uint8": "smallint", "uint16": "int", "uint32": "bigint",
             "uint64": "decimal(20,0)", "float": "float", "double": "double",
             "halffloat": "float"}
    return named.get(str(arrow_type), str(arrow_type))


class _SparkField:
    """A field of the Spark schema a Parquet file carries (what :func:`.arrow.vector_names`
    reads: a name and its metadata)."""

    def __init__(self, entry):
        self.name, self.metadata = entry.get("name"), entry.get("metadata") or {}


def arrow_feature_names(schema, kind, features) -> tuple[list | None, list | None]:
    """(names, Spark type names) of the features of a file Spark does not read: the columns,
    or an array or vector column's ML attributes from the Spark schema the file keeps."""
    if kind == "columns":
        return list(features), [spark_type_name(schema.field(name).type) for name in features]
    spark_schema = (schema.metadata or {}).get(_SPARK_METADATA)
    if not spark_schema:
        return None, None
    entries = {entry.get("name"): entry
               for entry in json.loads(spark_schema).get("fields", [])}
    names = vector_names(_SparkField(entries.get(features[0], {})))
    return names, None if names is None else ["double"] * len(names)


def _open(path: str):
    """A pyarrow ParquetFile of a local path or a URI pyarrow reaches."""
    import pyarrow.parquet as pq

    if "://" not in path:
        return pq.ParquetFile(path)
    import pyarrow.fs as pafs

    from ...data.filesystems import arrow_uri

    filesystem, inner = pafs.FileSystem.from_uri(arrow_uri(path))
    return pq.ParquetFile(filesystem.open_input_file(inner))


def parquet_schema(path: str):
    """The pyarrow schema of the Parquet file ``path`` (a local path or a URI pyarrow
    reaches)."""
    return _open(path).schema_arrow


def local_name(name: str) -> str:
    """A file name as Spark answers it (``file:`` URIs %-escaped) as pyarrow opens it."""
    uri = urlparse(name)
    return unquote(uri.path) if uri.scheme in ("file", "") else name


def _split_tables(split: Split, columns):
    """(table, the file's row number of its first row) of ``split``'s rows, a row group at a
    time."""
    parquet = _open(split.path)
    metadata = parquet.metadata
    start, stop, first = split.first_row, split.first_row + split.rows, 0
    for group in range(metadata.num_row_groups):
        rows = metadata.row_group(group).num_rows
        low, high = max(start, first), min(stop, first + rows)
        if low < high:
            table = parquet.read_row_group(group, columns=list(columns))
            yield table.slice(low - first, high - low), low
        first += rows


def _float64(column):
    """A numeric or boolean Arrow column as float64 numpy, nulls as NaN, each value as
    Spark's ``cast("double")`` gives it (decimals through their text: correctly rounded)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.types as pt

    if pt.is_decimal(column.type):
        column = pc.cast(pc.cast(column, pa.string()), pa.float64())
    elif not pt.is_float64(column.type):
        column = pc.cast(column, pa.float64())
    return np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.float64)


def _column_matrix(table, features, dtype):
    """The (n, d) C-contiguous matrix of the feature columns in ``dtype``: filled a column at
    a time into a column-major matrix, then transposed once (twice as fast as strided
    writes). A float32 column stays float32; others go through float64, as Spark casts."""
    import pyarrow.types as pt

    out = np.empty((len(features), table.num_rows), dtype=dtype)
    for j, name in enumerate(features):
        column = table.column(name).combine_chunks()
        if dtype == np.float32 and pt.is_float32(column.type) and not column.null_count:
            out[j] = column.to_numpy(zero_copy_only=False)
        else:
            out[j] = to_feature_dtype(_float64(column)[None, :], dtype)[0]
    return np.ascontiguousarray(out.T)


def _width_problem(lengths, d, column, path, first_row):
    wrong = np.flatnonzero(lengths != d)
    if not wrong.size:
        return
    row = int(wrong[0])
    found = "a null" if lengths[row] < 0 else f"{lengths[row]} values"
    raise DataFormatError(f"{path}: row {first_row + row + 1} of the file has {found} in "
                          f"{column!r} where the first row has {d}; every row needs the same "
                          "number of features.", path=path)


def _features(table, layout: ParquetLayout, path, first_row, first_id):
    """The (n, d) features of ``table`` (its first row's id ``first_id``) in the layout's
    dtype."""
    import pyarrow.compute as pc

    dtype = np.dtype(layout.dtype)
    if layout.kind == "columns":
        numeric = _column_matrix(table, layout.features, dtype)
        if layout.categories is None:
            return numeric
        encoded = to_feature_dtype(layout.categories.features(table, first_id), dtype)
        return np.ascontiguousarray(np.hstack([numeric, encoded]))
    column = table.column(layout.features[0]).combine_chunks()
    if layout.kind == "vector":
        rows, sizes, _ = vector_rows(column, layout.d)
        _width_problem(sizes, layout.d, layout.features[0], path, first_row)
        return to_feature_dtype(rows.toarray(), dtype)
    lengths = pc.fill_null(pc.list_value_length(column), -1).to_numpy(zero_copy_only=False)
    _width_problem(lengths, layout.d, layout.features[0], path, first_row)
    flat = column.flatten()
    import pyarrow.types as pt

    # float32 lists stay float32; others (doubles, integers) become doubles as Spark casts them
    values = flat.to_numpy(zero_copy_only=False) if pt.is_float32(flat.type) and \
        not flat.null_count else _float64(flat)
    return to_feature_dtype(np.asarray(values).reshape(table.num_rows, layout.d), dtype)


def task_blocks(plan: TaskPlan, layout: ParquetLayout, split_tables=None):
    """The Blocks of one task's plan: its splits read a table at a time (``split_tables``:
    how, a Parquet row group at a time when None), checked, cut into the plan's blocks."""
    split_tables = split_tables or _split_tables
    pending_X: list = []
    pending_y: list = []
    have, next_id = 0, plan.first_id
    sizes = iter(plan.block_rows)
    want = next(sizes, 0)
    strings = () if layout.categories is None else \
        tuple(column.name for column in layout.categories.encoding.columns)
    columns = (layout.label, *layout.features, *strings)
    limit = max_abs_value(layout.dtype)
    table_id = plan.first_id
    for split in plan.splits:
        for table, first_row in split_tables(split, columns):
            X = _features(table, layout, split.path, first_row, table_id)
            table_id += table.num_rows
            y = _float64(table.column(layout.label).combine_chunks())
            _check_values(X, y, split.path, first_row, limit)
            pending_X.append(X)
            pending_y.append(y)
            have += len(y)
            while want and have >= want:
                X_all = pending_X[0] if len(pending_X) == 1 else np.concatenate(pending_X)
                y_all = pending_y[0] if len(pending_y) == 1 else np.concatenate(pending_y)
                ids = np.arange(next_id, next_id + want, dtype=np.int64)
                yield Block(np.ascontiguousarray(X_all[:want]),
                            np.ascontiguousarray(y_all[:want]), ids)
                next_id += want
                pending_X, pending_y = [X_all[want:]], [y_all[want:]]
                have -= want
                want = next(sizes, 0)


def _first_width(plans, layout: ParquetLayout, where) -> int:
    """The number of features of the first row of an array or vector column."""
    import pyarrow.compute as pc

    for plan in plans:
        for split in plan.splits:
            for table, _ in _split_tables(Split(split.path, split.first_row, 1),
                                          layout.features):
                column = table.column(0).combine_chunks()
                if layout.kind == "vector":
                    row = column[0].as_py() or {}  # a null row: no width
                    width = row.get("size") if row.get("type") == 0 else \
                        len(row.get("values") or ())
                else:
                    width = pc.list_value_length(column)[0].as_py()
                if not width:
                    raise DataFormatError(f"{where}: the {layout.features[0]!r} "
                                          f"{layout.kind}s are empty or null in the first row "
                                          "of " f"{split.path}; every row needs at least one "
                                          "feature.", path=split.path)
                return int(width)
    raise DataFormatError(f"{where} has no rows. Check the input path or filter.")


def _row_groups(files):
    """(path, the rows of each row group) of each file, in the given order."""
    return [(path, [parquet.metadata.row_group(g).num_rows
                    for g in range(parquet.metadata.num_row_groups)])
            for path, parquet in ((path, _open(path)) for path in files)]


@dataclass(frozen=True)
class ReadTable:
    """What :func:`read_parquet_table` read: the blocks' RDD, ``d``, the feature names and
    types (None: positional), how the rows were numbered and each task's plan."""

    blocks: object
    d: int
    names: tuple | None
    types: tuple | None
    numbering: str
    plans: tuple[TaskPlan, ...] = ()
    categories: CategoryEncoding | None = None  # how its string columns were encoded


def read_parquet_table(spark, path, files, features_col, label_col: str, dtype, slices: int,
                       min_partitions=None,
                       strings: StringEncoding | None = None) -> ReadTable | None:
    """The Parquet input ``path`` (its data ``files``, sorted, as pyarrow names them) read by
    the tasks, or None when Spark SQL must read it (see the module). Spark's scan is planned
    with ``slices`` partitions at least, as Spark SQL's reading of it would be.

    String columns among the features are encoded (:mod:`.string_columns`): by
    ``strings.encoding`` (a model's, and ``features_col`` its input columns) when given, else
    by an encoding fitted on these rows, their target-encoded columns out of fold (folds from
    the row ids and ``strings.seed``); the features are then the numeric columns followed by
    the encoded ones."""
    strings = strings or StringEncoding()
    where, encoding = f"{path} (format 'parquet')", strings.encoding
    schema = _open(files[0]).schema_arrow
    with sql_conf(spark, "spark.sql.files.minPartitionNum", str(slices)):
        try:
            df = spark.read.parquet(str(path))
            df.schema  # noqa: B018 - Spark lists the files here, or cannot reach them
        except Exception:  # noqa: BLE001 - only pyarrow reaches them: read by row groups
            df = None
        if df is not None:
            if not set(df.columns) <= set(schema.names):  # partition folders' columns
                return None
            names, types = table_features(df, features_col, [label_col])
        elif any("=" in part for name in files for part in name.split("/")[:-1]):
            return None  # partition folders whose values only Spark reads
        else:
            names = [name for name in schema.names if name not in (label_col,)] \
                if not isinstance(features_col, (list, tuple)) else list(features_col)
            types = None
        found = feature_layout(schema, features_col, label_col, names)
        if found is None or (encoding is not None and found[1:] != (
                encoding.numeric, tuple(column.name for column in encoding.columns))):
            return None
        kind, features, string_names = found
        if df is None:
            names, types = arrow_feature_names(schema, kind, features + string_names)
        dtype = np.dtype(dtype).name
        planned = _plans(df, files, kind, min_partitions)
        if planned is None:
            return None
        numbering, plans = planned
    if not any(plan.splits for plan in plans):
        raise DataFormatError(f"{where} has no rows. Check the input path or filter.")
    categories = None
    if string_names:
        strings.refuse_unfitted(string_names, where)
        categories = TableCategories(encoding) if encoding is not None else \
            fit_table_categories(context_of(spark), plans, label_col, features, string_names,
                                 strings.seed, _split_tables, where)
        names, types = encoded_features(categories.encoding, names, types)
    d = len(features) if categories is None else len(categories.encoding.feature_names)
    if kind != "columns":
        d = _first_width(plans, ParquetLayout(kind, features, label_col, 0, dtype), where)
    row_bytes = np.dtype(dtype).itemsize * d
    plans = cut_blocks(plans, row_bytes, None if numbering == "row groups" else (
        int(spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch", "10000")),
        max(1, min(CHUNK_ROWS, MAX_BLOCK_BYTES // max(1, row_bytes)))))
    layout = ParquetLayout(kind, features, label_col, d, dtype, categories)
    read = reported_to_driver(lambda plan: task_blocks(plan, layout))
    blocks = context_of(spark).parallelize(plans, max(1, len(plans))).flatMap(read)
    if numbering == "row groups" and min_partitions is not None and \
            blocks.getNumPartitions() < min_partitions:
        blocks = blocks.repartition(min_partitions)
    return ReadTable(blocks, d, None if names is None else tuple(names),
                     None if not types else tuple(types), numbering, tuple(plans),
                     None if categories is None else categories.encoding)


def _plans(df, files, kind, min_partitions) -> tuple[str, list] | None:
    """(numbering, each task's plan) of the input (:mod:`.scan_plan`), or None when Spark SQL
    must read it (it repartitions before it numbers the rows)."""
    if df is None or (kind == "array" and all("://" not in name for name in files)):
        return "row groups", row_group_plan(_row_groups(files))
    n_partitions = partition_count(df)
    if min_partitions is not None and n_partitions < min_partitions:
        return None
    return "Spark's scan", spark_scan_plan(df, n_partitions, local_name)


def _check_values(X, y, path, first_row, limit):
    """Refuse the first row holding NaN or ±inf (features or label), or a feature beyond
    ±``limit`` (:func:`~.blocks.check_blocks`' rules), naming the file and the row."""
    finite = np.isfinite(X).all(axis=1) & np.isfinite(y)
    if not finite.all():
        row = int(np.flatnonzero(~finite)[0])
        raise DataFormatError(f"{path}: row {first_row + row + 1} of the file contains NaN or "
                              f"infinity ({int((~finite).sum())} such rows in its row group). "
                              "Remove or impute those rows before training.", path=path)
    huge = np.abs(X).max(axis=1) > limit if X.size else np.zeros(0, dtype=bool)
    if huge.any():
        row = int(np.flatnonzero(huge)[0])
        raise DataFormatError(f"{path}: row {first_row + row + 1} of the file holds feature "
                              f"values beyond ±{limit:g}, whose squares overflow the kernels to "
                              "NaN. Rescale those features, or remove the rows if they are "
                              "placeholders for missing values.", path=path)
