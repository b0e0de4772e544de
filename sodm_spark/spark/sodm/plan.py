"""The levels before they run (SODM paper, Algorithm 1): how many, and each one's plan.

**How many levels.** Without ``levels`` the fit starts from p^L partitions of about
:data:`TOP_PARTITION_ROWS` rows (:func:`auto_levels`): the size at which a level costs least
per row here. Smaller partitions pay Spark's cost per task (tens of ms) for little kernel work;
larger ones pay the m²·d kernel and the sweeps over it for every row. Every merge costs about p
times the level before it, so the top level is a small share of a fit whatever its size, and
automatic stopping decides how far down the fit goes. Levels above the deepest one whose
kernels are cached pay off only through their warm start, which saves sweeps but no kernel
work: rows of :data:`KERNEL_BOUND_FEATURES` features or more (the kernel's m²·d GEMM dominates
a solve) start at that cached level instead (:func:`auto_level_count`).

**Each level's plan** (:func:`plan_level`): its shape, whether every partition's whole kernel
matrix fits the kernel cache of a task (``cached``) or is computed on demand in every sweep
(``blocked``), the memory of one task, and its predicted seconds — from the levels measured so
far (:func:`~sodm_spark.selection.stopping.predict_seconds`), or before the first level from this
machine's measured GEMM speed (:func:`prior_seconds`). A blocked plan says what it costs and
which level count would keep the kernels cached. On a GPU the driver sees, the cache is its
free memory's share (:class:`~sodm_spark.spark.memory.ExecutorMemory`).
"""
from __future__ import annotations

import math
import time

import numpy as np

from ...core.errors import SettingsError
from ...selection.stopping import LevelCost, predict_seconds, validation_share
from ...solvers.kernel_rows import kernel_mode_for
from ..memory import MemoryBudgetError, level_cache_mb
from .params import LevelPlan

#: Rows of a top-level partition without --levels. Measured with the job on 600,000 × 784
#: deformed Fashion-MNIST rows (the top level alone, `--no-auto-stop --stop-level L`, local[2]):
#: see docs/jobs.md, "The top partition size, measured".
TOP_PARTITION_ROWS = 2500
#: Sweeps a solve from scratch is assumed to need before any level is measured (the block
#: solver needed 15-37 on 600,000 deformed Fashion-MNIST rows at partitions of 824-22,194
#: rows, 9-50 on letter and the sphere at λ = 1e3-1e6).
PRIOR_SWEEPS = 30
#: Seconds of one sweep per cached kernel entry on one core (reading float32 entries from
#: memory), a task's fixed cost, and seconds per row besides: fitted with this machine's GEMM
#: speed (87 GFLOP/s a core) to the top levels of 600,000 × 784 deformed Fashion-MNIST rows from
#: scratch, local[2] (docs/jobs.md, "The top partition size, measured"): 729 × 824 rows 58.5 s
#: (59.5 s by this rule), 243 × 2,466 35.9 s (39.7), 81 × 7,398 56.9 s (68), 27 × 22,194
#: 177-209 s (185).
PRIOR_SECONDS_PER_ENTRY_SWEEP = 0.56e-9
PRIOR_SECONDS_PER_TASK, PRIOR_SECONDS_PER_ROW = 0.13, 15e-6
#: Rows this wide start at the deepest cached level (:func:`auto_level_count`). Measured on
#: 600,000 rows, local[2] (docs/jobs.md, "The top partition size, measured"): with 784
#: features, levels 5 and 4 cost 148 s and left level 3 needing as many sweeps as from scratch
#: (28 and 28 on one 22,194-row partition, benchmarks/bench_warm_start.py), so starting at
#: level 3 saved them whole; with 12 features (2,000,000 rows) the warm start cut level 4's
#: sweeps from 42 to 13, and the kernel work they saved is negligible at that width.
KERNEL_BOUND_FEATURES = 100


def largest_levels(n_rows: int, p: int) -> int:
    """Largest L with p^L <= n_rows (every partition gets at least one row)."""
    levels = 0
    while p ** (levels + 1) <= n_rows:
        levels += 1
    return levels


def check_levels_fit_rows(n_rows: int, p: int, levels: int | None, held_out: int = 0) -> None:
    """Refuse ``levels`` whose p^levels partitions outnumber the ``n_rows`` rows (every
    partition needs one): a SettingsError naming the most levels the rows allow.
    ``held_out``: validation rows already taken from the data."""
    if levels is None or p ** levels <= n_rows:
        return
    most = largest_levels(n_rows, p)
    rows = (f"only {n_rows} rows are left after holding out {held_out} for validation"
            if held_out else f"the data have only {n_rows} rows")
    raise SettingsError(f"levels={levels} with p={p} asks for {p ** levels} partitions but "
                        f"{rows}; use levels={most} (--levels {most}) or less"
                        + (", or auto_stop=False (--no-auto-stop)." if held_out else "."))


