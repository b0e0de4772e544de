"""The MLflow flavor (sodm_spark.mlflow) and the training job's --mlflow run, against a local
file tracking store in a temporary folder (docs/design.md §7, docs/jobs.md "MLflow")."""
import argparse
import ast
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

mlflow = pytest.importorskip("mlflow")

import mlflow.pyfunc  # noqa: E402, F811 (the submodule, after the skip above)
from mlflow.tracking import MlflowClient  # noqa: E402

from sodm_spark import ODMClassifier  # noqa: E402
from sodm_spark import mlflow as flavor  # noqa: E402
from sodm_spark.core.errors import JobExit, SettingsError  # noqa: E402
from sodm_spark.jobs import train_mlflow, train_sodm  # noqa: E402
from sodm_spark.models.expansion import KernelExpansion  # noqa: E402


@pytest.fixture
def tracking(tmp_path, monkeypatch):
    """A file store of its own, named by $MLFLOW_TRACKING_URI as a user would; MLflow's
    process-wide URI is put back afterwards. Also for loading a local model: MLflow 3.1's
    pyfunc.load_model creates the default store (./mlruns) when none is set."""
    uri = (tmp_path / "mlruns").as_uri()
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 refuses file stores else
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    previous = mlflow.get_tracking_uri() if mlflow.tracking.is_tracking_uri_set() else None
    mlflow.set_tracking_uri(uri)
    yield uri
    mlflow.set_tracking_uri(previous)


def _problem(classes, rows=240, seed=3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows, 4))
    if classes == 2:
        y = np.where(X[:, 0] + X[:, 1] ** 2 > 1.0, 1, -1)
    else:
        y = np.where(X[:, 0] + X[:, 1] ** 2 > 1.0, 2, np.where(X[:, 2] > 0, 1, 0))
    return X, y


@pytest.fixture(scope="module", params=[2, 3], ids=["binary", "three-classes"])
def calibrated(request):
    """(ODMClassifier, its model calibrated on held-out rows, rows to score)."""
    X, y = _problem(request.param)
    clf = ODMClassifier(random_state=0).fit(X[:160], y[:160])
    return clf, clf.model_.calibrated(X[160:200], y[160:200]), X[200:]


def test_the_flavor_imports_mlflow_itself_not_the_module_of_its_name():
    assert flavor.mlflow is sys.modules["mlflow"]
    assert "sodm_spark" not in Path(mlflow.__file__).parts


