"""What the benchmarks that run a job through spark-submit share: the environment of a job of a
checkout, one timed run of a command, one run of a job and the medians of several (their result
record: sodm_spark.benchmarking.records)."""
from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def job_env(root: Path = ROOT) -> dict:
    """The environment of a job of the checkout at ``root``: its ``conf/`` (SPARK_CONF_DIR), this
    interpreter for the Python workers and its folder first on PATH (spark-submit), and ``root``
    first on PYTHONPATH, so that the driver and the Python workers import that checkout's
    sodm_spark, not the one installed (an editable install points at another checkout)."""
    path = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
    return dict(os.environ, SPARK_CONF_DIR=str(Path(root) / "conf"),
                PYSPARK_PYTHON=sys.executable, PYTHONPATH=path,
                PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")


def timed_run(command: list[str], env: dict, cwd=None, timeout: float | None = None):
    """(the finished command with its output, its wall seconds from start to exit). It runs in
    a process group of its own: when it runs past ``timeout`` seconds (TimeoutExpired) or this
    process is interrupted, the whole group (spark-submit, its JVM, the driver, the Python
    workers) is killed before the exception goes on, so nothing of it outlives the call."""
    start = time.perf_counter()
    process = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except BaseException:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise
    wall = time.perf_counter() - start
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr), wall


def submit(job: str, job_args: list[str], master: str, submit_args: list[str] = (),
           root: Path = ROOT):
    """``spark-submit --master M [submit_args] jobs/JOB job_args --metrics-out F`` of the checkout
    at ``root`` (:func:`job_env`): (its metrics JSON, the command's wall seconds, its output
    without the config line). Exits with the command's stderr when it fails."""
    with tempfile.TemporaryDirectory() as tmp:
        metrics_path = Path(tmp) / "metrics.json"
        command = (["spark-submit", "--master", master, *submit_args, str(root / "jobs" / job)]
                   + list(job_args) + ["--metrics-out", str(metrics_path)])
        result, wall = timed_run(command, job_env(root))
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


class S3Copy:
    """Files on a moto S3 server on loopback (the object-store tests' server) in ``bucket``,
    and the environment that names it (a job given it reads ``s3://`` through pyarrow);
    :meth:`stop` ends the server."""

    def __init__(self, bucket: str):
        import logging

        from moto.server import ThreadedMotoServer
        from pyarrow import fs

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.server.start()
        host, port = self.server.get_host_and_port()
        self.env = {"AWS_ENDPOINT_URL": f"http://{host}:{port}", "AWS_REGION": "us-east-1",
                    "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                    "AWS_EC2_METADATA_DISABLED": "true"}
        self.store = fs.S3FileSystem(endpoint_override=self.env["AWS_ENDPOINT_URL"],
                                     access_key="testing", secret_key="testing",
                                     region="us-east-1", allow_bucket_creation=True)
        self.store.create_dir(bucket)
        self.bucket = bucket

    def upload(self, folder: Path, prefix: str, pattern: str = "*.parquet") -> str:
        """``folder``'s files matching ``pattern`` under ``prefix``: their folder's URI."""
        for path in sorted(Path(folder).glob(pattern)):
            with self.store.open_output_stream(f"{self.bucket}/{prefix}/{path.name}") as out:
                out.write(path.read_bytes())
        return f"s3://{self.bucket}/{prefix}"

    def stop(self) -> None:
        self.server.stop()

