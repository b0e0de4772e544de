"""What a merge's warm start saves: one partition's local ODM solved from scratch, and
warm-started from the solutions of its p children (one level up) or p² grandchildren (two
levels up; rows dealt round robin), γ scaled as the job scales it (1/p per merge). A
benchmark, not a test.

    python benchmarks/bench_warm_start.py --rows 22194 [--dataset fashion|tabular]

The rows are the first --rows of the deformed Fashion-MNIST set (or the 12-column table) that
``bench_at_scale.py`` writes, min-max scaled as the job scales them; γ = --gamma-scale / (d ·
variance), the job's default point (λ = 1e6, θ = 0.1, v = 0.2, tol = 1e-2). Prints sweeps and
seconds of the partition's solve for each start; ``--record PATH`` writes the run's result
record (the same figures, the rows' identity, a stage a start; sodm_spark.benchmarking.records).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from sodm_spark.benchmarking.records import add_record_flag, start_record
from sodm_spark.core.column_stats import ColumnStats
from sodm_spark.core.kernels import Kernel
from sodm_spark.solvers import solve_odm_dual
from sodm_spark.solvers.dcd_settings import DCDSettings, ODMHyperparameters

sys.path.insert(0, str(Path(__file__).parent))
from bench_at_scale import data_dir, load_rows  # noqa: E402
from bench_blocked_kernel import warm_start  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="fashion", choices=["fashion", "tabular"])
    parser.add_argument("--rows", type=int, default=22_194)
    parser.add_argument("--p", type=int, default=3)
    parser.add_argument("--gamma-scale", type=float, default=2.0)
    parser.add_argument("--lam", type=float, default=1e6)
    parser.add_argument("--theta", type=float, default=0.1)
    parser.add_argument("--v", type=float, default=0.2)
    parser.add_argument("--tol", type=float, default=1e-2)
    parser.add_argument("--work-dir", type=Path, default=Path.home() / ".cache" / "sodm_spark")
    add_record_flag(parser)
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    record = start_record(parser, args, __file__, argv)
    size = 600_000 if args.dataset == "fashion" else 2_000_000
    X, y = load_rows(data_dir(args.work_dir, args.dataset, size) / "train", args.rows)
    record.add_data(f"{args.dataset}-{size}, first training rows", (X, y))
    low, scale = ColumnStats(X).minmax()
    X = ((X - low) * scale).astype(np.float32)
    kernel = Kernel.create("rbf", args.gamma_scale / (X.shape[1] * X.astype(np.float64).var()))
    print(f"{args.rows:,} rows × {X.shape[1]}, gamma {kernel.gamma:.4g}, lam {args.lam:g}")
    print(f"{'start':<34}{'children s':>11}{'solve s':>9}{'sweeps':>8}{'objective':>14}")
    record.lap("data")
    results = []
    for name, parts in [("from scratch", 1), (f"{args.p} children, γ / {args.p}", args.p),
                        (f"{args.p ** 2} grandchildren, γ / {args.p ** 2}", args.p ** 2)]:
        started = time.perf_counter()
        gamma0 = None if parts == 1 else warm_start(X, y, kernel, args, parts)
        children, started = time.perf_counter() - started, time.perf_counter()
        result = solve_odm_dual(X, y, kernel, ODMHyperparameters(args.lam, args.theta, args.v),
                                settings=DCDSettings(violation_tol=args.tol), gamma0=gamma0)
        solved = time.perf_counter() - started
        print(f"{name:<34}{children:>11.1f}{solved:>9.1f}"
              f"{result.n_sweeps:>8}{result.objective:>14.1f}", flush=True)
        results.append({"start": name, "children_seconds": children, "solve_seconds": solved,
                        "sweeps": result.n_sweeps, "objective": result.objective})
        record.lap(name)
    record.write(gamma=kernel.gamma, results=results)


if __name__ == "__main__":
    main()
