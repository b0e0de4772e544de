"""SODMClassifier as a pyspark.ml Estimator: Params, transform, Pipeline, CrossValidator, save/load."""
import numpy as np
import pytest
from pyspark.ml import Pipeline, PipelineModel
from pyspark.ml.evaluation import BinaryClassificationEvaluator
from pyspark.ml.feature import VectorAssembler
from pyspark.ml.linalg import Vectors
from pyspark.ml.tuning import CrossValidator, ParamGridBuilder

from sodm_spark import ODMClassifier, SODMClassificationModel, SODMClassifier

from conftest import make_problem


@pytest.fixture(scope="module")
def frames(spark):
    X, y = make_problem(m=300, d=4, seed=31)
    X_test, y_test = make_problem(m=120, d=4, seed=32)

    def frame(X, y):
        rows = [(Vectors.dense(x), float(label > 0)) for x, label in zip(X, y)]
        return spark.createDataFrame(rows, ["features", "label"])

    return frame(X, y), frame(X_test, y_test), X_test, y_test


def test_params_have_setters_getters_and_defaults():
    estimator = SODMClassifier(levels=2, lam=50.0)
    assert estimator.getLevels() == 2 and estimator.getLam() == 50.0
    assert estimator.getP() == 3 and estimator.getPartitioner() == "stratified"
    assert estimator.setTheta(0.3).getTheta() == 0.3
    assert estimator.setGamma("auto").getGamma() == "auto"
    assert estimator.setGamma(0.5).getGamma() == 0.5
    assert estimator.getFeaturesCol() == "features" and estimator.getRawPredictionCol() == "rawPrediction"
    assert estimator.getAutoStop() is True and estimator.getMinImprovement() == 0.002
    assert estimator.setAutoStop(False)._sodm_params().auto_stop is False
    assert estimator.setTimeBudget(60.0)._sodm_params().time_budget == 60.0
    assert estimator.getFitIntercept() is True and estimator.getKernelOffset() == 0.0
    assert estimator.setKernelOffset(1.0)._sodm_params().kernel_offset == 1.0


def test_every_param_of_the_table_is_a_constructor_keyword_with_its_default():
    """The constructor's keywords are the Params (keyword_only sets them), and each keyword's
    default is the Param's default (from SODMParams): none missing, none disagreeing."""
    import inspect

    from sodm_spark.estimators.ml_params import _PARAMS

    keywords = inspect.signature(SODMClassifier.__init__).parameters
    estimator = SODMClassifier()
    assert set(_PARAMS) <= set(keywords)
    for name in _PARAMS:
        default = keywords[name].default
        if default is not None:
            assert estimator.getOrDefault(name) == default, name
    assert SODMClassifier(inputMap="none")._sodm_params().input_map == "none"


def test_transform_matches_the_local_predictor_and_save_load(spark, frames, tmp_path):
    train, test, X_test, _ = frames
    model = SODMClassifier(gamma=0.3, lam=100.0, levels=1, p=2).fit(train)
    assert [entry["level"] for entry in model.levelStats] == [1, 0]
    assert model.stopReason == "reached stop level" and model.bestLevel in (1, 0)
    assert all("validation_accuracy" in entry for entry in model.levelStats)
    out = model.transform(test).collect()
    raw = np.array([row.rawPrediction.toArray() for row in out])
    local = model.toLocal()
    # float32 kernel blocks (jobs/predict.py's scoring); predictions are float64's
    np.testing.assert_allclose(raw[:, 1], local.decision_function(X_test), rtol=0,
                               atol=1e-4 * np.abs(model.expansion.coef).sum())
    np.testing.assert_allclose(raw[:, 0], -raw[:, 1])
    np.testing.assert_array_equal([row.prediction for row in out], local.predict(X_test))
    assert isinstance(local, ODMClassifier)

    model.write().overwrite().save(str(tmp_path / "model"))
    loaded = SODMClassificationModel.load(str(tmp_path / "model"))
    again = loaded.transform(test).collect()
    assert [row.prediction for row in again] == [row.prediction for row in out]
    assert loaded.getLam() == 100.0 and loaded.uid == model.uid
    assert not list((tmp_path / "model").rglob("*.pkl"))


