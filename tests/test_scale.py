"""What makes large data the normal case: bounded blocks and chunks, the level count chosen from
the rows, the checks before the work, scoring inside the tasks, compression before the model
reaches the driver, and the deformed Fashion-MNIST generator."""
import json
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import make_problem
from sodm_spark.core.kernels import Kernel, decision_values
from sodm_spark.data.big_data import deformed_fashion_mnist
from sodm_spark.data.datasets import FASHION_MNIST_DIR, load_fashion_mnist
from sodm_spark.models import compression
from sodm_spark.models.expansion import KernelExpansion
from sodm_spark.solvers.local_solve import LocalSolve
from sodm_spark.spark.io import MAX_BLOCK_BYTES, read_blocks
from sodm_spark.spark.memory import ExecutorMemory, MemoryBudgetError, check_fit_resources
from sodm_spark.spark.partitioning import CHUNK_BYTES, Chunk, as_chunks, assemble
from sodm_spark.spark.io import numpy_to_blocks
from sodm_spark.spark.sodm import level_model
from sodm_spark.spark.sodm.fit import fit_sodm
from sodm_spark.spark.sodm.params import SODMParams
from sodm_spark.spark.sodm.plan import (KERNEL_BOUND_FEATURES, auto_level_count, auto_levels,
                                        cached_level_count, largest_levels)
from sodm_spark.spark.engine import ReportsParam
from sodm_spark.spark.sodm.tasks import FitTargets, LevelTaskSettings, solve_partitions

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "jobs"))
import train_sodm  # noqa: E402


def test_parquet_rows_arrive_in_bounded_float32_blocks(spark, tmp_path):
    # 6,000 rows × 800 float64 features: 38 MB in one Parquet file, more than two blocks' worth
    rng = np.random.default_rng(3)
    X = rng.random((6000, 800))
    y = np.where(rng.random(6000) > 0.5, 1.0, 0.0)
    table = pa.table({"label": y, "features": pa.FixedSizeListArray.from_arrays(
        pa.array(X.ravel()), 800).cast(pa.list_(pa.float64()))})
    pq.write_table(table, tmp_path / "rows.parquet")
    for dtype in (np.float64, np.float32):
        blocks, d = read_blocks(spark, str(tmp_path / "rows.parquet"), "parquet", dtype=dtype)
        pieces = blocks.collect()
        assert d == 800 and len(pieces) >= (3 if dtype == np.float64 else 2)
        assert all(piece.X.nbytes <= MAX_BLOCK_BYTES and piece.X.dtype == dtype
                   for piece in pieces)
        ids = np.concatenate([piece.row_ids for piece in pieces])
        got = np.concatenate([piece.X for piece in pieces])[np.argsort(ids)]
        np.testing.assert_array_equal(got, X.astype(dtype))


def test_a_partition_travels_as_bounded_chunks_and_reassembles_in_order():
    rng = np.random.default_rng(4)
    m, d = 9000, 600  # 43 MB of float64 rows: three chunks at least
    X, y = rng.random((m, d)), np.where(rng.random(m) > 0.5, 1.0, -1.0)
    ids, gamma = np.arange(m) * 7, rng.random(m)
    records = list(as_chunks(5, X, y, ids, gamma, stats={"rows": m}))
    assert len(records) >= 3 and {key for key, _ in records} == {5}
    assert all(chunk.X.nbytes <= CHUNK_BYTES for _, chunk in records)
    assert [chunk.stats for _, chunk in records][1:] == [None] * (len(records) - 1)
    shuffled = [records[i][1] for i in np.random.default_rng(0).permutation(len(records))]
    for got, expected in zip(assemble(shuffled), (X, y, ids, gamma)):
        np.testing.assert_array_equal(got, expected)
    # a merge places the children's chunks one after the other
    children = [Chunk((child, 0), X[:2] + child, y[:2], ids[:2] + child, gamma[:2], None)
                for child in (2, 0, 1)]
    np.testing.assert_array_equal(assemble(children)[0], np.concatenate([X[:2] + c
                                                                         for c in range(3)]))


