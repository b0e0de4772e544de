"""The real data sets' loaders (Debian packages) and the script that installs those packages."""
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from sodm_spark.data.datasets import FASHION_MNIST_DIR, load_fashion_mnist

ROOT = Path(__file__).resolve().parents[1]


def test_fashion_mnist_loader_reads_the_debian_idx_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="dataset-fashion-mnist"):
        load_fashion_mnist("train", root=tmp_path)
    with pytest.raises(ValueError, match="'train' or 'test'"):
        load_fashion_mnist("validation")
    if not (Path(FASHION_MNIST_DIR) / "train-images-idx3-ubyte.gz").exists():
        pytest.skip("Debian's dataset-fashion-mnist is not installed (tests/data_packages.sh)")
    X, labels = load_fashion_mnist("train", binary=False)
    X_test, labels_test = load_fashion_mnist("test", binary=False)
    # the published split: 60,000 + 10,000 grey images of 28 × 28, 10 balanced classes
    assert X.shape == (60000, 784) and X_test.shape == (10000, 784)
    assert X.dtype == np.float64 and X.min() == 0.0 and X.max() == 1.0
    assert np.array_equal(np.bincount(labels), np.full(10, 6000))
    assert np.array_equal(np.bincount(labels_test), np.full(10, 1000))
    # pixels are bytes / 255: every value is a multiple of 1/255
    assert np.allclose(X[:100] * 255, np.round(X[:100] * 255))
    # the first training image is an ankle boot (class 9), the first test image too
    assert labels[0] == 9 and labels_test[0] == 9
    _, binary = load_fashion_mnist("train")
    assert np.array_equal(binary, np.where(labels % 2 == 0, 1, -1))


def _fake_tools(directory: Path, installed: bool):
    """dpkg-query answering 'not installed' (or installed), and no apt-get on the PATH."""
    directory.mkdir()
    status = "install ok installed" if installed else "unknown ok not-installed"
    (directory / "dpkg-query").write_text(f"#!/bin/sh\nprintf '{status}'\n")
    (directory / "dpkg-query").chmod(0o755)
    return directory


@pytest.mark.parametrize("installed, expected", [
    (True, ""), (False, "data packages: dataset-fashion-mnist r-cran-mlbench not installed "
                        "(no apt-get here); the real-data tests skip\n")])
