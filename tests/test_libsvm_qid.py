"""LIBSVM lines as SVMlight defines them: a ranking query id (``qid:N``) after the label and
``#`` comments, read by every reader as scikit-learn's ``load_svmlight_file`` reads them.

References: ``load_svmlight_file`` (X, y and ``query_id=True``'s query ids) for the parsers;
the line parser for the numba loop, bit for bit; :func:`read_libsvm_local` for the classic
Spark reader and the DataFrame reader of a Spark Connect session (a live server through a
client process: this file run as a script); ``model.predict`` and the same rows without
query ids and comments for the prediction job.

Usage as the Connect client: python tests/test_libsvm_qid.py URL DATA_DIR OUT_DIR
"""
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import job_env, make_problem

ROOT = Path(__file__).resolve().parents[1]


def ranked_lines(X, y, qids, seed):
    """``X, y`` as SVMlight lines with a query id each, written every way the format allows:
    tabs, a trailing comment after a space or straight after the last value, comment lines,
    blank lines, a row with no features, and values the numba loop hands to the line parser
    (mantissas of 20+ digits), so that both parsers read query ids."""
    rng = np.random.default_rng(seed)
    lines = ["# a ranking data set, SVMlight format", ""]
    for i, (row, label, qid) in enumerate(zip(X, y, qids)):
        cols = np.flatnonzero(row)
        pairs = [f"{c + 1}:{float(row[c])!r}" for c in cols]
        sep = "\t" if i % 5 == 0 else " "
        line = sep.join([f"{label:g}", f"qid:{qid}", *pairs])
        kind = int(rng.integers(0, 4))
        if kind == 1:
            line += f"  # doc {i} qid:9 1:5"  # what follows '#' is a comment, parsed or not
        elif kind == 2 and pairs:
            line += "#no space"
        if i in (7, 11) and pairs and "e" not in pairs[0]:  # the same value, 20+ digits
            line = line.replace(pairs[0], pairs[0] + "0" * 20, 1)
        lines.append(line)
        if i % 9 == 4:
            lines += ["", "   # a comment line"]
    return lines


def ranked_data(n=120, d=8, seed=5):
    """Sparse rows (some all-zero), labels and non-decreasing query ids, rows of a query
    together as rankers write them."""
    rng = np.random.default_rng(seed)
    X = np.round(rng.normal(size=(n, d)), 4)
    X[rng.random((n, d)) < 0.5] = 0.0
    X[3] = 0.0
    X[0, d - 1] = 1.5  # the last column is used: the width is d
    y = rng.choice([-1.0, 1.0], size=n)
    qids = np.sort(rng.integers(0, 15, size=n))
    return X, y, qids


def write_ranked(path, seed=5, n=120, d=8):
    X, y, qids = ranked_data(n, d, seed)
    path.write_text("\n".join(ranked_lines(X, y, qids, seed)) + "\n", encoding="utf-8")
    return X, y, qids


# ------------------------------------------------------------------------- the parsers

def test_the_parsers_read_query_ids_and_comments_as_scikit_learn_does(tmp_path):
    from sklearn.datasets import load_svmlight_file

    from sodm_spark.data.formats.libsvm import parse_libsvm_line, parse_libsvm_text
    from sodm_spark.spark.io import read_libsvm_local

    X0, y0, q0 = write_ranked(tmp_path / "ranked.svm")
    X_ref, y_ref, q_ref = load_svmlight_file(str(tmp_path / "ranked.svm"), zero_based=False,
                                             query_id=True)
    X_ref = X_ref.toarray()
    np.testing.assert_array_equal(X_ref, X0)  # the file says what it was written from
    X, y, qid = read_libsvm_local(tmp_path / "ranked.svm", query_id=True)
    np.testing.assert_array_equal(X, X_ref)
    np.testing.assert_array_equal(y, y_ref)
    np.testing.assert_array_equal(qid, q_ref)
    assert qid.dtype == np.int64 and X.shape == (120, 8)
    X_plain, y_plain = read_libsvm_local(tmp_path / "ranked.svm")  # the ids skipped
    np.testing.assert_array_equal(X_plain, X_ref)
    np.testing.assert_array_equal(y_plain, y_ref)

    # the numba loop and the line parser, line by line: values to the bit, query ids
    text = (tmp_path / "ranked.svm").read_text(encoding="utf-8")
    parsed = parse_libsvm_text(text.encode(), query_ids=True)
    rows = [r for r in (parse_libsvm_line(line, query_id=True) for line in text.split("\n"))
            if r is not None]
    assert parsed.error is None and len(rows) == 120
    np.testing.assert_array_equal(parsed.labels, [r[0] for r in rows])
    np.testing.assert_array_equal(parsed.indices, np.concatenate([r[1] for r in rows]))
    np.testing.assert_array_equal(parsed.values.view(np.uint64),
                                  np.concatenate([r[2] for r in rows]).view(np.uint64))
    np.testing.assert_array_equal(parsed.qids, [r[3] for r in rows])
    np.testing.assert_array_equal(parsed.qids, q_ref)
    assert parse_libsvm_text(text.encode()).qids is None  # not asked for


