"""sodm_spark.spark.io: files and DataFrames -> RDD of numpy blocks (local[2] Spark)."""

import re

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import dump_svmlight_file, load_svmlight_file

from sodm_spark.spark.io import (Block, BlockStats, DataFormatError, TableColumns,
                                 check_blocks, dataframe_to_blocks, parse_libsvm_line,
                                 read_blocks, read_libsvm_local)

# Python workers must run this interpreter (the venv), not whatever `python3` is on PATH.
# Read when the session-scoped SparkContext starts, i.e. after collection; belongs in conftest.


def sparse_data(labels=(0, 1), n=41, d=9, seed=0):
    """Sparse rows with gaps: ~60% zeros, an all-zero row, an all-zero middle column."""
    rng = np.random.default_rng(seed)
    X = np.round(rng.normal(size=(n, d)), 3)
    X[rng.random((n, d)) < 0.6] = 0.0
    X[:, 4] = 0.0
    X[7] = 0.0
    X[0, d - 1] = 2.5  # the last column is used, so max index == d
    y = np.asarray(labels, dtype=np.float64)[rng.integers(0, 2, size=n)]
    return X, y


def collect(blocks):
    """All blocks of an RDD -> (X, y, ids) sorted by row id, after checking each block."""
    parts = blocks.collect()
    assert parts, "no blocks"
    for b in parts:
        assert isinstance(b, Block)
        assert b.X.dtype == np.float64 and b.X.flags.c_contiguous and b.X.ndim == 2
        assert b.y.dtype == np.float64 and b.y.shape == (b.X.shape[0],)
        assert b.row_ids.dtype == np.int64 and b.row_ids.shape == (b.X.shape[0],)
        assert b.X.shape[0] > 0
    X = np.concatenate([b.X for b in parts])
    y = np.concatenate([b.y for b in parts])
    ids = np.concatenate([b.row_ids for b in parts])
    assert np.unique(ids).size == ids.size, "row ids are not unique"
    order = np.argsort(ids)
    return X[order], y[order], ids[order]


def as_row_set(X, y):
    """Rows [y, X] in a canonical order, to compare reads whose row ids differ."""
    rows = np.column_stack([y, X])
    return rows[np.lexsort(rows.T[::-1])]


def write_svm(path, X, y):
    dump_svmlight_file(X, y, str(path), zero_based=False)
    return path


# --------------------------------------------------------------------------------- LIBSVM

@pytest.mark.parametrize("labels", [(0, 1), (-1, 1)])
def test_libsvm_matches_sklearn(spark, tmp_path, labels):
    X0, y0 = sparse_data(labels)
    path = write_svm(tmp_path / "data.svm", X0, y0)
    X_ref, y_ref = load_svmlight_file(str(path), zero_based=False)
    X_ref = X_ref.toarray()

    blocks, d = read_blocks(spark, str(path), "libsvm", min_partitions=3)
    assert blocks.getNumPartitions() >= 3 and len(blocks.collect()) >= 2
    X, y, ids = collect(blocks)
    assert d == X_ref.shape[1] == X0.shape[1]
    np.testing.assert_array_equal(X, X_ref)
    np.testing.assert_array_equal(y, y_ref)
    assert set(np.unique(y)) == set(map(float, labels))
    np.testing.assert_array_equal(ids, np.arange(len(y0)))  # 0-based line numbers

    X_loc, y_loc = read_libsvm_local(path)
    np.testing.assert_array_equal(X_loc, X_ref)
    np.testing.assert_array_equal(y_loc, y_ref)
    assert X_loc.dtype == np.float64 and X_loc.flags.c_contiguous

    stats = check_blocks(blocks, d)
    assert isinstance(stats, BlockStats) and stats.n_rows == len(y0)
    values, counts = np.unique(y0, return_counts=True)
    assert stats.label_counts == dict(zip(values.tolist(), counts.tolist()))


