"""The device path's numerics on one GPU, without Spark: SODM's levels and the global step on
the deformed Fashion-MNIST rows (docs/design.md §2.10), each stage timed and scored.

    python benchmarks/bench_gpu.py --rows 600000 --device gpu --compare-cpu

What runs is what a Spark fit runs in its tasks, in one process: the rows generated here (the
seeded deformations of ``data.big_data``, in parallel over the chunks), scaled to [0, 1] per
column, mapped onto their principal directions (``input_map="auto"``), split into
strata by the landmarks of Eqns 7-8 and dealt into p^L partitions; each partition's kernel
computed on the device and its dual solved by the finite Newton solver (``odm_newton``), the
levels merged with the scaled warm start; the level's model (the sum of its partitions')
scored on the 10,000 Fashion-MNIST test images; then the global step (the Nyström ODM of
every row, ``nystroem_odm.fit_on_device``) from that model. ``--compare-cpu`` also solves the
first partition of the first level with the numba solver (the CPU default) on this machine's
cores. The clock of "work" starts once the rows are on the device.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from sodm_spark.core.array_namespace import resolve_device  # noqa: E402
from sodm_spark.core.kernel_blocks import decision_values, kernel_matrix  # noqa: E402
from sodm_spark.core.kernels import Kernel  # noqa: E402
from sodm_spark.data.big_data import DEFORM_CHUNK, deformed_fashion_mnist  # noqa: E402
from sodm_spark.data.datasets import FASHION_MNIST_DIR, load_fashion_mnist  # noqa: E402
from sodm_spark.models.input_projection import fit_input_projection  # noqa: E402
from sodm_spark.models.nystroem_odm import NystroemFit, fit_on_device  # noqa: E402
from sodm_spark.partition.landmarks import select_landmarks  # noqa: E402
from sodm_spark.partition.strata import nearest_landmark  # noqa: E402
from sodm_spark.selection.tuning import (DEFAULT_SEARCH_GRID_TEXT, DEFAULT_SEARCH_POINT,  # noqa: E402
                                         MAX_SEARCH_TOL, SEARCH_PARTITION_ROWS,
                                         SEARCH_TOL_FACTOR, ParamGrid, PointSolve, choose_point,
                                         search_partition, search_pieces, search_sample,
                                         search_subsets)
from sodm_spark.solvers.odm_newton import NewtonSettings, solve_odm_newton  # noqa: E402

LAM, THETA, V, TOL = 1e5, 0.1, 0.2, 1e-2  # SODMParams' defaults
VALIDATION_ROWS = 10_000  # the job's slice: a tenth of the rows, at most 10,000


def search(args, device, kernel, X_host, y, partition, X_val, y_val):
    """The job's default search (selection/tuning.py): the grid of γ multiples and λ on seeded
    pieces of a sample of the start level's partitions, each point's decision values summed
    over the pieces, the default point kept unless another is significantly better on the
    validation rows. Returns (γ multiple, λ) and a report."""
    grid = ParamGrid.parse(DEFAULT_SEARCH_GRID_TEXT)
    n_partitions = args.p ** args.start_level
    rows_per_partition = int(np.bincount(partition).max())
    keys = search_sample(n_partitions, rows_per_partition, 16, args.seed)
    pieces = search_pieces(len(keys), rows_per_partition)
    scores = None
    for key in keys:
        rows = np.flatnonzero(partition == key)
        for number, subset in enumerate(search_subsets(rows.size, SEARCH_PARTITION_ROWS, pieces,
                                                       args.seed, key)):
            points, share, _ = search_partition(
                X_host[rows[subset]], y[rows[subset]], X_val, kernel, grid,
                seed=[args.seed, key, number],
                solving=PointSolve(min(MAX_SEARCH_TOL, SEARCH_TOL_FACTOR * args.tol),
                                   device=args.device))
            scores = share if scores is None else scores + share
    judged = [np.where(row >= 0, 1.0, -1.0) == y_val for row in scores]
    default = next(i for i, point in enumerate(points) if point == DEFAULT_SEARCH_POINT)
    chosen = points[choose_point(judged, default=default)]
    return chosen.gamma_scale, chosen.lam, {
        "searched_rows": len(keys) * pieces * SEARCH_PARTITION_ROWS,
        "validation_accuracy": {f"gamma x{p.gamma_scale:g}, lam {p.lam:g}": round(
            float(np.mean(j)), 4) for p, j in zip(points, judged)}}


def _chunk(arguments):
    start, stop, root = arguments
    return deformed_fashion_mnist(start, stop, root=root)


def generate(rows: int, root, workers: int):
    """The first ``rows`` deformed rows, one process per chunk of DEFORM_CHUNK."""
    ranges = [(start, min(start + DEFORM_CHUNK, rows), root)
              for start in range(0, rows, DEFORM_CHUNK)]
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        parts = pool.map(_chunk, ranges)
    return (np.concatenate([part[0] for part in parts]),
            np.concatenate([part[1] for part in parts]).astype(np.float64))


def deal(strata: np.ndarray, n_partitions: int, seed: int) -> np.ndarray:
    """Partition of every row: each stratum's rows in a seeded order dealt round-robin
    (docs/design.md §2.3), so partition q at level L is the union of q + k·p^(L−1)."""
    order = np.random.default_rng(seed).permutation(strata.shape[0])
    order = order[np.argsort(strata[order], kind="stable")]
    partition = np.empty(strata.shape[0], dtype=np.int64)
    partition[order] = np.arange(strata.shape[0]) % n_partitions
    return partition


class Clock:
    def __init__(self, device):
        self.device, self.rows = device, []

    def __call__(self, stage, started, **extra):
        self.device.synchronize()
        seconds = time.perf_counter() - started
        self.rows.append({"stage": stage, "seconds": round(seconds, 2), **extra})
        print(json.dumps(self.rows[-1]), flush=True)
        return time.perf_counter()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=600_000)
    parser.add_argument("--device", choices=("cpu", "gpu"), default="gpu")
    parser.add_argument("--fashion-root", default=str(FASHION_MNIST_DIR))
    parser.add_argument("--workers", type=int, default=os.cpu_count())
    parser.add_argument("--p", type=int, default=3)
    parser.add_argument("--start-level", type=int, default=3)
    parser.add_argument("--last-level", type=int, default=2)
    parser.add_argument("--tol", type=float, default=TOL, help="violation bound")
    parser.add_argument("--input-map", choices=("auto", "none"), default="auto")
    parser.add_argument("--global-centres", type=int, default=4000)
    parser.add_argument("--rank", type=int, default=1000, help="preconditioner columns")
    parser.add_argument("--compare-cpu", action="store_true")
    parser.add_argument("--search", action=argparse.BooleanOptionalAction, default=True,
                        help="the job's default search of gamma and lam before the levels")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write the stages here")
    args = parser.parse_args(argv)

    device = resolve_device(args.device)
    xp = device.xp
    clock = Clock(device)
    started = time.perf_counter()
    X, y = generate(args.rows, args.fashion_root, args.workers)
    X_test, y_test = load_fashion_mnist("test", args.fashion_root)
    started = clock("generate rows (CPU processes)", started, rows=int(X.shape[0]))
    # minmax per column (the job's scale="minmax"), from the training rows
    low, high = X.min(axis=0), X.max(axis=0)
    span = np.where(high > low, high - low, 1.0).astype(np.float32)
    X = (X - low) / span
    X_test = ((X_test - low) / span).astype(np.float32)
    X_dev = device.asarray(X, dtype=xp.float32)
    started = clock("scale and copy to the device (not counted)", started)
    work_started = started

    variance = float(xp.mean(xp.var(X_dev, axis=0)) + xp.var(xp.mean(X_dev, axis=0)))
    kernel = Kernel("rbf", 1.0 / (X.shape[1] * variance))
    sample = np.random.default_rng([args.seed, 1]).choice(X.shape[0], 4000, replace=False)
    projection = None
    if args.input_map == "auto":
        projection, _ = fit_input_projection(X[np.sort(sample)], kernel, X.shape[1])
    if projection is not None:
        centre = device.asarray(projection.center, dtype=xp.float32)
        components = device.asarray(projection.components, dtype=xp.float32)
        X_dev = (X_dev - centre[None, :]) @ components
        X_test = projection.projected(X_test).astype(np.float32)
    started = clock("gamma and input map", started, gamma=kernel.gamma,
                    inputs=int(X_dev.shape[1]))
    del X
    X_host = device.to_numpy(X_dev)
    held = np.zeros(X_host.shape[0], dtype=bool)
    validation_rows = min(VALIDATION_ROWS, X_host.shape[0] // 10)
    held[np.random.default_rng([args.seed, 4]).choice(X_host.shape[0], validation_rows,
                                                      replace=False)] = True
    X_val, y_val = X_host[held], y[held]
    X_host, y = X_host[~held], y[~held]
    X_dev = device.asarray(X_host, dtype=xp.float32)
    candidates = np.sort(np.random.default_rng([args.seed, 2]).choice(X_host.shape[0], 1000,
                                                                      replace=False))
    landmarks = X_host[candidates[select_landmarks(X_host[candidates], kernel, 20)]]
    strata = nearest_landmark(X_host, landmarks, kernel)
    partition = deal(strata, args.p ** args.start_level, args.seed)
    started = clock("landmarks, strata, partitions", started)
    lam = LAM
    if args.search:
        gamma_scale, lam, report = search(args, device, kernel, X_host, y, partition, X_val,
                                          y_val)
        kernel = Kernel("rbf", kernel.gamma * gamma_scale)
        started = clock("search (the job's default grid)", started, gamma_scale=gamma_scale,
                        lam=lam, **report)

    if args.compare_cpu:
        from sodm_spark.solvers.odm_dcd import solve_odm_dual
        from sodm_spark.solvers.dcd_settings import DCDSettings, ODMHyperparameters

        rows = np.flatnonzero(partition == 0)
        compare_started = cpu_started = time.perf_counter()
        numba_run = solve_odm_dual(X_host[rows], y[rows], kernel,
                                   ODMHyperparameters(lam, THETA, V),
                                   settings=DCDSettings(violation_tol=args.tol),
                                   seed=[args.seed, args.start_level, 0])
        cpu_seconds = time.perf_counter() - cpu_started
        gpu_started = time.perf_counter()
        K = kernel_matrix(device, kernel, xp.take(X_dev, device.asarray(rows), axis=0))
        newton_run = solve_odm_newton(device, K, y[rows], lam, THETA, V,
                                      seed=[args.seed, args.start_level, 0],
                                      settings=NewtonSettings(args.tol, rank=args.rank))
        del K
        device.synchronize()
        gpu_seconds = time.perf_counter() - gpu_started
        started = clock("one partition, numba CPU vs device (not counted)", started,
                        rows=int(rows.size), cpu_seconds=round(cpu_seconds, 2),
                        device_seconds=round(gpu_seconds, 2),
                        ratio=round(cpu_seconds / gpu_seconds, 1),
                        objective_difference=newton_run.objective - numba_run.objective,
                        max_u_difference=float(np.abs(newton_run.u - numba_run.u).max()))
        work_started += started - compare_started

    gamma = np.zeros(y.shape[0])
    level_started = time.perf_counter()
    for level in range(args.start_level, args.last_level - 1, -1):
        n_partitions = args.p ** level
        if level < args.start_level:
            gamma /= args.p  # the scaled warm start (docs/design.md §2.5)
        steps = products = 0
        for q in range(n_partitions):
            rows = np.flatnonzero(partition % n_partitions == q)
            K = kernel_matrix(device, kernel, xp.take(X_dev, device.asarray(rows), axis=0))
            run = solve_odm_newton(device, K, y[rows], lam, THETA, V,
                                   gamma0=None if level == args.start_level else gamma[rows],
                                   seed=[args.seed, level, q],
                                   settings=NewtonSettings(args.tol, rank=args.rank))
            del K
            gamma[rows] = run.gamma
            steps, products = steps + run.n_sweeps, products + run.cg_iterations
        level_started = clock(f"level {level}: {n_partitions} partitions solved", level_started,
                              rows_per_partition=int(rows.size), newton_steps=steps,
                              kernel_products=products)
        f_test = decision_values(device, kernel, X_test, X_host, gamma * y)
        accuracy = float(np.mean(np.where(f_test >= 0, 1.0, -1.0) == y_test))
        level_started = clock(f"level {level}: test scoring", level_started,
                              accuracy=round(accuracy, 4),
                              support_vectors=int(np.count_nonzero(gamma)))
    started = level_started

    n_level_partitions = args.p ** args.last_level
    if args.global_centres:
        picked = np.sort(np.random.default_rng([args.seed, 3]).choice(
            X_host.shape[0], args.global_centres, replace=False))
        centres = X_host[picked]
        start_values = decision_values(device, kernel, centres, X_host, gamma * y)
        alpha, report = fit_on_device(device, kernel, centres, X_dev, y,
                                      NystroemFit(lam, THETA, V),
                                      start_values=start_values / n_level_partitions)
        started = clock("global step", started, centres=args.global_centres,
                        passes=getattr(report, "passes", None))
        f_global = decision_values(device, kernel, X_test, centres, alpha)
        accuracy = float(np.mean(np.where(f_global >= 0, 1.0, -1.0) == y_test))
        started = clock("global step: test scoring", started, accuracy=round(accuracy, 4))
    total = time.perf_counter() - work_started
    print(json.dumps({"work_seconds_after_data_on_device": round(total, 1),
                      "device": device.describe()}), flush=True)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"stages": clock.rows, "work_seconds": total}, handle, indent=1)


if __name__ == "__main__":
    main()
