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
(``blocked``), the memory of one task, and its predicted seconds: what the solver does, at this
machine's measured GEMM speed (:func:`modelled_seconds`), with the visits of a solve from
scratch before any level ran (:func:`prior_seconds`: those the search's chosen point needed
on its pieces nearest the level's partitions in size, :func:`searched_visits`, when a search
ran), then with the sweeps the last level
needed, scaled by how far its own seconds were from the model
(:func:`~sodm_spark.selection.stopping.predict_seconds`). A blocked plan says what it costs and
which level count would keep the kernels cached. On a GPU the driver sees, the cache is its
free memory's share (:class:`~sodm_spark.spark.memory.ExecutorMemory`).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

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
#: The level cost model (:func:`modelled_seconds`), int16 levels. Its seconds are this
#: machine's when a core's float32 GEMM runs at PRIOR_REFERENCE_GEMM_FLOPS; the model scales
#: them by the speed measured before each fit (:func:`measure_gemm`), which a loaded machine
#: lowers. Fitted by least squares on log seconds to the 28 levels of a first run of
#: benchmarks/bench_level_costs.py (the six data sets of bench_stopping.py, every level, and
#: 12-column tables of 50,000-200,000 rows; local[2], load average 3.2-5.8 from the other
#: users of the machine, GEMM 57.8 GFLOP/s a core against about 130 when idle), each level with
#: the visits its measured sweeps give (:func:`measured_visits`); with the level's own cost
#: below, within a factor of 1.5 of 20 of them, 1.92 at worst; of the stored run's 28
#: (docs/results/level_costs.json, load average 1.2-2.6), 20, 2.08 at worst. Per cached
#: entry, filling it (the rbf epilogue, the rounding to int16, the mirrored half, the pages):
#: 3.38 ns (the ten-class levels' float32 entries fitted no dearer). Per visit of a row in a
#: sweep, the block's 8 inner sweeps over its 512-entry row: 3.42 µs, and reading the row into
#: u: 0.093 ns a byte (0.19 ns an int16 entry, about 10 GB/s). Single-core probes of the
#: solver on Fashion-MNIST and the sphere, CPU time: 4.9-6.9 ns an entry, 5.3-5.4 µs a visit
#: on 1,000-5,000 rows, 0.19 ns an entry read on 20,000. Per scored row and training row, besides the GEMM:
#: 1.97 ns (the levels' own scoring seconds, median of 20 levels: 3.4 ns at 57.8 GFLOP/s). Per
#: task 0.029 s (0.05 s at the run's speed, Spark's launch of a task: 80 ms of everything a
#: task of the 729-task level in docs/jobs.md, "The top partition size, measured"); per row
#: of a task 36 µs (reading its partition, the merge's shuffle: what the fit gave a level's
#: rows besides its kernel and sweeps). Ten classes' joint solve: 0.171 ns per class and
#: float32 entry a plain sweep reads.
PRIOR_REFERENCE_GEMM_FLOPS = 100e9
PRIOR_FILL_SECONDS = 3.38e-9
PRIOR_SECONDS_PER_VISIT, PRIOR_SECONDS_PER_BYTE_READ = 3.42e-6, 0.093e-9
PRIOR_SCORE_SECONDS_PER_ENTRY = 1.97e-9
PRIOR_SECONDS_PER_TASK, PRIOR_SECONDS_PER_ROW = 0.029, 36e-6
#: A level's own fixed cost (Spark's jobs, the merge's shuffle, collecting the stats): the
#: least the levels of a warm session took here, one partition of 2,400 rows × 4 features
#: (3-5 sweeps) 0.43-0.52 s, two of 1,200 0.69-0.75 s, at a load of 2.6; what the fit above
#: left to the rows is not counted twice on such levels.
PRIOR_SECONDS_PER_LEVEL = 0.3
PRIOR_MULTICLASS_SECONDS_PER_ENTRY = 0.171e-9
#: The visits of a row in a solve from scratch, before any level is measured (the sweeps times
#: the share of rows active). Measured at the top levels of the same runs: 5.6 (the sphere),
#: 11.6 (Fashion-MNIST), 52 (satellite), 105 (letter), 310 (shuttle), 34-416 (the tables,
#: fewer on larger partitions); no one number is within 1.5 of them all. 40 makes the worst
#: of the six data sets' first levels 3.2 times off, either way (docs/results/level_costs.json).
#: Ten classes (joint plain sweeps): 172, Fashion-MNIST's ten classes at the default point.
#: The prior of a fit given its hyperparameters; after a search the first level takes the
#: visits its chosen point needed (:func:`searched_visits`): pieces near the partitions' size
#: need about as many sweeps (New York flights, λ = 1e5: 43 on 2,500 rows and 21 on 10,000 in
#: the search, 47 on 3,581 and 21 on 10,743 in the levels), and the search counts them.
PRIOR_ACTIVE_SWEEPS = 40.0
PRIOR_MULTICLASS_SWEEPS = 172.0
#: The share of a partition's rows active in a sweep, on average over its sweeps (shrinking):
#: single-core probes, 0.42-0.46 of Fashion-MNIST's rows, 0.75-0.81 of the sphere's; the
#: joint ten-class solve 0.75 of its coordinates.
ACTIVE_SHARE, MULTICLASS_ACTIVE_SHARE = 0.6, 0.75
#: A merged level's visits over the level before it (the warm start): 0.26-1.64, geometric
#: mean 0.75, over the 17 merges of the runs above; 0.6 predicted their seconds best (within
#: 1.5 of 12 of 17, unbiased on average) with the square root of the measured ratio
#: (selection/stopping.py: predict_seconds).
WARM_VISITS = 0.6
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
    """This machine's float32 GEMM speed on one core as last measured (:func:`measure_gemm`;
    measured now when it never was)."""
    return measure_gemm() if _GEMM_FLOPS is None else _GEMM_FLOPS


