"""How much memory one SODM task may use at a level, from the tasks that really run at once.

A level with n partitions runs ``min(n, cores per executor)`` solves at once on an executor, so
the top levels (many partitions) split the executor's memory between its cores while level 0
(one partition) gives its one task all of it. What the executor has for Python:

* ``spark.executor.pyspark.memory`` when set: Spark caps every Python worker at that amount
  divided by the executor's cores (a hard limit), so no task may plan beyond it;
* else, in local mode, this machine's RAM less the driver's JVM heap (``spark.driver.memory``:
  Spark's own bookkeeping, the persisted levels are on disk) and a reserve
  (:data:`~sodm_spark.core.resources.RESERVE_MB`);
* else (a cluster), an executor host's RAM, asked once by a one-task job, less the executor's
  JVM heap (``spark.executor.memory``) and the reserve.

On the device path with a GPU the driver sees (``device`` "gpu", or "auto" with a GPU here;
:func:`.gpu.driver_gpu_mb`), the kernel cache lives on the GPU: a level's cache is planned from
that GPU's free memory, shared by the tasks one GPU runs at once, and the host's budget still
bounds the rows and the solver's arrays. The driver's GPU stands for the executors' (local mode,
or a cluster of like machines); a driver without one plans from the host's memory.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass

import numpy as np

from ..core.errors import ResourceError
from ..core.resources import RESERVE_MB, physical_memory_mb, share_per_task, size_mb
from ..solvers.kernel_rows import solver_memory_mb
from .engine import executor_count
from .gpu import driver_gpu_mb, tasks_per_gpu


class MemoryBudgetError(ResourceError):
    """A level whose largest partition cannot be solved within the per-task memory budget."""


def rows_text(rows: int, n_features, dense_text: str | None = None) -> str:
    """'rows × d features' (or ``dense_text``) for dense rows, whose ``n_features`` is an int;
    for sparse ones, whose ``n_features`` is their memory width (a float, see
    :func:`sodm_spark.core.sparse_rows.memory_width`), the memory a row takes."""
    if isinstance(n_features, (int, np.integer)):
        return dense_text or f"{rows:,} rows × {n_features:,} features"
    return f"{rows:,} sparse rows (each the memory of {n_features:,.0f} float64 values)"


@dataclass(frozen=True)
class ExecutorMemory:
    """Memory for Python on one executor, its task slots, and Spark's per-worker cap."""

    memory_mb: float
    cores: int
    per_worker_limit_mb: float | None = None
    configured_task_mb: float | None = None  # --memory-mb: a fixed budget per task
    gpu_mb: float | None = None  # free memory of the driver's GPU (module docstring); None: none
    gpu_tasks: int = 1  # tasks that share one GPU at once

    def task_mb(self, partitions: int) -> float:
        """Budget of one task at a level with ``partitions`` partitions."""
        if self.configured_task_mb:
            return float(self.configured_task_mb)
        return share_per_task(self.memory_mb, self.cores, partitions, self.per_worker_limit_mb)

    def gpu_task_mb(self, partitions: int) -> float | None:
        """GPU memory of one task at a level with ``partitions`` partitions (None: no GPU,
        the kernel cache is planned from :meth:`task_mb`)."""
        if self.gpu_mb is None:
            return None
        return share_per_task(self.gpu_mb, self.gpu_tasks, partitions)


