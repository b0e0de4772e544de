"""What the benchmarks that run a job through spark-submit share: one run of the command and the
medians of several (their result record: sodm_spark.benchmarking.records)."""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def submit(job: str, job_args: list[str], master: str, submit_args: list[str] = ()):
    """``spark-submit --master M [submit_args] jobs/JOB job_args --metrics-out F``: (its metrics
    JSON, the command's wall seconds, its output without the config line). Exits with the
    command's stderr when it fails."""
    with tempfile.TemporaryDirectory() as tmp:
        metrics_path = Path(tmp) / "metrics.json"
        command = (["spark-submit", "--master", master, *submit_args, str(ROOT / "jobs" / job)]
                   + list(job_args) + ["--metrics-out", str(metrics_path)])
        env = dict(os.environ, SPARK_CONF_DIR=str(ROOT / "conf"), PYSPARK_PYTHON=sys.executable,
                   PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
        start = time.perf_counter()
        result = subprocess.run(command, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if result.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
        metrics = json.loads(metrics_path.read_text())
    output = [line for line in result.stdout.splitlines() if not line.startswith("config:")]
    return metrics, wall, output


def medians(runs: list[dict]):
    """(train seconds, wall seconds, test accuracy) medians and the train seconds of each run."""
    return (statistics.median(r["train_seconds"] for r in runs),
            statistics.median(r["wall_seconds"] for r in runs),
            statistics.median(r["test_accuracy"] for r in runs),
            ", ".join(f"{r['train_seconds']:.1f}" for r in runs))