def auto_levels(n_rows: int, p: int, top_rows: int = TOP_PARTITION_ROWS) -> int:
    """The L whose p^L partitions hold closest to ``top_rows`` rows (on a log scale)."""
    if n_rows <= top_rows:
        return 0
    return min(largest_levels(n_rows, p), max(0, round(math.log(n_rows / top_rows, p))))


def auto_level_count(n_rows: int, p: int, n_features: float, memory, params) -> int:
    """The level count of a fit given none: :func:`auto_levels` of the rows, or for rows of at
    least :data:`KERNEL_BOUND_FEATURES` features the fewest levels whose kernels are cached
    (:func:`cached_level_count`) when that is fewer (see the module docstring), for the rows
    left once automatic stopping holds out its validation slice (the partitions hold those)."""
    by_size = auto_levels(n_rows, p)
    if n_features < KERNEL_BOUND_FEATURES:
        return by_size
    if params.auto_stop:
        n_rows -= int(n_rows * validation_share(params.validation_fraction,
                                                params.validation_max_rows, n_rows))
    cached = cached_level_count(n_rows, p, n_features, memory, params)
    return by_size if cached is None else min(by_size, cached)


def kernel_mb(rows: int, itemsize: int = 4) -> float:
    """Megabytes of one partition's whole kernel matrix."""
    return rows * rows * itemsize / 2**20


_GEMM_FLOPS = None


def gemm_flops_per_second() -> float:
    """This machine's float32 GEMM speed on one core, measured once (about 10 ms)."""
    global _GEMM_FLOPS
    if _GEMM_FLOPS is None:
        from threadpoolctl import threadpool_limits

        a = np.random.default_rng(0).random((512, 784), dtype=np.float32)
        b = np.random.default_rng(1).random((1024, 784), dtype=np.float32)
        with threadpool_limits(1):
            a @ b.T  # warm up
            start = time.perf_counter()
            for _ in range(3):
                a @ b.T
            _GEMM_FLOPS = 3 * 2 * 512 * 1024 * 784 / max(time.perf_counter() - start, 1e-6)
    return _GEMM_FLOPS


def prior_seconds(partitions: int, rows: int, n_features: int, cores: int, mode: str,
                  cache_mb: float) -> float:
    """A level's seconds before any level is measured, over the rounds of tasks the cores run:
    a task's kernel GEMM work at this machine's measured speed (m²·d flops for a cached
    partition, half a symmetric product; blocked, 2·m²·d more in every sweep for the share of
    rows the cache cannot hold), :data:`PRIOR_SWEEPS` sweeps over the m² kernel entries, and
    its fixed and per-row costs (the constants above)."""
    entries = float(rows) ** 2
    flops = entries * max(n_features, 1)
    if mode == "blocked":
        uncached = 1.0 - min(1.0, cache_mb / max(kernel_mb(rows), 1e-9))
        flops *= 1.0 + 2.0 * PRIOR_SWEEPS * uncached
    task = (flops / gemm_flops_per_second()
            + PRIOR_SWEEPS * entries * PRIOR_SECONDS_PER_ENTRY_SWEEP
            + PRIOR_SECONDS_PER_TASK + rows * PRIOR_SECONDS_PER_ROW)
    return math.ceil(partitions / max(1, min(partitions, cores))) * task


def storage_itemsize(storage: str) -> int:
    """Bytes of one cached kernel value in ``storage`` ('float32' or 'int16')."""
    return np.dtype(storage).itemsize