def test_the_level_count_follows_the_rows():
    # partitions of about 2,500 rows: closest on a log scale, never more partitions than rows
    assert [auto_levels(n, 3) for n in (1000, 2500, 7500, 60_000, 600_000, 2_400_000)] == \
        [0, 0, 1, 3, 5, 6]
    assert auto_levels(600_000, 2) == 8 and auto_levels(60_000, 3, top_rows=20_000) == 1
    for n in (3, 10, 100, 5000, 10**7):
        assert 3 ** auto_levels(n, 3) <= n and auto_levels(n, 3) <= largest_levels(n, 3)


def test_wide_rows_start_at_the_deepest_cached_level():
    # 2 task slots, 18 GB for Python: 600,000 rows of 784 features have cached kernels from
    # level 3 (27 × 22,223 rows: 0.9 GB each in int16), not level 2 (9.7 GB a task in int16)
    memory, params = ExecutorMemory(memory_mb=18_000.0, cores=2), SODMParams()
    assert cached_level_count(600_000, 3, 784, memory, params) == 3
    assert auto_level_count(600_000, 3, KERNEL_BOUND_FEATURES, memory, params) == 3
    # narrower rows keep the top partitions of about 2,500 rows, whose warm start pays
    assert auto_level_count(600_000, 3, KERNEL_BOUND_FEATURES - 1, memory, params) == \
        auto_levels(600_000, 3) == 5
    # never more levels than the rows' size asks for: 3,000 wide rows are one partition
    assert auto_level_count(3000, 3, 784, memory, params) == 0
    # a tighter budget caches smaller partitions only: more levels
    tight = ExecutorMemory(memory_mb=2_000.0, cores=2)
    assert auto_level_count(600_000, 3, 784, tight, params) == 4 == \
        cached_level_count(600_000, 3, 784, tight, params)
    # no level cached at all (10 kB a task): the rows' size decides
    hopeless = ExecutorMemory(memory_mb=0.01, cores=2)
    assert cached_level_count(600_000, 3, 784, hopeless, params) is None
    assert auto_level_count(600_000, 3, 784, hopeless, params) == 5


def test_levels_are_cached_in_int16_and_float32_needs_twice_the_memory():
    # level 2 of 600,000 rows × 784: 9 partitions of 66,667 rows, 17.0 GB each in float32,
    # 8.5 GB in int16; two task slots of 10 GB each (a solve's own arrays: 1.2 GB)
    from sodm_spark.spark.sodm.plan import plan_level
    memory, sizes = ExecutorMemory(memory_mb=20_000.0, cores=2), np.full(9, 66_667)
    plan = plan_level(2, sizes, 784, SODMParams(levels=3), memory, [], cores=2)
    assert (plan.kernel, plan.storage, plan.tasks) == ("cached", "int16", 2)
    assert plan.advice == ""
    # float32 only: one task at a time holds the whole executor's memory
    plan = plan_level(2, sizes, 784, SODMParams(levels=3, kernel_storage="float32"), memory,
                      [], cores=2)
    assert (plan.kernel, plan.storage, plan.tasks) == ("cached", "float32", 1)
    assert "1 task at a time" in plan.advice and "(16,954 MB)" in plan.advice
    # blocked levels compute float32 kernel rows on demand, whatever the storage asked for
    tight = ExecutorMemory(memory_mb=4_000.0, cores=2)
    plan = plan_level(2, sizes, 784, SODMParams(levels=3), tight, [], cores=2)
    assert (plan.kernel, plan.storage) == ("blocked", "float32")
    # wide rows start at the deepest level cached in the storage the levels use
    assert cached_level_count(600_000, 3, 784, memory, SODMParams()) == 2
    assert cached_level_count(600_000, 3, 784, memory, SODMParams(kernel_storage="float32")) == 3
    with pytest.raises(ValueError, match="kernel_storage"):
        SODMParams(kernel_storage="float16")


