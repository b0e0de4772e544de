"""Feature names on the local doors (sodm_spark.core.feature_names): ODMClassifier and the
comparators that share its input checks, the MLflow pyfunc and the ONNX graph. Every door that
scores named rows takes the training columns by name: the same rows with the columns reversed
give the predictions of the original order (and not those of the reversed values taken by
position, which the tests check differ, so that they could fail); a column the model was not
trained on is left out with one line naming it; a missing one is refused naming it. Rows
without names stay positional. The reference is always the model's answer on the original
column order."""
import json
import logging
import warnings
from contextlib import contextmanager
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import scipy.sparse
from sklearn.base import clone, is_regressor
from sklearn.datasets import make_classification

from sodm_spark import ODMClassifier
from sodm_spark.core.errors import InputError
from sodm_spark.models.expansion import KernelExpansion

from conftest import model_files

try:
    import mlflow
except ImportError:  # the MLflow tests skip themselves (pytest.importorskip)
    mlflow = None
if mlflow is not None:
    import mlflow.pyfunc  # noqa: F401 (the submodule)
    from test_mlflow import tracking  # noqa: F401 (the fixture: a file store of its own)
else:
    @pytest.fixture
    def tracking():
        pytest.importorskip("mlflow")

NAMES = [f"x{i}" for i in range(6)]
REVERSED = NAMES[::-1]
METHODS = ("predict", "decision_function", "predict_proba", "predict_log_proba")


def _problem(rows=240, seed=0):
    """Seeded rows of six named float64 columns, four of them informative, and two labels."""
    X, y = make_classification(n_samples=rows, n_features=6, n_informative=4, n_redundant=1,
                               random_state=seed)
    return pd.DataFrame(X, columns=NAMES), y


@pytest.fixture(scope="module")
def fitted():
    """(ODMClassifier fitted on the DataFrame with probabilities, the frame, the labels)."""
    frame, y = _problem()
    return ODMClassifier(random_state=0, probability=True).fit(frame, y), frame, y


@contextmanager
def no_warnings():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught
    assert [str(w.message) for w in caught] == []


@contextmanager
def recorded_warnings():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


def _with_extra(frame):
    """``frame`` with a column the model was not trained on, in the middle."""
    extra = frame.copy()
    extra.insert(3, "extra", np.random.default_rng(7).normal(size=len(frame)) * 100)
    return extra


def _positional_differs(reference, reversed_positionally):
    """The reversed values taken by position are another answer: a test of the names that
    would pass with the columns ignored cannot."""
    assert not np.allclose(reference, reversed_positionally)


# ---------------------------------------------------------------- ODMClassifier
def test_a_fit_on_a_frame_keeps_its_names_and_types(fitted):
    clf, frame, y = fitted
    assert clf.feature_names_in_.dtype == object and list(clf.feature_names_in_) == NAMES
    assert clf.n_features_in_ == 6
    assert clf.model_.feature_names == tuple(NAMES)
    assert clf.model_.feature_types == ("float64",) * 6
    assert clf.model_.calibration is not None  # the calibrated model kept the names
    mixed = frame.assign(x2=(frame["x2"] * 10).round().astype(np.int64), x5=frame["x5"] > 0)
    model = ODMClassifier(random_state=0).fit(mixed, y).model_
    assert model.feature_types == ("float64", "float64", "int64", "float64", "float64", "bool")


def test_reversed_columns_give_the_answers_of_the_original_order(fitted):
    clf, frame, y = fitted
    for method in METHODS:
        reference = getattr(clf, method)(frame)
        with no_warnings():
            assert np.array_equal(getattr(clf, method)(frame[REVERSED]), reference)
    with no_warnings():
        assert clf.score(frame[REVERSED], y) == clf.score(frame, y)
    with recorded_warnings():  # scikit-learn's: X has no names, the fit had
        positional = clf.decision_function(frame[REVERSED].to_numpy())
    _positional_differs(clf.decision_function(frame), positional)


def test_an_extra_column_is_left_out_with_one_warning_naming_it(fitted):
    clf, frame, y = fitted
    extra = _with_extra(frame)
    for method in METHODS:
        with recorded_warnings() as caught:
            got = getattr(clf, method)(extra)
        assert np.array_equal(got, getattr(clf, method)(frame))
        assert [w.category for w in caught] == [UserWarning]
        assert "'extra'" in str(caught[0].message) and "\n" not in str(caught[0].message)
        assert "x0" not in str(caught[0].message)
    with recorded_warnings() as caught:
        assert clf.score(extra[["extra"] + REVERSED], y) == clf.score(frame, y)
    assert len(caught) == 1 and "'extra'" in str(caught[0].message)