def test_pipeline_and_cross_validator(spark, frames, tmp_path):
    train, test, _, y_test = frames
    columns = [f"x{j}" for j in range(4)]
    as_columns = lambda frame: frame.rdd.map(
        lambda row: tuple(float(v) for v in row.features) + (row.label,)).toDF(columns + ["label"])
    pipeline = Pipeline(stages=[VectorAssembler(inputCols=columns, outputCol="features"),
                                SODMClassifier(gamma=0.3, levels=1, p=2)])
    fitted = pipeline.fit(as_columns(train))
    fitted.write().overwrite().save(str(tmp_path / "pipeline"))
    reloaded = PipelineModel.load(str(tmp_path / "pipeline"))
    predictions = reloaded.transform(as_columns(test)).select("prediction").collect()
    accuracy = np.mean([row.prediction for row in predictions] == (y_test > 0).astype(float))
    assert accuracy > 0.7
    # a pipeline saved when the classes lived in sodm_spark.ml still loads (its metadata name
    # that class path; a rewritten file's checksum goes with it)
    renamed = 0
    for path in (tmp_path / "pipeline").rglob("part-*"):
        text = path.read_text()
        if "sodm_spark.estimators.ml." in text:
            path.write_text(text.replace("sodm_spark.estimators.ml.", "sodm_spark.ml."))
            path.with_name(f".{path.name}.crc").unlink(missing_ok=True)
            renamed += 1
    assert renamed >= 1
    old_path = PipelineModel.load(str(tmp_path / "pipeline"))
    assert old_path.transform(as_columns(test)).select("prediction").collect() == predictions

    estimator = SODMClassifier(gamma=0.3, levels=1, p=2)
    grid = ParamGridBuilder().addGrid(estimator.lam, [1.0, 100.0]).build()
    cv = CrossValidator(estimator=estimator, estimatorParamMaps=grid, numFolds=2, seed=3,
                        evaluator=BinaryClassificationEvaluator())
    cv_model = cv.fit(train)
    assert len(cv_model.avgMetrics) == 2 and all(0.5 < m <= 1.0 for m in cv_model.avgMetrics)
    assert isinstance(cv_model.bestModel, SODMClassificationModel)


def test_array_features_and_bad_input(spark, frames):
    train, _, _, _ = frames
    as_arrays = train.rdd.map(lambda row: (row.features.toArray().tolist(), row.label)) \
        .toDF(["features", "label"])
    model = SODMClassifier(gamma=0.3, levels=0).fit(as_arrays)
    assert model.transform(as_arrays).count() == 300
    with pytest.raises(ValueError, match="only one class"):
        SODMClassifier(levels=0).fit(train.filter("label > 0.5"))
    with pytest.raises(ValueError, match="p .* must be an integer >= 2"):
        SODMClassifier(p=1).fit(train)


