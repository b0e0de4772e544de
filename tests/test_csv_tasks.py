"""CSV tables read by pyarrow in the tasks (sodm_spark.spark.io.csv_files) give, block for
block, what Spark SQL's reader gives (csv_frame, then dataframe_to_blocks over spark.read.csv):
the same values, row ids and block boundaries, on files cut into several Spark splits, several
files a partition and several Arrow batches a partition; string columns of a CSV are encoded
inside the model as a Parquet table's are, and the job's model scores CSV rows as it scores
them on pandas."""
import gzip
import sys
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sodm_spark.core.categories import ONE_HOT, TARGET, encoding_to_json
from sodm_spark.models.expansion import KernelExpansion
from sodm_spark.spark.io import TableColumns, input_slices, input_statuses, read_blocks
from sodm_spark.spark.io.arrow import dataframe_to_blocks
from sodm_spark.spark.io.blocks import DataFormatError, sql_conf
from sodm_spark.spark.io.csv import checked_csv_table, csv_frame
from sodm_spark.spark.io.csv_files import read_csv_table, split_text
from sodm_spark.spark.io.file_schemas import listed_files
from sodm_spark.spark.io.string_columns import StringEncoding

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "jobs"))
import predict  # noqa: E402
from test_parquet_layouts import _assert_same_blocks as assert_same_blocks  # noqa: E402
import train_sodm  # noqa: E402

SMALL_SCAN = {"spark.sql.files.maxPartitionBytes": "3000",
              "spark.sql.files.openCostInBytes": "1",
              "spark.sql.execution.arrow.maxRecordsPerBatch": "7"}
CARRIERS = ["AA", "B6", "DL", "UA"]
AIRPORTS = [f"A{k:02d}" for k in range(30)]


@pytest.fixture
def small_scan(spark):
    with ExitStack() as stack:
        for key, value in SMALL_SCAN.items():
            stack.enter_context(sql_conf(spark, key, value))
        yield


def _rows(n=260, seed=5, strings=False):
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"label": np.where(rng.random(n) < 0.4, 0, 1)})
    for j in range(4):
        frame[f"x{j}"] = np.round(rng.standard_normal(n) * 10 ** j, 6)
    if strings:
        frame.insert(2, "carrier", rng.choice(CARRIERS, size=n))
        frame["dest"] = rng.choice(AIRPORTS, size=n)
        frame.loc[frame.index[::37], "dest"] = None  # a missing value: a level of its own
    return frame


def _write(folder, frame, sizes=(120, 90, 40, 10), header=True, line_end="\n", blank=False,
           spaces=False):
    """The rows as several CSV files, lines ending in ``line_end``; ``blank``: blank lines and
    lines of spaces between rows; ``spaces``: numbers with spaces around them."""
    folder.mkdir()
    start = 0
    for number, size in enumerate(sizes):
        part = frame.iloc[start:start + size]
        lines = [",".join(part.columns)] if header else []
        for k, row in enumerate(part.itertuples(index=False)):
            cells = ["" if value is None else (f" {value} " if spaces and
                                               isinstance(value, float) else str(value))
                     for value in row]
            lines.append(",".join(cells))
            if blank and k % 11 == 3:
                lines.append("   " if k % 2 else "")
        (folder / f"part-{number:05d}.csv").write_text(line_end.join(lines) + line_end)
        start += size
    (folder / "_SUCCESS").write_text("")
    return folder


def _both_readers(spark, path, dtype, header=True, categories=None):
    """(the tasks' ReadTable, Spark SQL's blocks and encoding), planned as read_blocks plans."""
    statuses = input_statuses(spark, str(path), "csv")
    with sql_conf(spark, "spark.sql.files.minPartitionNum", str(input_slices(spark, statuses))):
        table = checked_csv_table(spark, str(path), statuses,
                                  TableColumns(header=header, categories=categories))
        _, files = listed_files(statuses)
        read = read_csv_table(spark, table, files, dtype,
                              strings=StringEncoding(categories, 0))
        df, numeric, text = csv_frame(table)
        aliases = dict(zip(table.numeric_names + table.string_names, numeric + text))
        blocks, _, encoding = dataframe_to_blocks(
            df, numeric + text, "label", dtype=dtype,
            strings=StringEncoding(None if categories is None else categories.renamed(aliases)))
        return read, blocks.collect(), encoding, aliases