def test_a_missing_column_is_refused_in_one_line_naming_it(fitted):
    clf, frame, y = fitted
    for call in (clf.predict, clf.decision_function, clf.predict_proba,
                 lambda rows: clf.score(rows, y)):
        with pytest.raises(InputError) as raised:
            call(frame[[name for name in REVERSED if name != "x3"]])
        assert isinstance(raised.value, ValueError)
        message = str(raised.value)
        assert "'x3'" in message and "\n" not in message
        assert "no column 'x3'" in message  # the others are named only as the model's list


def test_rows_without_names_stay_positional(fitted):
    clf, frame, _ = fitted
    reference = clf.decision_function(frame)
    X = frame.to_numpy()
    with recorded_warnings() as caught:  # scikit-learn's warning, kept
        assert np.array_equal(clf.decision_function(X), reference)
        assert np.array_equal(clf.decision_function(scipy.sparse.csr_matrix(X)), reference)
    assert caught and all("does not have valid feature names" in str(w.message)
                          for w in caught)
    with recorded_warnings(), pytest.raises(ValueError, match="6 features"):
        clf.predict(X[:, :5])
    # a frame of unnamed (integer) columns is rows without names too
    with recorded_warnings():
        assert np.array_equal(clf.decision_function(pd.DataFrame(X)), reference)


def test_fitted_on_arrays_a_frame_is_taken_by_position(fitted):
    _, frame, y = fitted
    clf = ODMClassifier(random_state=0).fit(frame.to_numpy(), y)
    assert not hasattr(clf, "feature_names_in_") and clf.model_.feature_names is None
    with recorded_warnings() as caught:
        by_position = clf.decision_function(frame[REVERSED])
    assert np.array_equal(by_position, clf.decision_function(frame[REVERSED].to_numpy()))
    assert any("X has feature names, but ODMClassifier was fitted without feature names"
               in str(w.message) for w in caught)
    # a refit on arrays forgets the names of an earlier fit on a frame
    refit = ODMClassifier(random_state=0).fit(frame, y).fit(frame.to_numpy(), y)
    assert not hasattr(refit, "feature_names_in_") and refit.model_.feature_names is None


def test_saved_and_loaded_models_keep_the_names(fitted, tmp_path):
    clf, frame, _ = fitted
    clf.model_.save(tmp_path / "model")
    metadata = json.loads((model_files(tmp_path / "model") / "metadata.json").read_text())
    assert metadata["feature_names"] == NAMES and metadata["feature_types"] == ["float64"] * 6
    loaded = KernelExpansion.load(tmp_path / "model")
    assert loaded.feature_names == tuple(NAMES) and loaded.feature_types == ("float64",) * 6
    for restored in (ODMClassifier.load(tmp_path / "model"),
                     ODMClassifier.from_expansion(clf.model_)):
        assert list(restored.feature_names_in_) == NAMES
        assert restored.feature_names_in_.dtype == object
        for method in METHODS:
            with no_warnings():
                got = getattr(restored, method)(frame[REVERSED])
            assert np.array_equal(got, getattr(clf, method)(frame))
        with pytest.raises(InputError, match="'x3'"):
            restored.predict(frame.drop(columns="x3"))


def test_a_repeated_column_name_is_refused(fitted):
    clf, frame, y = fitted
    twice = pd.concat([frame, frame[["x1"]]], axis=1)
    with pytest.raises(InputError, match="'x1' occur more than once"):
        clf.predict(twice)
    with pytest.raises(InputError, match="'x1' occur more than once"):
        ODMClassifier().fit(twice, y)


def _comparators():
    from sodm_spark.baselines.coreset_svm import CoresetSVMClassifier
    from sodm_spark.baselines.csvrg import CSVRGClassifier
    from sodm_spark.baselines.cvm import CVMClassifier, CVRRegressor

    return [CSVRGClassifier(max_core=40, epochs=5, random_state=0),
            CVMClassifier(tol=1e-3, max_core=60, random_state=0),
            CVRRegressor(tol=1e-3, max_core=60, random_state=0),
            CoresetSVMClassifier(coreset_size=60, kernel="rbf", random_state=0)]