#: GEMMs :func:`measure_gemm` times one by one, and the pause between them.
GEMM_PROBES, GEMM_PROBE_PAUSE = 7, 0.02


def measure_gemm() -> float:
    """Measure this machine's float32 GEMM speed on one core now (about 0.2 s): the fastest
    of :data:`GEMM_PROBES` products timed one by one, a short pause apart, so that a core
    another process holds for a moment (the search's Python workers winding down, the JVM's
    collector) does not pass for the machine's speed: timed together, the same shape's first
    level on 290,000 New York flights rows was predicted at 37.6 s to 66.8 s in four runs
    (34.0 s to 40.0 s measured). What a core does now, on a machine others may load
    (:func:`plan_level` measures it again before the first level of every fit)."""
    global _GEMM_FLOPS
    from threadpoolctl import threadpool_limits

    a = np.random.default_rng(0).random((512, 784), dtype=np.float32)
    b = np.random.default_rng(1).random((1024, 784), dtype=np.float32)
    fastest = math.inf
    with threadpool_limits(1):
        a @ b.T  # warm up
        for probe in range(GEMM_PROBES):
            if probe:
                time.sleep(GEMM_PROBE_PAUSE)
            start = time.perf_counter()
            a @ b.T
            fastest = min(fastest, time.perf_counter() - start)
    _GEMM_FLOPS = 2 * 512 * 1024 * 784 / max(fastest, 1e-6)
    return _GEMM_FLOPS


@dataclass(frozen=True)
class LevelShape:
    """What :func:`prior_seconds` reads of a level: ``partitions`` of at most ``rows`` rows of
    ``n_features`` (a row's width), ``tasks`` solving at once with ``threads`` BLAS threads
    each, the kernel ``mode`` ('cached' or 'blocked') and ``storage`` of a task's ``cache_mb``
    cache, ``scored_rows`` (validation and test rows every task scores) and ``classes`` (0 or
    2: one binary dual; C ≥ 3: C one-vs-rest duals on one float32 matrix)."""

    partitions: int
    rows: int
    n_features: float
    tasks: int
    threads: int = 1
    mode: str = "cached"
    cache_mb: float = math.inf
    storage: str = "int16"
    scored_rows: int = 0
    classes: int = 0


def prior_seconds(shape: LevelShape, visits: float | None = None) -> float:
    """A level's seconds before any level is measured: :func:`modelled_seconds` with the
    visits of a row in a solve from scratch: ``visits`` (the search's,
    :func:`searched_visits`), else :data:`PRIOR_ACTIVE_SWEEPS`'."""
    return modelled_seconds(shape, visits)