@pytest.mark.parametrize("zeros, sparse, expect_csr", [
    (0.6, True, True), (0.6, "auto", True), (0.1, "auto", False), (0.1, False, False)])
def test_libsvm_sparse_blocks_hold_the_same_rows(spark, tmp_path, zeros, sparse, expect_csr):
    """``sparse=True`` keeps CSR; ``"auto"`` keeps it only under half full; values as sklearn."""
    rng = np.random.default_rng(5)
    X0 = np.round(rng.normal(size=(50, 8)), 4) * (rng.random((50, 8)) >= zeros)
    X0[0, 7] = 1.0
    path = write_svm(tmp_path / "data.svm", X0, rng.integers(0, 2, 50).astype(float))
    X_ref, y_ref = load_svmlight_file(str(path), zero_based=False)
    blocks, d = read_blocks(spark, str(path), "libsvm", min_partitions=2, sparse=sparse)
    parts = blocks.collect()
    assert {sp.issparse(b.X) for b in parts} == {expect_csr}
    X = np.concatenate([b.X.toarray() if expect_csr else b.X for b in parts])
    np.testing.assert_array_equal(X, X_ref.toarray())
    np.testing.assert_array_equal(np.concatenate([b.y for b in parts]), y_ref)
    X_loc, _ = read_libsvm_local(path, sparse=sparse)
    assert sp.issparse(X_loc) == expect_csr
    np.testing.assert_array_equal(X_loc.toarray() if expect_csr else X_loc, X_ref.toarray())


def test_libsvm_comments_blank_lines_and_padding(spark, tmp_path):
    path = tmp_path / "hand.svm"
    path.write_text("# a header comment\n"
                    "+1 1:0.5 3:2  # trailing comment\n"
                    "\n"
                    "-1\t2:1e-3\t4:-7\n"
                    "-1\n")
    blocks, d = read_blocks(spark, str(path), "libsvm", n_features=6)
    X, y, ids = collect(blocks)
    assert d == 6
    expected = np.zeros((3, 6))
    expected[0, [0, 2]] = [0.5, 2.0]
    expected[1, [1, 3]] = [1e-3, -7.0]
    np.testing.assert_array_equal(X, expected)
    np.testing.assert_array_equal(y, [1.0, -1.0, -1.0])
    np.testing.assert_array_equal(ids, [1, 3, 4])  # row id + 1 == line in the file
    X_loc, y_loc = read_libsvm_local(path, n_features=6)
    np.testing.assert_array_equal(X_loc, expected)
    assert parse_libsvm_line("   # only a comment") is None
    label, cols, vals = parse_libsvm_line("2 1:1 10:3")
    assert label == 2.0 and cols.tolist() == [0, 9] and vals.tolist() == [1.0, 3.0]


def test_libsvm_folder_of_files_gives_line_numbers_per_file(spark, tmp_path):
    folder = tmp_path / "parts"
    folder.mkdir()
    X0, y0 = sparse_data((-1, 1), n=30)
    write_svm(folder / "part-0.svm", X0[:20], y0[:20])
    lines = (folder / "part-0.svm").read_text().splitlines()
    write_svm(folder / "part-1.svm", X0[20:], y0[20:])
    bad = (folder / "part-1.svm").read_text().splitlines()
    bad[6] = bad[6].split()[0] + " 0:1.0"
    (folder / "part-1.svm").write_text("\n".join(bad) + "\n")
    with pytest.raises(ValueError, match=r"part-1\.svm, line 7: index 0 .*1-based"):
        read_blocks(spark, str(folder), "libsvm", min_partitions=4)
    # the good file alone, through a glob
    blocks, d = read_blocks(spark, str(folder / "part-0*"), "libsvm")
    X, y, ids = collect(blocks)
    np.testing.assert_array_equal(X[:, :d], X0[:20, :d])
    assert len(lines) == 20 and ids.tolist() == list(range(20))


