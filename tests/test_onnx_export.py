"""The ONNX export (sodm_spark.models.onnx_export, sodm_spark/jobs/export_onnx.py): onnxruntime's
decision values against ``KernelExpansion.decision_function`` on 10,000 raw rows per model (and
a brute-force numpy kernel for one), its labels against ``predict``, its probabilities against
``predict_proba``; the job end to end. Relative difference: the largest |Δf| of an output
column over the largest |f| of that column, the worst column. Skipped without onnxruntime
(``pip install "sodm-spark[onnx]"``).
"""
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse
from sklearn.gaussian_process.kernels import Matern

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from sodm_spark import ODMClassifier  # noqa: E402
from sodm_spark.core.errors import run_job  # noqa: E402
from sodm_spark.core.kernels import Kernel  # noqa: E402
from sodm_spark.data.storage import join, replace_versioned  # noqa: E402
from sodm_spark.jobs import export_onnx as job  # noqa: E402
from sodm_spark.models import calibration, onnx_export  # noqa: E402
from sodm_spark.models.expansion import KernelExpansion  # noqa: E402
from sodm_spark.models.input_projection import fit_input_projection  # noqa: E402
from sodm_spark.models.onnx_export import save_onnx, to_onnx  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ROWS = 10_000
#: What the export promises (module docstring); it measures about 1e-15.
TOLERANCE = 1e-4