@pytest.mark.parametrize("estimator", _comparators(), ids=lambda e: type(e).__name__)
def test_the_comparators_take_the_columns_by_name_too(estimator):
    frame, y = _problem(rows=160, seed=1)
    estimator = clone(estimator)
    target = frame["x0"] + frame["x1"] ** 2 if is_regressor(estimator) else y
    with recorded_warnings():  # their convergence warnings
        estimator.fit(frame, target)
    assert list(estimator.feature_names_in_) == NAMES
    assert estimator.model_.feature_names == tuple(NAMES)
    reference = estimator.predict(frame)
    with no_warnings():
        assert np.array_equal(estimator.predict(frame[REVERSED]), reference)
    with recorded_warnings() as caught:
        assert np.array_equal(estimator.predict(_with_extra(frame)), reference)
    assert len(caught) == 1 and "'extra'" in str(caught[0].message)
    with pytest.raises(InputError, match="no column 'x3'"):
        estimator.predict(frame.drop(columns="x3"))


# ---------------------------------------------------------------- MLflow
@contextmanager
def mlflow_log_lines():
    """The lines MLflow logs meanwhile (its loggers do not propagate to pytest's)."""
    lines = []

    class Keep(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    logger, handler = logging.getLogger("mlflow"), Keep(logging.WARNING)
    logger.addHandler(handler)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)


@pytest.fixture
def served(fitted, tracking, tmp_path):  # noqa: F811 (tracking: test_mlflow's fixture)
    """(the fitted estimator, its frame, its pyfunc as saved with the default signature)."""
    from sodm_spark import mlflow as flavor

    clf, frame, _ = fitted
    flavor.save_model(clf, tmp_path / "mlflow-model")
    return clf, frame, mlflow.pyfunc.load_model(str(tmp_path / "mlflow-model"))


def _pyfunc_outputs(clf, frame):
    """The pyfunc's expected columns: the labels and the calibrated probabilities."""
    return np.column_stack([clf.predict(frame), clf.predict_proba(frame)])


def test_the_signature_lists_the_feature_columns_by_name_and_type(served):
    pytest.importorskip("mlflow")
    from sodm_spark import mlflow as flavor

    clf, _, model = served
    inputs = model.metadata.get_input_schema()
    assert inputs.input_names() == NAMES
    assert [kind.name for kind in inputs.input_types()] == ["double"] * 6
    assert model.metadata.get_output_schema().input_names() == \
        ["prediction", "probability_0", "probability_1"]
    typed = clf.model_.with_features(NAMES, ["float32", "int64", "bool", "int", "bigint",
                                             "decimal(10,2)"])
    assert [kind.name for kind in flavor.default_signature(typed).inputs.input_types()] == \
        ["double", "long", "boolean", "long", "long", "double"]
    assert flavor.default_signature(typed, inputs=False).inputs is None
    unnamed = replace(clf.model_, feature_names=None, feature_types=None)
    assert flavor.default_signature(unnamed).inputs is None  # rows taken by position


def test_the_pyfunc_takes_the_columns_by_name(served):
    clf, frame, model = served
    reference = _pyfunc_outputs(clf, frame)
    assert np.array_equal(model.predict(frame).to_numpy(), reference)
    with no_warnings(), mlflow_log_lines() as lines:
        reversed_out = model.predict(frame[REVERSED])
    assert np.array_equal(reversed_out.to_numpy(), reference) and lines == []
    assert list(reversed_out.index) == list(frame.index)
    with recorded_warnings():
        positional = clf.predict_proba(frame[REVERSED].to_numpy())
    _positional_differs(clf.predict_proba(frame), positional)


def test_the_pyfunc_leaves_out_an_extra_column_with_one_line(served):
    _, frame, model = served
    with no_warnings(), mlflow_log_lines() as lines:
        out = model.predict(_with_extra(frame))
    assert np.array_equal(out.to_numpy(), model.predict(frame).to_numpy())
    assert len(lines) == 1 and "['extra']" in lines[0] and "x0" not in lines[0]


def test_the_pyfunc_refuses_a_missing_column_naming_it(served):
    _, frame, model = served
    with pytest.raises(mlflow.exceptions.MlflowException,
                       match=r"Model is missing inputs \['x3'\]"):
        model.predict(frame.drop(columns="x3"))


def test_the_pyfunc_takes_float32_and_small_integer_rows(served):
    clf, frame, model = served
    single = frame.astype(np.float32)
    assert np.array_equal(model.predict(single).to_numpy(), _pyfunc_outputs(clf, single))
    counts = (frame * 4).round()
    for kind in (np.int32, np.int16):
        rows = counts.astype(kind)[REVERSED]
        assert np.array_equal(model.predict(rows).to_numpy(), _pyfunc_outputs(clf, counts))
    # MLflow refuses int64 for a double column (it may not fit a float64), unless 0 and 1
    with pytest.raises(mlflow.exceptions.MlflowException, match="int64"):
        model.predict(counts.astype(np.int64))
    assert np.array_equal(model.predict(counts.astype(np.float64)).to_numpy(),
                          _pyfunc_outputs(clf, counts))