# --------------------------------------------------------------------------- CSV & Parquet

@pytest.fixture(scope="module")
def same_data():
    return sparse_data((-1, 1), n=37, d=6, seed=3)


def test_csv_with_and_without_header_match_the_data(spark, tmp_path, same_data):
    # the LIBSVM reader reproduces the data exactly (test_libsvm_matches_sklearn), so CSV and
    # Parquet are compared with the same rows directly
    X0, y0 = same_data
    X_svm, y_svm = X0, y0

    with_header = tmp_path / "h.csv"
    names = ["f1", "f2", "f3", "label", "f4", "f5", "f6"]  # label not first: found by name
    table = np.column_stack([X0[:, :3], y0, X0[:, 3:]])
    np.savetxt(with_header, table, delimiter=",", header=",".join(names), comments="",
               fmt="%.17g")
    blocks, d = read_blocks(spark, str(with_header), "csv", min_partitions=2)
    X, y, ids = collect(blocks)
    assert d == 6
    np.testing.assert_array_equal(as_row_set(X, y), as_row_set(X_svm, y_svm))

    no_header = tmp_path / "n.csv"
    np.savetxt(no_header, np.column_stack([y0, X0]), delimiter=",", fmt="%.17g")
    blocks, d = read_blocks(spark, str(no_header), "csv", n_features=6)
    X, y, _ = collect(blocks)
    np.testing.assert_array_equal(as_row_set(X, y), as_row_set(X_svm, y_svm))


def test_parquet_array_vector_and_columns_match(spark, tmp_path, same_data):
    from pyspark.ml.linalg import Vectors

    X0, y0 = same_data
    expected = as_row_set(X0, y0)
    rows = [(float(t), [float(v) for v in x]) for x, t in zip(X0, y0)]
    arrays = spark.createDataFrame(rows, "label double, features array<double>")
    arrays.repartition(3).write.parquet(str(tmp_path / "arr.parquet"))
    vectors = spark.createDataFrame(
        [(t, Vectors.sparse(len(x), {i: v for i, v in enumerate(x) if v}) if k % 2 else
          Vectors.dense(x)) for k, (t, x) in enumerate(rows)], ["label", "features"])
    vectors.write.parquet(str(tmp_path / "vec.parquet"))
    columns = spark.createDataFrame([(t, *x) for t, x in rows],
                                    ["label"] + [f"x{j}" for j in range(6)])
    columns.write.parquet(str(tmp_path / "col.parquet"))

    for name in ("arr", "vec", "col"):
        blocks, d = read_blocks(spark, str(tmp_path / f"{name}.parquet"), "parquet")
        X, y, _ = collect(blocks)
        assert d == 6, name
        np.testing.assert_array_equal(as_row_set(X, y), expected, err_msg=name)


def test_dataframe_to_blocks_keeps_every_row_once(spark):
    from pyspark.sql import functions as F

    n = 20_000  # > 8192 rows per partition: several Arrow payloads per block
    df = (spark.range(n, numPartitions=2)
          .select((F.col("id") % 2).alias("label"),
                  F.array(F.col("id").cast("double"), (F.col("id") * 0.5)).alias("features")))
    blocks, d = dataframe_to_blocks(df)
    assert d == 2
    parts = blocks.collect()
    assert len(parts) == 2
    X, y, ids = collect(blocks)
    np.testing.assert_array_equal(np.sort(X[:, 0]), np.arange(n, dtype=np.float64))
    np.testing.assert_array_equal(X[:, 1], X[:, 0] * 0.5)
    np.testing.assert_array_equal(y, X[:, 0] % 2)
    assert {int(i) >> 40 for i in ids} == {0, 1}
    again = collect(dataframe_to_blocks(df)[0])[2]
    np.testing.assert_array_equal(ids, again)  # deterministic

    plain = spark.createDataFrame([(1, 2.0, 3), (0, 4.0, 5), (1, 6.0, 7)], ["y", "a", "b"])
    blocks, d = dataframe_to_blocks(plain.repartition(4), label_col="y")
    X, y, _ = collect(blocks)
    assert d == 2 and len(blocks.collect()) <= 3  # empty partitions are skipped
    np.testing.assert_array_equal(as_row_set(X, y),
                                  as_row_set(np.array([[2., 3], [4, 5], [6, 7]]), [1., 0, 1]))