def test_a_comment_straight_after_a_value_ends_the_line_as_scikit_learn_cuts_it(tmp_path):
    from sklearn.datasets import load_svmlight_file

    from sodm_spark.data.formats.libsvm import parse_libsvm_line, parse_libsvm_text
    from sodm_spark.spark.io import read_libsvm_local

    text = ("1 qid:3 1:0.5 2:1 # a comment\n-1 qid:3 1:0.5#x 2:7\n1 qid:4#c 3:9\n"
            "-1 qid:4 2:2.5#\n1 qid:5 3:1e-3 # 1:99\n")
    (tmp_path / "c.svm").write_text(text)
    X_ref, y_ref, q_ref = load_svmlight_file(str(tmp_path / "c.svm"), zero_based=False,
                                             query_id=True, n_features=3)
    X, y, qid = read_libsvm_local(tmp_path / "c.svm", n_features=3, query_id=True)
    np.testing.assert_array_equal(X, X_ref.toarray())
    np.testing.assert_array_equal(X, [[0.5, 1, 0], [0.5, 0, 0], [0, 0, 0], [0, 2.5, 0],
                                      [0, 0, 1e-3]])
    np.testing.assert_array_equal(y, y_ref)
    np.testing.assert_array_equal(qid, q_ref)
    _, cols, vals, qid = parse_libsvm_line("-1 qid:3 1:0.5#x 2:7", query_id=True)
    assert cols.tolist() == [0] and vals.tolist() == [0.5] and qid == 3
    assert parse_libsvm_text(b"1 1:0.5#x 2:7").indices.tolist() == [0]