def test_a_wide_fit_without_levels_solves_one_cached_partition(engine):
    # 5,000 rows: about 2,500 a partition would mean one level (3 partitions), but 100
    # features make the kernel dominate and the whole 95 MB kernel is cached: one partition
    X, y = make_problem(m=5000, d=KERNEL_BOUND_FEATURES, seed=22)
    sc = engine
    params = SODMParams(gamma=0.01, lam=100.0, auto_stop=False)
    assert auto_levels(5000, 3) == 1
    fit = fit_sodm(sc, numpy_to_blocks(sc, X, y), params, [-1.0, 1.0])
    assert [(entry.level, entry.partitions, entry.kernel) for entry in fit.levels] == \
        [(0, 1, "cached")]


def test_a_fit_in_int16_storage_is_the_float32_fit_within_its_storage_error(engine):
    X, y = make_problem(m=3000, d=6, seed=23)
    sc = engine
    fits = {storage: fit_sodm(sc, numpy_to_blocks(sc, X, y),
                              SODMParams(gamma=0.5, lam=1e3, levels=1, auto_stop=False,
                                         kernel_storage=storage), [-1.0, 1.0])
            for storage in ("float32", "int16")}
    for storage, fit in fits.items():
        assert [(entry.kernel, entry.storage) for entry in fit.levels] == [("cached", storage)] * 2
    assert SODMParams().kernel_storage == "auto"  # int16 where the kernel allows it
    X_new = make_problem(m=500, d=6, seed=24)[0]
    scores = {storage: fit.model.decision_function(X_new) for storage, fit in fits.items()}
    assert np.mean(np.sign(scores["int16"]) == np.sign(scores["float32"])) >= 0.99
    np.testing.assert_allclose(scores["int16"], scores["float32"], atol=1e-2)


def test_a_fit_without_levels_starts_from_the_automatic_count(engine):
    X, y = make_problem(m=9000, d=4, seed=21)
    sc = engine
    params = SODMParams(gamma=0.5, lam=100.0, stop_level=1, auto_stop=False)
    fit = fit_sodm(sc, numpy_to_blocks(sc, X, y), params, [-1.0, 1.0])
    assert [entry.level for entry in fit.levels] == [1]
    assert fit.levels[0].partitions == 3 == 3 ** auto_levels(9000, 3)


def test_a_fit_that_cannot_hold_its_top_level_is_refused_before_the_work(engine):
    params = SODMParams()
    tight = ExecutorMemory(memory_mb=400.0, cores=2)
    with pytest.raises(MemoryBudgetError,
                       match=r"levels=4 \(--levels 4\), or give the Python workers more"):
        # 600,000 × 784 rows from 27 partitions: 22,223 rows need ~390 MB, over 200 MB a task
        check_fit_resources(engine, 600_000, 784, 4, 27, 3, tight, params)
    check_fit_resources(engine, 600_000, 784, 4, 81, 4, tight, params)  # fits


def test_the_job_names_the_memory_setting_in_one_line(spark, tmp_path):
    from sklearn.datasets import dump_svmlight_file

    X, y = make_problem(m=2000, d=50, seed=5)
    dump_svmlight_file(X, y, str(tmp_path / "train.svm"), zero_based=False)
    with pytest.raises(SystemExit) as raised:
        train_sodm.main(["--data", str(tmp_path / "train.svm"), "--levels", "0",
                         "--memory-mb", "1"])
    message = str(raised.value.code)
    assert message.startswith("error: the top level's partitions") and "\n" not in message
    assert "--memory-mb" in message and "--levels" in message