@dataclass(frozen=True)
class SearchedSolve:
    """How the search's chosen point solved in one round (spark/tune.py): on pieces of
    ``rows`` rows, ``visits`` visits of a row on average (None: not counted:
    :attr:`~sodm_spark.solvers.local_solve.LocalSolution.visits_per_row`) and at most
    ``sweeps`` sweeps."""

    rows: int
    visits: float | None
    sweeps: int


def searched_visits(searched, rows: int, classes: int = 0) -> float | None:
    """The visits of a row (:func:`modelled_seconds`' ``visits``) of a first level whose
    partitions hold ``rows`` rows, from the search's rounds ``searched`` (SearchedSolve): the
    round whose pieces are nearest that size on a log scale (a solve's sweeps depend on its
    rows); its counted visits, else its sweeps times :data:`ACTIVE_SHARE`, or for C ≥ 3
    classes :data:`MULTICLASS_ACTIVE_SHARE`. None: no search ran."""
    if not searched:
        return None
    nearest = min(searched, key=lambda solve: abs(math.log(max(rows, 1) / max(solve.rows, 1))))
    if classes >= 3:
        return MULTICLASS_ACTIVE_SHARE * nearest.sweeps
    return ACTIVE_SHARE * nearest.sweeps if nearest.visits is None else nearest.visits


def modelled_seconds(shape: LevelShape, visits: float | None = None) -> float:
    """What a level of ``shape`` costs by what the solver does (docs/design.md §1.3, §2.4), over
    the rounds of tasks the cores run. A task of m rows pays:

    * the kernel: its GEMM work at this machine's measured speed (m²·d flops, half a
      symmetric product, over its BLAS threads), and filling the m² entries (the kernel's
      epilogue, the fixed-point rounding, the mirrored half, the pages) at
      :data:`PRIOR_FILL_SECONDS` an entry; blocked, the uncached share again at every visit of
      a row;
    * the sweeps: shrinking leaves few rows active, so a row is visited ``visits`` times in
      all (None: :data:`PRIOR_ACTIVE_SWEEPS`), not once a sweep; a visit costs
      :data:`PRIOR_SECONDS_PER_VISIT` (the block's inner sweeps) and reading the row's m
      entries into u (:data:`PRIOR_SECONDS_PER_BYTE_READ` a byte). C ≥ 3 classes: ``visits``
      (None: :data:`PRIOR_MULTICLASS_SWEEPS`) plain sweeps of the m² float32 entries a class;
    * scoring the scored rows against its rows (GEMM and :data:`PRIOR_SCORE_SECONDS_PER_ENTRY`
      an entry), and its fixed and per-row costs;

    and the level :data:`PRIOR_SECONDS_PER_LEVEL`. Every constant is seconds at
    :data:`PRIOR_REFERENCE_GEMM_FLOPS`, scaled by the speed measured now."""
    m, flops_per_second = float(shape.rows), gemm_flops_per_second()
    entries, width = m * m, max(shape.n_features, 1.0)
    gemm_seconds = 1.0 / (flops_per_second * max(1, shape.threads))
    slower = PRIOR_REFERENCE_GEMM_FLOPS / flops_per_second  # the constants' seconds, here now
    if shape.classes >= 3:  # the joint solve keeps its one matrix in float32
        itemsize = 4
        visits = PRIOR_MULTICLASS_SWEEPS if visits is None else visits
        sweeps = visits * shape.classes * entries * PRIOR_MULTICLASS_SECONDS_PER_ENTRY
    else:
        itemsize = storage_itemsize(shape.storage)
        visits = PRIOR_ACTIVE_SWEEPS if visits is None else visits
        sweeps = visits * m * (PRIOR_SECONDS_PER_VISIT
                               + m * itemsize * PRIOR_SECONDS_PER_BYTE_READ)
    computed = 1.0
    if shape.mode == "blocked":
        uncached = 1.0 - min(1.0, shape.cache_mb / max(kernel_mb(shape.rows, itemsize), 1e-9))
        computed += 2.0 * visits * uncached
    kernel = computed * entries * (width * gemm_seconds + slower * PRIOR_FILL_SECONDS)
    scoring = shape.scored_rows * m * (2.0 * width * gemm_seconds
                                       + slower * PRIOR_SCORE_SECONDS_PER_ENTRY)
    task = kernel + slower * (sweeps + PRIOR_SECONDS_PER_TASK + m * PRIOR_SECONDS_PER_ROW) + scoring
    rounds = math.ceil(shape.partitions / max(1, min(shape.partitions, shape.tasks)))
    return slower * PRIOR_SECONDS_PER_LEVEL + rounds * task