def test_lines_without_a_query_id_get_none_and_the_numba_loop_reads_every_query_id(
        monkeypatch):
    from sodm_spark.data.formats import libsvm

    text = (b"1 qid:3 1:0.5\n2 2:1\n\n3 qid:0 # no features\n-1\tqid:7\t1:2 3:4 # x\n4 1:1\n"
            b"5 qid:" + b"0" * 30 + b"12 2:1\n")  # leading zeros: the line parser's
    parsed = libsvm.parse_libsvm_text(text, query_ids=True)
    assert parsed.qids.tolist() == [3, libsvm.NO_QID, 0, 7, libsvm.NO_QID, 12]
    assert libsvm.NO_QID == -1
    assert parsed.row_lines.tolist() == [0, 1, 3, 4, 5, 6]
    assert parsed.indptr.tolist() == [0, 1, 2, 2, 4, 5, 6]
    # the loop takes plain query-id lines itself: none goes to the line parser
    lines = "".join(f"{i % 2} qid:{i // 3} {i % 5 + 1}:{i * 0.25!r}\n" for i in range(300))
    original, called = libsvm.parse_libsvm_line, []
    monkeypatch.setattr(libsvm, "parse_libsvm_line", lambda *args, **kwargs: called.append(
        args) or original(*args, **kwargs))
    parsed = libsvm.parse_libsvm_text(lines.encode(), query_ids=True)
    plain = libsvm.parse_libsvm_text(lines.encode())
    monkeypatch.undo()
    assert not called and parsed.error is None and parsed.labels.size == 300
    assert parsed.qids.tolist() == [i // 3 for i in range(300)]
    np.testing.assert_array_equal(plain.values, parsed.values)


BAD_QIDS = [  # (line, the token named, what the message says)
    ("1 1:0.5 qid:3 2:1", "qid:3", "a query id after the first index:value pair"),
    ("1 qid:3 qid:4 1:1", "qid:4", "a second query id"),
    ("1 qid:3 1:1 qid:4", "qid:4", "a second query id"),
    ("1 qid:x 1:1", "qid:x", "is not a non-negative integer"),
    ("1 qid:1.5 1:1", "qid:1.5", "is not a non-negative integer"),
    ("1 qid:-3 1:1", "qid:-3", "is not a non-negative integer"),
    ("1 qid:+3 1:1", "qid:+3", "is not a non-negative integer"),
    ("1 qid: 1:1", "qid:", "is not a non-negative integer"),
    ("1 qid:\u0663 1:1", "qid:\u0663", "is not a non-negative integer"),  # an Arabic 3
    ("1 qid:99999999999999999999 1:1", "qid:99999999999999999999", "larger than"),
]


def test_malformed_query_ids_are_refused_naming_the_token(tmp_path):
    from sodm_spark.data.formats.libsvm import LineProblem, parse_libsvm_line, parse_libsvm_text
    from sodm_spark.spark.io import DataFormatError, read_libsvm_local

    for number, (bad, token, what) in enumerate(BAD_QIDS):
        with pytest.raises(LineProblem) as raised:
            parse_libsvm_line(bad)
        assert raised.value.token == token, bad
        assert repr(token) in str(raised.value) and what in str(raised.value), bad
        assert "right after the label" in raised.value.advice
        text = f"1 qid:1 1:1\n# comment\n\n{bad}\n-1 2:1\n"
        assert parse_libsvm_text(text.encode()).error == (3, raised.value.as_tuple()), bad
        path = tmp_path / f"bad{number}.svm"
        path.write_text(text, encoding="utf-8")
        with pytest.raises(DataFormatError) as read:
            read_libsvm_local(path)
        assert str(read.value).startswith(f"{path}, line 4: ") and read.value.token == token


# ------------------------------------------------------------------------- the Spark readers

def _collected(blocks):
    """(X, y, row ids) of a blocks RDD, in its partitions' order."""
    parts = blocks.collect()
    return (np.concatenate([b.X for b in parts]), np.concatenate([b.y for b in parts]),
            np.concatenate([b.row_ids for b in parts]))


def _data_lines(path):
    """0-based numbers of the lines of ``path`` that hold a row (the classic row ids)."""
    from sodm_spark.data.formats.libsvm import parse_libsvm_line

    lines = Path(path).read_text(encoding="utf-8").split("\n")
    return [i for i, line in enumerate(lines) if parse_libsvm_line(line) is not None]


def test_the_classic_and_the_dataframe_readers_give_the_local_reader_s_rows(spark, tmp_path,
                                                                            monkeypatch):
    from sodm_spark.spark import engine
    from sodm_spark.spark.frame_rdd import FrameRDD
    from sodm_spark.spark.io import read_blocks, read_libsvm_local
    from sodm_spark.spark.io.read import _libsvm_by_spark

    write_ranked(tmp_path / "ranked.svm")
    path = str(tmp_path / "ranked.svm")
    X_loc, y_loc = read_libsvm_local(path)
    lines = _data_lines(path)
    blocks, d = read_blocks(spark, path, "libsvm", min_partitions=3)
    assert d == 8 and blocks.getNumPartitions() >= 3
    X, y, ids = _collected(blocks)
    np.testing.assert_array_equal(X, X_loc)
    np.testing.assert_array_equal(y, y_loc)
    np.testing.assert_array_equal(ids, lines)
    # the Connect path's reader on this session: over the RDD of its DataFrame, then over
    # DataFrames alone (FrameRDD, what a Connect session gets)
    for records in ("rdd", "frames"):
        monkeypatch.setenv(engine.RECORDS_ENV, records)
        frames, d = _libsvm_by_spark(spark, path, None, False, np.float64, 3, 2)
        assert d == 8 and isinstance(frames, FrameRDD) == (records == "frames")
        assert frames.getNumPartitions() == 3
        X, y, ids = _collected(frames)
        np.testing.assert_array_equal(X, X_loc)
        np.testing.assert_array_equal(y, y_loc)
        np.testing.assert_array_equal(ids, lines)  # the classic reader's row ids
        narrow, _ = _libsvm_by_spark(spark, path, 10, "auto", np.float32, None, 2)
        X32 = np.concatenate([b.X for b in narrow.collect()])
        assert X32.dtype == np.float32 and X32.shape == (120, 10)
        np.testing.assert_array_equal(X32[:, :8], X_loc.astype(np.float32))


def test_the_dataframe_reader_keeps_the_files_line_order_and_names_a_bad_line(spark,
                                                                           tmp_path):
    from sodm_spark.spark.io import DataFormatError, read_libsvm_local
    from sodm_spark.spark.io.read import _libsvm_by_spark

    folder = tmp_path / "ranked"
    folder.mkdir()
    sizes = {"b.svm": 40, "a.svm": 150, "c.svm": 90}  # Spark plans the largest file first
    for number, (name, n) in enumerate(sizes.items()):
        write_ranked(folder / name, seed=number, n=n)
    frames, d = _libsvm_by_spark(spark, str(folder), None, False, np.float64, None, 2)
    X, y, ids = _collected(frames)
    parts = [read_libsvm_local(folder / name, n_features=d) for name in sorted(sizes)]
    np.testing.assert_array_equal(X, np.concatenate([p[0] for p in parts]))
    np.testing.assert_array_equal(y, np.concatenate([p[1] for p in parts]))
    offsets = np.cumsum([0] + [len((folder / n).read_text().split("\n")) - 1
                               for n in sorted(sizes)])
    np.testing.assert_array_equal(ids, np.concatenate([
        offset + np.array(_data_lines(folder / name))
        for offset, name in zip(offsets, sorted(sizes))]))

    lines = (folder / "b.svm").read_text().split("\n")
    lines[6] = lines[6].replace("qid:", "qid:-", 1)
    (folder / "b.svm").write_text("\n".join(lines))
    with pytest.raises(DataFormatError) as raised:
        _libsvm_by_spark(spark, str(folder), None, False, np.float64, None, 2)
    assert re.search(r"b\.svm, line 7: the query id '-\d+' in token 'qid:-\d+' is not a "
                     r"non-negative integer", str(raised.value)), str(raised.value)
    (folder / "b.svm").write_text("1 qid:1 1:1\n-1 qid:1 2:nan # a NaN\n")
    with pytest.raises(DataFormatError) as raised:
        _libsvm_by_spark(spark, str(folder), None, False, np.float64, None, 2)
    assert re.search(r"b\.svm, line 2: feature 2 \(nan\) is NaN or infinite", str(raised.value))


# ------------------------------------------------------------------------- the prediction job

def _models(root):
    """A binary model of 4 features (the prediction job's tests' problem)."""
    from sodm_spark import ODMClassifier

    X, y = make_problem(m=300, d=4, seed=91)
    ODMClassifier(gamma=0.5, lam=100.0).fit(X, np.where(y > 0, 7.0, 3.0)).model_.save(
        root / "binary")
    return root / "binary"


def _scoring_inputs(folder):
    """The same rows as a plain LIBSVM file and as one with query ids and comments; the rows."""
    from sklearn.datasets import dump_svmlight_file

    X, y = make_problem(m=200, d=4, seed=92)
    X[5, 2] = 0.0  # a value the sparse rows leave out
    dump_svmlight_file(X, y, str(folder / "plain.svm"), zero_based=False)
    qids = np.arange(200) // 10
    (folder / "ranked.svm").write_text("\n".join(ranked_lines(X, y, qids, seed=93)) + "\n",
                                       encoding="utf-8")
    return X, y


def _predictions(out):
    import pyarrow.parquet as pq

    table = pq.read_table(str(out)).to_pandas().sort_values("row_id")
    return table["prediction"].to_numpy(), np.stack(table["rawPrediction"].to_numpy())


def test_the_prediction_job_scores_query_ids_and_comments_as_the_plain_rows(spark, tmp_path):
    from sodm_spark.models.expansion import KernelExpansion

    sys.path.insert(0, str(ROOT / "jobs"))
    import predict

    model_dir = _models(tmp_path)
    X, _ = _scoring_inputs(tmp_path)
    model = KernelExpansion.load(model_dir)
    scored = {}
    for name in ("plain", "ranked"):
        assert predict.main(["--model", str(model_dir), "--data", str(tmp_path / f"{name}.svm"),
                             "--format", "libsvm", "--out", str(tmp_path / f"out_{name}")]) == 0
        scored[name] = _predictions(tmp_path / f"out_{name}")
    np.testing.assert_array_equal(scored["ranked"][0], scored["plain"][0])
    np.testing.assert_array_equal(scored["ranked"][1], scored["plain"][1])
    np.testing.assert_array_equal(scored["plain"][0], model.predict(X))


# ------------------------------------------------------------------------- Spark Connect

def test_a_spark_connect_session_reads_and_scores_the_same_rows(spark, connect_url, tmp_path):
    """Through a live Connect server (a client process: this file as a script): read_blocks
    gives the local reader's rows and row ids, the prediction job the classic predictions."""
    if importlib.util.find_spec("grpc") is None:
        pytest.skip("pyspark[connect] is not installed")
    sys.path.insert(0, str(ROOT / "jobs"))
    import predict

    from sodm_spark.spark.io import read_libsvm_local

    model_dir = _models(tmp_path)
    _scoring_inputs(tmp_path)
    client = subprocess.Popen([sys.executable, str(Path(__file__)), connect_url, str(tmp_path),
                               str(tmp_path)], env=job_env(), stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    try:  # the classic predictions meanwhile
        assert predict.main(["--model", str(model_dir), "--data", str(tmp_path / "ranked.svm"),
                             "--format", "libsvm", "--out", str(tmp_path / "out_classic")]) == 0
        _, stderr = client.communicate(timeout=900)
    finally:
        if client.poll() is None:
            client.kill()
            client.communicate()
    assert client.returncode == 0, stderr[-3000:]
    remote = np.load(tmp_path / "connect.npz")
    X_loc, y_loc = read_libsvm_local(tmp_path / "ranked.svm")
    np.testing.assert_array_equal(remote["X"], X_loc)
    np.testing.assert_array_equal(remote["y"], y_loc)
    np.testing.assert_array_equal(remote["ids"], _data_lines(tmp_path / "ranked.svm"))
    assert "line 4: token 'qid:4' is a second query id" in str(remote["refused"])
    classic = _predictions(tmp_path / "out_classic")
    connect = _predictions(tmp_path / "out_connect")
    np.testing.assert_array_equal(connect[0], classic[0])
    np.testing.assert_array_equal(connect[1], classic[1])


def connect_client(url: str, data_dir: str, out_dir: str) -> None:
    """The Connect client of the test above: read_blocks and the prediction job through the
    server at ``url``; the rows to OUT_DIR/connect.npz, the predictions to OUT_DIR/out_connect."""
    from pyspark.sql import SparkSession

    from sodm_spark.spark.frame_rdd import FrameRDD
    from sodm_spark.spark.io import DataFormatError, read_blocks
    from sodm_spark.spark.session import stop_session

    sys.path.insert(0, str(ROOT / "jobs"))
    import predict

    data = Path(data_dir)
    spark = SparkSession.builder.remote(url).getOrCreate()
    try:
        blocks, d = read_blocks(spark, str(data / "ranked.svm"), "libsvm")
        assert isinstance(blocks, FrameRDD) and d == 4
        X, y, ids = _collected(blocks)
        (data / "bad.svm").write_text("1 qid:1 1:1\n\n# c\n-1 qid:3 qid:4 1:1\n")
        try:
            read_blocks(spark, str(data / "bad.svm"), "libsvm")
            refused = ""
        except DataFormatError as error:
            refused = str(error)
        np.savez(Path(out_dir) / "connect.npz", X=X, y=y, ids=ids, refused=refused)
    finally:
        stop_session(spark)
    assert predict.main(["--master", url, "--model", str(data / "binary"),
                         "--data", str(data / "ranked.svm"), "--format", "libsvm",
                         "--out", str(Path(out_dir) / "out_connect")]) == 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    connect_client(*sys.argv[1:])
