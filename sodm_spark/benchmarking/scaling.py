"""Scaling runs of the benchmark job.

* rows (``--scaling rows --rows 10000,100000,1000000``): at fixed hyperparameters, SODM's
  seconds per level for each M. The levels grow with M so that the top level's partitions hold
  at most ``target_rows`` rows and the run stops after ``solved_levels`` levels: every M solves
  partitions of the same sizes, and the cost's growth with M is visible. The exact methods
  run with the same budget; once one has not finished at some M it is not started at a larger
  M (reported as not finished, "not run").
* cores (``--scaling cores --cores 1,2``): the same SODM fit in a fresh Spark session per core
  count (``local[k]``, or ``spark.cores.max=k`` on a cluster), for the speed-up of the SODM
  paper's Figure 2.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..core.kernels import resolve_gamma
from ..data.datasets import load_dataset
from .budget import NOT_FINISHED, OK
from .methods import _run_one
from .results import BenchContext, make_row, tag_budget
from .spark_methods import run_sodm, sodm_params


def levels_for_rows(rows: int, p: int, target_rows: int, solved_levels: int) -> tuple[int, int]:
    """(levels L, stop level): the smallest L with rows / p^L <= target_rows, and the level
    after which ``solved_levels`` levels have been solved."""
    if target_rows < 1 or solved_levels < 1:
        raise ValueError("target rows per partition and solved levels must be positive.")
    levels = 0
    while rows / p ** levels > target_rows:
        levels += 1
    return levels, max(0, levels - solved_levels + 1)


def _context(spark, data, settings, budget, log):
    from ..spark.io import numpy_to_blocks

    sc = spark.sparkContext
    # enough input slices that no single task holds a large share of 10^6 rows; a function
    # of the rows only, so every core count fits the same blocks (the same model)
    slices = max(4, data.X_train.shape[0] // 50000)
    blocks = numpy_to_blocks(sc, data.X_train, data.y_train, n_slices=slices).persist()
    blocks.count()  # move the rows into Spark before any clock starts
    return BenchContext(spark, data, blocks, resolve_gamma(settings["gamma"], data.X_train),
                        settings, budget, log)


def _sodm_rows(ctx, target_rows, solved_levels, **tags):
    n_rows = ctx.data.X_train.shape[0]
    levels, stop = levels_for_rows(n_rows, ctx.settings["p"], target_rows, solved_levels)
    params = sodm_params(ctx.settings, ctx.gamma, "stratified", levels=levels, stop_level=stop)
    rows = tag_budget(run_sodm(ctx, "stratified", params, label="SODM"), ctx.budget_seconds)
    for row in rows:
        row.update(tags, depth=None if row.get("level") is None else levels - row["level"])
    return rows


class ScalingSetup(NamedTuple):
    """What both scaling runs fit: generated ``dataset`` rows with ``test_rows`` test rows,
    SODM's levels chosen so that the top level's partitions hold at most ``target_rows`` rows,
    and ``solved_levels`` levels solved (:func:`levels_for_rows`)."""

    dataset: str = "nonlinear"
    test_rows: int = 2000
    target_rows: int = 2000
    solved_levels: int = 2


def run_rows_scaling(spark, sizes, settings: dict, methods, budget: float, log=print,
                     setup: ScalingSetup | None = None,
                     sodm_budget: float | None = None) -> list[dict]:
    """SODM per level plus ``methods`` (e.g. exact ODM, SVC) for each M in ``sizes``; SODM
    runs under ``sodm_budget`` (default ``budget``), the other methods under ``budget``."""
    dataset, test_rows, target_rows, solved_levels = setup or ScalingSetup()
    rows: list[dict] = []
    stopped: dict[str, int] = {}  # method: the M it did not finish at
    for size in sorted(sizes):
        data = load_dataset(dataset, train_rows=size, test_rows=test_rows, seed=settings["seed"])
        log(f"[scaling rows] M = {size:,}: {data.X_train.shape[1]} features, "
            f"{data.X_test.shape[0]:,} test rows")
        ctx = _context(spark, data, settings, sodm_budget or budget, log)
        try:
            rows.extend(_sodm_rows(ctx, target_rows, solved_levels, rows=size))
            ctx.budget_seconds = budget
            for method in methods:
                if method in stopped:
                    new = [make_row(method, NOT_FINISHED, note=f"not run: did not finish at "
                                    f"M = {stopped[method]:,}")]
                else:
                    log(f"[scaling rows] M = {size:,}: {method} started (budget {budget:g} s)")
                    new = _run_one(ctx, method)
                    log(f"[scaling rows] M = {size:,}: {method} {new[-1]['status']} "
                        f"({new[-1]['fit_seconds'] or 0:.1f} s)")
                tag_budget(new, budget)
                if new[-1]["status"] != OK:
                    stopped.setdefault(method, size)
                rows.extend(dict(row, rows=size) for row in new)
        finally:
            ctx.blocks.unpersist()
            ctx.close()
    return rows


def run_cores_scaling(make_session, cores, settings: dict, budget: float, log=print,
                      setup: ScalingSetup | None = None,
                      train_rows: int = 50000) -> list[dict]:
    """The same SODM fit once per core count; ``make_session(k)`` returns a fresh session with
    k cores (the caller's previous session stopped), which this function stops afterwards."""
    dataset, test_rows, target_rows, solved_levels = setup or ScalingSetup()
    data = load_dataset(dataset, train_rows=train_rows, test_rows=test_rows,
                        seed=settings["seed"])
    rows = []
    for count in cores:
        spark = make_session(count)
        log(f"[scaling cores] {count} core(s): {spark.sparkContext.master}, "
            f"{train_rows:,} rows")
        ctx = _context(spark, data, settings, budget, log)
        try:
            rows.extend(_sodm_rows(ctx, target_rows, solved_levels, cores=count))
        finally:
            ctx.close()
            spark.stop()
    return rows


def speedups(rows: list[dict]) -> list[dict]:
    """Per (depth, cores): seconds and speed-up over the fewest cores; depth None is the
    whole fit."""
    finished = [r for r in rows if r["status"] == OK and r.get("level") is not None]
    table = []
    for depth in sorted({r["depth"] for r in finished}) + [None]:
        picked = {r["cores"]: r for r in finished
                  if (r["depth"] == depth if depth is not None else r.get("final"))}
        if not picked:
            continue
        base_cores = min(picked)
        seconds_of = (lambda r: r["level_seconds"]) if depth is not None \
            else (lambda r: r["fit_seconds"])
        base = seconds_of(picked[base_cores])
        for count in sorted(picked):
            row = picked[count]
            table.append({"cores": count, "depth": depth, "level": row["level"],
                          "partitions": row["partitions"], "seconds": seconds_of(row),
                          "speedup": base / seconds_of(row) if seconds_of(row) else np.nan})
    return table