def _assert_same_blocks(got, expected):
    assert len(got) > 3  # several blocks: every cut compared
    assert_same_blocks(got, expected)


@pytest.mark.parametrize("dtype, header, line_end, blank, spaces", [
    (np.float64, True, "\n", False, False),
    (np.float32, True, "\r\n", True, False),
    (np.float64, False, "\n", True, True),
])
def test_numeric_csv_is_read_by_the_tasks_as_spark_sql_reads_it(spark, tmp_path, small_scan,
                                                                dtype, header, line_end,
                                                                blank, spaces):
    frame = _rows()
    folder = _write(tmp_path / "csv", frame, header=header, line_end=line_end, blank=blank,
                    spaces=spaces)
    read, expected, _, _ = _both_readers(spark, folder, dtype, header)
    assert read is not None and read.d == 4
    assert read.names == (("x0", "x1", "x2", "x3") if header else None)
    # Spark cut the files into several splits, several of them in one partition
    splits = [split for plan in read.plans for split in plan.splits]
    assert max(len(plan.splits) for plan in read.plans) > 1
    assert len({split.path for split in splits}) < len(splits)
    assert sum(split.rows for split in splits) == len(frame)
    _assert_same_blocks(read.blocks.collect(), expected)
    X = np.concatenate([block.X for block in expected])
    np.testing.assert_array_equal(np.sort(X[:, 3]), np.sort(frame["x3"].to_numpy().astype(dtype)))
    blocks, _, features = read_blocks(spark, str(folder), "csv", dtype=dtype, with_names=True,
                                      columns=TableColumns(header=header))
    _assert_same_blocks(blocks.collect(), expected)  # the public door takes this path
    assert features.names == read.names


def test_split_text_takes_the_lines_hadoop_gives_each_split(tmp_path):
    import pyarrow as pa

    text = b"a,b\n1,2\n33,44\n5,6\n"
    cuts = [(0, 4), (4, 4), (8, 3), (11, 8)]  # a line starting at a split's last byte is its
    pieces = [split_text(pa.BufferReader(text), start, length) for start, length in cuts]
    assert pieces == [b"a,b\n1,2\n", b"33,44\n", b"", b"5,6\n"]
    assert b"".join(pieces) == text


def test_string_columns_of_a_csv_are_encoded_by_the_tasks_as_by_spark_sql(spark, tmp_path,
                                                                         small_scan):
    frame = _rows(strings=True)
    folder = _write(tmp_path / "csv", frame)
    read, expected, encoding, aliases = _both_readers(spark, folder, np.float64)
    assert read is not None and read.categories is not None
    carrier, dest = read.categories.columns
    assert (carrier.name, carrier.kind, dest.name, dest.kind) == ("carrier", ONE_HOT, "dest",
                                                                  TARGET)
    assert "None" in dest.levels  # the empty cells
    renamed = encoding.renamed({v: k for k, v in aliases.items()})
    assert encoding_to_json(read.categories) == encoding_to_json(renamed)
    assert read.names == ("x0", "x1", "x2", "x3", "carrier=AA", "carrier=B6", "carrier=DL",
                          "carrier=UA", "dest:1")
    _assert_same_blocks(read.blocks.collect(), expected)
    # rows scored beside the model: its encoding, applied whole, on both readers
    scored, expected, _, _ = _both_readers(spark, folder, np.float64,
                                           categories=read.categories)
    _assert_same_blocks(scored.blocks.collect(), expected)


def test_gzip_files_are_read_by_spark_sql_with_the_same_rows(spark, tmp_path):
    frame = _rows(60)
    folder = _write(tmp_path / "plain", frame, sizes=(60,))
    zipped = tmp_path / "zipped"
    zipped.mkdir()
    (zipped / "part-00000.csv.gz").write_bytes(
        gzip.compress((folder / "part-00000.csv").read_bytes()))
    read, expected, _, _ = _both_readers(spark, zipped, np.float64)
    assert read is None  # Spark SQL decompresses them
    blocks = read_blocks(spark, str(zipped), "csv")[0].collect()
    np.testing.assert_array_equal(np.concatenate([b.X for b in blocks]),
                                  frame[[f"x{j}" for j in range(4)]].to_numpy())


