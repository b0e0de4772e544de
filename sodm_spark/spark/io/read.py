"""``read_blocks``: any input path and format into ``(RDD[Block], d)``.

Lists the input on its Hadoop file system (globs, folders, HDFS/S3), refuses paths that do not
exist or hold nothing, decides how many slices the input is read in (by its size only, so 1,
2 or N cores read the same blocks), and hands over to the format's reader: :mod:`.libsvm` for
text, :mod:`.csv` or a Parquet scan followed by :func:`.arrow.dataframe_to_blocks`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...core.categories import CategoryEncoding
from ...core.errors import SettingsError
from ...core.validation import max_abs_value
from ..engine import driver_hadoop, reads_text_lines
from .arrow import dataframe_to_blocks, table_features
from .blocks import (DataFormatError, DataPathError, check_n_features, check_positive,
                     empty_message, error_text, spark_read, sql_conf)
from .csv import checked_csv_table, csv_feature_names, csv_frame
from .csv_files import read_csv_table
from .file_schemas import check_parquet_files_agree, listed_files
from .libsvm import read_libsvm_spark
from .parquet_files import arrow_feature_names, parquet_schema, read_parquet_table
from .string_columns import StringEncoding, encoded_features

FORMATS = ("libsvm", "csv", "parquet")
_FORMAT_ALIASES = {"svmlight": "libsvm", "svm": "libsvm"}

# Input is sliced by its size, never by how many cores the session has: the blocks, the row
# ids of CSV/Parquet and so the whole fit are then the same on 1, 2 or N cores.
INPUT_SPLIT_BYTES = 32 << 20


def _normalize_format(fmt, path):
    name = fmt.lower() if isinstance(fmt, str) else fmt
    name = _FORMAT_ALIASES.get(name, name)
    if name not in FORMATS:
        raise SettingsError(f"unknown format {fmt!r} for {path}: use one of 'libsvm' (text "
                            "lines 'label index:value ...'), 'csv' (a label column and numeric "
                            "feature columns) or 'parquet' (a features column and a label "
                            "column, or numeric columns).")
    return name


class ListedPath:
    """A listed file or folder, as a Hadoop ``FileStatus`` answers for it (the methods the
    readers call), from pyarrow.fs: a Spark Connect client has no JVM to ask."""

    def __init__(self, uri: str, is_dir: bool, length: int):
        self.uri, self.is_dir, self.length = uri, is_dir, length

    def isDirectory(self) -> bool:
        return self.is_dir

    def getLen(self) -> int:
        return self.length

    def getPath(self):
        return self

    def toUri(self) -> str:
        return self.uri


def _listed_by_arrow(path) -> list[ListedPath]:
    """``path`` (a plain path, with globs, or a URI pyarrow.fs reaches) as ListedPaths."""
    import glob
    import os

    import pyarrow.fs as pafs

    from ...data.filesystems import arrow_uri, local_path, uri_scheme

    scheme = uri_scheme(path)
    remote = scheme not in (None, "file")
    if remote:
        filesystem, inner = pafs.FileSystem.from_uri(arrow_uri(str(path)))
        names = [inner]
    else:
        filesystem = pafs.LocalFileSystem()
        names = [os.path.abspath(name) for name in sorted(glob.glob(local_path(path)))]
    listed = []
    for info in filesystem.get_file_info(names):
        if info.type == pafs.FileType.NotFound:
            continue
        is_dir = info.type == pafs.FileType.Directory
        length = sum(child.size or 0 for child in filesystem.get_file_info(
            pafs.FileSelector(info.path, recursive=True))) if is_dir else (info.size or 0)
        uri = f"{scheme}://{info.path.lstrip('/')}" if remote else f"file://{info.path}"
        listed.append(ListedPath(uri, is_dir, length))
    return listed


def _listed_by_arrow_quietly(path) -> list[ListedPath] | None:
    """``path`` listed by pyarrow.fs when it names a remote store pyarrow reaches (an object
    store whose Hadoop connector the session lacks, say), else None."""
    from ...data.filesystems import uri_scheme

    if uri_scheme(path) in (None, "file"):
        return None
    try:
        return _listed_by_arrow(path) or None
    except Exception:  # noqa: BLE001 - pyarrow cannot reach it either: Hadoop's words stand
        return None


def input_statuses(spark, path, fmt):
    """Hadoop FileStatus list of ``path`` (globs allowed); a DataPathError if nothing matches.
    A session whose driver has no Hadoop of its own (Spark Connect,
    :func:`~sodm_spark.spark.engine.driver_hadoop`) lists through pyarrow.fs instead
    (:class:`ListedPath`)."""
    hadoop = driver_hadoop(spark)
    if hadoop is None:
        try:
            statuses = _listed_by_arrow(path)
        except Exception as exc:  # pyarrow: unknown scheme, no credentials, ...
            raise DataPathError(f"{path} (format {fmt!r}) cannot be listed "
                                f"({error_text(exc)}). Check the path and its scheme "
                                "(file://, hdfs://, s3a://).") from None
        if not statuses:
            raise DataPathError(f"{path} (format {fmt!r}) does not exist. Check the path (on "
                                "a cluster it must be visible to every executor, e.g. on "
                                "HDFS or a shared volume).")
        return statuses
    try:
        hpath = hadoop.path(path)
        statuses = hpath.getFileSystem(hadoop.configuration).globStatus(hpath)
    except Exception as exc:  # py4j errors: bad scheme, no credentials, ...
        reached = _listed_by_arrow_quietly(path)  # a store only pyarrow reaches (s3://)
        if reached:
            return reached
        raise DataPathError(f"{path} (format {fmt!r}) cannot be listed ({error_text(exc)}). "
                            "Check the path and its scheme (file://, hdfs://, s3a://).") from None
    if statuses is None or len(statuses) == 0:
        raise DataPathError(f"{path} (format {fmt!r}) does not exist. Check the path (on a "
                            "cluster it must be visible to every executor, e.g. on HDFS or a "
                            "shared volume).")
    return list(statuses)


def _check_not_all_empty(statuses, path, fmt):
    files = [s for s in statuses if not s.isDirectory()]
    if files and len(files) == len(statuses) and all(s.getLen() == 0 for s in files):
        raise DataFormatError(empty_message(path, fmt, "is empty (0 bytes)"), path=str(path))


def input_slices(spark, statuses) -> int:
    """How many input slices ``statuses`` (files or folders) are read in: one per
    :data:`INPUT_SPLIT_BYTES`, at least 2 (Spark's own default on 2+ cores)."""
    total = 0
    for status in statuses:
        if isinstance(status, ListedPath):
            total += status.getLen()
        elif status.isDirectory():  # a Hadoop FileStatus: the driver's Hadoop listed it
            hadoop = driver_hadoop(spark)
            assert hadoop is not None
            path = status.getPath()
            total += path.getFileSystem(hadoop.configuration).getContentSummary(path).getLength()
        else:
            total += status.getLen()
    return max(2, -(-int(total) // INPUT_SPLIT_BYTES))


@dataclass(frozen=True)
class TableColumns:
    """Where a CSV or Parquet table keeps its labels, features and row weights, and how CSV
    text is cut (LIBSVM lines have none of these): :func:`read_blocks` says what each means."""

    label_col: str | int | None = None
    # a vector or array column, or the names of the feature columns in the order wanted
    features_col: str | tuple[str, ...] = "features"
    header: bool | None = None
    sep: str = ","
    weight_col: str | int | None = None
    # a Parquet table's string columns: encoded by this model's encoding (rows scored beside
    # it; ``features_col`` its input columns), else by one fitted on the rows, their
    # target-encoding folds drawn from the row ids and ``fold_seed`` (.string_columns)
    categories: CategoryEncoding | None = None
    fold_seed: int = 0
    # False: rows scored beside a model trained on numbers (no ``categories``): text columns
    # are refused, not encoded by an encoding of their own
    fit_strings: bool = True

    def string_encoding(self) -> StringEncoding:
        return StringEncoding(self.categories, self.fold_seed, self.fit_strings)


@dataclass(frozen=True)
class FeatureColumns:
    """The feature columns an input was read with, as a model keeps them
    (:attr:`KernelExpansion.feature_names <sodm_spark.models.expansion.KernelExpansion>`):
    their names and Spark SQL types, None for rows without names (LIBSVM lines, a CSV without
    a header, a vector or array column without ML attributes), which are positional."""

    names: tuple[str, ...] | None = None
    types: tuple[str, ...] | None = None
    # how the input's string columns became features (core/categories.py): the names are
    # then the encoding's features, and a table scored beside the model holds its input columns
    categories: CategoryEncoding | None = None


def read_blocks(spark, path, fmt, n_features=None, min_partitions=None, *,
                columns: TableColumns = TableColumns(), sparse=False, dtype=np.float64,
                dense_advice=None, with_names=False):
    """Read ``path`` (a file, folder or glob; any Hadoop file system) into ``(RDD[Block], d)``.

    ``fmt`` is ``"libsvm"``, ``"csv"`` or ``"parquet"``. Blocks of at most
    :data:`~.blocks.MAX_BLOCK_BYTES` of features, dense in ``dtype`` (float64, or float32 for
    the kernel path); ``d`` is the number of feature columns.

    * ``libsvm``: ``d`` is the largest index in the data unless ``n_features`` is given (then a
      larger index is an error and missing columns are zeros). One validation job parses every
      line (same parser as :func:`read_libsvm_local`), counts lines per partition and raises a
      :class:`DataFormatError` naming the file, exact line and token; the returned RDD parses
      again lazily. ``min_partitions`` goes to ``sc.textFile`` (at least
      :func:`input_slices`). ``sparse=True`` gives each
      Block's X as a scipy CSR matrix, so 10^5+ feature columns are never densified;
      ``sparse="auto"`` does so when the whole input is under half full
      (:data:`DENSE_FROM_DENSITY`). Dense rows wider than a block are refused before any is
      made, naming the file and line of the largest index (``dense_advice``: what to do
      instead, for that message).

    ``columns`` (:class:`TableColumns`) names the columns of CSV and Parquet tables:

    * ``csv``: ``header=None`` detects a header (first row not all numbers); ``label_col`` (a
      name or 0-based position) defaults to the column named ``label`` if there is a header
      that has one, else the first column. All other columns are features and must be numeric
      (empty cells become NaN, which :func:`check_blocks` refuses).
    * ``parquet``: see :func:`dataframe_to_blocks` (``features_col``, ``label_col`` default
      ``"label"``); local files whose features are one numeric array column are read by
      pyarrow in the tasks instead (:mod:`.parquet_files`: the same rows, in the same order,
      four times faster).

    For CSV/Parquet ``n_features`` must match the data, and ``min_partitions`` repartitions
    the DataFrame (round robin, deterministic) when it has fewer partitions. ``weight_col``
    (CSV or Parquet; a name, or a position in a CSV) holds each row's weight (finite, >= 0;
    rows of weight 0 are left out), carried in the Blocks' ``weights``; LIBSVM has none.

    The files of one CSV or Parquet input must describe the same columns (names and types; a
    CSV's headers): else a DataFormatError names the first file that differs and how
    (:mod:`.file_schemas`). ``columns.features_col`` may name the feature columns (a tuple, in
    the order wanted: a model's columns taken by name). ``with_names``: ``(RDD[Block], d,
    FeatureColumns)``, the names and types of the columns read.

    String columns of a Parquet table (strings, dictionaries of them) become features
    (:mod:`.string_columns`): by ``columns.categories`` (a model's encoding;
    ``columns.features_col`` its input columns) when given, else by an encoding fitted on
    these rows (one-hot or target-encoded out of fold, the folds from the row ids and
    ``columns.fold_seed``), kept in the FeatureColumns; the features are the numeric columns,
    then the encoded ones.
    """
    fmt = _normalize_format(fmt, path)
    n_features = check_n_features(n_features)
    min_partitions = check_positive(min_partitions, "min_partitions")
    statuses = input_statuses(spark, path, fmt)
    _check_not_all_empty(statuses, path, fmt)
    slices = input_slices(spark, statuses)
    if fmt == "libsvm" and columns.weight_col is not None:
        raise SettingsError(f"{path}: LIBSVM rows have no weight column (weight_col="
                            f"{columns.weight_col!r}); write the data as CSV or Parquet with one.")
    if fmt == "libsvm":
        if not reads_text_lines(spark):
            blocks, d = _libsvm_by_spark(spark, path, n_features, sparse, dtype,
                                         min_partitions, slices)
        else:
            blocks, d = read_libsvm_spark(spark, str(path), statuses, n_features,
                                          max(slices, min_partitions or 0), sparse, dtype,
                                          dense_advice)
        return (blocks, d, FeatureColumns()) if with_names else (blocks, d)
    if sparse:
        raise SettingsError(f"sparse={sparse!r} is supported for LIBSVM input only, not {fmt!r}.")
    if fmt == "parquet":  # Spark would read them with one file's columns
        check_parquet_files_agree(spark, statuses, path)
    blocks, d, where, features = _table_blocks(spark, path, fmt, statuses, slices,
                                               min_partitions, columns, dtype)
    if n_features is not None and n_features != d:
        raise DataFormatError(f"{where} has {d} feature columns but n_features={n_features}. "
                              "Pass n_features=None or the matching value (CSV and Parquet "
                              "columns are not padded).", path=str(path))
    return (blocks, d, features) if with_names else (blocks, d)


def table_feature_names(spark, path, fmt, columns: TableColumns = TableColumns()):
    """The names of the feature columns :func:`read_blocks` would read from the CSV or Parquet
    input ``path`` (None: rows without names, LIBSVM lines among them), from its schema or
    its header alone: what a model's columns are looked up in before the rows are read."""
    fmt = _normalize_format(fmt, path)
    if fmt == "libsvm":
        return None
    label = columns.label_col
    if fmt == "csv":
        return csv_feature_names(spark, str(path), label, columns.header, columns.sep,
                                 columns.weight_col)
    where = f"{path} (format 'parquet')"
    features = columns.features_col
    wanted = features if isinstance(features, str) else list(features)
    not_features = [label or "label", columns.weight_col]
    try:
        df = spark_read(where, lambda: spark.read.parquet(str(path)))
    except DataFormatError:  # files only pyarrow reaches (s3:// without Hadoop's connector)
        files = _arrow_files(input_statuses(spark, path, fmt))
        if files is None:
            raise
        schema = parquet_schema(files[0])
        if isinstance(wanted, str) and wanted in schema.names:
            return arrow_feature_names(schema, "array", (wanted,))[0]
        return list(wanted) if not isinstance(wanted, str) else \
            [name for name in schema.names if name not in not_features]
    names, _ = table_features(df, wanted, not_features)
    return names


def _table_blocks(spark, path, fmt, statuses, slices, min_partitions, columns, dtype):
    """``(RDD[Block], d, where, FeatureColumns)`` of CSV or Parquet input (:func:`read_blocks`):
    files pyarrow reaches read by pyarrow in the tasks (:mod:`.parquet_files`,
    :mod:`.csv_files`), else by Spark SQL, in at least ``slices`` slices; ``where`` names the
    input in messages."""
    if fmt == "csv":
        return _csv_blocks(spark, path, statuses, slices, min_partitions, columns, dtype)
    label, weight_col = columns.label_col or "label", columns.weight_col
    features_col = columns.features_col if isinstance(columns.features_col, str) else \
        list(columns.features_col)  # a vector or array column, or the columns' names
    where, strings = f"{path} (format 'parquet')", columns.string_encoding()
    files = _arrow_files(statuses)
    if weight_col is None and files is not None:  # read in the tasks
        read = read_parquet_table(spark, path, files, features_col, label, dtype, slices,
                                  min_partitions, strings)
        if read is not None:
            return read.blocks, read.d, where, _read_features(read)
    # the file splits are planned when the blocks' RDD is built, inside this block
    with sql_conf(spark, "spark.sql.files.minPartitionNum", str(slices)):
        df = spark_read(where, lambda: spark.read.parquet(str(path)))
        names, types = table_features(df, features_col, [label, weight_col])
        blocks, d, encoding = dataframe_to_blocks(
            df, features_col, label, where=where, min_partitions=min_partitions, dtype=dtype,
            weight_col=weight_col, strings=strings)
    if encoding is not None:  # the numeric columns, then the encoded features
        names, types = encoded_features(encoding, names, types)
    features = FeatureColumns() if names is None else \
        FeatureColumns(tuple(names), tuple(types or ()) or None, encoding)
    return blocks, d, where, features


def _csv_blocks(spark, path, statuses, slices, min_partitions, columns, dtype):
    """:func:`_table_blocks` of a CSV input: checked (:func:`.csv.checked_csv_table`), then
    read by the tasks (:mod:`.csv_files`) or by Spark SQL (:func:`.csv.csv_frame`; its
    columns aliased, so a model's encoding is renamed to them and back)."""
    named = None if isinstance(columns.features_col, str) else list(columns.features_col)
    encoding = columns.categories
    # the file splits are planned when the blocks' RDD is built, inside this block
    with sql_conf(spark, "spark.sql.files.minPartitionNum", str(slices)):
        table = checked_csv_table(spark, str(path), statuses, columns, max_abs_value(dtype),
                                  named)
        files = _arrow_files(statuses)
        read = None if files is None else read_csv_table(spark, table, files, dtype,
                                                          min_partitions,
                                                          columns.string_encoding())
        if read is not None:
            return read.blocks, read.d, table.where, _read_features(read)
        df, numeric, text = csv_frame(table)
        aliases = dict(zip(table.numeric_names + table.string_names, numeric + text))
        blocks, d, fitted = dataframe_to_blocks(
            df, numeric + text, "label", where=table.where, min_partitions=min_partitions,
            dtype=dtype, weight_col=None if table.weight is None else "weight",
            strings=StringEncoding(None if encoding is None else encoding.renamed(aliases),
                                   columns.fold_seed, columns.fit_strings))
    if not table.header:  # CSV cells are read as text and cast to doubles
        return blocks, d, table.where, FeatureColumns()
    fitted = None if fitted is None else \
        fitted.renamed({alias: name for name, alias in aliases.items()})
    names, types = list(table.numeric_names), ["double"] * len(table.numeric)
    if fitted is not None:
        names, encoded_types = encoded_features(fitted, names, types)
        types = list(encoded_types or ())
    return blocks, d, table.where, FeatureColumns(tuple(names), tuple(types), fitted)


def _arrow_files(statuses) -> list[str] | None:
    """The data files of ``statuses`` as the tasks open them (:func:`_arrow_name`), None when
    pyarrow reaches none."""
    listed = listed_files(statuses)
    if listed is None or not listed[1]:
        return None
    return [_arrow_name(listed[0], name) for name in listed[1]]


def _read_features(read) -> FeatureColumns:
    """The FeatureColumns of a table the tasks read (a :class:`~.parquet_files.ReadTable`)."""
    return FeatureColumns() if read.names is None else \
        FeatureColumns(read.names, read.types, read.categories)


def _arrow_name(filesystem, name: str) -> str:
    """A file pyarrow listed as the tasks open it: a local path, or a URI of its store."""
    kind = filesystem.type_name
    return name if kind == "local" else f"{kind}://{name}"


def _libsvm_by_spark(spark, path, n_features, sparse, dtype, min_partitions, slices):
    """LIBSVM text on a Spark Connect session, which has no text RDD: ``spark.read.text`` and
    the package's own parser in ``mapInArrow`` tasks (:func:`.libsvm_frames.read_libsvm_frames`), not
    Spark's ``libsvm`` source, which refuses SVMlight's ``qid:N`` and ``#`` comments and names
    no line. The same files so give the classic reader's rows, row ids and refusals (a bad
    line named by its file and line), as dense rows."""
    from .libsvm_frames import read_libsvm_frames

    if sparse is True:  # "auto" reads dense rows here
        raise SettingsError(f"{path}: sparse LIBSVM blocks need a classic Spark session (the "
                            "RDD API); on Spark Connect read it with sparse=False, or convert it "
                            "to Parquet.")
    statuses = input_statuses(spark, path, "libsvm")
    return read_libsvm_frames(spark, str(path), statuses, slices, n_features, min_partitions,
                              dtype)
