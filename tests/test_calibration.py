"""Class probabilities (sodm_spark.models.calibration): Platt's sigmoid against scikit-learn's
own fit of it and a brute-force minimization of the same objective, the isotonic map against
scikit-learn's IsotonicRegression, on decision values of real data (scikit-learn's bundled
breast cancer and digits sets) held out from training; saved models of both methods;
ODMClassifier(probability=True) against out-of-fold decision values recomputed here; the
probability columns of SODMClassifier, DSVRG and the predict job."""
import json

import numpy as np
import pytest
from scipy.optimize import minimize
from sklearn.calibration import _sigmoid_calibration
from sklearn.datasets import load_breast_cancer, load_digits
from sklearn.isotonic import IsotonicRegression
from sklearn.model_selection import StratifiedKFold, train_test_split
from sklearn.preprocessing import MinMaxScaler
from sklearn.svm import SVC

from sodm_spark.models.calibration import (IsotonicCalibration, SigmoidCalibration,
                                           _objective, calibration_from_dict, fit_calibration,
                                           fit_isotonic, fit_sigmoid)


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


def test_the_isotonic_map_is_scikit_learn_s_isotonic_regression_clipped_outside_its_range():
    """Held-out SVC scores, once as they are and once rounded (ties pooled): the same points
    as IsotonicRegression(out_of_bounds="clip") keeps, the same values between them and the
    end values beyond them."""
    scores, y = _held_out_scores(*load_breast_cancer(return_X_y=True))
    for f in (scores, np.round(scores, 1)):
        reference = IsotonicRegression(out_of_bounds="clip").fit(f, (y == 1).astype(float))
        thresholds, values = fit_isotonic(f, y == 1)
        np.testing.assert_array_equal(thresholds, reference.X_thresholds_)
        np.testing.assert_allclose(values, reference.y_thresholds_, atol=1e-12)
        grid = np.linspace(f.min() - 3.0, f.max() + 3.0, 2001)  # beyond both ends
        p = IsotonicCalibration.fit(f, y, 2).probabilities(grid)
        np.testing.assert_allclose(p[:, 1], reference.predict(grid), atol=1e-12)
        np.testing.assert_allclose(p.sum(axis=1), 1.0)
        assert np.all(np.diff(p[:, 1]) >= 0)
        assert p[0, 1] == values[0] and p[-1, 1] == values[-1]


def test_one_vs_rest_isotonic_maps_are_normalized_as_scikit_learn_combines_them():
    X, y = load_digits(return_X_y=True)
    keep = y < 4
    X, y = MinMaxScaler().fit_transform(X[keep]), y[keep]
    X_train, X_held, y_train, y_held = train_test_split(X, y, test_size=0.5, random_state=1,
                                                        stratify=y)
    scores = SVC(kernel="rbf", C=1.0, decision_function_shape="ovr").fit(
        X_train, y_train).decision_function(X_held)
    p = fit_calibration("isotonic", scores, y_held, 4).probabilities(scores)
    per_class = np.column_stack([
        IsotonicRegression(out_of_bounds="clip").fit(scores[:, c], y_held == c)
        .predict(scores[:, c]) for c in range(4)])
    total = per_class.sum(axis=1, keepdims=True)
    expected = np.where(total > 0, per_class / np.where(total > 0, total, 1.0), 0.25)
    np.testing.assert_allclose(p, expected, atol=1e-12)
    assert np.allclose(p.sum(axis=1), 1.0)


def test_a_calibration_travels_as_plain_numbers_and_refuses_what_it_cannot_read():
    scores, y = _held_out_scores(*load_breast_cancer(return_X_y=True))
    calibration = SigmoidCalibration.fit(scores, y, 2)
    back = SigmoidCalibration.from_dict(calibration.to_dict())
    np.testing.assert_array_equal(back.probabilities(scores), calibration.probabilities(scores))
    with pytest.raises(ValueError, match="'isotonic' is not 'sigmoid'"):
        SigmoidCalibration.from_dict({"method": "isotonic"})
    with pytest.raises(ValueError, match="unknown calibration method 'beta'; this version "
                                         "reads 'sigmoid' and 'isotonic'"):
        calibration_from_dict({"method": "beta"})
    with pytest.raises(ValueError, match="thresholds in order"):
        calibration_from_dict({"method": "isotonic", "thresholds": [[1.0, 0.0]],
                               "probabilities": [[0.0, 1.0]]})
    with pytest.raises(ValueError, match="calibration must be one of sigmoid, isotonic, none"):
        fit_calibration("platt", scores, y, 2)
    assert fit_calibration("none", scores, y, 2) is None
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


