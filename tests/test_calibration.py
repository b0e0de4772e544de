"""Platt's sigmoid (sodm_spark.models.calibration) against scikit-learn's own fit of it and a
brute-force minimization of the same objective, on decision values of real data (scikit-learn's
bundled breast cancer and digits sets) held out from training."""
import numpy as np
import pytest
from scipy.optimize import minimize
from sklearn.calibration import _sigmoid_calibration
from sklearn.datasets import load_breast_cancer, load_digits
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import MinMaxScaler
from sklearn.svm import SVC

from sodm_spark.models.calibration import SigmoidCalibration, _objective, fit_sigmoid


def _held_out_scores(X, y, seed=0):
    """Decision values of an RBF SVC on rows it did not see, and their labels."""
    X = MinMaxScaler().fit_transform(X)
    X_train, X_held, y_train, y_held = train_test_split(X, y, test_size=0.4, random_state=seed,
                                                        stratify=y)
    model = SVC(kernel="rbf", C=1.0).fit(X_train, y_train)
    return model.decision_function(X_held), y_held


def _targets(positive):
    n_pos = positive.sum()
    n_neg = positive.size - n_pos
    return np.where(positive, (n_pos + 1.0) / (n_pos + 2.0), 1.0 / (n_neg + 2.0))


def test_the_sigmoid_is_platt_s_as_scikit_learn_and_a_brute_force_minimum_find_it():
    scores, y = _held_out_scores(*load_breast_cancer(return_X_y=True))
    positive = y == 1
    a, b = fit_sigmoid(scores, positive)
    ref_a, ref_b = _sigmoid_calibration(scores, y)
    t = _targets(positive)
    brute = minimize(lambda ab: _objective(ab[0], ab[1], scores, t), x0=[0.0, 0.0],
                     method="Nelder-Mead", options={"xatol": 1e-10, "fatol": 1e-12,
                                                     "maxiter": 20000})
    ours = _objective(a, b, scores, t)
    assert ours <= _objective(ref_a, ref_b, scores, t) + 1e-7
    assert ours <= brute.fun + 1e-7
    np.testing.assert_allclose([a, b], brute.x, rtol=1e-4, atol=1e-4)
    ours_p = SigmoidCalibration(np.array([a]), np.array([b])).probabilities(scores)[:, 1]
    ref_p = 1.0 / (1.0 + np.exp(ref_a * scores + ref_b))
    assert np.max(np.abs(ours_p - ref_p)) < 1e-4
    assert a < 0  # a larger decision value is a likelier positive


def test_a_separable_slice_keeps_a_finite_slope():
    """Platt's smoothed targets: even perfectly separated scores give finite (A, B) and
    probabilities strictly inside (0, 1)."""
    scores = np.array([-3.0, -2.0, -1.5, 1.0, 2.0, 4.0])
    a, b = fit_sigmoid(scores, scores > 0)
    p = SigmoidCalibration(np.array([a]), np.array([b])).probabilities(scores)
    assert np.isfinite(a) and np.isfinite(b) and a < 0
    assert np.all((p > 0) & (p < 1)) and np.allclose(p.sum(axis=1), 1.0)
    assert np.all(np.diff(p[:, 1]) > 0)


def test_one_vs_rest_sigmoids_are_normalized_as_scikit_learn_combines_them():
    X, y = load_digits(return_X_y=True)
    keep = y < 4  # four classes
    X, y = MinMaxScaler().fit_transform(X[keep]), y[keep]
    X_train, X_held, y_train, y_held = train_test_split(X, y, test_size=0.5, random_state=1,
                                                        stratify=y)
    scores = SVC(kernel="rbf", C=1.0, decision_function_shape="ovr").fit(
        X_train, y_train).decision_function(X_held)
    calibration = SigmoidCalibration.fit(scores, y_held, 4)
    p = calibration.probabilities(scores)
    per_class = np.column_stack([
        1.0 / (1.0 + np.exp(a * scores[:, c] + b))
        for c, (a, b) in enumerate(_sigmoid_calibration(scores[:, c], y_held == c)
                                   for c in range(4))])
    np.testing.assert_allclose(p, per_class / per_class.sum(axis=1, keepdims=True), atol=1e-4)
    assert np.allclose(p.sum(axis=1), 1.0)
    assert np.mean(p.argmax(axis=1) == y_held) > 0.95


def test_a_calibration_travels_as_plain_numbers_and_refuses_what_it_cannot_read():
    scores, y = _held_out_scores(*load_breast_cancer(return_X_y=True))
    calibration = SigmoidCalibration.fit(scores, y, 2)
    back = SigmoidCalibration.from_dict(calibration.to_dict())
    np.testing.assert_array_equal(back.probabilities(scores), calibration.probabilities(scores))
    with pytest.raises(ValueError, match="unknown calibration method 'isotonic'"):
        SigmoidCalibration.from_dict({"method": "isotonic"})
    with pytest.raises(ValueError, match="one label per score"):
        fit_sigmoid(scores, y[:-1] == 1)
    with pytest.raises(ValueError, match="finite"):
        fit_sigmoid(np.array([0.0, np.nan]), np.array([True, False]))
    with pytest.raises(ValueError, match="one score column each"):
        SigmoidCalibration.fit(scores, y, 3)