def test_a_line_break_inside_quotes_is_refused_naming_the_file(spark, tmp_path):
    folder = tmp_path / "quoted"
    folder.mkdir()
    lines = ["label,x0,name"] + [f"1,{k}.5,\"n{k}\"" for k in range(40)]
    lines[20:22] = ["1,3.5,\"two", "0,4.5,lines\""]  # one quoted value over two lines
    (folder / "part-0.csv").write_text("\n".join(lines) + "\n")
    # a task's refusal reaches the driver in Spark's error (the job words it in one line)
    with pytest.raises(Exception, match=r"part-0.csv: bytes 0-\d+ (hold 39 CSV rows for "
                                        r"pyarrow where Spark's reader counts 40|do not parse)"):
        read_blocks(spark, str(folder), "csv")[0].collect()


def test_text_among_numbers_is_refused_and_text_without_a_header_too(spark, tmp_path):
    frame = _rows(80)
    frame["x1"] = frame["x1"].astype(object)
    frame.loc[40, "x1"] = "n/a"  # a stray word in a numeric column: not a category
    folder = _write(tmp_path / "stray", frame, sizes=(80,))
    with pytest.raises(DataFormatError, match=r"line 42 .*column 'x1'.*'n/a'.*read as numbers"):
        read_blocks(spark, str(folder), "csv")
    strings = _write(tmp_path / "headless", _rows(40, strings=True), sizes=(40,), header=False)
    with pytest.raises(DataFormatError, match=r"no header, and its column\(s\) \[3, 7\]"):
        read_blocks(spark, str(strings), "csv", columns=TableColumns(header=False))


def test_text_beside_a_model_trained_on_numbers_is_refused(spark, tmp_path):
    frame = _rows(60, strings=True)
    folder = _write(tmp_path / "csv", frame, sizes=(60,))
    beside = TableColumns(fit_strings=False)  # rows scored beside a model of numbers
    with pytest.raises(DataFormatError, match=r"column 'carrier'.*non-numeric value"):
        read_blocks(spark, str(folder), "csv", columns=beside)
    frame.to_parquet(tmp_path / "rows.parquet")
    with pytest.raises(Exception, match=r"\['carrier', 'dest'\] hold text, but the model was "
                                        "trained on numbers"):
        read_blocks(spark, str(tmp_path / "rows.parquet"), "parquet", columns=beside)


@pytest.fixture(scope="module")
def trained_on_csv(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("csv-strings")
    train, test = _rows(900, 1, strings=True), _rows(200, 2, strings=True)
    train["label"] = ((train["carrier"].isin(["B6", "UA"])) ^ (train["x0"] > 0.3)).astype(int)
    test["label"] = ((test["carrier"].isin(["B6", "UA"])) ^ (test["x0"] > 0.3)).astype(int)
    _write(root / "train", train, sizes=(500, 400))
    _write(root / "test", test[test.columns[::-1]], sizes=(200,))  # columns in another order
    assert train_sodm.main(["--data", str(root / "train"), "--format", "csv", "--levels", "1",
                            "--gamma", "0.5", "--model-out", str(root / "model"),
                            "--test-data", str(root / "test"), "--metrics-out",
                            str(root / "metrics.json")]) == 0
    return root, test, KernelExpansion.load(root / "model")


def test_a_model_trained_on_csv_strings_scores_csv_rows_as_pandas_rows(trained_on_csv,
                                                                      tmp_path):
    import json

    root, test, model = trained_on_csv
    assert model.categories is not None and model.categories.numeric == ("x0", "x1", "x2", "x3")
    expected = model.decision_function(test.drop(columns=["label"]))
    accuracy = np.mean((expected > 0) == test["label"].to_numpy())
    assert accuracy > 0.85
    metrics = json.loads((root / "metrics.json").read_text())
    assert metrics["test_accuracy"] == pytest.approx(accuracy, abs=0.01)
    keyed = test.assign(key=np.arange(len(test)))
    _write(tmp_path / "rows", keyed, sizes=(200,))
    out = tmp_path / "scored"
    assert predict.main(["--model", str(root / "model"), "--data", str(tmp_path / "rows"),
                         "--format", "csv", "--key-col", "key", "--precision", "float64",
                         "--out", str(out)]) == 0
    scored = pd.read_parquet(out).sort_values("key")
    np.testing.assert_allclose(np.stack(scored["rawPrediction"])[:, 1], expected, rtol=1e-9,
                               atol=1e-9)
