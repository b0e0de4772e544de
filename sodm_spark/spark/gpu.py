"""The GPUs of a Spark application, as the device setting (``device``, ``--device``) reads
them: which GPU Spark gave a task, whether the conf asks for executor GPUs at all, the check
of ``--device gpu`` before any data are read, and the free memory of the driver's GPU that a
level's kernel cache is planned from (:mod:`.memory`).

Spark hands GPUs out per task (``spark.executor.resource.gpu.amount``,
``spark.task.resource.gpu.amount`` and a discovery script); a task reads its own in
``TaskContext.resources()``. Without that scheduling (local mode, a cluster without GPU
resources) a task has none named and the array code takes GPU 0
(:func:`~sodm_spark.core.array_namespace.resolve_device`).
"""
from __future__ import annotations

import math

from ..core.array_namespace import check_device, resolve_device
from ..core.errors import ResourceError

#: The conf keys that ask Spark for GPUs: per executor, and each task's share of one.
GPU_AMOUNTS = ("spark.executor.resource.gpu.amount", "spark.task.resource.gpu.amount")


def task_gpu_index() -> int | None:
    """The first address of the GPU Spark assigned the running task, as a CUDA device number;
    None outside a task, when Spark assigned it none, or where pyspark is not installed (the
    in-process back end: :mod:`.engine`)."""
    try:
        from pyspark import TaskContext
    except ImportError:
        return None

    context = TaskContext.get()
    if context is None:
        return None
    gpu = context.resources().get("gpu")
    if gpu is None or not gpu.addresses:
        return None
    return int(gpu.addresses[0])


def _amount(conf, key: str) -> float:
    """The number ``key`` is set to in ``conf`` (0 when unset or not a number)."""
    try:
        return float(conf.get(key, None) or 0)
    except ValueError:
        return 0.0


def conf_requests_gpus(sc) -> bool:
    """Whether the application's conf asks Spark for executor GPUs (either amount above 0)."""
    conf = sc.getConf()
    return any(_amount(conf, key) > 0 for key in GPU_AMOUNTS)


def tasks_per_gpu(sc, cores: int) -> int:
    """Tasks that share one GPU at once: 1 / ``spark.task.resource.gpu.amount`` when set, else
    every one of the executor's ``cores`` (local mode: every task takes GPU 0)."""
    share = _amount(sc.getConf(), "spark.task.resource.gpu.amount")
    return max(1, min(cores, math.floor(1 / share))) if share > 0 else max(1, cores)


def check_gpu_request(sc, device: str) -> None:
    """Refuse ``device="gpu"`` before any data are read when neither the driver sees a GPU nor
    the conf asks Spark for executor GPUs (a ResourceError in one line saying what to do);
    with executor GPUs asked for, a task that finds none fails with the same line."""
    if check_device(device) != "gpu" or conf_requests_gpus(sc):
        return
    resolve_device("gpu")  # raises the one line when the driver sees no GPU either


def driver_gpu_mb(device: str) -> float | None:
    """Free memory (MB) of the GPU the driver resolves ``device`` to, or None: the device is
    the CPU, or the driver sees no GPU (the executors' GPUs are not measured from here)."""
    if check_device(device) == "cpu":
        return None
    try:
        found = resolve_device(device)
    except ResourceError:  # device="gpu" on executors' GPUs only (check_gpu_request allowed it)
        return None
    free = None if found is None or found.kind != "gpu" else found.free_bytes()
    return None if free is None else free / 2**20
