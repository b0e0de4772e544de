"""String columns of a Parquet table taken as they are: the training job encodes them inside the
model (core/categories.py; the reading tasks, spark/io/string_columns.py), and every door gives
the model's own scores: KernelExpansion on a pandas DataFrame, sodm-predict, the ONNX export
(string inputs), the MLflow flavor. The training rows' features are checked against
scikit-learn's encoders on the same rows and folds; values never seen in training are scored
as the encoding says and counted."""
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.preprocessing import OneHotEncoder, TargetEncoder

from sodm_spark.core.categories import (FOLDS, ONE_HOT, ONE_HOT_WEIGHT, SMOOTHING, TARGET,
                                        training_folds)
from sodm_spark.models.expansion import KernelExpansion
from sodm_spark.spark.io import read_blocks

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "jobs"))
import predict  # noqa: E402
import train_sodm  # noqa: E402

CARRIERS = ["AA", "B6", "DL", "UA"]
AIRPORTS = [f"A{k:02d}" for k in range(40)]


def _flights(n, seed, carriers=CARRIERS, airports=AIRPORTS):
    """Rows whose label depends on a carrier (4 levels: one-hot) and a destination (40 levels:
    target encoding) as much as on the numeric columns."""
    rng = np.random.default_rng(seed)
    carrier = rng.choice(carriers, size=n)
    dest = rng.choice(airports, size=n)
    distance = rng.uniform(100, 3000, size=n)
    hour = rng.integers(5, 23, size=n).astype(np.float64)
    late_dest = {a: (k % 3 == 0) for k, a in enumerate(AIRPORTS)}
    score = (np.isin(carrier, ["B6", "UA"]) * 1.0 + np.array([late_dest.get(d, 0) for d in dest])
             + (hour > 17) * 0.8 - 0.4 + rng.normal(0, 0.5, size=n))
    return pd.DataFrame({"distance": distance, "carrier": carrier, "hour": hour, "dest": dest,
                         "label": (score > 0.6).astype(np.int64)})