def cached_level_count(n_rows: int, p: int, n_features: float, memory, params) -> int | None:
    """The fewest levels whose top partitions' kernels are cached (None: none are), in the
    dtype the levels keep them in (:func:`level_storage`)."""
    itemsize = storage_itemsize(level_storage(params.kernel_storage))
    for levels in range(0, largest_levels(n_rows, p) + 1):
        partitions = p ** levels
        rows = -(-n_rows // partitions)
        try:
            cache = level_cache_mb(levels, rows, n_features, memory.task_mb(partitions),
                                   params.cache_mb, levels, memory.gpu_task_mb(partitions))
        except MemoryBudgetError:
            continue
        if kernel_mode_for(rows, cache, itemsize) == "cached":
            return levels
    return None


def level_storage(kernel_storage: str) -> str:
    """The dtype of a level's cached kernels for ``SODMParams.kernel_storage``: 'auto' is
    int16 fixed point (:data:`~sodm_spark.solvers.kernel_rows.FIXED_POINT`; the solver keeps
    float32 for a kernel its diagonal does not bound). Measured with the job on 60,000 binary
    Fashion-MNIST rows (level 0: one cached partition of 53,898 rows, local[2], 3 paired
    runs): level 0 18 s against 28 s in float32, the whole command 0.83× (45.9 s against
    54.9 s), the same test accuracy (0.9814) and validation one row apart (docs/jobs.md,
    "Memory")."""
    return "int16" if kernel_storage == "auto" else kernel_storage


def plan_level(level, sizes, n_features, params, memory, done, cores) -> LevelPlan:
    """Shape, kernel mode, memory and predicted seconds of the level about to run.

    The partitions' kernels are cached where they fit a task's cache, in the dtype of
    :func:`level_storage` (int16 fixed point by default: half float32's memory, faster sweeps),
    with a task on every core. When they do not fit with a task per core but would with fewer
    tasks at once (each then has more of the executor's memory and BLAS threads), the level
    runs with that many (``LevelPlan.tasks``): a cached solve with idle cores in its sweeps is
    still far cheaper than recomputing kernel rows in every sweep. Raises MemoryBudgetError
    when its largest partition cannot be solved within the budget.
    """
    partitions, rows = int(sizes.size), int(np.max(sizes))
    executors = max(1, cores // max(1, memory.cores))
    running = max(1, min(partitions, memory.cores))  # tasks at once on an executor
    budget = memory.task_mb(partitions)
    cache_mb = level_cache_mb(level, rows, n_features, budget, params.cache_mb, params.levels,
                              memory.gpu_task_mb(partitions))
    storage = level_storage(params.kernel_storage)
    itemsize = storage_itemsize(storage)
    mode = kernel_mode_for(rows, cache_mb, itemsize)
    if mode == "blocked" and params.cache_mb is None:
        for fewer in range(running - 1, 0, -1):
            room = memory.task_mb(fewer)
            try:
                cache = level_cache_mb(level, rows, n_features, room, None, params.levels,
                                       memory.gpu_task_mb(fewer))
            except MemoryBudgetError:
                continue
            if kernel_mode_for(rows, cache, itemsize) == "cached":
                running, budget, cache_mb, mode = fewer, room, cache, "cached"
                break
    if mode == "blocked":  # kernel rows on demand are float32
        storage = "float32"
    tasks = running * executors
    costs = [LevelCost(e.partitions, e.max_rows or -(-e.rows // e.partitions), e.seconds)
             for e in done]
    priors = None
    if len(done) == 1 and done[0].predicted_seconds:  # the first level's estimate was its prior
        priors = (done[0].predicted_seconds,
                  prior_seconds(partitions, rows, n_features, tasks, "cached", cache_mb))
    predicted = predict_seconds(costs, partitions, rows, tasks, priors)
    if predicted is not None and mode == "blocked" and done:
        # on-demand blocks recompute the uncached share of the kernel in every sweep
        uncached = 1.0 - min(1.0, cache_mb / kernel_mb(rows))
        predicted *= 1.0 + max(1, done[-1].sweeps_max) * uncached
    if predicted is None:
        predicted = prior_seconds(partitions, rows, n_features, tasks, mode, cache_mb)
    advice = ""
    if mode == "blocked":
        advice = (f"each partition's kernel ({kernel_mb(rows):,.0f} MB) exceeds the "
                  f"{cache_mb:,.0f} MB cache a task has, so every sweep recomputes "
                  f"{100 * (1 - min(1.0, cache_mb / kernel_mb(rows))):.0f}% of it")
        if not done:
            n_rows = int(np.sum(sizes))
            better = cached_level_count(n_rows, params.p, n_features, memory, params)
            if better is not None and better > level:
                advice += (f"; levels={better} (--levels {better}) would start from "
                           f"{params.p ** better:,} partitions of {-(-n_rows // params.p ** better):,} rows, cached")
    elif tasks < min(partitions, cores):
        advice = (f"{tasks} task{'s' if tasks > 1 else ''} at a time, so that each "
                  f"partition's kernel ({kernel_mb(rows, storage_itemsize(storage)):,.0f} MB"
                  f"{' in int16' if storage == 'int16' else ''}) fits the cache")
    return LevelPlan(level, partitions, rows, mode, budget, cache_mb, predicted,
                     estimated=not done, advice=advice, tasks=tasks, storage=storage)