def measured_visits(entry, classes: int) -> float:
    """The visits a row of a measured level had (:func:`modelled_seconds`' ``visits``): the
    sweeps its partitions needed (``LevelStats``) times the share of rows active in a sweep
    (:data:`ACTIVE_SHARE`), or for C ≥ 3 classes its joint sweeps times
    :data:`MULTICLASS_ACTIVE_SHARE`."""
    if classes >= 3:
        return MULTICLASS_ACTIVE_SHARE * entry.sweeps_max
    return ACTIVE_SHARE * entry.sweeps_total / max(1, entry.partitions)


def measured_cost(entry, shape: LevelShape,
                  cores_per_executor: int) -> tuple[LevelCost, float]:
    """(the measured level ``entry`` (a ``LevelStats``) as :func:`predict_seconds` reads it,
    the visits its rows had): its seconds, and what :func:`modelled_seconds` gives its own
    shape (the next level's ``shape`` with its partitions, rows, tasks and kernel) with those
    visits."""
    partitions = max(1, entry.partitions)
    tasks = entry.tasks or shape.tasks
    running = max(1, min(partitions, tasks, cores_per_executor))
    measured = replace(shape, partitions=partitions,
                       rows=entry.max_rows or -(-entry.rows // partitions), tasks=tasks,
                       threads=max(1, cores_per_executor // running),
                       mode="blocked" if "blocked" in entry.kernel else "cached",
                       storage=entry.storage if entry.storage in ("int16", "float32")
                       else shape.storage)
    visits = measured_visits(entry, shape.classes)
    return LevelCost(entry.seconds, modelled_seconds(measured, visits)), visits


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


def plan_level(level, sizes, n_features, params, memory, done, cores, scored_rows: int = 0,
               classes: int = 0, searched: tuple = ()) -> LevelPlan:
    """Shape, kernel mode, memory and predicted seconds of the level about to run; its tasks
    score ``scored_rows`` rows, and solve ``classes`` one-vs-rest duals (0: one binary dual).
    Before any level is measured (``done`` empty) the search's rounds ``searched``
    (:class:`SearchedSolve`) give a row's visits (:func:`searched_visits`).

    The partitions' kernels are cached where they fit a task's cache, in the dtype of
    :func:`level_storage` (int16 fixed point by default: half float32's memory, faster sweeps),
    with a task on every core. When they do not fit with a task per core but would with fewer
    tasks at once (each then has more of the executor's memory and BLAS threads), the level
    runs with that many (``LevelPlan.tasks``): a cached solve with idle cores in its sweeps is
    still far cheaper than recomputing kernel rows in every sweep. Raises MemoryBudgetError
    when its largest partition cannot be solved within the budget.
    """
    partitions, rows = int(sizes.size), int(np.max(sizes))
    if not done:  # a fit's first level: how fast a core is now
        measure_gemm()
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
    shape = LevelShape(partitions, rows, n_features, tasks, max(1, memory.cores // running), mode,
                       cache_mb, storage, scored_rows, classes)
    predicted = first_visits = None
    if done:  # the last level measured, with the sweeps it needed, scales the model
        last, visits = measured_cost(done[-1], shape, max(1, memory.cores))
        predicted = predict_seconds([last], modelled_seconds(shape, WARM_VISITS * visits))
    else:
        first_visits = searched_visits(searched, rows, classes)
    if predicted is None:
        predicted = prior_seconds(shape, first_visits)
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
                     estimated=not done, advice=advice, tasks=tasks, storage=storage,
                     searched_visits=first_visits)
