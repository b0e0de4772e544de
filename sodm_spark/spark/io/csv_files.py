"""CSV tables read by pyarrow inside the tasks: each task parses the lines of the file splits
Spark's own CSV scan gives its partition (:func:`~.scan_plan.spark_scan_plan`) with pyarrow's
C++ reader, straight into the blocks :func:`~.arrow.dataframe_to_blocks` makes of Spark SQL's
reading (the same rows, ids and blocks, byte for byte), without Spark parsing a cell.

A split is ``start`` and ``length`` bytes of a file; as Hadoop's line reader cuts them, its
lines are those that start after ``start`` (from the file's first byte for the first split)
and at or before ``start + length``: the tasks read from the end of the line holding byte
``start`` to the end of the line holding byte ``start + length``. A file's first line is its
header when the input has one, blank lines are not rows (as Spark reads them), and each split
must give the rows Spark's scan counted in it, or the task refuses it naming the file and the
bytes.

Compressed files, text whose lines end in a lone carriage return, a weight column and sessions
that cannot plan the scan are read by Spark SQL instead (:func:`~.csv.csv_frame`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...core.errors import reported_to_driver
from ..engine import context_of, partition_count
from .arrow import CHUNK_ROWS
from .blocks import MAX_BLOCK_BYTES, DataFormatError
from .csv import CsvTable
from .parquet_files import ParquetLayout, ReadTable, local_name, task_blocks
from .scan_plan import Split, cut_blocks, spark_scan_plan
from .string_columns import (StringEncoding, TableCategories, encoded_features,
                             fit_table_categories)

#: File name endings of the codecs Hadoop decompresses (their splits are not byte ranges).
COMPRESSED = (".gz", ".bz2", ".deflate", ".lz4", ".snappy", ".zst", ".zstd", ".xz", ".br",
              ".zip")
#: Bytes read at a time while looking for the end of a line.
_LOOK_AHEAD = 1 << 16


def _open(path: str):
    """A pyarrow random-access file of a local path or a URI pyarrow reaches."""
    import pyarrow.fs as pafs

    if "://" not in path:
        return pafs.LocalFileSystem().open_input_file(path)
    from ...data.filesystems import arrow_uri

    filesystem, inner = pafs.FileSystem.from_uri(arrow_uri(path))
    return filesystem.open_input_file(inner)


def _line_end(stream, position: int) -> int:
    """The offset just after the first line feed at or after ``position`` (the file's size
    when none follows)."""
    if position >= stream.size():
        return stream.size()
    stream.seek(position)
    while True:
        chunk = stream.read(_LOOK_AHEAD)
        if not chunk:
            return position
        found = chunk.find(b"\n")
        if found >= 0:
            return position + found + 1
        position += len(chunk)


def split_text(stream, start: int, length: int) -> bytes:
    """The bytes of the lines of the split ``start``, ``length`` of ``stream`` (the module's
    rule)."""
    begin = 0 if start == 0 else _line_end(stream, start)
    end = start + length
    if begin > end:  # the line holding byte ``start`` runs past the split
        return b""
    stop = _line_end(stream, end)
    stream.seek(begin)
    return stream.read(stop - begin)


def _blank_line(row) -> str:
    """pyarrow's handler of a line with the wrong number of cells: a blank line (spaces
    only) is no row, as Spark reads it; any other is refused."""
    return "skip" if not row.text.strip() else "error"


@dataclass(frozen=True)
class CsvCells:
    """What a task needs of a :class:`~.csv.CsvTable` to parse its lines (not its
    DataFrame, which lives on the driver): the columns' ``names``, ``header``, ``sep``, the
    positions of the string columns."""

    names: tuple[str, ...]
    header: bool
    sep: str
    strings: tuple[int, ...]


def _parsed_batches(text: bytes, table: CsvCells, columns, first_line_header: bool,
                    as_text: bool):
    """pyarrow's record batches of ``text``'s ``columns`` (positions): numbers as doubles
    (``as_text``: as text), string columns as text, an unquoted empty cell null."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    names = [f"_c{j}" for j in range(len(table.names))]
    kept = [names[j] for j in columns]
    types = {names[j]: pa.string() if as_text or j in table.strings else pa.float64()
             for j in columns}
    reader = pcsv.open_csv(
        pa.BufferReader(text),
        read_options=pcsv.ReadOptions(column_names=names, skip_rows=int(first_line_header),
                                      use_threads=False, block_size=1 << 24),
        parse_options=pcsv.ParseOptions(delimiter=table.sep, escape_char="\\",
                                        invalid_row_handler=_blank_line),
        convert_options=pcsv.ConvertOptions(include_columns=kept, column_types=types,
                                            null_values=[""], strings_can_be_null=True,
                                            quoted_strings_can_be_null=False))
    return list(reader)


