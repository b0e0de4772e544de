"""The Spark layer on a session without the RDD API (Spark Connect): the records over
DataFrames (sodm_spark.spark.frames) against the RDD operations they stand in for, and the
estimator's fit and transform through a local Spark Connect server against the same fits on
classic Spark, bit for bit (binary and multi-class levels, DSVRG for the linear kernel)."""
import importlib.util
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from sodm_spark.spark.engine import map_with_reports
from sodm_spark.spark.frames import FrameContext, FrameRDD

from conftest import job_env

# The Connect server's tests need grpc (pyspark[connect], which the test extra installs); the
# DataFrame path's tests need none, and run without it.
GRPC_MISSING = importlib.util.find_spec("grpc") is None

ROOT = Path(__file__).resolve().parents[1]

#: name: (data set, SODMClassifier settings), fitted on both kinds of session.
FITS = {
    "binary": ("binary", {"levels": 2, "seed": 3}),
    "classes": ("classes", {"levels": 2, "seed": 3, "strata": 5}),
    "linear": ("binary", {"kernel": "linear", "seed": 3}),
}


def _glom(rdd):
    return [sorted(part) for part in rdd.glom().collect()]


def _frame_glom(records: FrameRDD):
    found = records.mapPartitionsWithIndex(lambda index, it: [(index, sorted(it))]).collect()
    return [part for _, part in sorted(found)]


def test_records_over_dataframes_land_where_the_rdd_operations_put_them(spark):
    """parallelize's slices, partitionBy's key k in partition k, coalesce's consecutive
    ranges, zipWithIndex, runJob on some partitions, reduce: as a SparkContext does them."""
    sc, frames = spark.sparkContext, FrameContext(spark)
    values = list(range(10))
    assert _frame_glom(frames.parallelize(values, 4)) == _glom(sc.parallelize(values, 4))
    pairs = [(k % 5, k) for k in range(23)]
    by_key = frames.parallelize(pairs, 3).partitionBy(5, lambda k: k)
    assert _frame_glom(by_key) == _glom(sc.parallelize(pairs, 3).partitionBy(5, lambda k: k))
    assert all(key == index for index, part in enumerate(_frame_glom(by_key))
               for key, _ in part)
    seven = list(range(14))
    assert _frame_glom(frames.parallelize(seven, 7).coalesce(3)) == \
        _glom(sc.parallelize(seven, 7).coalesce(3))
    assert frames.parallelize(values, 3).zipWithIndex().collect() == \
        sc.parallelize(values, 3).zipWithIndex().collect()
    assert frames.runJob(frames.parallelize(values, 4), lambda it: [sum(it)], [1, 3]) == \
        sc.runJob(sc.parallelize(values, 4), lambda it: [sum(it)], [1, 3])
    assert frames.parallelize(values, 4).treeReduce(lambda a, b: a + b) == 45
    assert frames.parallelize(values, 4).count() == 10
    assert frames.parallelize(values, 2).take(3) == [0, 1, 2]


def test_stages_that_read_part_of_their_input_keep_their_python_workers(spark):
    """A Python worker that leaves its task's input unread exits instead of going back to the
    pool, and the next task pays a new interpreter's imports: the stages of a runJob that asks
    for some partitions, of take, and of a function that reads one record read their input
    to the end, so the same workers serve the stage after them."""
    frames = FrameContext(spark)
    records = frames.parallelize(range(600), 6)

    def workers():
        return set(records.mapPartitions(lambda it: [os.getpid(), sum(it)][:1]).collect())

    before = workers() | workers()  # the pool's workers (both task slots busy)
    assert frames.runJob(records, lambda it: [next(iter(it))], partitions=[1, 4]) == [100, 400]
    assert records.take(2) == [0, 1]
    assert records.mapPartitions(lambda it: [next(iter(it))]).collect()[:2] == [0, 100]
    assert workers() <= before


def test_the_salts_are_the_smallest_values_spark_sends_to_each_partition(spark):
    """FrameContext.salts, computed without a query: for each partition count, value k lands
    in partition k by Spark's own pmod(hash(v), n), and no smaller value does; a count beyond
    the first 4,096 ids (1,000: 8,000 ids) looks further."""
    from pyspark.sql import functions as F

    frames = FrameContext(spark)
    for n in (1, 2, 3, 27, 64, 300, 1000):
        salts = frames.salts(n)
        ids = spark.range(0, max(salts) + 1).select(
            "id", F.expr(f"pmod(hash(id), {n})").alias("k")).collect()
        smallest: dict = {}
        for row in sorted(ids, key=lambda row: row["id"]):
            smallest.setdefault(int(row["k"]), int(row["id"]))
        assert salts == [smallest[k] for k in range(n)], n