def test_rows_are_scaled_onto_the_unit_interval_and_the_model_takes_raw_rows(engine, tmp_path):
    from sodm_spark.models.expansion import KernelExpansion
    from sodm_spark.solvers import solve_odm_dual
    from sodm_spark.solvers.dcd_settings import DCDSettings, ODMHyperparameters

    X, y = make_problem(m=600, d=4, seed=13)
    X = X * np.array([1.0, 100.0, 0.01, 5.0]) + np.array([0.0, 50.0, -3.0, 7.0])  # raw units
    X_test, _ = make_problem(m=200, d=4, seed=14)
    X_test = X_test * np.array([1.0, 100.0, 0.01, 5.0]) + np.array([0.0, 50.0, -3.0, 7.0])
    sc = engine
    params = SODMParams(gamma="scale", lam=100.0, levels=0, auto_stop=False, tol=1e-8,
                        kernel_storage="float32")  # compared with the exact solver to 1e-6
    fit = fit_sodm(sc, numpy_to_blocks(sc, X, y), params, [-1.0, 1.0], max_sv="none")
    # the reference: every column mapped onto [0, 1] by hand, gamma 'scale' of those rows
    low, high = X.min(axis=0), X.max(axis=0)
    mapped = (X - low) / (high - low)
    kernel = Kernel.create("rbf", 1.0 / (4 * mapped.var()))
    assert fit.model.kernel.gamma == pytest.approx(kernel.gamma, rel=1e-9)
    exact = solve_odm_dual(mapped, y, kernel, ODMHyperparameters(100.0, 0.1, 0.2),
                           settings=DCDSettings(violation_tol=1e-8))
    assert fit.levels[0].objective == pytest.approx(exact.objective, rel=1e-6)
    reference = decision_values(kernel, (X_test - low) / (high - low), mapped, exact.gamma * y)
    np.testing.assert_allclose(fit.model.decision_function(X_test), reference, atol=1e-5)
    fit.model.save(tmp_path / "model")  # the scaling is part of the saved model
    loaded = KernelExpansion.load(tmp_path / "model")
    np.testing.assert_allclose(loaded.decision_function(X_test), reference, atol=1e-5)


def test_the_validation_scores_of_a_level_are_its_model_s_own(engine):
    X, y = make_problem(m=1500, d=4, seed=6)
    sc = engine
    X_val, y_val = make_problem(m=400, d=4, seed=7)
    params = SODMParams(gamma=0.5, lam=100.0, levels=2, stop_level=1, min_improvement=None)
    fit = fit_sodm(sc, numpy_to_blocks(sc, X, y), params, [-1.0, 1.0], validation=(X_val, y_val),
                   max_sv="none")
    best = next(entry for entry in fit.levels if entry.level == fit.best_level)
    scores = fit.model.decision_function(X_val)
    # the tasks scored in float32; no row here lies within float32's error of the boundary
    assert np.min(np.abs(scores)) > 1e-4
    assert best.validation_accuracy == np.mean(np.where(scores > 0, 1.0, -1.0) == y_val)