@pytest.mark.parametrize("method", ["sigmoid", "isotonic"])
def test_a_saved_model_keeps_its_calibration_of_either_method(tmp_path, method):
    """metadata.json holds the calibration as plain numbers, read back to the same
    probabilities; a model saved in the format of sigmoid-only versions still reads."""
    from sodm_spark.models.expansion import KernelExpansion
    from sodm_spark.estimators.sklearn import ODMClassifier

    X, y = load_breast_cancer(return_X_y=True)
    X = MinMaxScaler().fit_transform(X)
    model = ODMClassifier(kernel="rbf", lam=1e5, theta=0.1, v=0.2).fit(X[:250], y[:250]).model_
    calibrated = model.calibrated(X[250:450], y[250:450], method)
    assert calibrated.calibration.method == method
    calibrated.save(tmp_path / "model")
    back = KernelExpansion.load(tmp_path / "model")
    assert type(back.calibration) is type(calibrated.calibration)
    np.testing.assert_array_equal(back.predict_proba(X[450:]), calibrated.predict_proba(X[450:]))
    if method == "sigmoid":  # as the first version with probabilities wrote it
        from conftest import model_files

        metadata = model_files(tmp_path / "model") / "metadata.json"
        saved = json.loads(metadata.read_text())
        a, b = calibrated.calibration.slopes[0], calibrated.calibration.intercepts[0]
        assert saved["calibration"] == {"method": "sigmoid", "slopes": [a],
                                        "intercepts": [b]}


def test_odm_classifier_calibrates_on_out_of_fold_decision_values_as_svc_does():
    """probability=True: Platt's sigmoid fitted on every row's decision value from an
    ODMClassifier fitted without the row's fold, recomputed here with StratifiedKFold (5
    shuffled folds seeded by random_state, the full fit's gamma); the model that predicts is
    the one fitted on all rows; predict_proba's rows sum to one in classes_ order and
    predict_log_proba is their logarithm; probability=False has neither method."""
    from sklearn.exceptions import NotFittedError

    from sodm_spark.estimators.sklearn import ODMClassifier

    X, y = load_breast_cancer(return_X_y=True)
    X = MinMaxScaler().fit_transform(X)
    labels = np.where(y == 1, "benign", "malignant")  # classes_ sorts them: benign first
    settings = dict(kernel="rbf", lam=1e5, theta=0.1, v=0.2, random_state=4)
    clf = ODMClassifier(probability=True, **settings).fit(X, labels)
    plain = ODMClassifier(**settings).fit(X, labels)
    np.testing.assert_array_equal(clf.decision_function(X), plain.decision_function(X))
    out_of_fold = np.zeros(len(labels))
    folds = StratifiedKFold(5, shuffle=True, random_state=4).split(X, labels)
    for train, held in folds:
        fold = ODMClassifier(**{**settings, "gamma": plain.kernel_.gamma})
        out_of_fold[held] = fold.fit(X[train], labels[train]).decision_function(X[held])
    a, b = fit_sigmoid(out_of_fold, labels == clf.classes_[1])
    np.testing.assert_allclose([clf.model_.calibration.slopes[0],
                                clf.model_.calibration.intercepts[0]], [a, b], rtol=1e-10)
    p = clf.predict_proba(X)
    np.testing.assert_allclose(p[:, 1], 1.0 / (1.0 + np.exp(a * clf.decision_function(X) + b)),
                               rtol=1e-10)
    assert list(clf.classes_) == ["benign", "malignant"] and np.allclose(p.sum(axis=1), 1.0)
    np.testing.assert_allclose(clf.predict_log_proba(X), np.log(p))
    assert np.mean(clf.classes_[p.argmax(axis=1)] == clf.predict(X)) > 0.97
    assert not hasattr(plain, "predict_proba") and not hasattr(plain, "predict_log_proba")
    with pytest.raises(AttributeError, match="no attribute 'predict_proba'") as error:
        plain.predict_proba(X)
    assert "not available when probability=False" in str(error.value.__cause__)
    plain.set_params(probability=True)  # asked for after a fit without: SVC's error
    with pytest.raises(NotFittedError, match="fitted with probability=False"):
        plain.predict_proba(X)
    with pytest.raises(ValueError, match="calibration must be one of 'sigmoid', 'isotonic'"):
        ODMClassifier(probability=True, calibration="beta").fit(X, labels)


