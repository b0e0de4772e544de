"""Which rows of which Parquet or CSV files each task reads, the row ids they get and where
the blocks are cut: the plan :mod:`.parquet_files` and :mod:`.csv_files` read by, in one of
two numberings.

``spark_scan_plan``
    Spark's own. One job over the files without their columns asks Spark's scan which rows of
    which file each partition holds (``spark_partition_id``, ``input_file_name``,
    ``input_file_block_start``, a count, the first ``monotonically_increasing_id``): the
    splits Spark planned, in the order its partition reads them. Row ids are then
    ``(partition << ROW_ID_SHIFT) + row within the partition`` and blocks are cut where
    :func:`~.arrow.dataframe_to_blocks` cuts them (Arrow batches of
    ``spark.sql.execution.arrow.maxRecordsPerBatch`` rows, payloads of at most
    :data:`~.arrow.CHUNK_ROWS`, joined while they fit :data:`~.blocks.MAX_BLOCK_BYTES`): the
    blocks, and so every fit, are byte for byte those Spark SQL's reader gives, whatever the
    layout, without Spark decoding a value.
``row_group_plan``
    One task per row group, the row groups numbered over the files in name order, ids
    ``(row group number << ROW_ID_SHIFT) + row within it``, blocks of
    :data:`~.blocks.MAX_BLOCK_BYTES`: for local files of one array column (read so since
    pyarrow first read them in the tasks) and for files only pyarrow reaches (an object
    store whose Hadoop connector the session lacks), where Spark cannot plan a scan. The same
    whatever the cores.
"""
from __future__ import annotations

from dataclasses import dataclass

from .blocks import MAX_BLOCK_BYTES, ROW_ID_SHIFT

#: Bits of ``monotonically_increasing_id`` that count rows within a partition.
_MONOTONIC_ROW_BITS = 33


@dataclass(frozen=True)
class Split:
    """Rows ``first_row`` .. ``first_row + rows - 1`` (0-based, counted over the file's row
    groups, or a CSV file's data lines) of the file ``path`` (a local path or a URI pyarrow
    reaches); for a text file the bytes Spark's split covers, ``start`` and ``length`` (the
    lines that start in them: :mod:`.csv_files`)."""

    path: str
    first_row: int
    rows: int
    start: int = 0
    length: int = 0


@dataclass(frozen=True)
class TaskPlan:
    """What one task reads: its ``splits`` in order, its rows' ids counted from ``first_id``,
    and the rows of each block it yields (``block_rows`` sums to the splits' rows)."""

    splits: tuple[Split, ...]
    first_id: int
    block_rows: tuple[int, ...] = ()

    @property
    def rows(self) -> int:
        return sum(split.rows for split in self.splits)


def spark_block_rows(n_rows: int, batch_rows: int, chunk_rows: int, row_bytes: int,
                     max_bytes: int = MAX_BLOCK_BYTES) -> tuple[int, ...]:
    """The rows of each block :func:`~.arrow.dataframe_to_blocks` makes of a partition of
    ``n_rows``: Arrow batches of ``batch_rows`` (none when <= 0, as Spark reads the setting),
    each cut into payloads of ``chunk_rows``, consecutive payloads joined while their
    features (``row_bytes`` a row) fit ``max_bytes``."""
    batch = n_rows if batch_rows <= 0 else batch_rows
    blocks: list[int] = []
    rows = size = 0
    for start in range(0, n_rows, max(batch, 1)):
        in_batch = min(batch, n_rows - start)
        for first in range(0, in_batch, chunk_rows):
            payload = min(chunk_rows, in_batch - first)
            if rows and size + payload * row_bytes > max_bytes:
                blocks.append(rows)
                rows = size = 0
            rows += payload
            size += payload * row_bytes
    if rows:
        blocks.append(rows)
    return tuple(blocks)