def _package_imports(path):
    """The sodm_spark modules ``path`` imports by absolute names (the package's own rule)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("sodm_spark"))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sodm_spark"):
            yield from (f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level:
            yield from (f"relative.{a.name}" for a in node.names)


def test_the_flavor_sits_over_models_and_core_and_only_the_jobs_import_it():
    """docs/design.md §5: beside the folders, as low as what it wraps."""
    package = Path(flavor.__file__).parent
    assert {name.split(".")[1] for name in _package_imports(Path(flavor.__file__))} <= \
        {"core", "models"}
    importers = sorted(p.relative_to(package).as_posix() for p in package.rglob("*.py")
                       if any(name in ("sodm_spark.mlflow", "sodm_spark.mlflow.*")
                              or name.startswith("sodm_spark.mlflow.")
                              for name in _package_imports(p)))
    assert importers == ["jobs/train_mlflow.py"]


def test_the_job_without_mlflow_never_imports_it():
    code = ("import sys, sodm_spark.jobs.train_sodm as job\n"
            "job.parse_args(['--rows', '100'])\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'mlflow'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=300, cwd=Path(__file__).resolve().parents[1])
    assert out.stdout.split() == ["[]"]


def test_save_and_load_give_the_same_decision_values(calibrated, tmp_path):
    clf, model, X = calibrated
    flavor.save_model(model, tmp_path / "mlflow-model")
    loaded = flavor.load_model(str(tmp_path / "mlflow-model"))
    assert isinstance(loaded, KernelExpansion)
    assert np.array_equal(loaded.decision_function(X), model.decision_function(X))
    assert np.array_equal(loaded.predict_proba(X), model.predict_proba(X))
    # the package's own format inside (no pickles), readable without MLflow
    files = {p.name for p in (tmp_path / "mlflow-model").rglob("*") if p.is_file()}
    assert {"MLmodel", "arrays.npz", "metadata.json", "requirements.txt"} <= files
    assert not [name for name in files if name.endswith((".pkl", ".pickle"))]
    direct = KernelExpansion.load(tmp_path / "mlflow-model" / flavor.MODEL_DATA)
    assert np.array_equal(direct.decision_function(X), model.decision_function(X))
    # the estimators hand over their expansion
    flavor.save_model(clf, tmp_path / "from-estimator")
    assert np.array_equal(flavor.load_model(str(tmp_path / "from-estimator")).coef,
                          clf.model_.coef)
    with pytest.raises(mlflow.exceptions.MlflowException, match="not empty"):
        flavor.save_model(model, tmp_path / "mlflow-model")


def test_a_pyspark_ml_model_hands_over_its_expansion(calibrated):
    from sodm_spark.estimators.ml import SODMClassificationModel

    _, model, _ = calibrated
    assert flavor.expansion_of(SODMClassificationModel(model)) is model
    with pytest.raises(TypeError, match="no fitted KernelExpansion"):
        flavor.expansion_of(ODMClassifier())


def test_pyfunc_predict_is_the_models_predict_and_predict_proba(tracking, calibrated,
                                                                 tmp_path):
    _, model, X = calibrated
    flavor.save_model(model, tmp_path / "m")
    served = mlflow.pyfunc.load_model(str(tmp_path / "m"))
    classes = [str(int(c)) for c in model.classes]
    for rows in (pd.DataFrame(X), X):
        out = served.predict(rows)
        assert list(out.columns) == ["prediction"] + [f"probability_{c}" for c in classes]
        assert np.array_equal(out["prediction"].to_numpy(), model.predict(X))
        assert np.array_equal(out.iloc[:, 1:].to_numpy(), model.predict_proba(X))
    assert served.predict(X.astype(np.float32)).shape == (len(X), 1 + len(classes))
    assert served.get_raw_model().n_features_in == X.shape[1]
    with pytest.raises(Exception, match="rows of 4 features"):
        served.predict(X[:, :3])


def test_an_uncalibrated_model_predicts_labels_only(tracking, tmp_path):
    X, y = _problem(2)
    model = ODMClassifier(random_state=0).fit(X, y).model_
    flavor.save_model(model, tmp_path / "m")
    out = mlflow.pyfunc.load_model(str(tmp_path / "m")).predict(pd.DataFrame(X))
    assert list(out.columns) == ["prediction"]
    assert np.array_equal(out["prediction"].to_numpy(), model.predict(X))


def test_log_model_under_a_run(tracking, calibrated):
    clf, model, X = calibrated
    with mlflow.start_run() as run:
        info = flavor.log_model(model, name="model")
    for uri in (info.model_uri, f"runs:/{run.info.run_id}/model"):
        out = mlflow.pyfunc.load_model(uri).predict(X)
        assert np.array_equal(out["prediction"].to_numpy(), model.predict(X))
        assert np.array_equal(flavor.load_model(uri).decision_function(X),
                              model.decision_function(X))


def test_the_job_logs_its_run(spark, tracking, tmp_path, capsys):
    model_out, metrics_out = tmp_path / "model", tmp_path / "metrics.json"
    assert train_sodm.main(["--rows", "1500", "--levels", "1", "--gamma", "1", "--lam", "1e3",
                            "--theta", "0.1", "--v", "0.2", "--global-step", "none",
                            "--max-sv", "none", "--model-out", str(model_out),
                            "--metrics-out", str(metrics_out), "--mlflow",
                            "--mlflow-experiment", "job-test"]) == 0
    assert "MLflow run " in capsys.readouterr().out
    metrics = json.loads(metrics_out.read_text())
    client = MlflowClient(tracking)
    (run,) = client.search_runs([client.get_experiment_by_name("job-test").experiment_id])
    assert run.info.status == "FINISHED"
    params = run.data.params
    assert params["lam"] == "1000.0" and params["rows"] == "1500" and params["levels"] == "1"
    assert "mlflow_tracking_uri" not in params
    history = client.get_metric_history(run.info.run_id, "level/validation_accuracy")
    assert [(m.step, m.value) for m in history] == \
        [(step, entry["validation_accuracy"]) for step, entry in enumerate(metrics["levels"])]
    assert [m.value for m in client.get_metric_history(run.info.run_id, "level/number")] == \
        [entry["level"] for entry in metrics["levels"]]
    assert run.data.metrics["test_accuracy"] == metrics["test_accuracy"]
    logged = json.loads(Path(mlflow.artifacts.download_artifacts(
        run_id=run.info.run_id, artifact_path="metrics.json",
        dst_path=str(tmp_path / "download"))).read_text())
    # the file is written again at the end with the command's timeline, which measures the
    # MLflow logging too: the run holds every other figure of it
    assert logged == {key: value for key, value in metrics.items() if key != "timeline"}
    assert "mlflow" in [stage["stage"] for stage in metrics["timeline"]["stages"]]
    saved = KernelExpansion.load(model_out)
    from sodm_spark.data.datasets import make_nonlinear

    X = make_nonlinear(300, seed=5)[0]  # rows like the built-in data's
    out = mlflow.pyfunc.load_model(f"runs:/{run.info.run_id}/model").predict(X)
    assert np.array_equal(out["prediction"].to_numpy(), saved.predict(X))
    if saved.calibration is not None:
        assert np.array_equal(out.iloc[:, 1:].to_numpy(), saved.predict_proba(X))


def _exit_of(argv):
    with pytest.raises(JobExit) as raised:
        train_sodm.main(argv)
    return raised.value.status, str(raised.value.code)


def test_without_mlflow_the_job_stops_before_reading_data(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # as if it were not installed
    status, message = _exit_of(["--data", str(tmp_path / "missing.svm"), "--mlflow"])
    assert status == 2 and 'pip install "sodm-spark[mlflow]"' in message
    assert "missing.svm" not in message  # the data were never looked at


def test_a_tracking_store_is_checked_before_the_data(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    status, message = _exit_of(["--data", str(tmp_path / "missing.svm"), "--mlflow"])
    assert status == 2 and "--mlflow-tracking-uri" in message
    status, message = _exit_of(["--data", str(tmp_path / "missing.svm"), "--mlflow",
                                "--mlflow-tracking-uri", "nosuch://user:secret@host/store"])
    assert status == 2 and "nosuch://…@host/store cannot be used" in message
    assert "secret" not in message and "missing.svm" not in message


def _logged_args(tracking, model_out=None):
    parser = argparse.ArgumentParser()
    train_mlflow.add_mlflow_arguments(parser)
    args = parser.parse_args(["--mlflow", "--mlflow-tracking-uri", tracking])
    args.model_out = model_out
    return args


def test_a_failed_run_keeps_the_model_and_says_where(tracking, calibrated, monkeypatch,
                                                      tmp_path):
    _, model, X = calibrated
    summary = {"levels": [{"level": 0, "seconds": 1.0}], "test_accuracy": 0.9}

    def refused(*args, **kwargs):
        raise mlflow.exceptions.MlflowException("the store refused the upload")

    monkeypatch.setattr(flavor, "log_model", refused)
    with pytest.raises(SettingsError, match="the store refused the upload") as raised:
        train_mlflow.log_run(_logged_args(tracking), model, summary)
    kept = str(raised.value).split("the model is saved in ")[1].split(" ")[0]
    assert np.array_equal(KernelExpansion.load(kept).decision_function(X),
                          model.decision_function(X))

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(flavor, "log_model", broken)
    with pytest.raises(JobExit) as raised:
        train_mlflow.log_run(_logged_args(tracking, str(tmp_path / "out")), model, summary)
    assert raised.value.status == 4 and "--model-out" in str(raised.value.code)
    runs = MlflowClient(tracking).search_runs(
        [MlflowClient(tracking).get_experiment_by_name("sodm-spark").experiment_id])
    assert {run.info.status for run in runs} == {"FAILED"}