def executor_cores(sc) -> int:
    """Cores of one executor: local mode's, ``spark.executor.cores`` when set, else the
    application's cores over its executors."""
    conf = sc.getConf()
    if sc.master.startswith("local"):
        return max(1, sc.defaultParallelism)
    if conf.get("spark.executor.cores", None):
        return max(1, int(conf.get("spark.executor.cores")))
    executors = executor_count(sc)
    if executors is None:  # no executor list (Spark Connect): the configured instances, else
        # one executor holding every core
        executors = max(1, int(conf.get("spark.executor.instances", "1") or 1))
    else:
        executors = max(1, executors)
    return max(1, sc.defaultParallelism // executors)


def executor_memory(sc, configured_task_mb: float | None = None,
                    device: str = "cpu") -> ExecutorMemory:
    """The :class:`ExecutorMemory` of this application (see the module docstring), with the
    free memory of the driver's GPU where ``device`` resolves to one."""
    conf = sc.getConf()
    cores = executor_cores(sc)
    gpu_mb = driver_gpu_mb(device)
    gpu_tasks = 1 if gpu_mb is None else tasks_per_gpu(sc, cores)
    pyspark_memory = conf.get("spark.executor.pyspark.memory", None)
    if pyspark_memory:
        total = size_mb(pyspark_memory)
        return ExecutorMemory(total, cores, total / cores, configured_task_mb, gpu_mb, gpu_tasks)
    if sc.master.startswith("local"):
        ram, heap = physical_memory_mb(), size_mb(conf.get("spark.driver.memory", "1g"))
    else:
        ram = _executor_ram_mb(sc)
        heap = size_mb(conf.get("spark.executor.memory", "1g"))
    return ExecutorMemory(max(0.0, ram - heap - RESERVE_MB), cores, None, configured_task_mb,
                          gpu_mb, gpu_tasks)


_EXECUTOR_RAM_MB: dict[str, float] = {}  # application id -> an executor host's RAM, probed once


def _executor_ram_mb(sc) -> float:
    """An executor host's physical memory, from one small job per application (the job's
    resource check, the level count and the fit all ask)."""
    app = sc.applicationId
    if app not in _EXECUTOR_RAM_MB:
        _EXECUTOR_RAM_MB[app] = sc.parallelize([0], 1).map(lambda _: physical_memory_mb()).first()
    return _EXECUTOR_RAM_MB[app]


def level_cache_mb(level: int, rows: int, n_features: float, budget_mb: float,
                   cache_mb: float | None, levels: int, gpu_mb: float | None = None) -> float:
    """The kernel cache a level's solves may use within ``budget_mb``, or MemoryBudgetError.

    The cache is what the budget leaves after the solver's own arrays, capped by ``cache_mb``
    when the user set one; with ``gpu_mb`` (a task's share of a GPU, where the device path
    keeps the cache and its copy of those arrays) what that leaves instead. A partition whose
    whole kernel matrix does not fit the cache is solved with on-demand kernel blocks (the
    solver's blocked mode); one that cannot be solved even so stops the fit here, before any
    task runs out of memory.
    """
    need = solver_memory_mb(rows, n_features)
    if need > budget_mb:
        hint = (f"stop one level earlier with stop_level={level + 1} (--stop-level {level + 1})"
                if level < levels else "start from more partitions (levels, --levels)")
        raise MemoryBudgetError(
            f"level {level}: its largest partition holds "
            f"{rows_text(rows, n_features, f'{rows} rows x {n_features} features')} and "
            f"needs about {need:,.0f} MB to solve even with on-demand kernel blocks, over the "
            f"{budget_mb:,.0f} MB a task may use (memory_mb / spark.executor.pyspark.memory); "
            f"{hint}, or give tasks more memory.")
    room = (budget_mb if gpu_mb is None else gpu_mb) - need
    return max(0.0, room if cache_mb is None else min(cache_mb, room))


#: Copies of the rows a fit keeps on local disk at once: the persisted input, the top level's
#: partitions, the last two solved levels and one merge's shuffle files, and a spare.
DISK_COPIES = 6


def _local_dirs(sc) -> list[str]:
    dirs = os.environ.get("SPARK_LOCAL_DIRS") or sc.getConf().get("spark.local.dir", None) \
        or tempfile.gettempdir()
    return [d for d in dirs.split(",") if d]


def check_fit_resources(sc, n_rows: int, n_features: int, itemsize: int, top_partitions: int,
                        top_level: int, memory: ExecutorMemory, params) -> None:
    """Refuse, before any level runs, a fit this application cannot hold: the top level's
    partitions beyond what a task may use, or (local mode) more persisted rows than the local
    disk has room for. One ValueError naming the setting to change. ``n_features`` is the rows'
    width, or for sparse rows their memory width (:func:`rows_text`; ``itemsize`` 8: a stored
    value and its column index take 12 bytes, 1.5 such columns)."""
    rows = -(-n_rows // max(1, top_partitions))
    budget = memory.task_mb(top_partitions)
    need = solver_memory_mb(rows, n_features)
    if need > budget:
        if memory.configured_task_mb:
            where, more = "memory_mb / --memory-mb", "a larger memory_mb (--memory-mb)"
        elif sc.master.startswith("local"):
            where = ("on this machine, the RAM left beside the driver's JVM heap "
                     "(spark.driver.memory, --driver-memory)")
            more = "the Python workers more memory"
        else:
            where = ("spark.executor.pyspark.memory, or an executor host's RAM less "
                     "spark.executor.memory")
            more = "the Python workers more memory"
        p, most = params.p, top_level
        while params.p ** (most + 1) <= n_rows:  # every partition needs a row
            most += 1

        def fits(levels):
            return solver_memory_mb(-(-n_rows // p ** levels), n_features) <= \
                memory.task_mb(p ** levels)

        better = next((levels for levels in range(top_level + 1, most + 1) if fits(levels)),
                      None)
        if better is None:
            smallest = -(-n_rows // p ** most)
            raise MemoryBudgetError(
                f"the {budget:,.4g} MB a task may use ({where}) is below what even the "
                f"smallest partitions need: at levels={most}, the most {n_rows:,} rows allow "
                f"with p={p}, each holds {smallest:,} rows × {n_features:,} features and needs "
                f"about {solver_memory_mb(smallest, n_features):,.4g} MB to solve; give "
                f"{more}.")
        raise MemoryBudgetError(
            f"the top level's partitions ({top_partitions:,} of {rows_text(rows, n_features)}) "
            f"need about {need:,.0f} MB each to solve, over the {budget:,.4g} MB a task may use "
            f"({where}); start from more partitions, levels={better} (--levels {better}), or "
            f"give {more}.")
    if not sc.master.startswith("local"):
        return  # executors' disks are not visible from here
    need_mb = DISK_COPIES * n_rows * n_features * itemsize / 2**20
    for directory in _local_dirs(sc):
        try:
            free_mb = shutil.disk_usage(directory).free / 2**20
        except OSError:
            continue
        if need_mb > free_mb:
            raise MemoryBudgetError(
                f"the fit keeps its rows on local disk (up to {need_mb:,.0f} MB: {DISK_COPIES} "
                f"copies of {rows_text(n_rows, n_features)}), but {directory} has "
                f"{free_mb:,.0f} MB free; point spark.local.dir (or SPARK_LOCAL_DIRS) at a "
                "larger disk.")


def result_limit_mb(sc) -> float:
    """``spark.driver.maxResultSize`` in MB (0: no limit)."""
    return size_mb(sc.getConf().get("spark.driver.maxResultSize", "1g"))


def check_collectable(sc, n_bytes: float, what: str, advice: str) -> None:
    """Refuse to collect ``what`` (``n_bytes``) when it exceeds half the driver's result limit."""
    limit = result_limit_mb(sc)
    if limit > 0 and n_bytes / 2**20 > 0.5 * limit:
        raise MemoryBudgetError(
            f"{what} would bring {n_bytes / 2**20:,.0f} MB to the driver, over half of "
            f"spark.driver.maxResultSize ({limit:,.0f} MB); {advice}, or raise "
            "spark.driver.maxResultSize (and spark.driver.memory with it).")