def test_large_models_are_compressed_before_the_driver_and_none_keeps_them(spark, monkeypatch):
    X, y = make_problem(m=1200, d=4, seed=8)
    X_test, y_test = make_problem(m=500, d=4, seed=9)
    sc = spark.sparkContext
    params = SODMParams(gamma=0.5, lam=100.0, levels=1, auto_stop=False)
    full = fit_sodm(sc, numpy_to_blocks(sc, X, y), params, [-1.0, 1.0], test=(X_test, y_test),
                    max_sv="none")
    n_sv = full.model.support_vectors.shape[0]
    assert full.compression is None and n_sv == full.levels[-1].n_sv > 300
    monkeypatch.setattr(compression, "AUTO_ABOVE", 300)
    monkeypatch.setattr(compression, "AUTO_POINTS", 120)
    small = fit_sodm(sc, numpy_to_blocks(sc, X, y), params, [-1.0, 1.0], test=(X_test, y_test),
                     max_sv="auto")
    assert small.model.support_vectors.shape == (120, 4)
    report = small.compression
    assert report["support_vectors_before"] == n_sv and report["support_vectors_after"] == 120
    # the report's "before" is the uncompressed model, "after" the model returned
    assert report["test"]["accuracy_before"] == full.test_accuracy
    assert report["test"]["accuracy_after"] == small.test_accuracy == \
        np.mean(small.model.predict(X_test) == y_test)
    assert small.test_accuracy >= full.test_accuracy - 0.03
    # the compressed f is a least-squares fit of the partitions' own f (times their count) on a
    # sample of their rows, which the level's tasks kept: close to the whole model's f
    assert report["fit_targets"] == "partitions"
    f, g = full.model.decision_function(X_test), small.model.decision_function(X_test)
    assert np.linalg.norm(g - f) / np.linalg.norm(f) < 0.2
    # the tasks returned those rows, so the points are drawn among them with no pass over the
    # level: every point is one of the whole model's support vectors
    assert report["passes_over_level"] == 0
    full_sv = {row.tobytes() for row in full.model.support_vectors.astype(np.float32)}
    assert all(row.astype(np.float32).tobytes() in full_sv
               for row in small.model.support_vectors)
    # rows over the result limit stay in the tasks: the points then come from a pass
    monkeypatch.setattr(level_model, "_piece_is_small", lambda sc, piece_bytes: False)
    passed = fit_sodm(sc, numpy_to_blocks(sc, X, y), params, [-1.0, 1.0], max_sv="auto")
    assert passed.compression["fit_targets"] == "partitions"
    assert passed.compression["passes_over_level"] == 2
    g = passed.model.decision_function(X_test)
    assert np.linalg.norm(g - f) / np.linalg.norm(f) < 0.2
    monkeypatch.undo()
    monkeypatch.setattr(compression, "AUTO_ABOVE", 300)
    monkeypatch.setattr(compression, "AUTO_POINTS", 120)
    # without those rows (a level read back from a checkpoint): the whole model's f on a
    # sample of its support vectors, summed from the tasks
    monkeypatch.setattr(compression, "LOCAL_FIT_ROWS_PER_POINT", 0)
    scored = fit_sodm(sc, numpy_to_blocks(sc, X, y), params, [-1.0, 1.0], max_sv="auto")
    assert scored.compression["fit_targets"] == "model"
    g = scored.model.decision_function(X_test)
    assert np.linalg.norm(g - f) / np.linalg.norm(f) < 0.2


@pytest.mark.parametrize("n_classes", [0, 3])
def test_a_partition_leaves_its_own_model_s_scores_on_a_sample_of_rows(n_classes):
    X, y = make_problem(m=400, d=4, seed=11)
    if n_classes:  # three classes, numbered
        y = np.digitize(X[:, 0], [-0.5, 0.5]).astype(np.float64)
    ids = np.arange(1000, 1400)
    kernel = Kernel.create("rbf", 0.5)
    settings = LevelTaskSettings(
        LocalSolve(100.0, 0.1, 0.2, violation_tol=1e-3, max_iter=200, cache_mb=64.0),
        n_classes=n_classes, seed=0, fit_targets=FitTargets(share=0.1, with_rows=True))
    gamma = np.zeros((400, n_classes)) if n_classes else np.zeros(400)
    records = list(as_chunks(2, X, y, ids, gamma))
    solved = list(solve_partitions(records, kernel, settings, level=1, threads=1))
    stats = solved[0][1].stats
    _, _, got_ids, solved_gamma = assemble([chunk for _, chunk in solved])
    assert stats["fit_rows"].size == 40 and np.all(np.isin(stats["fit_rows"], ids))
    # the reference: this partition's expansion evaluated on those rows
    signs = y if not n_classes else np.where(
        y[:, None] == np.arange(n_classes)[None, :], 1.0, -1.0)
    coef = solved_gamma * signs
    rows = X[stats["fit_rows"] - 1000]
    np.testing.assert_allclose(stats["fit_scores"], decision_values(kernel, rows, X, coef),
                               rtol=1e-5, atol=1e-6)
    # the rows themselves and which are support vectors, for a compression without a pass
    np.testing.assert_array_equal(stats["fit_X"], rows)
    np.testing.assert_array_equal(stats["fit_support"],
                                  np.any(np.atleast_2d(coef.T).T[stats["fit_rows"] - 1000] != 0,
                                         axis=1))
    again = list(solve_partitions(records, kernel, settings, level=1, threads=1))
    np.testing.assert_array_equal(again[0][1].stats["fit_rows"], stats["fit_rows"])


