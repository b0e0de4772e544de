"""The device setting (``device``, ``--device``; docs/design.md §2.10) from the user to the solve:
every front-end refuses a value that is no device, the job's flag and the Params reach each
partition's LocalSolve, a task reads the GPU Spark assigned it, ``--device gpu`` with no GPU
to be had is refused before any data are read, a GPU the driver sees sizes the kernel cache,
and the job run with ``--device cpu`` scores as the default run does."""
import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from sodm_spark import ODMClassifier
from sodm_spark.core.array_namespace import gpu_available
from sodm_spark.core.errors import EXIT_CODES, RESOURCES, ResourceError, SettingsError, run_job
from sodm_spark.jobs.train_args import parse_args
from sodm_spark.solvers.kernel_rows import solver_memory_mb
from sodm_spark.spark import gpu as spark_gpu
from sodm_spark.spark import memory as spark_memory
from sodm_spark.spark.dsvrg.fit import DSVRGParams
from sodm_spark.spark.memory import ExecutorMemory, executor_memory
from sodm_spark.spark.sodm.params import SODMParams
from sodm_spark.spark.sodm.plan import plan_level
from sodm_spark.spark.train import fit_params

from conftest import make_problem

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "jobs"))
import train_sodm  # noqa: E402

NO_GPU_HERE = pytest.mark.skipif(gpu_available(), reason="this machine has a GPU")
NOT_A_DEVICE = r"device must be one of auto, cpu, gpu, got 'tpu'"


# ------------------------------------------------------------------------ the settings

def test_every_front_end_refuses_a_device_that_is_not_one(spark):
    from sodm_spark import SODMClassifier

    with pytest.raises(SettingsError, match=NOT_A_DEVICE):
        SODMParams(device="tpu")
    with pytest.raises(SettingsError, match=NOT_A_DEVICE):
        DSVRGParams(device="tpu")
    with pytest.raises(SettingsError, match=NOT_A_DEVICE):  # the linear kernel checks it too
        fit_params({"kernel": "linear", "device": "tpu"})
    X, y = make_problem(m=30, d=3, seed=1)
    for solver in ("dcd", "newton"):  # the primal solvers ignore it, but check it
        kernel = "linear" if solver == "newton" else "rbf"
        with pytest.raises(SettingsError, match=NOT_A_DEVICE):
            ODMClassifier(kernel=kernel, solver=solver, device="tpu").fit(X, y)
    df = spark.createDataFrame([(row.tolist(), float(label > 0)) for row, label in zip(X, y)],
                               ["features", "label"])
    with pytest.raises(SettingsError, match=NOT_A_DEVICE):
        SODMClassifier(device="tpu").fit(df)


def test_the_flag_the_param_and_the_estimator_reach_the_local_solve():
    from sodm_spark import SODMClassifier

    assert SODMParams().device == "auto" and SODMParams().local_solve.device == "auto"
    assert SODMParams(device="CPU").local_solve.device == "cpu"  # as check_device spells it
    args = parse_args(["--device", "cpu", "--lam", "1e4"])
    assert fit_params(vars(args)).local_solve.device == "cpu"
    assert parse_args([]).device == "auto"
    assert fit_params({"kernel": "linear", "device": "gpu"}).device == "gpu"
    with pytest.raises(SystemExit):  # argparse's refusal, exit code 2
        parse_args(["--device", "tpu"])
    estimator = SODMClassifier(device="cpu")
    assert estimator.getDevice() == "cpu" and SODMClassifier().getDevice() == "auto"
    assert estimator._sodm_params().local_solve.device == "cpu"
    assert ODMClassifier().get_params()["device"] == "auto"


# ------------------------------------------------------------------------ the GPUs of tasks

class FakeTaskContext:
    def __init__(self, resources):
        self._resources = resources

    def resources(self):
        return self._resources


@pytest.mark.parametrize("context, index", [
    (FakeTaskContext({"gpu": SimpleNamespace(name="gpu", addresses=["3", "5"])}), 3),
    (FakeTaskContext({"gpu": SimpleNamespace(name="gpu", addresses=[])}), None),
    (FakeTaskContext({}), None),  # a task Spark assigned no GPU
    (None, None),  # not in a task: the driver
], ids=["two-gpus", "no-address", "no-gpu-resource", "driver"])
def test_a_task_reads_the_first_gpu_spark_assigned_it(monkeypatch, context, index):
    from pyspark import TaskContext

    monkeypatch.setattr(TaskContext, "get", classmethod(lambda cls: context))
    assert spark_gpu.task_gpu_index() == index


def test_a_real_task_without_gpu_scheduling_has_no_gpu_index(spark):
    tasks = spark.sparkContext.parallelize(range(2), 2)
    assert tasks.map(lambda _: spark_gpu.task_gpu_index()).collect() == [None, None]


class FakeContext:
    def __init__(self, conf):
        self.conf = conf

    def getConf(self):
        return self.conf


