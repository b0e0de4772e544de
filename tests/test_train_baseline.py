"""jobs/train_baseline.py: every comparator as one Spark task, with the metrics of train_sodm."""
import json
import sys
from pathlib import Path

import pytest

from sodm_spark.models.expansion import KernelExpansion

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "jobs"))
import train_baseline  # noqa: E402

METHOD_FLAGS = {
    "csvrg": ["--max-core", "200", "--epochs", "10", "--lam", "100"],
    "cvm": ["--C", "10"],
    "cvr": [],
    "coreset-svm": ["--coreset-size", "300", "--C", "10", "--kernel", "rbf"],
}


@pytest.mark.parametrize("method", sorted(METHOD_FLAGS))
def test_each_method_trains_saves_and_reports(spark, tmp_path, method, capsys):
    code = train_baseline.main(["--method", method, "--rows", "1200", "--seed", "3",
                                "--model-out", str(tmp_path / "model"),
                                "--metrics-out", str(tmp_path / "metrics.json"),
                                *METHOD_FLAGS[method]])
    assert code == 0
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    model = KernelExpansion.load(tmp_path / "model")
    assert metrics["method"] == method and metrics["train_seconds"] > 0
    assert metrics["n_sv"] == model.support_vectors.shape[0] > 0
    if method == "cvr":
        assert model.is_regression
        # Friedman #1 targets lie in about [0, 30]; a useful model is far below predicting 0
        assert metrics["test_rmse"] < 3.0 and 0 < metrics["test_mre"] < 0.5
        assert "test_accuracy" not in metrics
    else:  # the built-in set; a linear model gets ~0.5, exact kernel methods ~0.9
        assert metrics["test_accuracy"] > (0.7 if method == "coreset-svm" else 0.8)
    assert "config:" in capsys.readouterr().out


def test_coreset_svm_merge_and_reduce_over_partitions(spark, tmp_path):
    code = train_baseline.main(["--method", "coreset-svm", "--rows", "2000", "--partitions", "4",
                                "--coreset-size", "300", "--C", "10", "--kernel", "rbf",
                                "--metrics-out", str(tmp_path / "m.json")])
    assert code == 0
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert metrics["test_accuracy"] > 0.7 and 0 < metrics["n_coreset"] <= 300


def test_bad_flags_and_data(spark, tmp_path):
    with pytest.raises(SystemExit):
        train_baseline.main(["--method", "svm"])
    with pytest.raises(SystemExit):
        train_baseline.main(["--method", "csvrg", "--partitions", "3"])
    (tmp_path / "bad.libsvm").write_text("1 1:0.5\n0 1:nan\n")
    with pytest.raises(SystemExit, match="NaN|nan"):
        train_baseline.main(["--method", "csvrg", "--data", str(tmp_path / "bad.libsvm")])