def test_a_level_s_stats_reach_the_driver_through_an_accumulator(spark):
    """Each partition's stats once, keyed by partition: a retried task's replace its first
    attempt's instead of adding to them, and the chunks persisted carry none."""
    sc = spark.sparkContext
    X, y = make_problem(m=300, d=4, seed=12)
    kernel = Kernel.create("rbf", 0.5)
    settings = LevelTaskSettings(
        LocalSolve(100.0, 0.1, 0.2, violation_tol=1e-3, max_iter=200, cache_mb=64.0), seed=0)
    records = [record for key in range(3) for record in as_chunks(
        key, X[key::3], y[key::3], np.arange(key, 300, 3), np.zeros(100))]
    sink = sc.accumulator({}, ReportsParam())
    solved = sc.parallelize(records, 3).mapPartitions(lambda part: solve_partitions(
        part, kernel, settings, 1, 1, report=sink.add)).collect()
    assert sorted(sink.value) == [0, 1, 2]
    assert all(chunk.stats is None for _, chunk in solved)
    assert [sink.value[key]["rows"] for key in range(3)] == [100, 100, 100]
    merged = ReportsParam().addInPlace({0: {"rows": 1}, 1: {"rows": 2}}, {1: {"rows": 3}})
    assert merged == {0: {"rows": 1}, 1: {"rows": 3}}


def test_a_model_over_the_result_limit_is_collected_in_pieces(spark, monkeypatch):
    X, y = make_problem(m=900, d=5, seed=10)
    sc = spark.sparkContext
    params = SODMParams(gamma=0.5, lam=100.0, levels=1, auto_stop=False)
    whole = fit_sodm(sc, numpy_to_blocks(sc, X, y), params, [-1.0, 1.0], max_sv="none")
    monkeypatch.setattr(level_model, "result_limit_mb", lambda sc: 1e-3)  # 1 KB
    pieces = fit_sodm(sc, numpy_to_blocks(sc, X, y), params, [-1.0, 1.0], max_sv="none")
    np.testing.assert_array_equal(pieces.model.support_vectors, whole.model.support_vectors)
    np.testing.assert_array_equal(pieces.model.coef, whole.model.coef)


def test_the_job_scores_only_the_final_model_when_scoring_every_level_is_dear(spark, tmp_path,
                                                                              monkeypatch):
    from sklearn.datasets import dump_svmlight_file

    from sodm_spark.spark.sodm import fit as sodm_fit, scored_model

    X, y = make_problem(m=1500, d=5, seed=11)
    X_test, y_test = make_problem(m=300, d=5, seed=12)
    dump_svmlight_file(X, y, str(tmp_path / "train.svm"), zero_based=False)
    dump_svmlight_file(X_test, y_test, str(tmp_path / "test.svm"), zero_based=False)
    monkeypatch.setattr(scored_model, "CHEAP_SCORING_WORK", 1.0)
    monkeypatch.setattr(sodm_fit, "TEST_EVERY_LEVEL_WORK", 1.0)
    assert train_sodm.main(["--data", str(tmp_path / "train.svm"), "--test-data",
                            str(tmp_path / "test.svm"), "--levels", "2", "--gamma", "0.3",
                            "--lam", "100", "--metrics-out", str(tmp_path / "m.json"),
                            "--model-out", str(tmp_path / "model")]) == 0
    metrics = json.loads((tmp_path / "m.json").read_text())
    scored = [entry for entry in metrics["levels"] if "test_accuracy" in entry]
    assert [entry["level"] for entry in scored] == [metrics["best_level"]]
    assert metrics["test_accuracy"] == scored[0]["test_accuracy"] > 0.7
    assert len(metrics["levels"]) >= 2
    # the uncompressed model was scored on the driver: the saved model's own predictions
    model = KernelExpansion.load(tmp_path / "model")
    assert metrics["test_accuracy"] == pytest.approx(np.mean(model.predict(X_test) == y_test))