def _outputs(model, X, **options) -> dict:
    session = ort.InferenceSession(to_onnx(model, **options).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    rows = X.astype(np.float32 if options.get("input_type") == "float" else np.float64)
    names = [output.name for output in session.get_outputs()]
    return dict(zip(names, session.run(None, {"features": rows})))


def relative_difference(got, want) -> float:
    got, want = (np.asarray(a, dtype=np.float64).reshape(len(a), -1) for a in (got, want))
    return float(np.max(np.abs(got - want).max(axis=0) / np.abs(want).max(axis=0)))


def _agrees(model, X, **options) -> dict:
    """onnxruntime's outputs of ``model`` on ``X``, checked against the model's own."""
    out = _outputs(model, X, **options)
    f = model.decision_function(X)
    assert out["scores"].shape == f.shape
    assert relative_difference(out["scores"], f) < TOLERANCE
    if model.is_regression:
        assert set(out) == {"scores"}
    else:
        np.testing.assert_array_equal(out["label"], model.predict(X))
    if model.calibration is not None and options.get("probabilities", True):
        np.testing.assert_allclose(out["probabilities"], model.predict_proba(X), atol=1e-9)
    else:
        assert "probabilities" not in out
    return out


def _min_max(X):
    low, high = X.min(axis=0), X.max(axis=0)
    return low, 1.0 / np.where(high > low, high - low, 1.0)


def _rows(seed=0, d=8, n=ROWS, shift=3.0, spread=5.0):
    """Raw rows far from [0, 1] (so that a missing scaling shows), and a sample of them."""
    rng = np.random.default_rng(seed)
    return shift + spread * rng.normal(size=(n, d))


def test_rbf_with_min_max_scaling_is_the_brute_force_kernel_sum():
    X = _rows(0)
    offset, scale = _min_max(X)
    rng = np.random.default_rng(1)
    support = (X[rng.choice(ROWS, 400, replace=False)] - offset) * scale
    coef = rng.normal(size=(400, 1))
    model = KernelExpansion(support, coef, Kernel.create("rbf", 2.0), np.array([0, 1]),
                            feature_offset=offset, feature_scale=scale)
    # an intercept that splits the rows between the two labels
    model = replace(model, intercept=-np.median(model.decision_function(X), keepdims=True))
    out = _agrees(model, X)
    # independent of sodm_spark.core.kernels: exp(−γ‖u − z‖²) summed row by row
    inputs = (X - offset) * scale
    brute = np.array([np.exp(-2.0 * ((support - u) ** 2).sum(axis=1)) @ coef[:, 0]
                      for u in inputs]) + model.intercept
    assert relative_difference(out["scores"], brute) < 1e-12
    assert set(out["label"]) == {0, 1} and out["label"].dtype == np.int64


def test_poly_kernel_with_an_offset_and_float32_rows():
    X = _rows(2, d=6, shift=0.0, spread=1.0)
    rng = np.random.default_rng(3)
    model = KernelExpansion(rng.normal(size=(300, 6)), rng.normal(size=(300, 1)),
                            Kernel.create("poly", 0.4, degree=3, coef0=1.0, offset=2.5),
                            np.array([-1.0, 1.0]))
    _agrees(model, X)
    float_rows = X.astype(np.float32).astype(np.float64)
    out = _outputs(model, X, input_type="float")
    assert relative_difference(out["scores"], model.decision_function(float_rows)) < TOLERANCE


def test_linear_kernel_with_an_intercept_from_odm_classifier():
    rng = np.random.default_rng(4)
    X_train = rng.normal(size=(400, 10))
    y = np.where(X_train[:, 0] - 0.5 * X_train[:, 3] + 0.8 > 0, "yes", "no")
    model = ODMClassifier(kernel="linear", random_state=0).fit(X_train, y).model_
    assert model.intercept is not None and np.any(model.intercept)
    _agrees(model, rng.normal(size=(ROWS, 10)))


def test_three_classes_one_vs_rest_with_string_labels_and_probabilities():
    rng = np.random.default_rng(5)
    X_train = rng.normal(size=(300, 4))
    y = np.array(["setosa", "versicolor", "virginica"])[
        np.digitize(X_train[:, 0] + 0.3 * X_train[:, 1], [-0.5, 0.5])]
    model = ODMClassifier(kernel="rbf", random_state=0).fit(X_train, y).model_
    X = rng.normal(size=(ROWS, 4))
    held = rng.normal(size=(500, 4))
    model = model.calibrated(held, np.array(model.classes)[
        np.digitize(held[:, 0] + 0.3 * held[:, 1] + 0.3 * rng.normal(size=500), [-0.5, 0.5])])
    out = _agrees(model, X)
    assert out["scores"].shape == (ROWS, 3) and out["probabilities"].shape == (ROWS, 3)
    np.testing.assert_allclose(out["probabilities"].sum(axis=1), 1.0, atol=1e-12)
    # a tie goes to the first largest score, as numpy's argmax
    tied = replace(model, support_vectors=model.support_vectors[:1],
                   coef=np.zeros((1, 3)), intercept=np.array([0.5, 0.5, 0.1]))
    assert set(_agrees(tied, X[:10], probabilities=False)["label"]) == {"setosa"}


def test_binary_probabilities_and_a_model_left_uncalibrated():
    X = _rows(6, d=5, shift=0.0, spread=1.0)
    rng = np.random.default_rng(7)
    model = KernelExpansion(rng.normal(size=(200, 5)), rng.normal(size=(200, 1)),
                            Kernel.create("rbf", 0.5), np.array([3, 8]))
    held = rng.normal(size=(600, 5))
    labels = np.where(model.decision_function(held) + rng.normal(size=600) > 0, 8, 3)
    calibrated = model.calibrated(held, labels)
    assert _agrees(calibrated, X)["probabilities"].shape == (ROWS, 2)
    _agrees(calibrated, X, probabilities=False)
    _agrees(model, X)


@pytest.mark.parametrize("outputs", [1, 3])
def test_isotonic_probabilities(outputs):
    X = _rows(8, d=5, shift=0.0, spread=1.0)
    rng = np.random.default_rng(9)
    classes = np.array([0, 1]) if outputs == 1 else np.array([2, 4, 6])
    model = KernelExpansion(rng.normal(size=(200, 5)), rng.normal(size=(200, outputs)),
                            Kernel.create("rbf", 0.5), classes)
    held = rng.normal(size=(2000, 5))
    labels = model.predict(held)
    noisy = rng.random(2000) < 0.3
    labels[noisy] = rng.choice(classes, noisy.sum())
    # the thresholds themselves too: where the maps change
    thresholds = model.calibrated(held, labels, method="isotonic")
    rows = np.vstack([X, held[:200]])
    _agrees(thresholds, rows)


def test_an_unknown_calibration_is_refused_in_one_line():
    class Beta:
        def to_dict(self):
            return {"method": "beta"}

    rng = np.random.default_rng(10)
    model = KernelExpansion(rng.normal(size=(5, 3)), rng.normal(size=(5, 1)),
                            Kernel.create("rbf", 1.0), np.array([0, 1]), calibration=Beta())
    with pytest.raises(ValueError, match="'beta' calibration has no ONNX export.*probabilit"):
        to_onnx(model)
    assert "probabilities" not in _outputs(model, rng.normal(size=(4, 3)), probabilities=False)


def _near_subspace(n, d=300, latent=12, seed=11):
    rng = np.random.default_rng(seed)
    return 10.0 + rng.normal(size=(n, latent)) @ rng.normal(size=(latent, d)) \
        + 0.05 * rng.normal(size=(n, d))


def test_a_projection_of_the_fit_and_of_a_compression_in_the_graph():
    X = _near_subspace(ROWS)
    offset, scale = _min_max(X)
    scaled = (X[:600] - offset) * scale
    kernel = Kernel.create("rbf", 1.0 / (300 * scaled.var()))
    rng = np.random.default_rng(12)
    coef = rng.normal(size=(600, 1))
    # the fit's map (sodm_spark.spark.sodm.prepare): support vectors stored projected
    projection, report = fit_input_projection(scaled, kernel, 300)
    assert projection is not None, report
    fitted = KernelExpansion(projection.projected(scaled), coef, kernel, np.array([0, 1]),
                             feature_offset=offset, feature_scale=scale,
                             projection_center=projection.center,
                             projection_components=projection.components)
    _agrees(fitted, X)
    # a compression's map of a model of raw (scaled) rows
    raw = KernelExpansion(scaled, coef, kernel, np.array([0, 1]), feature_offset=offset,
                          feature_scale=scale)
    compressed = raw.compress(250, method="random", seed=0)
    assert compressed.projection_components is not None
    _agrees(compressed, X)


def test_max_abs_scaling_of_some_columns_and_sparse_support_vectors():
    rng = np.random.default_rng(13)
    X = rng.normal(size=(ROWS, 20)) * (rng.random((ROWS, 20)) < 0.3)
    support = scipy.sparse.random(150, 20, density=0.3, format="csr", random_state=14)
    columns = np.array([1, 4, 9, 17])
    model = KernelExpansion(support, rng.normal(size=(150, 1)), Kernel.create("rbf", 0.1),
                            np.array([0, 1]), feature_scale=np.array([0.5, 2.0, 3.0, 0.1]),
                            feature_columns=columns)
    _agrees(model, X)


def test_sparse_support_vectors_too_large_to_densify_are_refused(monkeypatch):
    monkeypatch.setattr(onnx_export, "MAX_DENSE_CELLS", 100)
    support = scipy.sparse.random(20, 10, density=0.3, format="csr", random_state=0)
    model = KernelExpansion(support, np.ones((20, 1)), Kernel.create("linear"), np.array([0, 1]))
    with pytest.raises(ValueError, match="sparse.*compress the model"):
        to_onnx(model)


def test_laplacian_kernel_in_blocks_with_an_offset_and_padding():
    X = _rows(15, d=7, shift=0.0, spread=1.0)
    rng = np.random.default_rng(16)
    # 1,000 vectors in blocks of 1024 // 7 = 146: the last block padded
    model = KernelExpansion(rng.normal(size=(1000, 7)), rng.normal(size=(1000, 2)),
                            Kernel.create("laplacian", 0.3, offset=0.7), np.array([0, 1, 2]),
                            intercept=np.array([0.1, -0.2]))
    # two outputs: argmax of the two, as predict reads them
    _agrees(replace(model, classes=np.array([0, 1])), X)
    # a regression model: its scores alone
    _agrees(replace(model, coef=model.coef[:, :1], intercept=None, classes=np.array([])), X)


def test_matern_kernel_with_an_offset_is_scikit_learn_s_kernel_sum():
    X = _rows(19, d=6, shift=0.0, spread=1.0)
    rng = np.random.default_rng(20)
    # support vectors among the rows: x = z, where the graph clamps the rounded t² at 0
    support, coef = X[rng.choice(ROWS, 300, replace=False)], rng.normal(size=(300, 1))
    model = KernelExpansion(support, coef, Kernel.create("matern", 0.3, offset=0.5),
                            np.array([0, 1]))
    model = replace(model, intercept=-np.median(model.decision_function(X), keepdims=True))
    out = _agrees(model, X)
    # independent of sodm_spark.core.kernels: scikit-learn's Matérn kernel, ℓ = 1/√γ
    brute = Matern(length_scale=0.3 ** -0.5, nu=1.5)(X, support) @ coef[:, 0] \
        + 0.5 * coef.sum() + model.intercept
    assert relative_difference(out["scores"], brute) < 1e-12
    assert np.isfinite(out["scores"]).all() and set(out["label"]) == {0, 1}
    out = _outputs(model, X, input_type="float")
    float_rows = X.astype(np.float32).astype(np.float64)
    assert relative_difference(out["scores"], model.decision_function(float_rows)) < TOLERANCE


def test_a_model_without_support_vectors_is_its_intercept():
    model = KernelExpansion(np.zeros((0, 3)), np.zeros((0, 1)), Kernel.create("rbf", 1.0),
                            np.array([0, 1]), intercept=np.array([-0.25]))
    out = _agrees(model, np.ones((5, 3)))
    np.testing.assert_array_equal(out["scores"], -0.25)


# --- the job -------------------------------------------------------------------------------

def _saved(tmp_path):
    rng = np.random.default_rng(17)
    X = _rows(18, d=4, n=300)
    offset, scale = _min_max(X)
    model = KernelExpansion((X[:120] - offset) * scale, rng.normal(size=(120, 1)),
                            Kernel.create("rbf", 1.5), np.array([0, 1]), feature_offset=offset,
                            feature_scale=scale)
    model = model.calibrated(X[120:], rng.choice([0, 1], 180))
    folder = tmp_path / "model"
    model.save(folder)
    return model, folder, X


def test_the_job_writes_a_file_onnxruntime_scores_like_the_model(tmp_path, capsys):
    model, folder, X = _saved(tmp_path)
    out = tmp_path / "model.onnx"
    assert run_job(job.main, [str(folder), str(out)]) == 0
    line = capsys.readouterr().out
    assert line.startswith(f"wrote {out}") and "label, scores, probabilities" in line
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    assert session.get_inputs()[0].shape == ["batch", 4]
    label, scores, probabilities = session.run(None, {"features": X})
    assert relative_difference(scores, model.decision_function(X)) < TOLERANCE
    np.testing.assert_array_equal(label, model.predict(X))
    np.testing.assert_allclose(probabilities, model.predict_proba(X), atol=1e-9)
    # an existing file: refused in one line, kept; --overwrite replaces it
    before = out.read_bytes()
    assert run_job(job.main, [str(folder), str(out), "--no-probabilities"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "exists; pass --overwrite" in error
    assert out.read_bytes() == before
    assert run_job(job.main, [str(folder), str(out), "--overwrite", "--no-probabilities",
                              "--input-type", "float"]) == 0
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    assert [o.name for o in session.get_outputs()] == ["label", "scores"]


def test_the_job_reads_a_saved_pyspark_ml_model_folder(tmp_path):
    """The layout of estimators/ml_persistence.py (Spark ML metadata beside ``data``), written
    here without Spark."""
    model, _, X = _saved(tmp_path)
    path = tmp_path / "sodm-ml"

    def write(store, folder):
        store.write_bytes(join(folder, "metadata", "part-00000"),
                          b'{"class": "sodm_spark.ml.SODMClassificationModel"}')
        model.write_files(store, join(folder, "data"))

    replace_versioned(str(path), write, flat_names=("data",))
    out = tmp_path / "ml.onnx"
    assert run_job(job.main, [str(path), str(out)]) == 0
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    assert relative_difference(session.run(["scores"], {"features": X})[0],
                               model.decision_function(X)) < TOLERANCE


def test_the_job_refuses_a_missing_model_and_names_the_missing_onnx(tmp_path, capsys,
                                                                     monkeypatch):
    out = tmp_path / "model.onnx"
    assert run_job(job.main, [str(tmp_path / "nowhere"), str(out)]) == 5
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "nowhere is not a saved model" in error
    assert not out.exists()

    def missing():
        raise ImportError(f"ONNX export needs the onnx package: {onnx_export.INSTALL_HINT}")

    monkeypatch.setattr(job, "import_onnx", missing)
    assert run_job(job.main, [str(tmp_path / "nowhere"), str(out)]) == 2
    assert 'pip install "sodm-spark[onnx]"' in capsys.readouterr().err


def test_python_m_runs_the_job_and_the_repository_file_names_it(tmp_path):
    out = tmp_path / "taken.onnx"
    out.write_bytes(b"")
    result = subprocess.run([sys.executable, "-m", "sodm_spark.jobs.export_onnx",
                             str(tmp_path), str(out)], capture_output=True, text=True,
                            cwd=ROOT, timeout=120)
    assert result.returncode == 2 and result.stderr.startswith("error: OUT"), result.stderr
    assert "from sodm_spark.jobs.export_onnx import" in (ROOT / "jobs" /
                                                         "export_onnx.py").read_text()


def test_save_onnx_writes_the_file_and_returns_the_outputs(tmp_path):
    rng = np.random.default_rng(19)
    model = KernelExpansion(rng.normal(size=(5, 2)), rng.normal(size=(5, 1)),
                            Kernel.create("linear"), np.array([0, 1]))
    path = tmp_path / "linear.onnx"
    assert save_onnx(model, path) == ["label", "scores"]
    assert path.read_bytes() == to_onnx(model).SerializeToString()


def test_isotonic_maps_with_one_point_and_a_repeated_last_threshold():
    rng = np.random.default_rng(20)
    model = KernelExpansion(rng.normal(size=(50, 3)), rng.normal(size=(50, 3)),
                            Kernel.create("rbf", 0.5), np.array([0, 1, 2]))
    X = rng.normal(size=(2000, 3))
    f = model.decision_function(X)
    maps = calibration.IsotonicCalibration(
        (np.array([0.0]), np.array([-0.5, 0.0, 0.2, 0.2]), np.quantile(f[:, 2], [0.2, 0.8])),
        (np.array([0.4]), np.array([0.1, 0.3, 0.6, 0.9]), np.array([0.2, 0.7])))
    assert (f[:, 1] > 0.2).any() and (f[:, 1] < -0.5).any()  # beyond both ends
    _agrees(replace(model, calibration=maps), X)
