"""benchmarks/bench_gpu.py is a thin caller of the package's in-process fit: the levels it
reports are the fit's own (the job's lines, its timeline, its record), on the device path
here on numpy (``--device cpu``: the code a GPU runs, docs/design.md §2.10)."""
import importlib.util
import json
from pathlib import Path

import pytest

from sodm_spark.data.datasets import FASHION_MNIST_DIR
from sodm_spark.spark import train

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_gpu.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_gpu", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_gpu_benchmark_runs_the_jobs_fit_on_the_device_path(tmp_path, capsys, monkeypatch):
    if not (Path(FASHION_MNIST_DIR) / "train-images-idx3-ubyte.gz").exists():
        pytest.skip("Debian's dataset-fashion-mnist is not installed (tests/data_packages.sh)")
    bench = _bench()
    fits = []

    def recorded(*args, **kwargs):
        fits.append(kwargs)
        return train.fit_in_process(*args, **kwargs)

    monkeypatch.setattr(bench, "fit_in_process", recorded)
    record_path = tmp_path / "gpu.json"
    assert bench.main(["--rows", "3000", "--device", "cpu", "--workers", "1", "--cores", "2",
                       "--levels", "1", "--global-step", "none", "--json",
                       str(record_path)]) == 0
    out = capsys.readouterr().out
    assert len(fits) == 1 and fits[0]["device"] == "cpu" and fits[0]["levels"] == 1
    record = json.loads(record_path.read_text())
    # the job's own lines: the search, the levels table, the timeline
    assert "no ODM hyperparameters given" in out and "timeline of the command" in out
    assert [entry["level"] for entry in record["levels"]][0] == 1
    assert record["test_rows"] == 10_000 and 0.85 < record["test_accuracy"] <= 1.0
    stages = [stage["stage"] for stage in record["timeline"]["stages"]]
    assert "search" in stages and "level 1" in stages
    assert "work_seconds" in record and record["machine"]["device"] and record["git"]["commit"]