def bounded_block_rows(n_rows: int, row_bytes: int,
                       max_bytes: int = MAX_BLOCK_BYTES) -> tuple[int, ...]:
    """Blocks of at most ``max_bytes`` (at least one row) over ``n_rows`` rows."""
    step = max(1, max_bytes // max(1, row_bytes))
    return tuple(min(step, n_rows - start) for start in range(0, n_rows, step))


def spark_scan_plan(df, n_partitions: int, local_path) -> list[TaskPlan]:
    """One :class:`TaskPlan` per partition of the Parquet or CSV scan ``df`` (``n_partitions`` of
    them, empty ones included), as Spark's scan reads them (the module's first numbering),
    its blocks not cut yet (:func:`cut_blocks`). ``local_path`` turns the file names Spark
    answers with into what pyarrow opens."""
    from pyspark.sql import functions as F

    found = (df.select(F.spark_partition_id().alias("partition"),
                       F.input_file_name().alias("file"),
                       F.input_file_block_start().alias("start"),
                       F.input_file_block_length().alias("length"),
                       F.monotonically_increasing_id().alias("row"))
             .groupBy("partition", "file", "start", "length")
             .agg(F.count(F.lit(1)).alias("rows"), F.min("row").alias("first"))
             .collect())
    # a file's splits cover its row groups in the order of their starts
    first_in_file: dict[tuple[str, int], int] = {}
    by_file: dict[str, list] = {}
    for row in found:
        by_file.setdefault(row["file"], []).append(row)
    for name, in_file in by_file.items():
        counted = 0
        for row in sorted(in_file, key=lambda r: r["start"]):
            first_in_file[(name, row["start"])] = counted
            counted += row["rows"]
    per_partition: list[list] = [[] for _ in range(n_partitions)]
    for row in found:
        per_partition[row["partition"]].append(row)
    plans: list[TaskPlan] = []
    for index, rows in enumerate(per_partition):
        rows.sort(key=lambda r: r["first"])  # the order the partition reads its splits
        local = [r["first"] & ((1 << _MONOTONIC_ROW_BITS) - 1) for r in rows]
        if local != [sum(r["rows"] for r in rows[:k]) for k in range(len(rows))]:
            raise RuntimeError(f"Spark's scan numbered partition {index}'s rows out of order "
                               f"({local}): its rows cannot be read by the tasks")
        splits = tuple(Split(local_path(r["file"]), first_in_file[(r["file"], r["start"])],
                             r["rows"], r["start"], r["length"]) for r in rows)
        plans.append(TaskPlan(splits, index << ROW_ID_SHIFT))
    return plans


def row_group_plan(row_groups) -> list[TaskPlan]:
    """One :class:`TaskPlan` per non-empty row group of ``row_groups`` (``(path, rows of
    each row group)`` of the files in name order): the module's second numbering, its
    blocks not cut yet (:func:`cut_blocks`)."""
    plans: list[TaskPlan] = []
    for path, group_rows in row_groups:
        first = 0
        for rows in group_rows:
            if rows:
                plans.append(TaskPlan((Split(path, first, rows),), len(plans) << ROW_ID_SHIFT))
            first += rows
    return plans


def cut_blocks(plans, row_bytes: int, spark_batches: tuple[int, int] | None):
    """``plans`` with the rows of each block: as Spark SQL's reader cuts them when
    ``spark_batches`` is ``(Arrow batch rows, payload rows)`` (:func:`spark_block_rows`),
    else in blocks of at most :data:`~.blocks.MAX_BLOCK_BYTES`."""
    if spark_batches is None:
        return [TaskPlan(plan.splits, plan.first_id, bounded_block_rows(plan.rows, row_bytes))
                for plan in plans]
    batch_rows, chunk_rows = spark_batches
    return [TaskPlan(plan.splits, plan.first_id,
                     spark_block_rows(plan.rows, batch_rows, chunk_rows, row_bytes))
            for plan in plans]
