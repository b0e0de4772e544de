"""Parquet tables in every layout read by pyarrow in the tasks (sodm_spark.spark.io.parquet_files)
give, block for block, what Spark SQL's reader gives (dataframe_to_blocks over
spark.read.parquet): the same values, row ids and block boundaries, on files cut into several
Spark splits, several files per partition and several Arrow batches per partition."""
from contextlib import ExitStack
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sodm_spark.spark.io import TableColumns, input_slices, input_statuses, read_blocks
from sodm_spark.spark.io.arrow import dataframe_to_blocks
from sodm_spark.spark.io.blocks import sql_conf
from sodm_spark.spark.io.file_schemas import listed_files
from sodm_spark.spark.io.parquet_files import read_parquet_table
from sodm_spark.spark.io.scan_plan import spark_block_rows

# small splits, several files a partition, Arrow batches of 7 rows: every cut Spark makes
SMALL_SCAN = {"spark.sql.files.maxPartitionBytes": "4000",
              "spark.sql.files.openCostInBytes": "1",
              "spark.sql.execution.arrow.maxRecordsPerBatch": "7"}


def _rows(n=230, seed=3):
    rng = np.random.default_rng(seed)
    X = np.round(rng.standard_normal((n, 5)), 3)
    y = np.where(rng.random(n) < 0.4, 0.0, 1.0)
    return X, y


def _write_columns(folder, X, y, types, sizes=(90, 80, 50, 3, 3, 2, 2), row_group_size=16):
    """The rows as files of one column per feature, of the given pyarrow types."""
    folder.mkdir()
    start = 0
    for number, size in enumerate(sizes):
        rows = slice(start, start + size)
        columns = {"label": pa.array(y[rows])}
        for j, kind in enumerate(types):
            values = X[rows, j]
            if pa.types.is_decimal(kind):
                column = pa.array([Decimal(f"{v:.3f}") for v in values], type=kind)
            elif pa.types.is_boolean(kind):
                column = pa.array(values > 0)
            elif pa.types.is_integer(kind):
                column = pa.array(np.round(values * 1000).astype(np.int64)).cast(kind)
            else:
                column = pa.array(values).cast(kind)
            columns[f"x{j}"] = column
        pq.write_table(pa.table(columns), folder / f"part-{number:05d}.parquet",
                       row_group_size=row_group_size)
        start += size
    (folder / "_SUCCESS").write_text("")
    return folder


def _spark_sql_blocks(spark, path, features_col, dtype):
    """What Spark SQL's reader gives, planned as read_blocks plans it."""
    slices = input_slices(spark, input_statuses(spark, str(path), "parquet"))
    with sql_conf(spark, "spark.sql.files.minPartitionNum", str(slices)):
        blocks, d = dataframe_to_blocks(spark.read.parquet(str(path)), features_col, "label",
                                        dtype=dtype)
        return blocks.collect(), d


def _tasks_read(spark, path, features_col, dtype):
    statuses = input_statuses(spark, str(path), "parquet")
    _, files = listed_files(statuses)
    return read_parquet_table(spark, str(path), files, features_col, "label", dtype,
                              input_slices(spark, statuses))


def _assert_every_cut(plans):
    """Spark planned several splits of one file, and several splits in one partition."""
    assert max(len(plan.splits) for plan in plans) > 1
    splits = [split.path for plan in plans for split in plan.splits]
    assert len(splits) > len(set(splits))


def _assert_same_blocks(got, expected):
    assert len(got) == len(expected) > 1
    for ours, theirs in zip(got, expected):
        assert ours.X.dtype == theirs.X.dtype and ours.X.flags.c_contiguous
        np.testing.assert_array_equal(ours.X, theirs.X)
        np.testing.assert_array_equal(ours.y, theirs.y)
        np.testing.assert_array_equal(ours.row_ids, theirs.row_ids)
        assert ours.y.dtype == np.float64 and ours.row_ids.dtype == np.int64


@pytest.fixture
def small_scan(spark):
    with ExitStack() as stack:
        for key, value in SMALL_SCAN.items():
            stack.enter_context(sql_conf(spark, key, value))
        yield


@pytest.mark.parametrize("types, dtype", [
    ((pa.float32(),) * 5, np.float32),
    ((pa.float32(),) * 5, np.float64),
    ((pa.float64(), pa.int32(), pa.int64(), pa.decimal128(10, 3), pa.bool_()), np.float64),
    ((pa.float64(), pa.int16(), pa.float32(), pa.decimal128(12, 3), pa.bool_()), np.float32),
])
def test_a_column_per_feature_is_read_as_spark_sql_reads_it(spark, tmp_path, small_scan,
                                                           types, dtype):
    X, y = _rows()
    folder = _write_columns(tmp_path / "columns", X, y, types)
    expected, d = _spark_sql_blocks(spark, folder, "features", dtype)
    read = _tasks_read(spark, folder, "features", dtype)
    assert read is not None and read.numbering == "Spark's scan" and read.d == d == 5
    assert read.names == tuple(f"x{j}" for j in range(5))
    _assert_every_cut(read.plans)
    _assert_same_blocks(read.blocks.collect(), expected)
    blocks, d, features = read_blocks(spark, str(folder), "parquet", dtype=dtype,
                                      with_names=True)  # the public door takes this path
    _assert_same_blocks(blocks.collect(), expected)
    assert features.names == read.names and features.types == read.types


def test_named_columns_in_another_order_are_read_so(spark, tmp_path, small_scan):
    X, y = _rows()
    folder = _write_columns(tmp_path / "columns", X, y, (pa.float64(),) * 5)
    wanted = ["x3", "x0", "x4"]
    expected, _ = _spark_sql_blocks(spark, folder, wanted, np.float64)
    blocks, d = read_blocks(spark, str(folder), "parquet",
                            columns=TableColumns(features_col=tuple(wanted)))
    assert d == 3
    _assert_same_blocks(blocks.collect(), expected)
    np.testing.assert_array_equal(np.sort(np.concatenate([b.X[:, 0] for b in expected])),
                                  np.sort(X[:, 3]))


def test_an_ml_vector_column_is_read_as_spark_sql_reads_it(spark, tmp_path, small_scan):
    from pyspark.ml.linalg import Vectors

    X, y = _rows()
    rows = [(float(t), Vectors.sparse(5, {j: v for j, v in enumerate(x) if v > 0}) if k % 3
             else Vectors.dense(x)) for k, (x, t) in enumerate(zip(X.tolist(), y))]
    folder = str(tmp_path / "vectors")
    (spark.createDataFrame(rows, ["label", "features"]).repartition(3)
     .write.option("parquet.block.size", 2048).parquet(folder))
    for dtype in (np.float32, np.float64):
        expected, d = _spark_sql_blocks(spark, folder, "features", dtype)
        read = _tasks_read(spark, folder, "features", dtype)
        assert read is not None and read.numbering == "Spark's scan" and read.d == d == 5
        _assert_same_blocks(read.blocks.collect(), expected)


def test_block_cuts_follow_arrow_batches_and_payloads():
    # batches of 10 rows, payloads of 4, blocks of at most 3 payloads' bytes (row 8 bytes)
    assert spark_block_rows(23, 10, 4, 8, max_bytes=96) == (10, 10, 3)
    assert spark_block_rows(23, 0, 4, 8, max_bytes=96) == (12, 11)  # no batch limit
    assert spark_block_rows(0, 10, 4, 8) == ()