# ------------------------------------------------------------------------------ bad input

@pytest.mark.parametrize("bad_line, pattern", [
    ("1 0:1.5 2:1", r"line 3: index 0 in token '0:1\.5'.*1-based"),
    ("1 3:1 2:1", r"line 3: index 2 in token '2:1' comes after index 3.*increasing"),
    ("1 2:1 2:4", r"line 3: index 2 in token '2:4' repeats"),
    ("1 2:abc", r"line 3: value 'abc' in token '2:abc' is not a number"),
    ("1 2=0.5", r"line 3: token '2=0\.5' is not of the form index:value"),
    ("yes 1:1", r"line 3: the label 'yes' is not a number"),
])
def test_libsvm_bad_lines_name_file_and_line(spark, tmp_path, bad_line, pattern):
    path = tmp_path / "bad.svm"
    path.write_text(f"1 1:1\n# comment\n{bad_line}\n-1 2:1\n")
    with pytest.raises(ValueError, match=pattern) as local_error:
        read_libsvm_local(path)
    assert str(path) in str(local_error.value)
    assert isinstance(local_error.value, DataFormatError) and local_error.value.line == 3
    with pytest.raises(ValueError, match=pattern) as spark_error:
        read_blocks(spark, str(path), "libsvm")
    assert str(path) in str(spark_error.value)


def test_libsvm_error_in_a_later_partition_has_exact_line(spark, tmp_path):
    X0, y0 = sparse_data((0, 1), n=60)
    path = write_svm(tmp_path / "long.svm", X0, y0)
    lines = path.read_text().splitlines()
    lines[56] = "1 5:1 4:2"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"long\.svm, line 57: index 4 .* after index 5"):
        read_blocks(spark, str(path), "libsvm", min_partitions=4)
    with pytest.raises(ValueError, match=r"line 57:"):
        read_libsvm_local(path)


def test_libsvm_index_above_n_features(spark, tmp_path):
    path = tmp_path / "wide.svm"
    path.write_text("1 1:1 12:1\n")
    with pytest.raises(ValueError, match=r"line 1: index 12 .* exceeds n_features=10"):
        read_blocks(spark, str(path), "libsvm", n_features=10)


def test_missing_path_unknown_format_and_empty_files(spark, tmp_path):
    missing = tmp_path / "nope.svm"
    for fmt in ("libsvm", "csv", "parquet"):
        with pytest.raises(ValueError, match=rf"nope\.svm \(format '{fmt}'\) does not exist"):
            read_blocks(spark, str(missing), fmt)
    with pytest.raises(ValueError, match=r"nope\.svm.*does not exist"):
        read_libsvm_local(missing)
    with pytest.raises(FileNotFoundError):
        read_libsvm_local(missing)

    path = tmp_path / "x.svm"
    path.write_text("1 1:1\n")
    with pytest.raises(ValueError, match=r"unknown format 'xls' for .*x\.svm.*'libsvm'"):
        read_blocks(spark, str(path), "xls")

    empty = tmp_path / "empty.txt"
    empty.write_text("")
    for fmt in ("libsvm", "csv", "parquet"):
        with pytest.raises(ValueError, match=rf"empty\.txt \(format '{fmt}'\) is empty"):
            read_blocks(spark, str(empty), fmt)
    with pytest.raises(ValueError, match=r"empty\.txt \(format 'libsvm'\) has no data lines"):
        read_libsvm_local(empty)
    comments = tmp_path / "comments.svm"
    comments.write_text("# nothing here\n\n")
    with pytest.raises(ValueError, match=r"comments\.svm \(format 'libsvm'\) has no data"):
        read_blocks(spark, str(comments), "libsvm")


