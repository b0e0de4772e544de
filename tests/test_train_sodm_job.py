"""jobs/train_sodm.py: end to end through spark-submit, and its answers to bad input."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import dump_svmlight_file

from sodm_spark.models.expansion import KernelExpansion

from conftest import make_problem

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "jobs"))
import train_sodm  # noqa: E402


def test_spark_submit_runs_the_built_in_data_and_writes_model_and_metrics(tmp_path):
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_CONF_DIR=str(ROOT / "conf"),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    command = ["spark-submit", "--master", "local[2]", str(ROOT / "jobs" / "train_sodm.py"),
               "--levels", "2", "--rows", "3000", "--model-out", str(tmp_path / "model"),
               "--metrics-out", str(tmp_path / "metrics.json")]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    level_lines = [line.split() for line in result.stdout.splitlines()
                   if line.split() and line.split()[0] in {"0", "1", "2"}]
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    solved = [entry["level"] for entry in metrics["levels"]]
    assert solved == [2, 1, 0][:len(solved)] and len(solved) >= 2  # the rule needs two levels
    assert [int(line[0]) for line in level_lines] == solved
    assert [int(line[1]) for line in level_lines] == [9, 3, 1][:len(solved)]
    # each level was announced with its plan before it ran; the second with a prediction
    plans = [line for line in result.stdout.splitlines() if line.startswith("  -> level")]
    assert len(plans) == len(solved) and "predicted" in plans[1]
    for entry in metrics["levels"]:
        assert {"level", "partitions", "seconds", "objective", "n_sv", "test_accuracy",
                "validation_accuracy", "kernel"} <= set(entry)
        assert entry["kernel"] == "cached"
    assert metrics["stopped_at"] == solved[-1] and metrics["stop_reason"]
    assert 240 < metrics["validation_rows"] < 360  # about 10% of the 3,000 rows
    best = next(e for e in metrics["levels"] if e["level"] == metrics["best_level"])
    assert best["validation_accuracy"] == max(e["validation_accuracy"] for e in metrics["levels"])
    assert best["test_accuracy"] > 0.8
    # the model written is the best level's, or the global step's where the slice ranked it
    # higher (the step runs when the merge into the last level gained nothing)
    step = metrics.get("global_step") or {}
    if step.get("kept"):
        assert step["validation_accuracy"] > step["level_validation_accuracy"]
        assert metrics["test_accuracy"] == step["test_accuracy"]
    else:
        assert metrics["test_accuracy"] == best["test_accuracy"]
    model = KernelExpansion.load(tmp_path / "model")
    assert model.support_vectors.shape[0] == metrics["n_sv"] > 0
    assert not list(tmp_path.glob(".model*"))  # no temporary directories left behind


@pytest.fixture
def libsvm_files(tmp_path):
    X, y = make_problem(m=400, d=6, seed=41)
    X_test, y_test = make_problem(m=100, d=6, seed=42)
    dump_svmlight_file(X, (y > 0).astype(int), str(tmp_path / "train.svm"), zero_based=False)
    dump_svmlight_file(X_test, (y_test > 0).astype(int), str(tmp_path / "test.svm"), zero_based=False)
    return tmp_path


def test_user_data_in_libsvm_with_labels_zero_one(spark, libsvm_files, capsys):
    metrics = libsvm_files / "metrics.json"
    assert train_sodm.main(["--data", str(libsvm_files / "train.svm"), "--test-data",
                            str(libsvm_files / "test.svm"), "--levels", "1", "--gamma", "0.2",
                            "--metrics-out", str(metrics)]) == 0
    assert json.loads(metrics.read_text())["test_accuracy"] > 0.7
    assert "level partitions" in capsys.readouterr().out
    assert spark.sparkContext.parallelize([1]).count() == 1  # the shared session still runs


def run_expecting_error(argv):
    with pytest.raises(SystemExit) as raised:
        train_sodm.main(argv)
    return str(raised.value.code)


def test_bad_input_is_refused_with_what_and_where(spark, libsvm_files):
    train = str(libsvm_files / "train.svm")
    assert "use levels=5 (--levels 5)" in run_expecting_error(["--data", train, "--levels", "6"])
    assert "p (partitions merged per level) must be an integer >= 2" in run_expecting_error(
        ["--p", "1"])
    assert "levels must be an integer >= 0" in run_expecting_error(["--levels", "-1"])
    missing = run_expecting_error(["--data", str(libsvm_files / "nope.svm")])
    assert "nope.svm" in missing and "libsvm" in missing
    wide = libsvm_files / "wide.svm"
    X, y = make_problem(m=50, d=9, seed=1)
    dump_svmlight_file(X, (y > 0).astype(int), str(wide), zero_based=False)
    message = run_expecting_error(["--data", train, "--test-data", str(wide), "--levels", "1"])
    assert "has 9 features but --data" in message and "has 6" in message
    one_class = libsvm_files / "one.svm"
    dump_svmlight_file(X, np.ones(50), str(one_class), zero_based=False)
    assert "labels hold 1 class" in run_expecting_error(["--data", str(one_class), "--levels", "1"])
    nan = libsvm_files / "nan.svm"
    nan.write_text("1 1:0.5 2:1\n-1 1:nan 2:2\n1 1:3 2:1\n-1 1:1 2:0.1\n")
    message = run_expecting_error(["--data", str(nan), "--levels", "0"])
    assert "nan.svm, line 2: feature 1 (nan) is NaN or infinite" in message  # the line, 1-based
    bad_line = libsvm_files / "bad.svm"
    bad_line.write_text("1 1:0.5 2:1\n-1 2:1 1:2\n")
    message = run_expecting_error(["--data", str(bad_line), "--levels", "0"])
    assert "line 2" in message and "bad.svm" in message


def test_linear_kernel_runs_dsvrg_on_sparse_libsvm(spark, tmp_path, capsys):
    from sodm_spark.data.datasets import make_linear
    X, y = make_linear(1200, 3000, seed=3, density=0.01)
    dump_svmlight_file(X[:1000], (y[:1000] > 0).astype(int), str(tmp_path / "train.svm"),
                       zero_based=False)
    dump_svmlight_file(X[1000:], (y[1000:] > 0).astype(int), str(tmp_path / "test.svm"),
                       zero_based=False)
    metrics = tmp_path / "metrics.json"
    assert train_sodm.main(["--kernel", "linear", "--data", str(tmp_path / "train.svm"),
                            "--test-data", str(tmp_path / "test.svm"), "--lam", "10",
                            "--epochs", "8", "--metrics-out", str(metrics),
                            "--model-out", str(tmp_path / "model")]) == 0
    summary = json.loads(metrics.read_text())
    objectives = [entry["objective"] for entry in summary["epochs"]]
    assert len(objectives) >= 2 and objectives[-1] <= objectives[0]
    assert summary["test_accuracy"] > 0.6
    assert "epoch" in capsys.readouterr().out
    model = KernelExpansion.load(tmp_path / "model")
    assert model.support_vectors.shape == (1, 3000)  # f(x) = wᵀx


def test_linear_kernel_fits_an_intercept_unless_told_not_to(spark, tmp_path):
    """Rows in [0, 1]^8 split at the cube's centre: the default job (intercept on) writes b into
    the model and the metrics and beats --no-intercept (a hyperplane through the origin)."""
    from sodm_spark.data.datasets import make_linear
    X, y = make_linear(3000, 8, seed=5, centred=False)
    for name, part in (("train.svm", slice(0, 2000)), ("test.svm", slice(2000, None))):
        dump_svmlight_file(X[part], (y[part] > 0).astype(int), str(tmp_path / name),
                           zero_based=False)
    runs = {}
    for flags in ([], ["--no-intercept"]):
        out = tmp_path / ("plain" if flags else "bias")
        assert train_sodm.main(["--kernel", "linear", "--data", str(tmp_path / "train.svm"),
                                "--test-data", str(tmp_path / "test.svm"), "--epochs", "15",
                                "--metrics-out", str(out / "metrics.json"),
                                "--model-out", str(out / "model")] + flags) == 0
        runs[bool(flags)] = (json.loads((out / "metrics.json").read_text()),
                             KernelExpansion.load(out / "model"))
    (with_bias, model), (without, plain) = runs[False], runs[True]
    assert model.intercept.shape == (1,) and model.intercept[0] == with_bias["intercept"] != 0.0
    assert with_bias["params"]["fit_intercept"] is True
    assert plain.intercept is None and without["intercept"] == 0.0
    assert with_bias["test_accuracy"] >= without["test_accuracy"] + 0.03


def test_ten_classes_in_libsvm_give_a_ten_column_model(spark, tmp_path):
    """Fashion-MNIST-like labels 0..9: per-level accuracies are K-class accuracies, the model
    holds one coefficient column per class and predicts the labels as given."""
    rng = np.random.default_rng(7)
    centres = rng.normal(scale=2.0, size=(10, 4))
    labels = rng.integers(0, 10, 700)
    X = centres[labels] + rng.normal(size=(700, 4))
    dump_svmlight_file(X[:600], labels[:600], str(tmp_path / "train.svm"), zero_based=False)
    dump_svmlight_file(X[600:], labels[600:], str(tmp_path / "test.svm"), zero_based=False)
    metrics = tmp_path / "metrics.json"
    assert train_sodm.main(["--data", str(tmp_path / "train.svm"), "--test-data",
                            str(tmp_path / "test.svm"), "--levels", "1", "--gamma", "0.2",
                            "--no-auto-stop", "--model-out", str(tmp_path / "model"),
                            "--metrics-out", str(metrics)]) == 0
    model = KernelExpansion.load(tmp_path / "model")
    assert model.coef.shape[1] == 10 and list(model.classes) == list(range(10))
    accuracy = float(np.mean(model.predict(X[600:]) == labels[600:]))
    result = json.loads(metrics.read_text())
    assert result["test_accuracy"] == pytest.approx(accuracy) and accuracy > 0.5
    assert [e["level"] for e in result["levels"]] == [1, 0]
