"""jobs/predict.py and the float32 scoring path against float64 model.predict;
the streamed support-vector blocks and the scoring partitions."""
import dataclasses
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from sklearn.datasets import dump_svmlight_file

from sodm_spark import ODMClassifier
from sodm_spark.core.kernels import Kernel
from sodm_spark.models import scoring
from sodm_spark.models.expansion import KernelExpansion, labels_from_scores
from sodm_spark.models.scoring import NpyRows, SupportSet, raw_scores
from sodm_spark.spark.predict import score_dataframe, scoring_partitions, thread_plan

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
    # the intercept moved so that row 0 lies just above the boundary: far below float32's
    # error (its float32 sign is a coin toss), far above float64's (1e-16 relative)
    X_edge = X[:50]
    shifted = KernelExpansion(sv, coef, kernel, model.classes,
                              intercept=np.array([0.3]) - f[:1] + 1e-10 * np.abs(coef).sum())
    scores, rescored = raw_scores(X, sv, coef, kernel, model.intercept)
    np.testing.assert_allclose(scores[:, 0], f, rtol=0, atol=1e-4 * np.abs(coef).sum())
    assert np.array_equal(labels_from_scores(scores, model.classes), model.predict(X))
    edge_scores, edge_rescored = raw_scores(X_edge, sv, coef, kernel, shifted.intercept)
    assert edge_rescored >= 1  # row 0 sits on the boundary, to float32
    assert shifted.predict(X_edge)[0] == 1.0
    assert np.array_equal(labels_from_scores(edge_scores, model.classes), shifted.predict(X_edge))
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


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """tempfile's directory for the test (the driver's model files go there)."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def model_files_left(folder):
    """The model data a scoring left behind: files with content in ``folder`` (the emptied
    files stay until the interpreter exits, Spark may still fetch them) or among the
    SparkFiles."""
    from pyspark import SparkFiles

    written = [os.path.join(root, name) for root, _, names in os.walk(folder) for name in names]
    fetched = [os.path.join(SparkFiles.getRootDirectory(), name)
               for name in os.listdir(SparkFiles.getRootDirectory())
               if name.startswith("sodm-predict-")]
    return [path for path in written + fetched if os.path.getsize(path)]


@pytest.mark.parametrize("precision", ["float32", "float64"])
@pytest.mark.parametrize("name", ["binary", "three"])
def test_parquet_with_a_key_column_is_scored_as_model_predict(spark, models, tmp_path, name,
                                                              precision, private_tmp,
                                                              monkeypatch):
    from pyspark.ml.linalg import Vectors

    # 2 KB blocks: 4 features in float32 or float64 and ~170 rows per batch make blocks of
    # one to three support vectors, so each score is a sum of over a hundred blocks
    monkeypatch.setattr(scoring, "SV_BLOCK_BYTES", 2048)
    model = KernelExpansion.load(models / name)
    assert model.support_vectors.shape[0] > 100
    X, _ = make_problem(m=500, d=4, seed=72)
    rows = [(int(1000 + i), Vectors.dense(x)) for i, x in enumerate(X)]
    spark.createDataFrame(rows, ["id", "features"]).repartition(3).write.parquet(
        str(tmp_path / "in.parquet"))
    assert predict.main(["--model", str(models / name), "--data", str(tmp_path / "in.parquet"),
                         "--out", str(tmp_path / "out"), "--key-col", "id",
                         "--precision", precision]) == 0
    out = read_output(tmp_path / "out")
    assert list(out.columns) == ["id", "prediction", "rawPrediction"]
    assert list(out["id"]) == list(range(1000, 1500))
    np.testing.assert_array_equal(out["prediction"].to_numpy(), model.predict(X))
    raw = np.stack(out["rawPrediction"].to_numpy())
    f = model.decision_function(X)
    expected = np.stack([-f, f], axis=1) if f.ndim == 1 else f
    atol = 1e-4 * np.abs(model.coef).sum() if precision == "float32" else 1e-10
    np.testing.assert_allclose(raw, expected, rtol=0, atol=atol)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]
    assert not model_files_left(private_tmp)


def test_one_file_is_scored_in_input_order_with_every_core(spark, models, tmp_path,
                                                          private_tmp, monkeypatch):
    import pyarrow as pa

    from sodm_spark.spark import predict as spark_predict

    model = KernelExpansion.load(models / "three")
    X, _ = make_problem(m=600, d=4, seed=77)
    offsets = pa.array(np.arange(0, X.size + 1, 4, dtype=np.int32))
    pq.write_table(pa.table({"features": pa.ListArray.from_arrays(offsets, pa.array(X.ravel()))}),
                   str(tmp_path / "one.parquet"))
    frame = spark.read.parquet(str(tmp_path / "one.parquet"))
    assert frame.rdd.getNumPartitions() == 1
    with score_dataframe(frame, model) as (scored, partitions):
        # no shuffle: its one task gets every core's BLAS threads (thread_plan)
        assert partitions == 1 and scored.rdd.getNumPartitions() == 1
        assert model_files_left(private_tmp)  # the files live while the frame is used
    assert not model_files_left(private_tmp)
    n_support = model.support_vectors.shape[0]  # as if 100 rows were a task's worth
    monkeypatch.setattr(spark_predict, "COUNT_ABOVE_FLOPS_PER_ROW", 0.0)
    monkeypatch.setattr(spark_predict, "SCORING_TASK_FLOPS", 2.0 * n_support * 4 * 100)
    with score_dataframe(frame, model) as (scored, partitions):
        assert partitions == 6 and scored.rdd.getNumPartitions() == 6
    monkeypatch.undo()
    monkeypatch.setattr(tempfile, "tempdir", str(private_tmp))
    assert predict.main(["--model", str(models / "three"), "--data", str(tmp_path / "one.parquet"),
                         "--out", str(tmp_path / "out"),
                         "--metrics-out", str(tmp_path / "metrics.json")]) == 0
    out = read_output(tmp_path / "out")  # sorted by row id: the file's order
    assert list(out["row_id"]) == list(range(600))  # partition 0 of the input, rows 0..599
    np.testing.assert_array_equal(out["prediction"].to_numpy(), model.predict(X))
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["rows"] == 600 and metrics["partitions"] == 1
    assert metrics["rows_per_second"] == pytest.approx(600 / metrics["seconds"])
    assert not model_files_left(private_tmp)


def test_an_expensive_model_gets_short_tasks_and_a_cheap_one_keeps_the_input_s():
    # 2.4 million support vectors of 784 features on one 10,000-row file: 266 rows a task
    assert scoring_partitions(1, 2_400_000, 784, 10_000) == 38
    assert scoring_partitions(1, 5_000, 784, 10_000) == 1  # 7.8e6 flops a row: the input's
    assert scoring_partitions(200, 5_000, 784, 10_000) == 200
    assert scoring_partitions(200, 2_400_000, 784, 10_000) == 200


def test_the_last_wave_of_tasks_shares_the_idle_cores():
    # one busy partition of two (a Parquet file of one row group): all cores to it
    assert thread_plan([10_000, 0], cores=2) == [2, 1]
    assert thread_plan([5, 5], cores=2) == [1, 1]  # a full wave: one thread a task
    assert thread_plan([5, 5, 5], cores=2) == [1, 1, 2]  # the third runs alone
    assert thread_plan([5, 5, 5], cores=4) == [1, 1, 1]  # 4 // 3
    assert thread_plan([0, 7, 0, 7, 7], cores=2) == [1, 1, 1, 1, 2]
    assert thread_plan([0, 0], cores=2) == [1, 1]
    assert thread_plan([9], cores=8, task_cpus=2) == [8]
    assert thread_plan([9, 9], cores=1, task_cpus=2) == [2, 2]


class CountingRows(NpyRows):
    """NpyRows that records the blocks read."""

    def __init__(self, path):
        super().__init__(path)
        self.reads = []

    def __getitem__(self, rows):
        self.reads.append(rows)
        return super().__getitem__(rows)


@pytest.mark.parametrize("kernel", [Kernel.create("rbf", 0.3), Kernel.create("poly", 0.5, 2, 1.0),
                                    Kernel.create("laplacian", 0.2, offset=0.5)],
                         ids=lambda k: k.name)
def test_support_set_files_summed_block_by_block_score_as_decision_function(tmp_path, kernel):
    rng = np.random.default_rng(8)
    sv, coef = rng.normal(size=(257, 5)), rng.normal(size=(257, 3))
    model = KernelExpansion(sv, coef, kernel, np.arange(3.0), intercept=np.array([0.1, 0, -0.1]))
    X = rng.normal(size=(40, 5))
    spec = SupportSet.from_arrays(sv, coef, kernel, model.intercept).save(str(tmp_path), "m-")
    assert spec["names"]["residual"]  # normal draws are not float32 numbers
    opened = SupportSet.open(spec, lambda name: str(tmp_path / name))
    counting = CountingRows(opened.vectors.path)
    opened = dataclasses.replace(opened, vectors=counting)
    f = model.decision_function(X)
    exact, rescored = opened.raw_scores(X, "float64", block_bytes=1024)  # 40 rows: 3 SVs a block
    assert len(counting.reads) == 86 and rescored == 0
    np.testing.assert_allclose(exact, f, rtol=0, atol=1e-12 * np.abs(coef).sum())
    fast, _ = opened.raw_scores(X, "float32", block_bytes=1024)
    np.testing.assert_allclose(fast, f, rtol=0, atol=1e-4 * np.abs(coef).sum())
    np.testing.assert_array_equal(labels_from_scores(fast, model.classes), model.predict(X))


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

    from sodm_spark.estimators.ml import SODMClassificationModel

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


def test_a_missing_feature_value_is_refused_naming_the_line(spark, models, tmp_path,
                                                            private_tmp):
    X, _ = make_problem(m=30, d=4, seed=76)
    lines = ["a,b,c,d"] + [",".join(repr(float(v)) for v in row) for row in X]
    lines[8] = "0.5,,1.0,2.0"  # line 9 has no value in column b
    (tmp_path / "gap.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(SystemExit) as raised:
        predict.main(["--model", str(models / "binary"), "--data", str(tmp_path / "gap.csv"),
                      "--format", "csv", "--out", str(tmp_path / "out")])
    assert "gap.csv, line 9 (format 'csv'): column 'b' (a feature column, column 2 of 4) is " \
        "empty (a missing value)" in str(raised.value.code)
    assert "Remove those rows or fill their cells" in str(raised.value.code)
    assert not (tmp_path / "out").exists()
    assert not model_files_left(private_tmp)  # removed also on failure


def test_a_model_with_feature_scaling_scores_raw_rows_as_model_predict(spark, models, tmp_path,
                                                                       private_tmp):
    from pyspark.ml.linalg import Vectors

    base = KernelExpansion.load(models / "binary")
    rng = np.random.default_rng(79)
    offset, scale = rng.normal(size=4), rng.uniform(0.2, 3.0, size=4)
    scaled = dataclasses.replace(base, feature_offset=offset, feature_scale=scale)
    scaled.save(tmp_path / "scaled")
    X, _ = make_problem(m=200, d=4, seed=79)
    raw_rows = X / scale + offset  # the rows whose scaled values are X
    spark.createDataFrame([(i, Vectors.dense(x)) for i, x in enumerate(raw_rows)],
                          ["id", "features"]).write.parquet(str(tmp_path / "raw.parquet"))
    assert predict.main(["--model", str(tmp_path / "scaled"), "--data",
                         str(tmp_path / "raw.parquet"), "--out", str(tmp_path / "out"),
                         "--key-col", "id"]) == 0
    out = read_output(tmp_path / "out")
    np.testing.assert_array_equal(out["prediction"].to_numpy(), base.predict(X))
    raw = np.stack(out["rawPrediction"].to_numpy())
    np.testing.assert_allclose(raw[:, 1], base.decision_function(X), rtol=0,
                               atol=1e-4 * np.abs(base.coef).sum())


def test_large_coefficients_keep_most_rows_in_float32_and_the_float64_predictions():
    # a compressed model's shape: Σ|α| far above |f|, most kernel values small
    rng = np.random.default_rng(81)
    vectors, X = rng.normal(size=(2000, 6)), rng.normal(size=(600, 6))
    coef = rng.choice([-100.0, 100.0], size=(2000, 1))
    kernel = Kernel.create("rbf", 2.0)
    exact, _ = raw_scores(X, vectors, coef, kernel, precision="float64")
    global_bound = 2 * scoring.FLOAT32_SLACK * np.abs(coef).sum()
    assert np.mean(np.abs(exact[:, 0]) <= global_bound) > 0.5  # the Σ|α| bound: most rows again
    fast, rescored = raw_scores(X, vectors, coef, kernel)
    assert rescored < 0.1 * X.shape[0]  # each row's own Σ|α|k(x, z): few
    np.testing.assert_array_equal(np.sign(fast), np.sign(exact))
    np.testing.assert_allclose(fast, exact, rtol=0, atol=1e-3)


@pytest.mark.parametrize("name", ["rbf", "matern"])  # the radial kernels
@pytest.mark.parametrize("d", [4, 100, 784])
def test_the_radial_slack_bounds_the_float32_error_of_every_row(d, name):
    # the error of f in float32 against float64, row by row, for cancelling coefficients (a
    # compressed model's), within the row's slack times Σ|α|k; the fixed slack is far looser
    # for few features
    rng = np.random.default_rng(d)
    vectors, X = rng.uniform(size=(1500, d)), rng.uniform(size=(400, d))
    coef = rng.normal(scale=1e4, size=(1500, 1))
    kernel = Kernel.create(name, 1.0 / d)
    support = SupportSet.from_arrays(vectors, coef, kernel)
    exact, _ = support._sum(X, np.dtype(np.float64), scoring.SV_BLOCK_BYTES)
    fast, weights = support._sum(X, np.dtype(np.float32), scoring.SV_BLOCK_BYTES, weighted=True)
    slack = scoring.radial_slack(X, kernel.distance_sensitivity, support.sq_norm_max)
    assert np.all(np.abs(fast[:, 0] - exact[:, 0]) <= slack * weights)
    if d <= 100:
        assert np.all(slack < 0.2 * scoring.FLOAT32_SLACK)


def test_float32_kernel_blocks_are_summed_in_float64():
    # cancelling coefficients: a float32 sum of these products loses most digits of f
    rng = np.random.default_rng(5)
    K = rng.uniform(size=(300, 2000)).astype(np.float32)
    coef = rng.normal(scale=1e4, size=(2000, 2))
    coef[:, 0] -= (K.astype(np.float64).mean(axis=0) @ coef[:, 0]) / K.shape[1] \
        / K.astype(np.float64).mean()
    out = np.ones((300, 2))
    scoring.add_float64_products(K, np.ascontiguousarray(coef.T), out)
    exact = 1.0 + K.astype(np.float64) @ coef
    np.testing.assert_allclose(out, exact, rtol=1e-12, atol=1e-12 * np.abs(exact).max())
    in_float32 = K @ coef.astype(np.float32)
    assert np.abs(in_float32 - (exact - 1.0)).max() > 1e3 * np.abs(out - exact).max()


def test_the_input_map_folds_the_scaling_into_the_projection():
    from sodm_spark.models.expansion import InputMap

    rng = np.random.default_rng(6)
    X = rng.uniform(0, 255, size=(50, 12))
    full = InputMap(rng.normal(size=12), rng.uniform(0.5, 2.0, 12), None, rng.normal(size=12),
                    rng.normal(size=(12, 5)))
    for input_map in (full, dataclasses.replace(full, offset=None)):
        stepwise = input_map.projected(input_map.scaled(X))
        np.testing.assert_allclose(input_map(X), stepwise, rtol=1e-12,
                                   atol=1e-12 * np.abs(stepwise).max())
        assert input_map(X.astype(np.float32)).dtype == np.float32


@pytest.mark.parametrize("name", ["rbf", "laplacian", "poly", "linear"])
def test_the_warm_up_scores_a_tiny_support_set_of_the_model_s_kernel(name):
    from sodm_spark.spark.predict import _warm_up_scoring

    warm_up = _warm_up_scoring(Kernel.create(name, 0.5), 7)
    assert list(warm_up(iter([object(), object()]))) == []


def test_a_projected_model_scores_raw_rows_in_the_job_and_in_transform(spark, models, tmp_path,
                                                                       private_tmp):
    from pyspark.ml.linalg import Vectors

    from sodm_spark.estimators.ml import SODMClassificationModel

    # a compressed model's shape: raw rows of 7 features scaled, then projected onto 4
    # orthonormal directions, where the binary model's support vectors live
    base = KernelExpansion.load(models / "binary")
    rng = np.random.default_rng(81)
    components = np.linalg.qr(rng.normal(size=(7, 4)))[0]
    center, offset, scale = rng.normal(size=7), rng.normal(size=7), rng.uniform(0.5, 2.0, 7)
    projected = dataclasses.replace(base, feature_offset=offset, feature_scale=scale,
                                    projection_center=center, projection_components=components)
    projected.save(tmp_path / "projected")
    assert KernelExpansion.load(tmp_path / "projected").n_features_in == 7
    X, _ = make_problem(m=200, d=4, seed=81)
    raw_rows = (X @ components.T + center) / scale + offset  # they project onto X
    frame = spark.createDataFrame([(i, Vectors.dense(x)) for i, x in enumerate(raw_rows)],
                                  ["id", "features"])
    frame.write.parquet(str(tmp_path / "raw.parquet"))
    assert predict.main(["--model", str(tmp_path / "projected"), "--data",
                         str(tmp_path / "raw.parquet"), "--out", str(tmp_path / "out"),
                         "--key-col", "id"]) == 0
    out = read_output(tmp_path / "out")
    np.testing.assert_array_equal(out["prediction"].to_numpy(), base.predict(X))
    raw = np.stack(out["rawPrediction"].to_numpy())
    np.testing.assert_allclose(raw[:, 1], base.decision_function(X), rtol=0,
                               atol=1e-4 * np.abs(base.coef).sum())
    np.testing.assert_allclose(projected.decision_function(raw_rows), base.decision_function(X),
                               rtol=0, atol=1e-8 * np.abs(base.coef).sum())
    transformed = SODMClassificationModel(projected).transform(frame).orderBy("id").collect()
    np.testing.assert_array_equal([r["prediction"] for r in transformed], base.predict(X))
