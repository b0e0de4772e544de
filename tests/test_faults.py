"""Driver loss: a spark-submit killed mid-run loses only time when it checkpoints, and never
leaves a half-written model. (Executor loss is in test_loopback_cluster.py.)"""
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np

from sodm_spark.core.kernels import Kernel
from sodm_spark.models.expansion import KernelExpansion

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "jobs"))
import train_sodm  # noqa: E402

JOB = ["--levels", "2", "--p", "3", "--rows", "6000", "--seed", "2"]


def test_killed_driver_resumes_to_the_uninterrupted_model(spark, tmp_path):
    # the uninterrupted run (in this process: the same local[2] settings as spark-submit's)
    assert train_sodm.main(JOB + ["--model-out", str(tmp_path / "reference"),
                                  "--metrics-out", str(tmp_path / "reference.json")]) == 0
    expected = KernelExpansion.load(tmp_path / "reference")
    reference = json.loads((tmp_path / "reference.json").read_text())

    # an older model in place: whatever happens, readers must see a complete model
    model_dir, checkpoint = tmp_path / "model", tmp_path / "checkpoint"
    old = KernelExpansion(np.ones((2, 10)), np.ones((2, 1)), Kernel.create("rbf", 0.5),
                          np.array([-1, 1]))
    old.save(model_dir)

    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_CONF_DIR=str(ROOT / "conf"),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    command = ["spark-submit", "--master", "local[2]", str(ROOT / "jobs" / "train_sodm.py"),
               *JOB, "--checkpoint-dir", str(checkpoint), "--model-out", str(model_dir)]
    driver = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        for line in driver.stdout:
            if line.split()[:2] == ["2", "9"]:  # level 2 printed (and checkpointed): kill
                os.killpg(driver.pid, signal.SIGKILL)
                break
        driver.wait(timeout=300)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
    assert driver.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    state = json.loads((checkpoint / "state.json").read_text())
    assert [entry["level"] for entry in state["levels"]] == [2]
    survivor = KernelExpansion.load(model_dir)  # still the old, complete model
    np.testing.assert_array_equal(survivor.support_vectors, old.support_vectors)
    assert not list(tmp_path.glob(".model.tmp-*"))

    # a new driver resumes from level 2 and writes the model an uninterrupted run writes
    # (automatic stopping on: it stops where the uninterrupted run stopped, same best level)
    assert train_sodm.main(JOB + ["--checkpoint-dir", str(checkpoint), "--resume",
                                  "--model-out", str(model_dir),
                                  "--metrics-out", str(tmp_path / "resumed.json")]) == 0
    resumed = KernelExpansion.load(model_dir)
    np.testing.assert_array_equal(resumed.support_vectors, expected.support_vectors)
    np.testing.assert_array_equal(resumed.coef, expected.coef)
    state = json.loads((checkpoint / "state.json").read_text())
    assert [entry["level"] for entry in state["levels"]] == [
        entry["level"] for entry in reference["levels"]]
    after = json.loads((tmp_path / "resumed.json").read_text())
    for key in ("stopped_at", "stop_reason", "best_level", "validation_accuracy"):
        assert after[key] == reference[key], key


def test_same_job_twice_gives_bit_identical_models(spark, tmp_path):
    for name in ("first", "second"):
        assert train_sodm.main(["--levels", "2", "--rows", "2000", "--seed", "9",
                                "--partitioner", "dip", "--model-out", str(tmp_path / name)]) == 0
    first, second = (KernelExpansion.load(tmp_path / name) for name in ("first", "second"))
    np.testing.assert_array_equal(first.coef, second.coef)
    np.testing.assert_array_equal(first.support_vectors, second.support_vectors)