def test_the_pyfunc_of_a_named_model_asks_for_names(served):
    _, frame, model = served
    with pytest.raises(mlflow.exceptions.MlflowException, match="missing inputs"):
        model.predict(frame.to_numpy())


def test_without_the_input_schema_predict_itself_takes_names(fitted, tracking,  # noqa: F811
                                                             tmp_path):
    from sodm_spark import mlflow as flavor

    clf, frame, _ = fitted
    flavor.save_model(clf, tmp_path / "m",
                      signature=flavor.default_signature(clf.model_, inputs=False))
    model = mlflow.pyfunc.load_model(str(tmp_path / "m"))
    assert model.metadata.get_input_schema() is None
    reference = _pyfunc_outputs(clf, frame)
    with no_warnings():
        assert np.array_equal(model.predict(frame[REVERSED]).to_numpy(), reference)
    with recorded_warnings() as caught:
        assert np.array_equal(model.predict(_with_extra(frame)).to_numpy(), reference)
    assert [w.category for w in caught] == [UserWarning]
    assert "'extra'" in str(caught[0].message) and "\n" not in str(caught[0].message)
    with pytest.raises(InputError, match="no column 'x3'") as raised:
        model.predict(frame.drop(columns="x3"))
    assert "\n" not in str(raised.value)
    X = frame.to_numpy()  # rows without names: by position, float32 too
    for rows in (X, scipy.sparse.csr_matrix(X), pd.DataFrame(X)):
        assert np.array_equal(model.predict(rows).to_numpy(), reference)
    assert np.array_equal(model.predict(X.astype(np.float32))["prediction"].to_numpy(),
                          clf.model_.predict(X.astype(np.float32)))
    counts = (frame * 4).round()
    assert np.array_equal(model.predict(counts.astype(np.int64)[REVERSED]).to_numpy(),
                          _pyfunc_outputs(clf, counts))


def test_a_model_without_names_keeps_the_positional_pyfunc(fitted, tracking,  # noqa: F811
                                                           tmp_path):
    from sodm_spark import mlflow as flavor

    _, frame, y = fitted
    clf = ODMClassifier(random_state=0).fit(frame.to_numpy(), y)
    flavor.save_model(clf, tmp_path / "m")
    model = mlflow.pyfunc.load_model(str(tmp_path / "m"))
    assert model.metadata.get_input_schema() is None
    positional = clf.predict(frame[REVERSED].to_numpy())
    assert np.array_equal(model.predict(frame[REVERSED])["prediction"].to_numpy(), positional)
    assert np.array_equal(model.predict((frame * 4).round().astype(np.int64))["prediction"]
                          .to_numpy(), clf.predict((frame * 4).round().to_numpy()))


# ---------------------------------------------------------------- ONNX
def test_the_onnx_graph_names_its_columns_and_scores_them_in_that_order(fitted):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from sodm_spark.models.onnx_export import to_onnx

    clf, frame, _ = fitted
    proto = to_onnx(clf.model_)
    props = {prop.key: prop.value for prop in proto.metadata_props}
    names = json.loads(props["feature_names"])
    assert names == NAMES and json.loads(props["feature_types"]) == ["float64"] * 6
    (features,) = proto.graph.input
    assert features.name == "features"
    assert [d.dim_param or d.dim_value for d in features.type.tensor_type.shape.dim] == \
        ["batch", 6]
    assert json.dumps(NAMES) in features.doc_string
    session = ort.InferenceSession(proto.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    shuffled = frame[REVERSED]  # serving code's columns, put in the names' order
    out = session.run(["scores", "label"], {"features": shuffled[names].to_numpy()})
    reference = clf.decision_function(frame)
    scale = np.abs(reference).max()
    assert np.abs(out[0] - reference).max() <= 1e-12 * scale
    assert np.array_equal(out[1], clf.predict(frame))
    positional = session.run(["scores"], {"features": shuffled.to_numpy()})[0]
    _positional_differs(reference, positional)


def test_the_onnx_graph_of_a_model_without_names(fitted):
    pytest.importorskip("onnx")
    from sodm_spark.models.onnx_export import to_onnx

    _, frame, y = fitted
    proto = to_onnx(ODMClassifier(random_state=0).fit(frame.to_numpy(), y).model_)
    keys = {prop.key for prop in proto.metadata_props}
    assert "feature_names" not in keys and "feature_types" not in keys
    assert "by position" in proto.graph.input[0].doc_string