def _fashion_installed():
    if not (Path(FASHION_MNIST_DIR) / "train-images-idx3-ubyte.gz").exists():
        pytest.skip("Debian's dataset-fashion-mnist is not installed (tests/data_packages.sh)")


def test_deformed_fashion_mnist_is_seeded_and_keeps_the_labels():
    _fashion_installed()
    X, labels = load_fashion_mnist("train", binary=False)
    first, first_labels = deformed_fashion_mnist(59_990, 60_020, seed=3, binary=False)
    # the originals come first, untouched; then deformations of image r % 60,000
    np.testing.assert_array_equal(first[:10], X[59_990:].astype(np.float32))
    assert np.array_equal(first_labels, labels[np.arange(59_990, 60_020) % 60_000])
    again, _ = deformed_fashion_mnist(60_000, 60_020, seed=3, binary=False)
    np.testing.assert_array_equal(again, first[10:])  # any range, any batching: same rows
    other, _ = deformed_fashion_mnist(60_000, 60_020, seed=4, binary=False)
    assert not np.array_equal(other, again)
    moved = np.abs(again - X[:20].astype(np.float32)).mean(axis=1)
    assert np.all(moved > 0.01)  # every image is deformed ...
    # ... but stays close to its source: nearer to it than to most other training images
    distances = ((again[:, None, :] - X[None, :20, :]) ** 2).sum(axis=2)
    own = np.diag(distances)
    others = np.where(np.eye(20, dtype=bool), np.nan, distances)
    assert np.all(own < np.nanmedian(others, axis=1))
    assert np.sum(np.argmin(distances, axis=1) == np.arange(20)) >= 15
    assert again.min() >= 0.0 and again.max() <= 1.0
    assert np.allclose(again * 255, np.round(again * 255), atol=1e-4)  # bytes, as infiMNIST's
    _, binary = deformed_fashion_mnist(60_000, 60_020, seed=3)
    assert np.array_equal(binary, np.where(labels[:20] % 2 == 0, 1, -1))


def test_the_tabular_generator_is_seeded_in_raw_units_and_its_labels_follow_the_latent_sphere():
    from sodm_spark.data.big_data import TABULAR_CHUNK, TABULAR_UNITS, make_tabular

    X, y = make_tabular(TABULAR_CHUNK - 50, TABULAR_CHUNK + 50, seed=5)
    assert X.shape == (100, 12) and X.dtype == np.float32 and set(np.unique(y)) == {-1, 1}
    again, again_y = make_tabular(TABULAR_CHUNK, TABULAR_CHUNK + 20, seed=5)
    np.testing.assert_array_equal(again, X[50:70])  # any range, any batching: same rows
    assert np.array_equal(again_y, y[50:70])
    assert not np.array_equal(make_tabular(0, 20, seed=6)[0], make_tabular(0, 20, seed=5)[0])
    assert not np.array_equal(make_tabular(0, 20, seed=5, test=True)[0],
                              make_tabular(0, 20, seed=5)[0])
    X, y = make_tabular(0, 20_000, seed=5)
    offsets, units = (np.array(column) for column in zip(*TABULAR_UNITS))
    z = (X[:, :7].astype(np.float64) - offsets) / units  # the latent normal columns
    np.testing.assert_allclose(z.mean(axis=0), 0.0, atol=0.05)
    np.testing.assert_allclose(z.std(axis=0), 1.0, atol=0.05)
    inside = (z[:, :5] ** 2).sum(axis=1) + z[:, 5] * z[:, 6] > 4.35
    agreement = np.mean(np.where(inside, 1, -1) == y)
    assert 0.93 < agreement < 0.97  # 5% of the labels flipped
    assert np.ptp(X[:, 4]) / np.ptp(X[:, 2]) > 1e5  # units six orders of magnitude apart
