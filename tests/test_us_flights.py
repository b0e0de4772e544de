"""The US flights of npm vega-datasets (sodm_spark/data/us_flights.py) on a small folder written
here in the package's schema, the at-scale benchmark's result record
(sodm_spark/benchmarking/records.py), and Falkon's Nyström kernel ridge
(sodm_spark/baselines/nystroem.py) against a direct solve of the same system."""
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sodm_spark.baselines import nystroem
from sodm_spark.baselines.nystroem import (FalkonSettings, falkon_fit, falkon_preconditioner,
                                           falkon_select, kernel_pass)
from sodm_spark.benchmarking.records import (content_hash, default_record_path, git_state,
                                             job_ratios, machine_record, parquet_identity,
                                             run_medians)
from sodm_spark.core.kernels import Kernel, kernel_matrix
from sodm_spark.data.datasets import DatasetUnavailable, load_dataset
from sodm_spark.data.us_flights import ENV_FOLDER, FEATURES, load_us_flights, vega_folder

ROOT = Path(__file__).resolve().parents[1]
AIRPORTS = {"AAA": (10.0, -100.0), "BBB": (20.0, -90.0), "CCC": (30.0, -80.0)}
ROWS = 300


def _flights_frame(rows=ROWS, seed=0):
    """Flights in vega-datasets' schema: known departures, delays around the 15-minute line,
    the origin ZZZ (not in airports.csv) on every seventh row."""
    rng = np.random.default_rng(seed)
    codes = np.array(list(AIRPORTS))
    origin = codes[rng.integers(0, 3, rows)].astype(object)
    origin[::7] = "ZZZ"
    dates = (pd.Timestamp("2001-01-01") + pd.to_timedelta(rng.integers(0, 180 * 1440, rows),
                                                          unit="min")).sort_values()
    delay = rng.integers(-30, 60, rows)
    delay[:4] = (15, 16, -5, 100)  # the line: 15 is on time, 16 late
    return pd.DataFrame({"date": dates.values.astype("datetime64[us]"), "delay": delay,
                         "distance": rng.integers(50, 3000, rows), "origin": origin,
                         "destination": codes[rng.integers(0, 3, rows)]})


def _write_folder(folder: Path, frame: pd.DataFrame) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    schema = pa.schema([("date", pa.timestamp("us")), ("delay", pa.int64()),
                        ("distance", pa.int64()), ("origin", pa.large_string()),
                        ("destination", pa.large_string())])
    pq.write_table(pa.Table.from_pandas(frame, schema=schema, preserve_index=False),
                   folder / "flights-3m.parquet")
    pd.DataFrame([{"iata": code, "name": code, "city": "c", "state": "s", "country": "USA",
                   "latitude": lat, "longitude": lon} for code, (lat, lon) in AIRPORTS.items()]
                 ).to_csv(folder / "airports.csv", index=False)
    return folder


@pytest.fixture
def vega(tmp_path):
    frame = _flights_frame()
    return _write_folder(tmp_path / "vega", frame), frame


def test_the_loader_reads_labels_and_columns_in_order(vega):
    folder, frame = vega
    X, y, names = load_us_flights(folder)
    assert names == list(FEATURES) and X.shape == (ROWS, 8) and X.dtype == np.float32
    assert np.array_equal(y, np.where(frame["delay"] > 15, 1.0, -1.0))
    assert list(y[:4]) == [-1.0, 1.0, -1.0, 1.0]
    dates = pd.DatetimeIndex(frame["date"])
    assert np.array_equal(X[:, 0], dates.month) and np.array_equal(X[:, 1], dates.weekday)
    assert np.array_equal(X[:, 2], dates.hour * 60 + dates.minute)
    assert np.array_equal(X[:, 3], frame["distance"])
    destination = np.array([AIRPORTS[code] for code in frame["destination"]], np.float32)
    assert np.array_equal(X[:, 6:8], destination)
    known = frame["origin"] != "ZZZ"
    origin = np.array([AIRPORTS[code] for code in frame["origin"][known]], np.float32)
    assert np.array_equal(X[known.to_numpy(), 4:6], origin)


def test_an_airport_missing_from_the_table_gets_the_column_mean_over_the_rows(vega):
    folder, frame = vega
    X, _, _ = load_us_flights(folder)
    unknown = (frame["origin"] == "ZZZ").to_numpy()
    assert unknown.sum() == len(range(0, ROWS, 7))
    for column, part in ((4, 0), (5, 1)):
        # the mean over the other rows (each airport weighted by its flights), not over the
        # three airports of the table
        expected = np.mean([AIRPORTS[code][part] for code in frame["origin"][~unknown]])
        assert X[unknown, column] == pytest.approx(expected, rel=1e-6)
        assert expected != pytest.approx(np.mean([v[part] for v in AIRPORTS.values()]))