@pytest.mark.parametrize("conf, asks, per_gpu", [
    ({}, False, 8),
    ({"spark.executor.resource.gpu.amount": "1"}, True, 8),
    ({"spark.executor.resource.gpu.amount": "1", "spark.task.resource.gpu.amount": "0.25"},
     True, 4),
    ({"spark.task.resource.gpu.amount": "1"}, True, 1),
    ({"spark.executor.resource.gpu.amount": "0"}, False, 8),
], ids=["none", "executor", "quarter-gpu-tasks", "whole-gpu-tasks", "zero"])
def test_the_conf_asks_for_executor_gpus(conf, asks, per_gpu):
    sc = FakeContext(conf)
    assert spark_gpu.conf_requests_gpus(sc) is asks
    assert spark_gpu.tasks_per_gpu(sc, 8) == per_gpu


@NO_GPU_HERE
def test_device_gpu_is_refused_only_when_no_gpu_can_be_had():
    with pytest.raises(ResourceError, match=r"needs a CUDA GPU .* or use --device cpu$"):
        spark_gpu.check_gpu_request(FakeContext({}), "gpu")
    # executors' GPUs the driver cannot see: the tasks find them
    spark_gpu.check_gpu_request(FakeContext({"spark.executor.resource.gpu.amount": "1"}), "gpu")
    for device in ("auto", "cpu"):
        spark_gpu.check_gpu_request(FakeContext({}), device)
        assert spark_gpu.driver_gpu_mb(device) is None
    assert spark_gpu.driver_gpu_mb("gpu") is None  # no GPU on the driver: the host plan


# ------------------------------------------------------------------------ the plan

def test_a_gpu_the_driver_sees_gives_the_kernel_cache_its_memory(monkeypatch, spark):
    fake = SimpleNamespace(kind="gpu", free_bytes=lambda: 3 * 2**30)
    monkeypatch.setattr(spark_gpu, "resolve_device", lambda device, index=None: fake)
    assert spark_gpu.driver_gpu_mb("auto") == 3072.0
    assert spark_gpu.driver_gpu_mb("cpu") is None  # never asked

    rows, d = 8000, 10
    need = solver_memory_mb(rows, d)
    params = SODMParams(levels=1)
    host = ExecutorMemory(memory_mb=need + 15.0, cores=1)  # 15 MB of cache: blocked
    plan = plan_level(1, np.full(3, rows), d, params, host, [], 1)
    assert plan.kernel == "blocked" and plan.cache_mb == pytest.approx(15.0)
    on_gpu = ExecutorMemory(memory_mb=need + 15.0, cores=1, gpu_mb=1000.0, gpu_tasks=1)
    plan = plan_level(1, np.full(3, rows), d, params, on_gpu, [], 1)
    assert plan.kernel == "cached" and plan.cache_mb == pytest.approx(1000.0 - need)
    shared = ExecutorMemory(memory_mb=4 * (need + 15.0), cores=4, gpu_mb=1000.0, gpu_tasks=4)
    plan = plan_level(1, np.full(3, rows), d, params, shared, [], 4)  # 3 tasks on one GPU
    assert plan.cache_mb == pytest.approx(1000.0 / 3 - need)

    # executor_memory asks the driver's GPU for the device the fit runs on
    monkeypatch.setattr(spark_memory, "driver_gpu_mb",
                        lambda device: None if device == "cpu" else 2048.0)
    sc = spark.sparkContext
    found = executor_memory(sc, None, "auto")
    assert found.gpu_mb == 2048.0 and found.gpu_tasks == sc.defaultParallelism
    assert executor_memory(sc, None, "cpu").gpu_mb is None


@NO_GPU_HERE
def test_on_a_machine_without_a_gpu_the_plan_is_the_hosts(spark):
    sc = spark.sparkContext
    assert executor_memory(sc, None, "auto") == executor_memory(sc, None, "cpu") == \
        executor_memory(sc)


# ------------------------------------------------------------------------ the job

FAST = ["--rows", "600", "--levels", "1", "--gamma", "1", "--lam", "1e4", "--theta", "0.1",
        "--v", "0.2", "--global-step", "none"]


def test_the_job_on_the_cpu_device_scores_as_the_default_run(spark, tmp_path, capsys):
    accuracy, modes = {}, {}
    for device in ("auto", "cpu"):
        metrics = tmp_path / f"{device}.json"
        assert train_sodm.main([*FAST, "--device", device, "--metrics-out", str(metrics)]) == 0
        report = json.loads(metrics.read_text())
        accuracy[device] = report["test_accuracy"]
        modes[device] = {level["kernel"] for level in report["levels"]}
    # the levels ran the device path's solver (its kernel resident) and the numba one
    assert modes == {"auto": {"cached"}, "cpu": {"resident"}}
    assert '"device": "cpu"' in capsys.readouterr().out  # the effective config says it
    assert accuracy["auto"] > 0.8
    assert accuracy["cpu"] == pytest.approx(accuracy["auto"], abs=0.01)


@NO_GPU_HERE
def test_the_job_refuses_device_gpu_in_one_line_before_the_data(spark, capfd):
    code = run_job(train_sodm.main, [*FAST, "--device", "gpu"])
    console = "".join(capfd.readouterr())
    assert code == EXIT_CODES[RESOURCES], console
    errors = [line for line in console.splitlines() if "error:" in line]
    assert len(errors) == 1 and re.search(r"--device gpu.*or use --device cpu$", errors[0])
    assert "level partitions" not in console and "Traceback" not in console