def test_a_model_calibrated_on_held_out_rows_gives_probabilities_and_keeps_them_when_saved(
        tmp_path):
    """KernelExpansion.calibrated on rows an ODM did not train on: probabilities that sum to
    one, agree with the labels' decisions, beat the constant prior's log-loss on other held-out
    rows, and come back from a saved model; an uncalibrated model says how to get them."""
    from sodm_spark.estimators.sklearn import ODMClassifier
    from sodm_spark.models.expansion import KernelExpansion

    X, y = load_breast_cancer(return_X_y=True)
    X = MinMaxScaler().fit_transform(X)
    X_train, X_rest, y_train, y_rest = train_test_split(X, y, test_size=0.5, random_state=2,
                                                        stratify=y)
    X_cal, X_test, y_cal, y_test = train_test_split(X_rest, y_rest, test_size=0.5,
                                                    random_state=3, stratify=y_rest)
    model = ODMClassifier(kernel="rbf", lam=1e5, theta=0.1, v=0.2).fit(X_train, y_train).model_
    with pytest.raises(ValueError, match="no calibration"):
        model.predict_proba(X_test)
    calibrated = model.calibrated(X_cal, y_cal)
    p = calibrated.predict_proba(X_test)
    assert p.shape == (len(y_test), 2) and np.allclose(p.sum(axis=1), 1.0)
    decided = np.asarray(model.classes)[p.argmax(axis=1)]
    assert np.mean(decided == model.predict(X_test)) > 0.97
    prior = np.mean(y_cal)
    log_loss = -np.mean(np.log(p[np.arange(len(y_test)), y_test]))
    prior_loss = -np.mean(np.where(y_test == 1, np.log(prior), np.log(1 - prior)))
    assert log_loss < 0.5 * prior_loss
    calibrated.save(tmp_path / "model")
    np.testing.assert_array_equal(KernelExpansion.load(tmp_path / "model").predict_proba(X_test),
                                  p)
    with pytest.raises(ValueError, match="row 0 has label 7"):
        model.calibrated(X_cal[:2], np.array([7, 0]))


@pytest.mark.parametrize("n_classes", [2, 3])
def test_sodm_models_are_calibrated_on_the_validation_slice_and_transform_gives_probabilities(
        spark, tmp_path, n_classes):
    """SODMClassifier: the model carries Platt's sigmoids fitted on its own validation slice
    (the held-out rows the fit scored), transform's probability column is
    KernelExpansion.predict_proba on the same rows, and a saved model keeps it."""
    from sodm_spark.estimators.ml import SODMClassificationModel, SODMClassifier

    X, y = load_digits(return_X_y=True)
    keep = y < n_classes if n_classes > 2 else y < 3
    X, y = X[keep], (y[keep] % 2 if n_classes == 2 else y[keep]).astype(float)
    rows = [(float(label), row.tolist()) for row, label in zip(X, y)]
    df = spark.createDataFrame(rows, "label double, features array<double>")
    model = SODMClassifier(levels=1, seed=0, validationFraction=0.2).fit(df)
    calibration = model.expansion.calibration
    assert calibration is not None and calibration.slopes.size == (1 if n_classes == 2 else 3)
    assert np.all(calibration.slopes < 0)
    scored = model.transform(df).select("label", "prediction", "probability").toPandas()
    p = np.stack([v.toArray() for v in scored["probability"]])
    # transform scores with float32 kernel blocks (float64 only near the boundary)
    np.testing.assert_allclose(p, model.expansion.predict_proba(X), atol=1e-5)
    assert np.allclose(p.sum(axis=1), 1.0)
    assert np.mean(model.classes[p.argmax(axis=1)] == scored["prediction"]) > 0.97
    model.write().overwrite().save(str(tmp_path / "model"))
    back = SODMClassificationModel.load(str(tmp_path / "model"))
    np.testing.assert_array_equal(back.expansion.calibration.slopes, calibration.slopes)
    assert "probability" in back.transform(df).columns


def test_the_predict_job_writes_a_calibrated_model_s_probabilities(spark, tmp_path):
    """sodm-predict on a calibrated model: a probability column beside rawPrediction and
    prediction, KernelExpansion.predict_proba's values for the same rows."""
    import pandas as pd

    from sodm_spark.estimators.sklearn import ODMClassifier
    from sodm_spark.jobs import predict

    X, y = load_breast_cancer(return_X_y=True)
    X = MinMaxScaler().fit_transform(X)
    model = ODMClassifier(kernel="rbf", lam=1e5, theta=0.1, v=0.2).fit(X[:300], y[:300]).model_
    model = model.calibrated(X[300:450], y[300:450])
    model.save(tmp_path / "model")
    rows = [(float(label), row.tolist()) for row, label in zip(X[450:], y[450:])]
    spark.createDataFrame(rows, "label double, features array<double>").coalesce(1) \
        .write.parquet(str(tmp_path / "rows"))
    expected = model.predict_proba(X[450:])
    for precision, tolerance in (("float64", 1e-9), ("float32", 1e-3)):  # float32 kernels
        out = tmp_path / f"scores-{precision}"
        assert predict.main(["--model", str(tmp_path / "model"), "--data",
                             str(tmp_path / "rows"), "--out", str(out),
                             "--precision", precision]) == 0
        p = np.stack(pd.read_parquet(out).sort_values("row_id")["probability"].to_numpy())
        np.testing.assert_allclose(p, expected, atol=tolerance)
        assert np.allclose(p.sum(axis=1), 1.0)