@pytest.fixture(scope="module")
def trained(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("categorical")
    train, test = _flights(1200, 1), _flights(300, 2)
    (root / "train").mkdir()
    train.iloc[:700].to_parquet(root / "train" / "part-0.parquet", row_group_size=200)
    train.iloc[700:].to_parquet(root / "train" / "part-1.parquet", row_group_size=200)
    test.to_parquet(root / "test.parquet")
    assert train_sodm.main(["--data", str(root / "train"), "--format", "parquet",
                            "--levels", "1", "--gamma", "0.3", "--model-out",
                            str(root / "model"),
                            "--test-data", str(root / "test.parquet"), "--metrics-out",
                            str(root / "metrics.json")]) == 0
    return root, train, test, KernelExpansion.load(root / "model")


def _features(frame):
    return frame.drop(columns=["label"])


def test_the_model_keeps_the_encoding_of_its_string_columns(trained):
    root, train, test, model = trained
    encoding = model.categories
    assert encoding is not None and encoding.numeric == ("distance", "hour")
    carrier, dest = encoding.columns
    assert (carrier.name, carrier.kind, carrier.levels) == ("carrier", ONE_HOT, tuple(CARRIERS))
    assert (dest.name, dest.kind, len(dest.levels)) == ("dest", TARGET, 40)
    assert model.feature_names == ("distance", "hour", "carrier=AA", "carrier=B6",
                                   "carrier=DL", "carrier=UA", "dest:1")
    # one-hot features scaled a numeric range apart: the min-max scale times 1/√2
    np.testing.assert_allclose(model.feature_scale[2:6], ONE_HOT_WEIGHT)
    accuracy = np.mean(model.predict(_features(test)) == test["label"].to_numpy())
    assert accuracy > 0.8 > max(test["label"].mean(), 1 - test["label"].mean())


@pytest.mark.parametrize("reader", ["tasks", "spark-sql"])
def test_the_training_rows_features_are_scikit_learns_encodings(spark, trained, reader,
                                                                tmp_path):
    from sodm_spark.spark.io import TableColumns

    root, train, _, model = trained
    path, columns = root / "train", TableColumns()
    if reader == "spark-sql":  # a weight column: Spark SQL reads, its tasks encode
        path, columns = tmp_path / "weighted", TableColumns(weight_col="w")
        path.mkdir()
        train.assign(w=1.0).to_parquet(path / "part-0.parquet", row_group_size=300)
    blocks, d, features = read_blocks(spark, str(path), "parquet", columns=columns,
                                      with_names=True)  # folds of seed 0, as the job's
    parts = blocks.collect()
    X = np.concatenate([b.X for b in parts])
    ids = np.concatenate([b.row_ids for b in parts])
    assert features.names == model.feature_names and d == 7
    np.testing.assert_array_equal(features.categories.columns[1].table,
                                  model.categories.columns[1].table)
    # the rows in the blocks' order, found by their distance (unique floats)
    order = pd.Index(train["distance"]).get_indexer(X[:, 0])
    assert (order >= 0).all()
    rows = train.iloc[order]
    np.testing.assert_array_equal(X[:, 1], rows["hour"])
    one_hot = OneHotEncoder(sparse_output=False).fit_transform(rows[["carrier"]])
    np.testing.assert_array_equal(X[:, 2:6], one_hot)
    folds = training_folds(ids, 0)
    splits = [(np.flatnonzero(folds != f), np.flatnonzero(folds == f)) for f in range(FOLDS)]
    target = TargetEncoder(smooth=SMOOTHING, cv=splits, target_type="binary")
    np.testing.assert_allclose(X[:, 6], target.fit_transform(rows[["dest"]],
                                                             rows["label"])[:, 0], rtol=1e-12)


def _with_unseen(test):
    frame = test.copy()
    frame.loc[frame.index[:5], "carrier"] = "ZZ"
    frame.loc[frame.index[3:9], "dest"] = "NEW"
    return frame


def test_pandas_rows_in_any_order_are_encoded_and_unseen_values_counted(trained):
    _, _, test, model = trained
    expected = model.decision_function(_features(test))
    shuffled = test[["dest", "hour", "carrier", "distance"]]
    np.testing.assert_array_equal(model.decision_function(shuffled), expected)
    with pytest.warns(UserWarning, match=r"5 in 'carrier', 6 in 'dest'"):
        scores = model.decision_function(_features(_with_unseen(test)))
    np.testing.assert_array_equal(scores[9:], expected[9:])
    # an unseen carrier is no carrier: the one-hot features all 0
    encoded = model.categories.encode(test[["distance", "hour"]].to_numpy()[:1],
                                      {"carrier": np.array(["ZZ"], dtype=object),
                                       "dest": test["dest"].to_numpy()[:1]})
    np.testing.assert_array_equal(encoded.X[0, 2:6], 0.0)
    np.testing.assert_allclose(scores[0], model.input_scores(model.inputs(encoded.X))[0])


def test_sodm_predict_gives_the_models_scores_and_counts_unseen_values(trained, tmp_path,
                                                                      capsys):
    root, _, test, model = trained
    frame = _with_unseen(test)
    frame["key"] = np.arange(len(frame))
    frame.to_parquet(tmp_path / "rows.parquet")
    out = tmp_path / "scored"
    assert predict.main(["--model", str(root / "model"), "--data", str(tmp_path / "rows.parquet"),
                         "--format", "parquet", "--key-col", "key", "--precision", "float64",
                         "--out", str(out)]) == 0
    assert "11 values of the string column(s) ['carrier', 'dest'] had not been seen" in \
        capsys.readouterr().out
    scored = pd.read_parquet(out).sort_values("key")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        expected = model.decision_function(_features(frame).drop(columns=["key"]))
    np.testing.assert_allclose(np.stack(scored["rawPrediction"])[:, 1], expected, rtol=1e-9,
                               atol=1e-9)
    np.testing.assert_array_equal(scored["prediction"], np.where(expected > 0, 1.0, 0.0))


def test_the_onnx_graph_takes_the_string_columns_as_inputs(trained):
    onnxruntime = pytest.importorskip("onnxruntime")
    from sodm_spark.models.onnx_export import to_onnx

    _, _, test, model = trained
    frame = _with_unseen(test)
    session = onnxruntime.InferenceSession(to_onnx(model).SerializeToString())
    assert [i.name for i in session.get_inputs()] == ["features", "carrier", "dest"]
    scores = session.run(["scores"], {
        "features": frame[["distance", "hour"]].to_numpy(np.float64),
        "carrier": frame["carrier"].to_numpy(dtype=object),
        "dest": frame["dest"].to_numpy(dtype=object)})[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        expected = model.decision_function(_features(frame))
    # float64 throughout: the graph's products round apart from numpy's by ~1e-12 of |f|
    assert np.abs(scores - expected).max() < 1e-10 * np.abs(expected).max()
    labels = session.run(["label"], {"features": frame[["distance", "hour"]].to_numpy(),
                                     "carrier": frame["carrier"].to_numpy(dtype=object),
                                     "dest": frame["dest"].to_numpy(dtype=object)})[0]
    np.testing.assert_array_equal(labels, np.where(expected > 0, 1, 0))


def test_the_mlflow_flavor_takes_the_input_columns_with_their_types(trained, tmp_path):
    pytest.importorskip("mlflow")
    import mlflow.pyfunc

    from sodm_spark import mlflow as flavor

    _, _, test, model = trained
    flavor.save_model(model, str(tmp_path / "mlflow"))
    loaded = mlflow.pyfunc.load_model(str(tmp_path / "mlflow"))
    inputs = loaded.metadata.get_input_schema()
    assert [(c.name, c.type.name) for c in inputs.inputs] == [
        ("distance", "double"), ("hour", "double"), ("carrier", "string"), ("dest", "string")]
    predicted = loaded.predict(test[["dest", "carrier", "hour", "distance"]])
    np.testing.assert_array_equal(predicted["prediction"].to_numpy(),
                                  model.predict(_features(test)))


def test_sodm_classifier_encodes_string_columns_and_transform_scores_as_its_model(spark,
                                                                                 trained):
    from sodm_spark.estimators.ml import SODMClassifier

    _, train, test, _ = trained
    fitted = SODMClassifier(levels=1, gamma=0.3, seed=0).fit(spark.createDataFrame(train))
    expansion = fitted.expansion
    assert expansion.categories is not None
    assert [c.kind for c in expansion.categories.columns] == [ONE_HOT, TARGET]
    np.testing.assert_allclose(expansion.feature_scale[2:6], ONE_HOT_WEIGHT)
    # the training rows as the job's reader encodes them: the same counts, the same model
    frame = _with_unseen(test).reset_index(drop=True)
    frame["key"] = np.arange(len(frame))
    scored = fitted.transform(spark.createDataFrame(frame.drop(columns=["label"])))
    rows = scored.select("key", "rawPrediction").toPandas().sort_values("key")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        expected = expansion.decision_function(_features(frame).drop(columns=["key"]))
    raw = np.stack(rows["rawPrediction"].map(lambda v: v.toArray()))[:, 1]
    # transform scores in float32 kernel blocks (boundary rows again in float64)
    assert np.abs(raw - expected).max() < 1e-3 * np.abs(expected).max()
    np.testing.assert_array_equal(np.sign(raw), np.sign(expected))


def test_the_scikit_learn_predictor_takes_the_input_columns(trained):
    from sodm_spark.estimators.sklearn import ODMClassifier

    root, _, test, model = trained
    predictor = ODMClassifier.load(root / "model")
    rows = test[["hour", "dest", "distance", "carrier"]]
    np.testing.assert_array_equal(predictor.predict(rows), model.predict(_features(test)))
    np.testing.assert_array_equal(predictor.decision_function(rows),
                                  model.decision_function(_features(test)))