def test_spark_s_hash_of_longs_is_computed_here_bit_for_bit(spark):
    """spark_long_hashes against Spark's own F.hash of a long column: the ids the salts
    use, negative values, both words' edges and random 64-bit values."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StructField, StructType

    from sodm_spark.spark.frames import spark_long_hashes

    rng = np.random.default_rng(7)
    values = np.concatenate([
        np.arange(-50, 5000), [2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1, -2**63, -2**31],
        rng.integers(-2**63, 2**63 - 1, size=2000, dtype=np.int64)]).astype(np.int64)
    frame = spark.createDataFrame([(int(v),) for v in values],
                                  StructType([StructField("v", LongType())]))
    theirs = {int(row["v"]): int(row["h"])
              for row in frame.select("v", F.hash("v").alias("h")).collect()}
    ours = spark_long_hashes(values)
    assert ours.dtype == np.int32
    assert [int(h) for h in ours] == [theirs[int(v)] for v in values]


def test_the_default_parallelism_is_the_local_master_s_or_probed(spark):
    """local[N] names its task slots (no query); other masters are probed with one job whose
    partitions a range without a count is cut into: both give SparkContext's figure."""
    from sodm_spark.spark.frames import _probed_partitions, local_cores

    assert [local_cores(m) for m in ("local", "local[3]", "local[4,2]", "local[*]",
                                     "spark://host:7077", "yarn", "")] == \
        [1, 3, 4, None, None, None, None]
    assert FrameContext(spark).defaultParallelism == spark.sparkContext.defaultParallelism == 2
    assert _probed_partitions(spark.range(0, 1 << 16)) == 2


def test_rows_a_shuffle_sent_to_another_partition_are_refused(spark):
    """A server that placed rows by another hash than Spark's: the stage reading them stops
    and says why, instead of fitting on records in the wrong partitions."""
    from pyspark.errors import PythonException
    from pyspark.sql import functions as F

    frames = FrameContext(spark)
    shuffled = frames.parallelize([(k % 4, k) for k in range(40)], 2).partitionBy(4)
    assert sorted(shuffled.values().collect()) == list(range(40))  # placed as the salts say
    # the same rows with their part column shifted by one, as a foreign hash would leave them
    moved = FrameRDD(frames, shuffled.base.withColumn("part", (F.col("part") + 1) % 4), 4,
                     placed=True)
    with pytest.raises(PythonException, match="does not place rows by Spark's hash"):
        moved.values().collect()


def test_reports_come_back_beside_the_data_as_an_accumulator_s_would(spark):
    """map_with_reports: the same records and reports on DataFrames as through an
    accumulator; records that were unpersisted refuse to be read."""
    def fn(records, report):
        records = list(records)
        report({records[0]: len(records)})
        yield from (r * 2 for r in records)

    sc, frames = spark.sparkContext, FrameContext(spark)
    data, reports = map_with_reports(sc, sc.parallelize(range(12), 3), fn)
    frame_data, frame_reports = map_with_reports(frames, frames.parallelize(range(12), 3), fn)
    assert frame_reports == reports == {0: 4, 4: 4, 8: 4}
    assert frame_data.collect() == data.collect()
    frame_data.unpersist()
    with pytest.raises(RuntimeError, match="unpersisted"):
        frame_data.collect()


@pytest.fixture(scope="module")
def connect_data(spark, tmp_path_factory) -> Path:
    """The two data sets the Connect tests fit (1000 rows each: ``binary``, two classes, and
    ``classes``, three), written once as Parquet by the classic session; the tests only read
    them."""
    from sklearn.datasets import make_classification

    folder = tmp_path_factory.mktemp("connect-data")
    for name, classes in (("binary", 2), ("classes", 3)):
        X, y = make_classification(n_samples=1000, n_features=6, n_informative=4,
                                   n_classes=classes, random_state=11)
        rows = [(float(label), [float(v) for v in row]) for row, label in zip(X, y)]
        spark.createDataFrame(rows, "label double, features array<double>") \
            .repartition(3).write.parquet(str(folder / name))
    return folder


@contextmanager
def _beside(process: subprocess.Popen):
    """``with _beside(Popen(...)) as process:`` the test's classic work while ``process``
    runs; leaving the block (also on a failure) kills it if it is still running."""
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


def _succeeded(process: subprocess.Popen) -> tuple[str, str]:
    """(stdout, stderr) of ``process`` once it has ended, with exit code 0."""
    stdout, stderr = process.communicate(timeout=900)
    assert process.returncode == 0, ((stdout or "") + stderr)[-3000:]
    return stdout, stderr