def test_odm_classifier_isotonic_probabilities_for_three_classes_travel_with_the_model():
    """Three classes, isotonic: one-vs-rest maps of the out-of-fold scores, normalized; the
    model keeps them through from_expansion (toLocal's path), which has predict_proba too."""
    from sodm_spark.estimators.sklearn import ODMClassifier

    X, y = load_digits(return_X_y=True)
    keep = y < 3
    X, y = MinMaxScaler().fit_transform(X[keep]), y[keep]
    clf = ODMClassifier(lam=1e5, theta=0.1, v=0.2, probability=True, calibration="isotonic",
                        random_state=0).fit(X, y)
    assert isinstance(clf.model_.calibration, IsotonicCalibration)
    assert len(clf.model_.calibration.thresholds) == 3
    p = clf.predict_proba(X)
    assert p.shape == (len(y), 3) and np.allclose(p.sum(axis=1), 1.0)
    assert np.mean(p.argmax(axis=1) == y) > 0.97
    local = ODMClassifier.from_expansion(clf.model_)
    assert local.probability and local.calibration == "isotonic"
    np.testing.assert_array_equal(local.predict_proba(X), p)


@pytest.mark.parametrize("n_classes, method", [(2, "sigmoid"), (2, "isotonic"), (3, "isotonic")])
def test_sodm_models_are_calibrated_on_the_validation_slice_and_transform_gives_probabilities(
        spark, tmp_path, n_classes, method):
    """SODMClassifier: the model carries the calibration Param's map fitted on its own
    validation slice (the held-out rows the fit scored), transform's probability column is that
    map of its rawPrediction column and KernelExpansion.predict_proba on the same rows (within
    what float32 kernel blocks move a decision value, times the map's steepest slope), and a
    saved model keeps it."""
    from sodm_spark.estimators.ml import SODMClassificationModel, SODMClassifier

    X, y = load_digits(return_X_y=True)
    keep = y < 3
    X, y = X[keep], (y[keep] % 2 if n_classes == 2 else y[keep]).astype(float)
    rows = [(float(label), row.tolist()) for row, label in zip(X, y)]
    df = spark.createDataFrame(rows, "label double, features array<double>")
    model = SODMClassifier(levels=1, seed=0, validationFraction=0.2, calibration=method).fit(df)
    calibration = model.expansion.calibration
    assert calibration.method == method
    maps = 1 if n_classes == 2 else 3
    if method == "sigmoid":
        assert calibration.slopes.size == maps and np.all(calibration.slopes < 0)
        steepest = float(np.max(np.abs(calibration.slopes))) / 4  # a sigmoid's at its middle
    else:
        assert len(calibration.thresholds) == maps
        steepest = max(float(np.max(np.diff(p) / np.diff(x), initial=0.0))
                       for x, p in zip(calibration.thresholds, calibration.values))
    scored = model.transform(df).select("label", "rawPrediction", "prediction",
                                        "probability").toPandas()
    p = np.stack([v.toArray() for v in scored["probability"]])
    raw = np.stack([v.toArray() for v in scored["rawPrediction"]])
    np.testing.assert_allclose(p, calibration.probabilities(raw[:, 1] if maps == 1 else raw),
                               atol=1e-12)
    # transform scores with float32 kernel blocks (float64 only near the boundary)
    moved = np.max(np.abs(raw[:, -maps:] - model.expansion.decision_function(X).reshape(
        len(y), maps)))
    assert moved < 1e-4
    np.testing.assert_allclose(p, model.expansion.predict_proba(X),
                               atol=2 * steepest * moved + 1e-12)
    assert np.allclose(p.sum(axis=1), 1.0)
    assert np.mean(model.classes[p.argmax(axis=1)] == scored["prediction"]) > 0.95
    model.write().overwrite().save(str(tmp_path / "model"))
    back = SODMClassificationModel.load(str(tmp_path / "model"))
    np.testing.assert_array_equal(back.expansion.predict_proba(X), model.expansion.predict_proba(X))
    assert "probability" in back.transform(df).columns