def _as_numbers(column):
    """A text column of numbers as doubles, surrounding spaces ignored (as Spark's cast
    reads them)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.cast(pc.utf8_trim_whitespace(column), pa.float64())


def _split_batches(split: Split, table: CsvCells, columns):
    """The record batches of ``split``'s rows (``columns`` positions, named by the table),
    numbers as doubles; refused when they are not the rows Spark's scan counted."""
    import pyarrow as pa

    with _open(split.path) as stream:
        text = split_text(stream, split.start, split.length)
    header = table.header and split.start == 0
    try:
        batches = _parsed_batches(text, table, columns, header, False)
    except pa.ArrowInvalid:  # numbers with spaces around them, or a line pyarrow refuses
        try:
            batches = _parsed_batches(text, table, columns, header, True)
        except pa.ArrowInvalid as error:
            raise DataFormatError(f"{split.path}: bytes {split.start}-"
                                  f"{split.start + split.length} do not parse as CSV lines of "
                                  f"{len(table.names)} cells ({str(error)[:200]}).",
                                  path=split.path) from None
        batches = [pa.RecordBatch.from_arrays(
            [_as_numbers(batch.column(k)) if j not in table.strings else batch.column(k)
             for k, j in enumerate(columns)], names=batch.schema.names) for batch in batches]
    rows = sum(batch.num_rows for batch in batches)
    if rows != split.rows:
        raise DataFormatError(
            f"{split.path}: bytes {split.start}-{split.start + split.length} hold {rows:,} "
            f"CSV rows for pyarrow where Spark's reader counts {split.rows:,} (a line break "
            "inside quotes, or a line of spaces between rows?). Write one row a line.",
            path=split.path)
    return [pa.RecordBatch.from_arrays(batch.columns, names=[table.names[j] for j in columns])
            for batch in batches]


def split_tables_of(checked: CsvTable):
    """The function the blocks and the string counts read a split by: ``(split, column
    names)`` → ``(table, the file's data row of its first row)`` a parsed batch at a time."""
    table = CsvCells(checked.names, checked.header, checked.sep, checked.strings)

    def tables(split: Split, names):
        import pyarrow as pa

        columns = [table.names.index(name) for name in names]
        first = split.first_row
        for batch in _split_batches(split, table, columns):
            yield pa.Table.from_batches([batch]), first
            first += batch.num_rows
    return tables


def tasks_read(files) -> bool:
    """Whether the tasks can read these CSV ``files`` (as pyarrow names them): none
    compressed, and the first one's lines end in a line feed."""
    if not files or any(name.lower().endswith(COMPRESSED) for name in files):
        return False
    with _open(files[0]) as stream:
        head = stream.read(_LOOK_AHEAD)
    return head.count(b"\r") == head.count(b"\r\n")


def read_csv_table(spark, table: CsvTable, files, dtype, min_partitions=None,
                   strings: StringEncoding | None = None) -> ReadTable | None:
    """The checked CSV ``table`` (its data ``files`` as pyarrow names them) read by the
    tasks, or None when Spark SQL must read it (see the module). Call it where the table's
    scan is planned as Spark SQL's reading of it would be (``spark.sql.files.
    minPartitionNum``). String columns are encoded as :func:`~.parquet_files.
    read_parquet_table` encodes them."""
    strings = strings or StringEncoding()
    if table.weight is not None or not tasks_read(files):
        return None
    n_partitions = partition_count(table.raw)
    if min_partitions is not None and n_partitions < min_partitions:
        return None
    plans = spark_scan_plan(table.raw, n_partitions, local_name)
    if not any(plan.splits for plan in plans):
        raise DataFormatError(f"{table.where} has no data rows.")
    label = table.names[table.label]
    numeric, text = table.numeric_names, table.string_names
    tables = split_tables_of(table)
    names: list = list(numeric)
    types: list | None = ["double"] * len(numeric)
    categories = None
    if text:
        strings.refuse_unfitted(text, table.where)
        categories = TableCategories(strings.encoding) if strings.encoding is not None else \
            fit_table_categories(context_of(spark), plans, label, numeric, text,
                                 strings.seed, tables, table.where)
        names, types = encoded_features(categories.encoding, numeric, types)
    d = len(names)
    dtype = np.dtype(dtype).name
    row_bytes = np.dtype(dtype).itemsize * d
    plans = cut_blocks(plans, row_bytes, (
        int(spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch", "10000")),
        max(1, min(CHUNK_ROWS, MAX_BLOCK_BYTES // max(1, row_bytes)))))
    layout = ParquetLayout("columns", numeric, label, d, dtype, categories)
    read = reported_to_driver(lambda plan: task_blocks(plan, layout, tables))
    blocks = context_of(spark).parallelize(plans, max(1, len(plans))).flatMap(read)
    return ReadTable(blocks, d, tuple(names) if table.header else None,
                     tuple(types or ()) if table.header else None, "Spark's scan",
                     tuple(plans), None if categories is None else categories.encoding)