@pytest.mark.skipif(GRPC_MISSING, reason="pyspark[connect] is not installed")
def test_the_estimator_fits_and_transforms_the_same_through_spark_connect(
        spark, connect_data, connect_url, tmp_path):
    """SODMClassifier on a local Spark Connect server: the same support vectors,
    coefficients, raw predictions and predictions as on classic Spark for the levels (two
    classes, three) and DSVRG (kernel='linear'); a model saved through Connect reads back
    the same on both."""
    from sodm_spark.estimators.ml import SODMClassificationModel, SODMClassifier

    # the Connect client fits on the shared server while this process fits on classic Spark
    with _beside(subprocess.Popen([sys.executable, str(ROOT / "tests" / "connect_client.py"),
                                   connect_url, str(connect_data), str(tmp_path)], env=job_env(),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True)) as client:
        classic = {}
        for name, (data, settings) in FITS.items():
            df = spark.read.parquet(str(connect_data / data))
            model = SODMClassifier(**settings).fit(df)
            scored = model.transform(df).select("rawPrediction", "prediction").toPandas()
            labels = df.select("label").toPandas()["label"].to_numpy()
            classic[name] = model, scored, labels
        _succeeded(client)
    remote = np.load(tmp_path / "connect.npz")
    for name, (model, scored, labels) in classic.items():
        assert np.array_equal(remote[f"{name}_sv"], model.expansion.support_vectors), name
        assert np.array_equal(remote[f"{name}_coef"], model.expansion.coef), name
        np.testing.assert_array_equal(
            remote[f"{name}_raw"], np.stack([v.toArray() for v in scored["rawPrediction"]]))
        np.testing.assert_array_equal(remote[f"{name}_prediction"],
                                      scored["prediction"].to_numpy())
        assert np.mean(scored["prediction"].to_numpy() == labels) > 0.7, name
        if name == "binary":
            saved = SODMClassificationModel.load(str(tmp_path / "model_connect"))
            assert np.array_equal(saved.expansion.coef, model.expansion.coef)
            np.testing.assert_array_equal(remote["binary_reloaded"],
                                          scored["prediction"].to_numpy())


def _connect_job(module: str, master: str, argv: list[str], cwd: Path) -> subprocess.Popen:
    """A job run as a user runs it against a Spark Connect server (``--master``: the shared
    server's ``sc://`` URL, or ``connect:local[2]``, a local server of the job's own), started
    beside the test's classic work (:func:`_beside`)."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    return subprocess.Popen([sys.executable, "-m", module, "--master", master, *argv],
                            env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _connect_output(job: subprocess.Popen) -> str:
    """The console output of a :func:`_connect_job`, which must succeed and print no trace
    or error."""
    stdout, stderr = _succeeded(job)
    assert "Traceback" not in stderr and "ERROR" not in stderr, stderr[-3000:]
    return stdout


@pytest.mark.skipif(GRPC_MISSING, reason="pyspark[connect] is not installed")
def test_the_train_and_predict_jobs_give_the_same_model_and_predictions_on_spark_connect(
        spark, connect_data, connect_url, tmp_path):
    """sodm-train (its default search first, then the levels) through a Spark Connect server
    (the run's shared one) and sodm-predict with ``--master connect:local[2]`` (a server of
    the job's own, as a user starts one): the model and the predictions of the same jobs run
    on classic Spark."""
    import pandas as pd

    from sodm_spark.jobs import predict, train_sodm
    from sodm_spark.models.expansion import KernelExpansion

    data = str(connect_data / "binary")
    # --stop-level 1: whether a cheap level 0 runs depends on the seconds spent so far
    # (stopping.CHEAP_LEVEL_SHARE), which differ between the two sessions
    train = ["--data", data, "--format", "parquet", "--levels", "2", "--stop-level", "1",
             "--seed", "5"]
    # each Connect job runs while this process runs the same job on classic Spark
    with _beside(_connect_job("sodm_spark.jobs.train_sodm", connect_url,
                              [*train, "--model-out", str(tmp_path / "connect_model")],
                              tmp_path)) as job:
        assert train_sodm.main([*train, "--model-out", str(tmp_path / "classic_model")]) == 0
        printed = _connect_output(job)
    assert "search" in printed and "model written to" in printed
    with _beside(_connect_job("sodm_spark.jobs.predict", "connect:local[2]",
                              ["--model", str(tmp_path / "connect_model"), "--data", data,
                               "--out", str(tmp_path / "connect_scores")], tmp_path)) as job:
        assert predict.main(["--model", str(tmp_path / "classic_model"), "--data", data,
                             "--out", str(tmp_path / "classic_scores")]) == 0
        _connect_output(job)
    remote, local = (KernelExpansion.load(str(tmp_path / f"{kind}_model"))
                     for kind in ("connect", "classic"))
    assert np.array_equal(remote.support_vectors, local.support_vectors)
    assert np.array_equal(remote.coef, local.coef) and remote.kernel == local.kernel
    scores = [pd.read_parquet(tmp_path / f"{kind}_scores").sort_values("row_id")
              .reset_index(drop=True) for kind in ("connect", "classic")]
    pd.testing.assert_frame_equal(scores[0], scores[1])
    assert len(scores[0]) == 1000