def test_the_files_are_found_in_the_environment_folder_or_named_in_one_line(vega, tmp_path,
                                                                          monkeypatch):
    folder, _ = vega
    monkeypatch.setenv(ENV_FOLDER, str(folder))
    assert vega_folder() == folder
    assert load_us_flights()[0].shape == (ROWS, 8)
    # the unpacked tarball's folder will do too (package/data/ below it)
    (tmp_path / "unpacked" / "package").mkdir(parents=True)
    folder.rename(tmp_path / "unpacked" / "package" / "data")
    assert vega_folder(tmp_path / "unpacked") == tmp_path / "unpacked" / "package" / "data"
    for missing in (tmp_path / "absent", None):
        if missing is None:
            monkeypatch.setenv(ENV_FOLDER, str(tmp_path / "nowhere"))
        with pytest.raises(DatasetUnavailable) as error:
            vega_folder(missing)
        message = str(error.value)
        assert "\n" not in message and "npm pack vega-datasets@3.2.1" in message
        assert "flights-3m.parquet" in message and "airports.csv" in message
        assert "~/.cache/sodm_spark/vega-datasets" in message and ENV_FOLDER in message
    with pytest.raises(DatasetUnavailable, match="npm pack"):
        load_dataset("us-flights", root=tmp_path / "absent")


def test_the_registered_split_holds_a_fifth_out_and_shuffles_the_training_rows(vega):
    folder, _ = vega
    X, y, _ = load_us_flights(folder)
    data = load_dataset("us-flights", root=folder, seed=3)
    assert data.X_train.shape == (240, 8) and data.X_test.shape == (60, 8)
    rows = {tuple(row) for row in X.astype(np.float64)}
    seen = [tuple(row) for row in np.concatenate([data.X_train, data.X_test])]
    assert set(seen) == rows and sum(data.y_train > 0) + sum(data.y_test > 0) == sum(y > 0)
    # test rows keep the file's (time) order; training rows come in a seeded random order
    assert np.all(np.diff(data.X_test[:, 0]) >= 0)
    assert np.any(np.diff(data.X_train[:, 0]) < 0)
    again = load_dataset("us-flights", root=folder, seed=3)
    assert np.array_equal(again.X_train, data.X_train)
    other = load_dataset("us-flights", root=folder, seed=4)
    assert not np.array_equal(other.X_test, data.X_test)


