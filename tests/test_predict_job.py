"""jobs/predict.py and the float32 scoring path against float64 model.predict (issue [12])."""
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from sklearn.datasets import dump_svmlight_file

from sodm_spark import ODMClassifier
from sodm_spark.kernels import Kernel
from sodm_spark.model import KernelExpansion
from sodm_spark.scoring import predictions, raw_scores

from conftest import make_problem

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "jobs"))
import predict  # noqa: E402


def test_float32_scores_give_float64_predictions_also_at_the_boundary():
    rng = np.random.default_rng(4)
    sv, coef = rng.normal(size=(300, 6)), rng.normal(size=(300, 1))
    kernel = Kernel.create("rbf", 0.2)
    model = KernelExpansion(sv, coef, kernel, np.array([0.0, 1.0]), intercept=np.array([0.3]))
    X = rng.normal(size=(2000, 6))
    f = model.decision_function(X)
    # the intercept moved so that row 0 lies on the boundary: its float32 sign is a coin toss
    X_edge = X[:50]
    shifted = KernelExpansion(sv, coef, kernel, model.classes, intercept=np.array([0.3]) - f[:1])
    scores, rescored = raw_scores(X, sv, coef, kernel, model.intercept)
    np.testing.assert_allclose(scores[:, 0], f, rtol=0, atol=1e-4 * np.abs(coef).sum())
    assert np.array_equal(predictions(scores, model.classes), model.predict(X))
    edge_scores, edge_rescored = raw_scores(X_edge, sv, coef, kernel, shifted.intercept)
    assert edge_rescored >= 1  # row 0 sits exactly on the boundary
    assert np.array_equal(predictions(edge_scores, model.classes), shifted.predict(X_edge))
    assert rescored < 2000  # most rows are far from the boundary: float32 only


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    X, y = make_problem(m=400, d=4, seed=71)
    ODMClassifier(gamma=0.5, lam=100.0).fit(X, np.where(y > 0, 7.0, 3.0)).model_.save(
        root / "binary")
    rng = np.random.default_rng(2)
    y3 = rng.integers(0, 3, size=400).astype(float)
    X3 = X + y3[:, None]  # three shifted copies of the cloud
    ODMClassifier(gamma=0.5, lam=100.0).fit(X3, y3).model_.save(root / "three")
    return root


def read_output(path):
    table = pq.read_table(str(path)).to_pandas()
    return table.sort_values(by=table.columns[0]).reset_index(drop=True)


@pytest.mark.parametrize("name", ["binary", "three"])
def test_parquet_with_a_key_column_is_scored_as_model_predict(spark, models, tmp_path, name):
    from pyspark.ml.linalg import Vectors

    model = KernelExpansion.load(models / name)
    X, _ = make_problem(m=500, d=4, seed=72)
    rows = [(int(1000 + i), Vectors.dense(x)) for i, x in enumerate(X)]
    spark.createDataFrame(rows, ["id", "features"]).repartition(3).write.parquet(
        str(tmp_path / "in.parquet"))
    assert predict.main(["--model", str(models / name), "--data", str(tmp_path / "in.parquet"),
                         "--out", str(tmp_path / "out"), "--key-col", "id"]) == 0
    out = read_output(tmp_path / "out")
    assert list(out.columns) == ["id", "prediction", "rawPrediction"]
    assert list(out["id"]) == list(range(1000, 1500))
    np.testing.assert_array_equal(out["prediction"].to_numpy(), model.predict(X))
    raw = np.stack(out["rawPrediction"].to_numpy())
    f = model.decision_function(X)
    expected = np.stack([-f, f], axis=1) if f.ndim == 1 else f
    np.testing.assert_allclose(raw, expected, rtol=0, atol=1e-4 * np.abs(model.coef).sum())
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]


def test_csv_columns_and_libsvm_give_the_same_predictions(spark, models, tmp_path):
    model = KernelExpansion.load(models / "binary")
    X, y = make_problem(m=300, d=4, seed=73)
    header = "label,a,b,c,d\n"
    (tmp_path / "in.csv").write_text(header + "".join(
        f"{label:g}," + ",".join(repr(float(v)) for v in row) + "\n" for row, label in zip(X, y)))
    dump_svmlight_file(X, y, str(tmp_path / "in.svm"), zero_based=False)
    for fmt, data in (("csv", "in.csv"), ("libsvm", "in.svm")):
        assert predict.main(["--model", str(models / "binary"), "--data", str(tmp_path / data),
                             "--format", fmt, "--out", str(tmp_path / f"out_{fmt}")]) == 0
        out = read_output(tmp_path / f"out_{fmt}")
        assert list(out.columns) == ["row_id", "prediction", "rawPrediction"]
        np.testing.assert_array_equal(out["prediction"].to_numpy(), model.predict(X))


def test_wrong_feature_counts_and_an_existing_output_are_refused(spark, models, tmp_path):
    from pyspark.ml.linalg import Vectors

    X, _ = make_problem(m=20, d=5, seed=74)
    spark.createDataFrame([(Vectors.dense(x),) for x in X], ["features"]).write.parquet(
        str(tmp_path / "wide.parquet"))
    with pytest.raises(SystemExit) as raised:
        predict.main(["--model", str(models / "binary"), "--data", str(tmp_path / "wide.parquet"),
                      "--out", str(tmp_path / "out")])
    assert "5 features" in str(raised.value.code) and "trained on 4" in str(raised.value.code)
    assert not (tmp_path / "out").exists()
    (tmp_path / "taken").mkdir()
    with pytest.raises(SystemExit) as raised:
        predict.main(["--model", str(models / "binary"), "--data", str(tmp_path / "wide.parquet"),
                      "--out", str(tmp_path / "taken")])
    assert "exists; pass --overwrite" in str(raised.value.code)
    with pytest.raises(SystemExit) as raised:
        predict.main(["--model", str(tmp_path / "nope"), "--data", "x", "--out",
                      str(tmp_path / "o")])
    assert "no such directory" in str(raised.value.code)


def test_the_pyspark_model_transforms_and_compresses_through_the_same_scoring(spark):
    from pyspark.ml.linalg import Vectors

    from sodm_spark.ml import SODMClassificationModel

    X, y = make_problem(m=300, d=4, seed=75)
    expansion = ODMClassifier(gamma=0.5, lam=100.0).fit(X, y).model_
    model = SODMClassificationModel(expansion)
    frame = spark.createDataFrame([(Vectors.dense(x),) for x in X], ["features"])
    rows = model.transform(frame).select("prediction", "rawPrediction").collect()
    np.testing.assert_array_equal([r["prediction"] for r in rows], expansion.predict(X))
    small = model.compress(40)
    assert small.expansion.support_vectors.shape[0] == 40
    assert small.getRawPredictionCol() == model.getRawPredictionCol()
    predicted = [r["prediction"] for r in small.transform(frame).collect()]
    np.testing.assert_array_equal(predicted, small.expansion.predict(X))


def test_a_missing_feature_value_is_refused_naming_the_row(spark, models, tmp_path):
    X, _ = make_problem(m=30, d=4, seed=76)
    lines = ["a,b,c,d"] + [",".join(repr(float(v)) for v in row) for row in X]
    lines[8] = "0.5,,1.0,2.0"  # row 7 has no value in column b
    (tmp_path / "gap.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(SystemExit) as raised:
        predict.main(["--model", str(models / "binary"), "--data", str(tmp_path / "gap.csv"),
                      "--format", "csv", "--out", str(tmp_path / "out")])
    assert "row 7" in str(raised.value.code) and "missing, NaN or infinite" in str(raised.value.code)
    assert not (tmp_path / "out").exists()