def test_linear_kernel_fits_dsvrg_with_an_intercept(spark, tmp_path):
    from sodm_spark.data.datasets import make_linear
    X, y = make_linear(1500, 6, seed=9, centred=False)
    frame = spark.createDataFrame([(Vectors.dense(x), float(label > 0)) for x, label in zip(X, y)],
                                  ["features", "label"])
    model = SODMClassifier(kernel="linear", lam=100.0).fit(frame)
    assert model.getFitIntercept() is True and model.expansion.intercept is not None
    raw = np.array([row.rawPrediction.toArray()[1] for row in model.transform(frame).collect()])
    w, b = model.expansion.support_vectors[0], model.expansion.intercept[0]
    np.testing.assert_allclose(raw, X @ w + b, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(model.toLocal().decision_function(X), X @ w + b, rtol=1e-12)
    model.write().overwrite().save(str(tmp_path / "linear"))
    loaded = SODMClassificationModel.load(str(tmp_path / "linear"))
    assert loaded.expansion.intercept[0] == b
    plain = SODMClassifier(kernel="linear", lam=100.0, fitIntercept=False).fit(frame)
    assert plain.expansion.intercept is None
    accuracy = lambda m: np.mean(m.toLocal().predict(X) == (y > 0).astype(float))
    assert accuracy(model) >= accuracy(plain) + 0.01


def test_multi_class_columns_evaluator_cross_validator_and_save_load(spark, tmp_path):
    """Four classes: rawPrediction holds one score per class (the local model's), prediction
    the label of the largest; MulticlassClassificationEvaluator and CrossValidator work; the
    saved model predicts the same."""
    from pyspark.ml.evaluation import MulticlassClassificationEvaluator

    rng = np.random.default_rng(9)
    centres = rng.normal(scale=2.0, size=(4, 3))
    labels = rng.choice([2.0, 5.0, 7.0, 8.0], 400)
    X = centres[np.searchsorted([2.0, 5.0, 7.0, 8.0], labels)] + rng.normal(size=(400, 3))
    frame = lambda rows: spark.createDataFrame(
        [(Vectors.dense(x), float(label)) for x, label in rows], ["features", "label"])
    train, test = frame(zip(X[:300], labels[:300])), frame(zip(X[300:], labels[300:]))
    model = SODMClassifier(gamma=0.3, lam=100.0, levels=1, p=2).fit(train)
    out = model.transform(test).collect()
    raw = np.array([row.rawPrediction.toArray() for row in out])
    local = model.toLocal()
    assert raw.shape == (100, 4)
    np.testing.assert_allclose(raw, local.decision_function(X[300:]), rtol=0,  # float32 blocks
                               atol=1e-4 * np.abs(model.expansion.coef).sum(axis=0).max())
    predictions = np.array([row.prediction for row in out])
    np.testing.assert_array_equal(predictions, local.predict(X[300:]))
    np.testing.assert_array_equal(predictions, np.array([2.0, 5.0, 7.0, 8.0])[raw.argmax(1)])
    evaluator = MulticlassClassificationEvaluator(metricName="accuracy")
    accuracy = evaluator.evaluate(model.transform(test))
    assert accuracy == pytest.approx(np.mean(predictions == labels[300:])) and accuracy > 0.6

    model.write().overwrite().save(str(tmp_path / "model"))
    loaded = SODMClassificationModel.load(str(tmp_path / "model"))
    assert [row.prediction for row in loaded.transform(test).collect()] == list(predictions)

    estimator = SODMClassifier(gamma=0.3, levels=1, p=2)
    grid = ParamGridBuilder().addGrid(estimator.lam, [1.0, 100.0]).build()
    cv_model = CrossValidator(estimator=estimator, estimatorParamMaps=grid, numFolds=2, seed=3,
                              evaluator=evaluator).fit(train)
    assert len(cv_model.avgMetrics) == 2 and all(0.25 < m <= 1.0 for m in cv_model.avgMetrics)
    with pytest.raises(ValueError, match="DSVRG, a binary classifier"):
        SODMClassifier(kernel="linear").fit(train)


def test_max_sv_compresses_the_fit_as_the_jobs_flag_does(spark, frames):
    """maxSV and compressMethod reach the fit as the job's --max-sv and --compress-method: the
    same seeded fit through fit_sodm's options gives the same model, and an invalid value is
    refused when it is set."""
    from sodm_spark.spark.engine import context_of
    from sodm_spark.spark.io import dataframe_to_blocks
    from sodm_spark.spark.sodm.fit import FitOptions
    from sodm_spark.spark.train import fit_params, train

    train_df, _, X_test, _ = frames
    estimator = SODMClassifier(levels=1, gamma=0.5, lam=100.0, seed=2, maxSV=12,
                               compressMethod="largest")
    assert estimator.getMaxSV() == 12 and estimator.getCompressMethod() == "largest"
    model = estimator.fit(train_df)
    blocks, d = dataframe_to_blocks(train_df, "features", "label")
    direct = train(context_of(spark), blocks, d, fit_params(estimator._settings()),
                   level_options=FitOptions(max_sv=12, compress_method="largest")).fit
    np.testing.assert_array_equal(model.expansion.coef, direct.model.coef)
    assert direct.compression is not None and direct.compression["max_sv"] == 12
    uncompressed = SODMClassifier(levels=1, gamma=0.5, lam=100.0, seed=2, maxSV="none").fit(train_df)
    assert model.expansion.support_vectors.shape[0] <= \
        uncompressed.expansion.support_vectors.shape[0]
    with pytest.raises(TypeError, match="maxSV"):
        SODMClassifier(maxSV=0)