def test_make_big_data_writes_the_first_training_rows_and_the_whole_test_split(vega, tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from make_big_data import main as make_big_data

    folder, _ = vega
    for rows in (200, 90):
        make_big_data(["--dataset", "us-flights", "--rows", str(rows), "--file-rows", "50",
                       "--out", str(tmp_path / f"out-{rows}"), "--dataset-root", str(folder)])
    data = load_dataset("us-flights", root=folder)
    for rows in (200, 90):
        train = pq.read_table(tmp_path / f"out-{rows}" / "train").to_pandas()
        assert len(list((tmp_path / f"out-{rows}" / "train").glob("part-*.parquet"))) == \
            -(-rows // 50)
        assert np.array_equal(np.stack(train["features"]), data.X_train[:rows])
        assert np.array_equal(train["label"], data.y_train[:rows])
        test = pq.read_table(tmp_path / f"out-{rows}" / "test").to_pandas()
        assert np.array_equal(np.stack(test["features"]), data.X_test)
    assert parquet_identity(tmp_path / "out-200" / "test")["sha256"] == \
        parquet_identity(tmp_path / "out-90" / "test")["sha256"]


# --- the result record --------------------------------------------------------------------

def test_the_machine_record_names_cores_memory_cpu_blas_and_gpus():
    record = machine_record()
    assert {"cores", "mem_total_kb", "cpu", "blas", "gpus", "numpy"} <= set(record)
    assert record["cores"] >= 1 and isinstance(record["gpus"], list)
    assert any(entry["user_api"] == "blas" and "architecture" in entry
               for entry in record["blas"])
    state = git_state(ROOT)
    assert set(state) == {"commit", "dirty"}
    assert state["commit"] is None or len(state["commit"]) == 40


def test_the_content_hash_is_stable_for_the_same_rows_and_differs_for_others():
    rng = np.random.default_rng(0)
    X, y = rng.random((3000, 8)), np.where(rng.random(3000) > 0.5, 1.0, -1.0)
    first = content_hash(y, X[:1000], X[-1000:])
    assert content_hash(y.copy(), X[:1000].astype(np.float32), X[-1000:].copy()) == first
    flipped = y.copy()
    flipped[1500] *= -1
    assert content_hash(flipped, X[:1000], X[-1000:]) != first
    moved = X[:1000].copy()
    moved[3, 2] += 0.5
    assert content_hash(y, moved, X[-1000:]) != first
    assert content_hash(y, X[1:1001], X[-1000:]) != first


def test_medians_and_job_ratios_pair_the_runs():
    runs = [{"job": {"wall_seconds": 30.0, "train_seconds": 20.0, "test_accuracy": 0.80},
             "xgboost": {"fit_seconds": 10.0, "test_accuracy": 0.82}},
            {"job": {"wall_seconds": 40.0, "train_seconds": 30.0, "test_accuracy": 0.81},
             "xgboost": {"fit_seconds": 20.0, "test_accuracy": 0.81}},
            {"job": {"wall_seconds": 35.0, "train_seconds": 25.0, "test_accuracy": 0.79},
             "xgboost": {"fit_seconds": 5.0, "test_accuracy": 0.83}}]
    medians = run_medians(runs)
    assert medians["job"] == {"runs": 3, "wall_seconds": 35.0, "train_seconds": 25.0,
                              "test_accuracy": 0.80}
    assert medians["xgboost"]["fit_seconds"] == 10.0
    ratios = job_ratios(runs)
    assert [r["wall_over_fit"] for r in ratios] == [3.0, 2.0, 7.0]
    assert ratios[1]["train_over_fit"] == 1.5
    assert ratios[0]["accuracy_difference"] == pytest.approx(-0.02)
    path = default_record_path(ROOT, "us-flights", [2400000])
    assert path.parent == ROOT / "docs" / "results" / "at_scale"
    assert path.name.startswith("us-flights-2400000-20") and path.suffix == ".json"


# --- Falkon ---------------------------------------------------------------------------------

def _problem(n=2000, d=5, m=200):
    rng = np.random.default_rng(0)
    X = rng.random((n, d))
    y = np.sign(np.sin(6 * X[:, 0]) + X[:, 1] - 0.5 + 0.3 * rng.standard_normal(n))
    kernel = Kernel.create("rbf", 1.0 / (d * X.var()))
    return kernel, X, y, X[np.sort(rng.choice(n, m, replace=False))]


def test_falkon_solves_the_regularised_nystroem_system():
    kernel, X, y, Z = _problem()
    penalties = (1e-3, 1e-4)
    fit = falkon_fit(kernel, X, y, Z, FalkonSettings(penalties, iterations=300,
                                                     dtype=np.float64))
    K_nm, K_mm = kernel_matrix(kernel, X, Z), kernel_matrix(kernel, Z)
    n, m = X.shape[0], Z.shape[0]
    assert fit.jitter == pytest.approx(1e-13 * m)
    for column, penalty in enumerate(penalties):
        exact = np.linalg.solve(K_nm.T @ K_nm + penalty * n * K_mm, K_nm.T @ y)
        error = np.linalg.norm(fit.alpha[:, column] - exact) / np.linalg.norm(exact)
        assert error < 1e-6, (penalty, error)
    # a few iterations are not the solution: the comparison can fail
    short = falkon_fit(kernel, X, y, Z, FalkonSettings(penalties[1:], iterations=3,
                                                       dtype=np.float64))
    assert np.linalg.norm(short.alpha[:, 0] - exact) > 1e-3 * np.linalg.norm(exact)


def test_the_preconditioner_is_falkons_two_cholesky_factors():
    kernel, _, _, Z = _problem(m=150)
    K_mm, m = kernel_matrix(kernel, Z), Z.shape[0]
    T, factors, jitter = falkon_preconditioner(K_mm.copy(), (1e-2, 1e-5))
    assert np.allclose(np.triu(T), T) and np.allclose(np.triu(factors[0]), factors[0])
    assert np.allclose(T.T @ T, K_mm + jitter * np.eye(m), atol=1e-10)
    for A, penalty in zip(factors, (1e-2, 1e-5)):
        assert np.allclose(A.T @ A, T @ T.T / m + penalty * np.eye(m), atol=1e-10)


def test_the_kernel_passes_sum_every_block_once_across_threads(monkeypatch):
    kernel, X, _, Z = _problem(n=1001)
    W = np.random.default_rng(1).standard_normal((Z.shape[0], 2))
    monkeypatch.setattr(nystroem, "BLOCK_BYTES", 64 * Z.shape[0] * 8)  # 16 blocks of 64 rows
    K = kernel_matrix(kernel, X, Z)
    for workers in (1, 2, 3):
        total = kernel_pass(kernel, X, np.ascontiguousarray(Z),
                            lambda block, rows: block.T @ (block @ W), workers)
        assert np.allclose(total, K.T @ (K @ W), rtol=1e-10)
        counted = kernel_pass(kernel, X, np.ascontiguousarray(Z),
                              lambda block, rows: np.array([rows.stop - rows.start]), workers)
        assert counted[0] == X.shape[0]


def test_falkon_chooses_the_penalty_on_held_out_rows_in_float32():
    kernel, X, y, Z = _problem(n=3000)
    held = np.zeros(X.shape[0], dtype=bool)
    held[::10] = True
    settings = FalkonSettings((1e-6, 1e-3, 10.0), iterations=20)
    fit, best, accuracies = falkon_select(kernel, X, y, Z, held, settings)
    assert fit.alpha.shape == (Z.shape[0], 3) and fit.iterations == 20
    assert fit.jitter == pytest.approx(1e-5 * Z.shape[0])
    scores = kernel_matrix(kernel, X[held], Z) @ fit.alpha  # float64: a row or two may flip
    assert accuracies == pytest.approx([np.mean(np.sign(scores[:, k]) == y[held])
                                        for k in range(3)], abs=2.5 / held.sum())
    assert best == int(np.argmax(accuracies)) and max(accuracies) > 0.7
    # fitted on the other rows only: the same as falkon_fit on them
    alone = falkon_fit(kernel, X[~held], y[~held], Z, settings)
    assert np.array_equal(alone.alpha, fit.alpha)