def test_the_data_package_script_never_fails_the_test_command(tmp_path, installed, expected):
    tools = _fake_tools(tmp_path / "bin", installed)
    env = dict(os.environ, PATH=f"{tools}:/bin:/usr/bin")
    if Path("/usr/bin/apt-get").exists() or Path("/bin/apt-get").exists():
        # hide the real apt-get: only our tools and a minimal set of utilities
        (tmp_path / "min").mkdir()
        for tool in ("sh", "grep", "id", "sudo"):
            for folder in ("/bin", "/usr/bin"):
                if Path(folder, tool).exists():
                    os.symlink(Path(folder, tool), tmp_path / "min" / tool)
                    break
        env["PATH"] = f"{tools}:{tmp_path / 'min'}"
    result = subprocess.run(["/bin/sh", str(ROOT / "tests" / "data_packages.sh")], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout == expected


def test_ci_runs_exactly_the_readme_test_command():
    """CI's first command is the README's test command (the linter and the type checker
    follow it)."""
    readme = (ROOT / "README.md").read_text()
    commands = [line for line in (ROOT / ".ci" / "run").read_text().strip().splitlines()
                if line and not line.startswith(("#", "set ", "cd "))]
    command = commands[0]
    assert f"```bash\n{command}\n```" in readme
    assert command.startswith("sh tests/data_packages.sh && ")


def test_quoted_comparator_figures_are_the_stored_benchmark_outputs():
    """docs/benchmarks.md quotes bench_csvrg.py and bench_cvr.py; the figures must be those of
    the outputs stored beside the other results (rerun the benchmarks to change them)."""
    import json
    import re

    readme = " ".join((ROOT / "docs" / "benchmarks.md").read_text().split())
    csvrg = json.loads((ROOT / "docs" / "results" / "csvrg.json").read_text())
    cvr = json.loads((ROOT / "docs" / "results" / "cvr.json").read_text())
    exact, fast = csvrg["methods"]["exact ODM (DCD)"], csvrg["methods"]["CSVRG+ODM"]
    match = re.search(r"CSVRG with 1,000 core points is ([\d.]+) points below exact ODM "
                      r"\(([\d.]+) vs ([\d.]+)\) in ([\d.]+) of its fit time", readme)
    assert match, "docs/benchmarks.md's CSVRG sentence changed; keep it tied to csvrg.json"
    assert float(match[1]) == round(csvrg["accuracy_gap_points"], 2)
    assert (float(match[2]), float(match[3])) == (round(fast["accuracy"], 4),
                                                  round(exact["accuracy"], 4))
    assert float(match[4]) == round(csvrg["fit_time_ratio"], 2)
    match = re.search(r"CVR on 100,000 rows reaches an RMSE ([\d.]+)× that of scikit-learn's "
                      r"SVR on 20,000 rows in ([\d.]+) of its time", readme)
    assert match, "docs/benchmarks.md's CVR sentence changed; keep it tied to cvr.json"
    assert float(match[1]) == round(cvr["rmse_ratio"], 3)
    assert float(match[2]) == round(cvr["time_ratio"], 2)


def test_the_flights_frame_keeps_the_codes_the_hand_table_encodes():
    from sodm_spark.data.flights import load_flights, load_flights_frame, package_data_dir

    try:
        package_data_dir()
    except FileNotFoundError as error:
        pytest.skip(str(error))
    X, y, names = load_flights()
    frame = load_flights_frame()
    assert len(frame) == X.shape[0]
    np.testing.assert_array_equal(frame["label"], (y > 0).astype(int))
    for name in ("month", "sched_dep", "distance", "temp", "visib"):
        np.testing.assert_array_equal(frame[name], X[:, names.index(name)])
    # the hand table's one-hot columns are the frame's codes
    for code in frame["carrier"].unique():
        np.testing.assert_array_equal(frame["carrier"] == code,
                                      X[:, names.index(f"carrier_{code}")] == 1.0)
    assert frame["dest"].nunique() > 100 and frame["origin"].nunique() == 3
    assert not {"dest_lat", "dest_lon", "dest_alt"} & set(frame.columns)


def test_the_flights_table_is_the_package_csv_with_the_weather_joined():
    import csv
    import io
    import zipfile

    from sodm_spark.data.datasets import DatasetUnavailable, load_dataset
    from sodm_spark.data.flights import load_flights, package_data_dir

    try:
        folder = package_data_dir()
    except FileNotFoundError as error:
        pytest.skip(str(error))
    X, y, names = load_flights()
    # the reference: the CSV read row by row with the standard library
    with zipfile.ZipFile(folder / "flights.csv.zip") as archive:
        text = archive.read(archive.namelist()[0]).decode()
    arrived = [row for row in csv.DictReader(io.StringIO(text)) if row["arr_delay"] != "NA"]
    assert X.shape == (len(arrived), 36) == (327_346, 36) and np.isfinite(X).all()
    late = np.array([float(row["arr_delay"]) >= 15 for row in arrived])
    np.testing.assert_array_equal(y > 0, late)
    # known before departure only: nothing measured once the flight has left
    assert not {"dep_delay", "dep_time", "arr_time", "air_time", "arr_delay"} & set(names)
    first = arrived[0]
    assert X[0, names.index("sched_dep")] == (int(first["sched_dep_time"]) // 100) * 60 + \
        int(first["sched_dep_time"]) % 100
    assert X[0, names.index(f"carrier_{first['carrier']}")] == 1.0
    assert X[0, names.index("distance")] == float(first["distance"])
    with open(folder / "weather.csv") as handle:
        hour = next(row for row in csv.DictReader(handle) if row["origin"] == first["origin"]
                    and row["time_hour"] == first["time_hour"])
    assert X[0, names.index("temp")] == pytest.approx(float(hour["temp"]))
    assert X[0, names.index("visib")] == pytest.approx(float(hour["visib"]))
    try:
        data = load_dataset("flights", seed=0)
    except DatasetUnavailable as error:
        pytest.skip(str(error))
    assert data.X_train.shape == (300_000, 36) and data.X_test.shape == (27_346, 36)
