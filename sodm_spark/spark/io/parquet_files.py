"""Parquet files of a ``features`` array column read by pyarrow inside the tasks.

Spark SQL decodes a ``list<float>`` column row by row in the JVM and converts it to Arrow
element by element: 600,000 × 784 deformed Fashion-MNIST rows (12 files) took 36.6 s to become
blocks here, pyarrow reading the same files in the tasks 9.3 s. So files on a file system every
executor sees as a local path (``file:``, as Spark's own reader needs them there too) whose
features are one numeric array column are read this way, one task per row group; anything else
(ML vectors, plain numeric columns, HDFS/S3, partition folders) goes through Spark SQL
(:func:`~.arrow.dataframe_to_blocks`).

Row ids are ``(row group number << 40) + row number within the row group``, row groups numbered
over the files in name order: the same whatever the cores.
"""
from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlparse

import numpy as np

from ...core.errors import reported_to_driver
from ...core.validation import max_abs_value
from .blocks import MAX_BLOCK_BYTES, ROW_ID_SHIFT, Block, DataFormatError, to_feature_dtype


def local_parquet_files(statuses, features_col: str, label_col: str):
    """The sorted local paths of the Parquet files that ``statuses`` (files or folders) name,
    when all of them can be read by :func:`read_parquet_files`: ``file:`` paths, folders of
    files only (no partition folders), one schema whose ``features_col`` is a list of numbers
    and whose ``label_col`` is a number. Else None (Spark SQL reads them)."""
    import pyarrow.parquet as pq
    import pyarrow.types as pt

    files = []
    for status in statuses:
        uri = urlparse(str(status.getPath().toUri()))
        if uri.scheme not in ("file", ""):
            return None
        local = unquote(uri.path)  # a URI's path: spaces and the like are %-escaped
        if not status.isDirectory():
            files.append(local)
            continue
        for child in Path(local).iterdir():
            if child.name.startswith(("_", ".")):  # _SUCCESS, .crc: as Spark skips them
                continue
            if child.is_dir():  # partition folders: Spark SQL reads their values
                return None
            files.append(str(child))
    if not files:
        return None
    files.sort()
    try:
        schema = pq.read_schema(files[0])
        for path in files[1:]:
            if not pq.read_schema(path).equals(schema):
                return None
    except Exception:  # noqa: BLE001 - not readable here: Spark's reader names the problem
        return None
    names = schema.names
    if features_col not in names or label_col not in names:
        return None
    features, label = schema.field(features_col).type, schema.field(label_col).type
    numeric = (pt.is_integer(label) or pt.is_floating(label))
    if not (pt.is_list(features) or pt.is_large_list(features)) or not numeric:
        return None
    element = features.value_type
    if not (pt.is_integer(element) or pt.is_floating(element)):
        return None
    return files


def read_parquet_files(sc, files, features_col: str, label_col: str, dtype, where: str):
    """``(RDD[Block], d)`` of the Parquet ``files`` (:func:`local_parquet_files`), features in
    ``dtype``; ``d`` from the first row. A null or a features array of another length is a
    DataFormatError naming the file and its row."""
    import pyarrow.parquet as pq

    pieces: list[tuple[int, str, int, int]] = []  # (number, file, row group, its first row)
    for path in files:
        metadata = pq.ParquetFile(path).metadata
        first = 0
        for group in range(metadata.num_row_groups):
            rows = metadata.row_group(group).num_rows
            if rows:
                pieces.append((len(pieces), path, group, first))
            first += rows
    if not pieces:
        raise DataFormatError(f"{where} has no rows. Check the input path or filter.")
    _, path, group, _ = pieces[0]
    first_batch = next(pq.ParquetFile(path).iter_batches(
        batch_size=1, row_groups=[group], columns=[features_col]))
    d = len(first_batch.column(0)[0])
    if d == 0:
        raise DataFormatError(f"{where}: the {features_col!r} arrays are empty; every row "
                              "needs at least one feature.", path=path)
    dtype = np.dtype(dtype)
    read = reported_to_driver(lambda piece: _row_group_blocks(piece, features_col, label_col,
                                                               d, dtype))
    return sc.parallelize(pieces, len(pieces)).flatMap(read), d


def _row_group_blocks(piece, features_col, label_col, d, dtype):
    """Blocks of at most MAX_BLOCK_BYTES of one row group's rows."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    number, path, group, first_row = piece
    table = pq.ParquetFile(path).read_row_group(group, columns=[label_col, features_col])
    features = table.column(features_col).combine_chunks()
    lengths = pc.fill_null(pc.list_value_length(features), -1).to_numpy(zero_copy_only=False)
    wrong = np.flatnonzero(lengths != d)
    if wrong.size:
        row = int(wrong[0])
        found = "a null" if lengths[row] < 0 else f"{lengths[row]} values"
        raise DataFormatError(f"{path}: row {first_row + row + 1} of the file has {found} in "
                              f"{features_col!r} where the first row has {d}; every row needs "
                              "the same number of features.", path=path)
    flat = features.flatten().to_numpy(zero_copy_only=False)
    # float32 lists stay float32; others (doubles, integers) are converted as the Spark path does
    X = to_feature_dtype(np.asarray(flat).reshape(len(table), d), dtype)
    y = np.asarray(table.column(label_col).to_numpy(zero_copy_only=False), dtype=np.float64)
    _check_values(X, y, path, first_row, max_abs_value(dtype))
    ids = (np.int64(number) << ROW_ID_SHIFT) + np.arange(len(table), dtype=np.int64)
    step = max(1, MAX_BLOCK_BYTES // (dtype.itemsize * d))
    for start in range(0, len(table), step):
        stop = start + step
        yield Block(X[start:stop], y[start:stop], ids[start:stop])


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