def test_csv_non_numeric_cell_names_column_and_row(spark, tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("label,height,colour\n1,1.5,2\n-1,2.5,blue\n1,0.5,3\n")
    with pytest.raises(ValueError, match=r"column 'colour' .*'blue'.*label='-1', "
                                         r"height='2\.5', colour='blue'") as error:
        read_blocks(spark, str(path), "csv")
    assert "bad.csv" in str(error.value)


def test_text_rows_are_named_by_line_and_dataframe_rows_by_partition_and_row(spark, tmp_path):
    path = tmp_path / "nan.svm"
    path.write_text("1 1:1\n-1 2:nan\n1 1:2\n-1 1:inf\n")
    with pytest.raises(ValueError, match=r"nan\.svm, line 2: feature 2 \(nan\) is NaN or "
                                         r"infinite \(2 lines in all: also line 4\)\. Remove"):
        read_blocks(spark, str(path), "libsvm")
    big = tmp_path / "big.svm"
    big.write_text("1 1:1\n# a comment\n-1 1:1e20\n")  # float32 rows: at most 1e15
    with pytest.raises(ValueError, match=r"big\.svm, line 3: feature 1 \(1e\+20\) lies beyond "
                                         r"±1e\+15.*Rescale"):
        read_blocks(spark, str(big), "libsvm", dtype=np.float32)
    assert read_blocks(spark, str(big), "libsvm")[1] == 1  # float64 rows: within 1e100
    csv = tmp_path / "gap.csv"
    csv.write_text("label,a,b\n1,1,2\n-1,,3\n1,2,inf\n")  # an empty cell, an infinity
    with pytest.raises(ValueError, match=r"gap\.csv, line 3 \(format 'csv'\): column 'a' \(a "
                                         r"feature column, column 2 of 3\) is empty .*\[label="
                                         r"'-1', a='', b='3'\]; 2 lines of the input"):
        read_blocks(spark, str(csv), "csv")
    frame = spark.createDataFrame([(1.0, [1.0, 2.0]), (-1.0, [float("nan"), 3.0])],
                                  "label double, features array<double>").coalesce(1)
    blocks, d = dataframe_to_blocks(frame)
    with pytest.raises(ValueError, match=r"1 row\(s\) contain NaN or infinity .*: row 1 of "
                                         r"partition 0 \(0-based\)"):
        check_blocks(blocks, d)
    good = tmp_path / "good.csv"
    good.write_text("label,a,b\n1,1,2\n-1,0,3\n")
    with pytest.raises(ValueError, match=r"2 columns but n_features=4"):
        check_blocks(read_blocks(spark, str(good), "csv",
                                 columns=TableColumns(label_col="a"))[0], 4)


def _write_parquet(path, X, y, row_group_size, element="float32"):
    import pyarrow as pa
    import pyarrow.parquet as pq

    features = pa.array([None if row is None else list(row) for row in X],
                        type=pa.list_(pa.float32() if element == "float32" else pa.float64()))
    pq.write_table(pa.table({"label": pa.array(y, type=pa.float64()), "features": features}),
                   path, row_group_size=row_group_size)


def test_local_parquet_arrays_are_read_by_pyarrow_in_file_order(spark, tmp_path):
    from sodm_spark.spark.io.arrow import dataframe_to_blocks
    from sodm_spark.spark.io.parquet_files import read_parquet_table

    rng = np.random.default_rng(5)
    X = rng.standard_normal((70, 6)).astype(np.float32)
    y = np.where(rng.random(70) < 0.5, -1.0, 1.0)
    folder = tmp_path / "train"
    folder.mkdir()
    _write_parquet(folder / "part-1.parquet", X[40:], y[40:], row_group_size=16)
    _write_parquet(folder / "part-0.parquet", X[:40], y[:40], row_group_size=16)
    (folder / "_SUCCESS").write_text("")
    blocks, d = read_blocks(spark, str(folder), "parquet", dtype=np.float32)
    parts = blocks.collect()
    assert d == 6 and blocks.getNumPartitions() == 5  # row groups 16+16+8, 16+14
    got = np.concatenate([b.X for b in parts])
    assert all(b.X.dtype == np.float32 for b in parts)
    # the files in name order, their rows in order: row ids count rows within a row group
    np.testing.assert_array_equal(got, X)
    np.testing.assert_array_equal(np.concatenate([b.y for b in parts]), y)
    ids = np.concatenate([b.row_ids for b in parts])
    np.testing.assert_array_equal(ids >> 40, np.repeat(np.arange(5), [16, 16, 8, 16, 14]))
    np.testing.assert_array_equal(ids & ((1 << 40) - 1),
                                  np.concatenate([np.arange(n) for n in (16, 16, 8, 16, 14)]))
    # the same rows as Spark SQL's reader gives
    sql_blocks, _ = dataframe_to_blocks(spark.read.parquet(str(folder)), dtype=np.float32)
    sql = sql_blocks.collect()
    np.testing.assert_array_equal(
        as_row_set(np.concatenate([b.X for b in sql]), np.concatenate([b.y for b in sql])),
        as_row_set(X, y))
    # float64 rows for the linear path; a partition folder goes to Spark SQL
    blocks64, _ = read_blocks(spark, str(folder), "parquet")
    np.testing.assert_array_equal(np.concatenate([b.X for b in blocks64.collect()]),
                                  X.astype(np.float64))
    # partition folders: their values are columns only Spark SQL reads, so Spark SQL reads
    by_year = tmp_path / "by_year"
    for year, rows in (("2025", slice(0, 40)), ("2026", slice(40, 70))):
        (by_year / f"year={year}").mkdir(parents=True)
        _write_parquet(by_year / f"year={year}" / "part-0.parquet", X[rows], y[rows], 64)
    files = sorted(str(p) for p in by_year.rglob("*.parquet"))
    assert read_parquet_table(spark, str(by_year), files, "features", "label", np.float32,
                              2) is None
    X_years, y_years, _ = collect(read_blocks(spark, str(by_year), "parquet")[0])
    np.testing.assert_array_equal(as_row_set(X_years, y_years), as_row_set(X, y))


@pytest.mark.parametrize("damage, message", [
    ("short", r"part-0\.parquet: row 3 of the file has 5 values in 'features' where the first "
              r"row has 6"),
    ("null", r"part-0\.parquet: row 3 of the file has a null in 'features'"),
    ("nan", r"part-0\.parquet: row 3 of the file contains NaN or infinity"),
    ("huge", r"part-0\.parquet: row 3 of the file holds feature values beyond"),
])
def test_a_bad_row_of_a_local_parquet_file_is_named_by_file_and_row(spark, tmp_path, damage,
                                                                     message):
    from pyspark.errors import PySparkException
    from py4j.protocol import Py4JJavaError

    from sodm_spark.core.errors import INPUT, failure_of

    rows = [list(np.arange(6, dtype=float) + k) for k in range(5)]
    rows[2] = {"short": rows[2][:5], "null": None, "nan": rows[2][:5] + [float("nan")],
               "huge": rows[2][:5] + [1e30]}[damage]
    folder = tmp_path / "bad"
    folder.mkdir()
    _write_parquet(folder / "part-0.parquet", rows, np.ones(5), row_group_size=4,
                   element="float64")
    blocks, _ = read_blocks(spark, str(folder), "parquet", dtype=np.float32)
    with pytest.raises((Py4JJavaError, PySparkException)) as raised:
        blocks.collect()
    kind, text = failure_of(raised.value)
    assert kind == INPUT and re.search(message, text), text