def test_the_predict_job_writes_a_calibrated_model_s_probabilities(spark, tmp_path):
    """sodm-predict on a calibrated model, Platt's sigmoid or an isotonic map: a probability
    column beside rawPrediction and prediction, KernelExpansion.predict_proba's values for the
    same rows."""
    import pandas as pd

    from sodm_spark.estimators.sklearn import ODMClassifier
    from sodm_spark.jobs import predict

    X, y = load_breast_cancer(return_X_y=True)
    X = MinMaxScaler().fit_transform(X)
    model = ODMClassifier(kernel="rbf", lam=1e5, theta=0.1, v=0.2).fit(X[:300], y[:300]).model_
    rows = [(float(label), row.tolist()) for row, label in zip(X[450:], y[450:])]
    spark.createDataFrame(rows, "label double, features array<double>").coalesce(1) \
        .write.parquet(str(tmp_path / "rows"))
    # float32 kernels move a decision value by ~1e-6: a sigmoid's probability by less, an
    # isotonic map's by up to its steepest slope times that, so that one is read in float64
    runs = (("sigmoid", "float64", 1e-9), ("sigmoid", "float32", 1e-3),
            ("isotonic", "float64", 1e-9))
    for method, precision, tolerance in runs:
        calibrated = model.calibrated(X[300:450], y[300:450], method)
        calibrated.save(tmp_path / method)
        out = tmp_path / f"scores-{method}-{precision}"
        assert predict.main(["--model", str(tmp_path / method), "--data",
                             str(tmp_path / "rows"), "--out", str(out),
                             "--precision", precision]) == 0
        p = np.stack(pd.read_parquet(out).sort_values("row_id")["probability"].to_numpy())
        np.testing.assert_allclose(p, calibrated.predict_proba(X[450:]), atol=tolerance)
        assert np.allclose(p.sum(axis=1), 1.0)


def test_the_linear_kernel_holds_out_the_levels_slice_and_calibrates_on_it(spark):
    """DSVRG through the one way into a fit: the rows SODM's levels would hold out (a seeded
    hash of the row id, validation_fraction of them) are kept out of the epochs and the
    model's sigmoid is Platt's on their decision values; SODMClassifier(kernel="linear")
    writes its probabilities; calibration="none" trains on every row."""
    from sodm_spark.estimators.ml import SODMClassifier
    from sodm_spark.data.datasets import make_linear
    from sodm_spark.selection.stopping import holdout_mask
    from sodm_spark.spark.io import numpy_to_blocks
    from sodm_spark.spark.train import fit_params, train

    X, y = make_linear(1000, 6, seed=9, centred=False)
    sc = spark.sparkContext
    params = fit_params({"kernel": "linear", "lam": 100.0, "seed": 5, "epochs": 5})
    fit = train(sc, numpy_to_blocks(sc, X, y, n_slices=3), 6, params, [-1.0, 1.0]).fit
    held = holdout_mask(np.arange(len(y)), 5, 0.1)  # row ids are row numbers here
    assert fit.validation_rows == held.sum() and fit.n_rows == len(y) - held.sum()
    a, b = fit_sigmoid(fit.model.decision_function(X[held]), y[held] > 0)
    np.testing.assert_allclose([fit.model.calibration.slopes[0],
                                fit.model.calibration.intercepts[0]], [a, b], rtol=1e-9)
    uncalibrated = fit_params({"kernel": "linear", "lam": 100.0, "seed": 5, "epochs": 5,
                               "calibration": "none"})
    every_row = train(sc, numpy_to_blocks(sc, X, y, n_slices=3), 6, uncalibrated,
                      [-1.0, 1.0]).fit
    assert every_row.n_rows == len(y) and every_row.model.calibration is None
    frame = spark.createDataFrame([(row.tolist(), float(label > 0)) for row, label in zip(X, y)],
                                  ["features", "label"])
    model = SODMClassifier(kernel="linear", lam=100.0, maxIter=5,
                           calibration="isotonic").fit(frame)
    assert model.expansion.calibration.method == "isotonic"
    p = np.stack([v.toArray() for v in model.transform(frame).toPandas()["probability"]])
    np.testing.assert_allclose(p, model.expansion.predict_proba(X), atol=1e-9)


def test_the_calibration_setting_reaches_the_fit_from_the_job_and_the_estimator():
    """--calibration and the calibration Param give the same SODMParams / DSVRGParams."""
    from sodm_spark.estimators.ml import SODMClassifier
    from sodm_spark.jobs.train_args import parse_args
    from sodm_spark.spark.train import fit_params

    for kernel in ("rbf", "linear"):
        job = fit_params(vars(parse_args(["--kernel", kernel, "--lam", "10",
                                          "--calibration", "isotonic"])))
        estimator = fit_params(SODMClassifier(kernel=kernel, lam=10.0,
                                              calibration="isotonic")._settings())
        assert job.calibration == estimator.calibration == "isotonic"
    assert fit_params(vars(parse_args(["--lam", "10"]))).calibration == "sigmoid"
    with pytest.raises(SystemExit):
        parse_args(["--calibration", "beta"])
    with pytest.raises(ValueError, match="calibration must be one of sigmoid, isotonic, none"):
        fit_params({"calibration": "beta"})
