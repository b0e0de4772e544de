"""Feature names through the Spark doors: the training job keeps the training columns' names
and types in the model, and every door that scores named rows (sodm-predict on Parquet and CSV,
the job's --test-data, SODMClassificationModel.transform) takes them by name: reordered columns
give the predictions of the original order, an extra column is left out and named in one line,
a missing one is refused naming it. Inputs whose files disagree are refused before any work,
and the earlier model stays. Each case is checked against the same rows in their original order
(the model's own predictions of the NumPy rows), not only by its exit code."""
import json
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sodm_spark.models.expansion import KernelExpansion

from conftest import make_problem

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "jobs"))
import predict  # noqa: E402
import train_sodm  # noqa: E402

NAMES = [f"x{i}" for i in range(6)]
REVERSED = NAMES[::-1]


def _table(X, y, columns):
    frame = pd.DataFrame(X, columns=NAMES)
    frame["label"] = y
    return frame[columns]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A model trained by the job on Parquet columns x0..x5 and a label, and its rows."""
    root = tmp_path_factory.mktemp("named")
    X, y = make_problem(m=300, d=6, seed=41)
    y = (y > 0).astype(np.int64)
    _table(X, y, NAMES + ["label"]).to_parquet(root / "train.parquet")
    return root, X, y


@pytest.fixture(scope="module")
def model_dir(spark, trained):
    root, X, y = trained
    _table(X, y, REVERSED + ["label"]).to_parquet(root / "test-reversed.parquet")
    assert train_sodm.main(["--data", str(root / "train.parquet"), "--format", "parquet",
                            "--levels", "1", "--gamma", "0.2", "--model-out",
                            str(root / "model"), "--test-data",
                            str(root / "test-reversed.parquet"), "--metrics-out",
                            str(root / "metrics.json")]) == 0
    return root / "model"


def _predictions(out) -> np.ndarray:
    return pd.read_parquet(out).sort_values("row_id")["prediction"].to_numpy()


def _exit_line(call) -> str:
    with pytest.raises(SystemExit) as raised:
        call()
    return str(raised.value.code)


def test_the_job_keeps_the_training_columns_names_and_types(model_dir, trained):
    _, X, y = trained
    model = KernelExpansion.load(model_dir)
    assert model.feature_names == tuple(NAMES)
    assert model.feature_types == ("double",) * 6
    # --test-data with its columns reversed was scored by name: the model's own accuracy
    metrics = json.loads((trained[0] / "metrics.json").read_text())
    assert metrics["test_accuracy"] == pytest.approx(np.mean(model.predict(X) == y))


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_predict_takes_reordered_extra_and_missing_columns_by_name(model_dir, trained, fmt,
                                                                   tmp_path, capsys):
    _, X, y = trained
    model = KernelExpansion.load(model_dir)
    expected = model.predict(X)
    # the reversed columns read by position would score other rows: the test can fail
    assert np.mean(model.predict(X[:, ::-1]) != expected) > 0.1

    def write(frame, name):
        path = tmp_path / f"{name}.{fmt}"
        if fmt == "parquet":
            frame.to_parquet(path)
        else:
            frame.to_csv(path, index=False)
        return path

    def scored(path):
        out = tmp_path / f"out-{path.stem}"
        assert predict.main(["--model", str(model_dir), "--data", str(path), "--format", fmt,
                             "--out", str(out)]) == 0
        return _predictions(out)

    reversed_path = write(_table(X, y, REVERSED + ["label"]), "reversed")
    np.testing.assert_array_equal(scored(reversed_path), expected)
    extra = _table(X, y, ["label"] + NAMES)
    extra.insert(3, "unused", np.arange(len(y), dtype=float))
    capsys.readouterr()
    np.testing.assert_array_equal(scored(write(extra, "extra")), expected)
    said = [line for line in capsys.readouterr().out.splitlines() if "left out" in line]
    assert len(said) == 1 and "'unused'" in said[0] and "not trained on" in said[0]
    missing = write(_table(X, y, ["x0", "x1", "x2", "x4", "x5", "label"]), "missing")
    line = _exit_line(lambda: predict.main(["--model", str(model_dir), "--data", str(missing),
                                            "--format", fmt, "--out",
                                            str(tmp_path / "never")]))
    assert "no column 'x3'" in line and "trained on" in line
    assert not (tmp_path / "never").exists()


def test_training_refuses_parquet_files_that_disagree_and_keeps_the_earlier_model(
        spark, model_dir, trained, tmp_path):
    root, X, y = trained
    folder = tmp_path / "mixed"
    folder.mkdir()
    _table(X[:150], y[:150], NAMES + ["label"]).to_parquet(folder / "part-0.parquet")
    wider = _table(X[150:], y[150:], NAMES + ["label"])
    wider["x6"] = 1.0
    wider.to_parquet(folder / "part-1.parquet")
    before = {name: (model_dir / name).stat().st_mtime_ns for name in os.listdir(model_dir)}
    line = _exit_line(lambda: train_sodm.main(["--data", str(folder), "--format", "parquet",
                                               "--levels", "1", "--gamma", "0.2",
                                               "--model-out", str(model_dir)]))
    assert "part-1.parquet" in line and "'x6'" in line and "same columns" in line
    assert {name: (model_dir / name).stat().st_mtime_ns
            for name in os.listdir(model_dir)} == before
    # a type that differs is named too
    retyped = _table(X[150:], y[150:], NAMES + ["label"]).astype({"x2": "float32"})
    retyped.to_parquet(folder / "part-1.parquet")
    line = _exit_line(lambda: train_sodm.main(["--data", str(folder), "--format", "parquet",
                                               "--levels", "1", "--gamma", "0.2"]))
    assert "'x2'" in line and "types differ" in line
    # the same columns in another order are read by name: accepted
    _table(X[150:], y[150:], REVERSED + ["label"]).to_parquet(folder / "part-1.parquet")
    assert train_sodm.main(["--data", str(folder), "--format", "parquet", "--levels", "1",
                            "--gamma", "0.2", "--model-out", str(tmp_path / "m")]) == 0


def test_csv_files_whose_headers_differ_are_refused_by_training_and_scoring(spark, model_dir,
                                                                          trained, tmp_path):
    _, X, y = trained
    folder = tmp_path / "csv"
    folder.mkdir()
    _table(X[:150], y[:150], NAMES + ["label"]).to_csv(folder / "a.csv", index=False)
    _table(X[150:], y[150:], REVERSED + ["label"]).to_csv(folder / "b.csv", index=False)
    line = _exit_line(lambda: train_sodm.main(["--data", str(folder), "--format", "csv",
                                               "--levels", "1", "--gamma", "0.2"]))
    assert "b.csv" in line and "another order" in line
    line = _exit_line(lambda: predict.main(["--model", str(model_dir), "--data", str(folder),
                                            "--format", "csv", "--out", str(tmp_path / "o")]))
    assert "b.csv" in line and "same columns" in line


def test_predict_refuses_parquet_files_that_disagree(spark, model_dir, trained, tmp_path):
    _, X, y = trained
    folder = tmp_path / "mixed"
    folder.mkdir()
    _table(X[:150], y[:150], NAMES + ["label"]).to_parquet(folder / "a.parquet")
    _table(X[150:], y[150:], NAMES[:5] + ["label"]).to_parquet(folder / "b.parquet")
    line = _exit_line(lambda: predict.main(["--model", str(model_dir), "--data", str(folder),
                                            "--out", str(tmp_path / "o")]))
    assert "b.parquet" in line and "lacks column(s) 'x5'" in line
    assert not (tmp_path / "o").exists()


def test_train_takes_a_named_vector_column_and_named_feature_columns(spark, trained, tmp_path):
    from pyspark.ml.feature import VectorAssembler

    root, X, y = trained
    frame = spark.createDataFrame(_table(X, y, NAMES + ["label"]))
    assembled = VectorAssembler(inputCols=NAMES, outputCol="vec").transform(frame)
    assembled.select("vec", F_col_as(assembled, "label", "target")).write.parquet(
        str(tmp_path / "vec.parquet"))
    assert train_sodm.main(["--data", str(tmp_path / "vec.parquet"), "--format", "parquet",
                            "--features-col", "vec", "--label-col", "target", "--levels", "1",
                            "--gamma", "0.2", "--model-out", str(tmp_path / "vec-model")]) == 0
    # the vector's ML attributes name its elements: the model keeps them
    by_vector = KernelExpansion.load(tmp_path / "vec-model")
    assert by_vector.feature_names == tuple(NAMES)
    # a subset of the columns, by name and in the order given
    assert train_sodm.main(["--data", str(root / "train.parquet"), "--format", "parquet",
                            "--features-col", "x4,x0,x2", "--levels", "1", "--gamma", "0.2",
                            "--model-out", str(tmp_path / "subset")]) == 0
    subset = KernelExpansion.load(tmp_path / "subset")
    assert subset.feature_names == ("x4", "x0", "x2")
    out = tmp_path / "subset-out"
    assert predict.main(["--model", str(tmp_path / "subset"), "--data",
                         str(root / "train.parquet"), "--out", str(out)]) == 0
    np.testing.assert_array_equal(_predictions(out), subset.predict(X[:, [4, 0, 2]]))


def F_col_as(frame, name, alias):
    return frame[name].alias(alias)


def test_column_flags_are_refused_for_libsvm_and_the_built_in_data(tmp_path):
    assert "LIBSVM rows have no named columns" in _exit_line(
        lambda: train_sodm.main(["--data", str(tmp_path / "x.svm"), "--features-col", "a"]))
    assert "no --data was given" in _exit_line(
        lambda: train_sodm.main(["--label-col", "y"]))


def test_sodm_classifier_transform_takes_vector_elements_and_columns_by_name(spark, trained):
    from pyspark.ml.feature import VectorAssembler

    from sodm_spark import SODMClassifier

    _, X, y = trained
    frame = spark.createDataFrame(_table(X, y, NAMES + ["label"]).assign(
        row=np.arange(len(y))))
    assembled = VectorAssembler(inputCols=NAMES, outputCol="features").transform(frame)
    model = SODMClassifier(levels=1, gamma=0.2, autoStop=False).fit(assembled)
    assert model.expansion.feature_names == tuple(NAMES)
    expected = model.expansion.predict(X)

    def predictions(df):
        return np.array([r["prediction"] for r in
                         model.transform(df).orderBy("row").select("prediction").collect()])

    np.testing.assert_array_equal(predictions(assembled), expected)
    reversed_vector = VectorAssembler(inputCols=REVERSED, outputCol="features").transform(frame)
    np.testing.assert_array_equal(predictions(reversed_vector), expected)
    # no vector column: the named columns, in any order
    np.testing.assert_array_equal(predictions(frame.select(*REVERSED, "label", "row")),
                                  expected)
    with pytest.warns(UserWarning, match="'unused'"):
        got = predictions(frame.withColumn("unused", frame["x0"] * 0.0))
    np.testing.assert_array_equal(got, expected)
    with pytest.raises(ValueError, match="no column 'x3'"):
        model.transform(frame.drop("x3"))
    short = VectorAssembler(inputCols=NAMES[:5], outputCol="features").transform(frame)
    with pytest.raises(ValueError, match="no column 'x5'"):
        model.transform(short)


def _connect_run(module: str, master: str, argv: list[str], cwd: Path):
    """A job run against a Spark Connect server as a user runs it: (exit code, output)."""
    import subprocess

    from conftest import job_env

    done = subprocess.run([sys.executable, "-m", module, "--master", master, *argv],
                          env=job_env(PYSPARK_PYTHON=sys.executable), cwd=cwd,
                          capture_output=True, text=True, timeout=600)
    return done.returncode, done.stdout + done.stderr


@pytest.mark.skipif(__import__("importlib").util.find_spec("grpc") is None,
                    reason="pyspark[connect] is not installed")
def test_on_spark_connect_columns_are_taken_by_name_and_disagreeing_files_refused(
        model_dir, trained, connect_url, tmp_path):
    root, X, y = trained
    model = KernelExpansion.load(model_dir)
    _table(X, y, REVERSED + ["label"]).to_parquet(tmp_path / "reversed.parquet")
    code, said = _connect_run("sodm_spark.jobs.predict", connect_url,
                              ["--model", str(model_dir), "--data",
                               str(tmp_path / "reversed.parquet"), "--out",
                               str(tmp_path / "out")], tmp_path)
    assert code == 0, said[-2000:]
    np.testing.assert_array_equal(_predictions(tmp_path / "out"), model.predict(X))
    folder = tmp_path / "mixed"
    folder.mkdir()
    _table(X[:150], y[:150], NAMES + ["label"]).to_parquet(folder / "a.parquet")
    _table(X[150:], y[150:], NAMES + ["label"]).assign(x6=1.0).to_parquet(folder / "b.parquet")
    code, said = _connect_run("sodm_spark.jobs.train_sodm", connect_url,
                              ["--data", str(folder), "--format", "parquet", "--levels", "1",
                               "--gamma", "0.2", "--model-out", str(tmp_path / "m")], tmp_path)
    assert code == 5 and "b.parquet" in said and "'x6'" in said, said[-2000:]
    assert "Traceback" not in said and not (tmp_path / "m").exists()
    # CSV files whose headers differ: Spark's own header check, as one line
    csv = tmp_path / "csv"
    csv.mkdir()
    _table(X[:150], y[:150], NAMES + ["label"]).to_csv(csv / "a.csv", index=False)
    _table(X[150:], y[150:], REVERSED + ["label"]).to_csv(csv / "b.csv", index=False)
    code, said = _connect_run("sodm_spark.jobs.train_sodm", connect_url,
                              ["--data", str(csv), "--format", "csv", "--levels", "1",
                               "--gamma", "0.2"], tmp_path)
    assert code == 5 and "same columns" in said and "Traceback" not in said, said[-2000:]


def test_the_in_process_fit_keeps_a_frame_s_names_and_scores_frames_by_them(trained):
    from sodm_spark.spark.train import fit_in_process

    _, X, y = trained
    frame = _table(X, y, NAMES)
    test = (_table(X, y, REVERSED), y)
    fit = fit_in_process(frame, y, cores=2, test=test, levels=1, gamma=0.2, lam=100.0).fit
    model = fit.model
    assert model.feature_names == tuple(NAMES)
    assert model.feature_types == ("float64",) * 6
    expected = model.predict(X)
    assert fit.test_accuracy == pytest.approx(np.mean(expected == y))
    np.testing.assert_array_equal(model.predict(_table(X, y, REVERSED)), expected)
    with pytest.warns(UserWarning, match="'label'"):
        np.testing.assert_array_equal(model.predict(_table(X, y, ["label"] + NAMES)), expected)
    with pytest.raises(ValueError, match="no column 'x0'"):
        model.predict(_table(X, y, NAMES[1:]))
    # arrays stay positional
    np.testing.assert_array_equal(model.predict(X[:, ::-1]),
                                  model.predict(_table(X[:, ::-1], y, NAMES)))


def test_saved_names_are_read_back_and_damaged_ones_refused(trained, tmp_path):
    from sodm_spark.core.kernels import Kernel
    from sodm_spark.data.storage import current_version, store_for

    _, X, _ = trained
    model = KernelExpansion(X[:5], np.ones((5, 1)), Kernel.create("rbf", 0.5),
                            np.array([0, 1])).with_features(NAMES, ["double"] * 6)
    model.save(tmp_path / "m")
    again = KernelExpansion.load(tmp_path / "m")
    assert again.feature_names == tuple(NAMES) and again.feature_types == ("double",) * 6
    folder = Path(current_version(store_for(str(tmp_path / "m")), str(tmp_path / "m"),
                                  "metadata.json"))
    metadata = json.loads((folder / "metadata.json").read_text())
    metadata["feature_names"] = NAMES[:5]
    (folder / "metadata.json").write_text(json.dumps(metadata))
    with pytest.raises(ValueError, match="feature_names is not a list of 6 strings"):
        KernelExpansion.load(tmp_path / "m")
    with pytest.raises(ValueError, match="more than once"):
        model.with_features(["a"] * 6)
