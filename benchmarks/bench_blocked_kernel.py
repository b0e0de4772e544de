"""One merged SODM partition solved with its kernel cached and with on-demand kernel blocks
(several cache sizes), side by side. A benchmark, not a test.

    python benchmarks/bench_blocked_kernel.py --rows 20000 --repeats 3 [--fractions 0,0.25,0.5]

The partition is the first --rows rows of binary Fashion-MNIST (Debian's
dataset-fashion-mnist), warm-started as SODM does after a merge: its p children are solved
separately and their γ concatenated and divided by p (docs/design.md §2.5). Every mode solves the
same problem from the same start to the same tolerance, with every core's BLAS threads; the
table gives median seconds, sweeps, kernel rows computed and the objective against the
cached solve's. ``--record PATH`` writes the run's result record (its rows, the data's
identity, each mode's seconds; sodm_spark.benchmarking.records).
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from threadpoolctl import threadpool_limits

from sodm_spark.benchmarking.records import add_record_flag, start_record
from sodm_spark.core.kernels import Kernel, resolve_gamma
from sodm_spark.data.datasets import load_fashion_mnist
from sodm_spark.solvers import solve_odm_dual
from sodm_spark.solvers.dcd_settings import DCDSettings, ODMHyperparameters


def warm_start(X, y, kernel, args, children=None):
    """γ/c of the c children (default p) solved separately (rows dealt round robin), as a
    merge of c partitions gives."""
    children = args.p if children is None else children
    gamma = np.zeros(X.shape[0])
    for child in range(children):
        rows = np.arange(child, X.shape[0], children)
        gamma[rows] = solve_odm_dual(X[rows], y[rows], kernel,
                                     ODMHyperparameters(args.lam, args.theta, args.v),
                                     settings=DCDSettings(violation_tol=args.tol)).gamma
    return gamma / children


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--p", type=int, default=3)
    parser.add_argument("--lam", type=float, default=1e5)
    parser.add_argument("--theta", type=float, default=0.1)
    parser.add_argument("--v", type=float, default=0.2)
    parser.add_argument("--tol", type=float, default=1e-3)
    parser.add_argument("--fractions", default="0,0.25,0.5,0.75",
                        help="kernel cache of the blocked runs, as a share of the whole matrix")
    parser.add_argument("--block-size", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, help="BLAS threads (default: all cores)")
    add_record_flag(parser)
    return parser


def main(argv=None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    record = start_record(parser, args, __file__, argv)

    X, y = load_fashion_mnist("train")
    X, y = X[:args.rows], y[:args.rows].astype(np.float64)
    record.add_data("fashion-mnist binary, first training rows", (X, y))
    kernel = Kernel.create("rbf", resolve_gamma("scale", X))
    gamma0 = warm_start(X, y, kernel, args)
    record.lap(f"data and the warm start from {args.p} children")
    whole_mb = args.rows ** 2 * 4 / 2**20
    runs = [("cached", "cached", whole_mb)] + [
        (f"blocked, cache {float(f):.0%}", "blocked", float(f) * whole_mb)
        for f in args.fractions.split(",")]
    print(f"{args.rows} rows x {X.shape[1]} features, whole kernel {whole_mb:,.0f} MB float32; "
          f"lam={args.lam:g} theta={args.theta} v={args.v} tol={args.tol}; warm start from "
          f"{args.p} children; medians of {args.repeats}", flush=True)
    print(f"{'mode':<22}{'seconds':>9}{'sweeps':>8}{'rows computed':>15}{'objective rel. diff':>21}"
          f"{'vs cached':>11}")
    reference, rows = None, []
    with threadpool_limits(args.threads):
        for name, mode, cache_mb in runs:
            seconds, result = [], None
            for _ in range(args.repeats):
                start = time.perf_counter()
                result = solve_odm_dual(X, y, kernel,
                                        ODMHyperparameters(args.lam, args.theta, args.v),
                                        settings=DCDSettings(violation_tol=args.tol, mode=mode,
                                                             cache_mb=cache_mb,
                                                             block_size=args.block_size),
                                        gamma0=gamma0)
                seconds.append(time.perf_counter() - start)
            median = statistics.median(seconds)
            if reference is None:
                reference = (median, result.objective)
            diff = abs(result.objective - reference[1]) / abs(reference[1])
            computed = result.kernel_rows_computed
            print(f"{name:<22}{median:>9.2f}{result.n_sweeps:>8}{computed:>15,}{diff:>21.2e}"
                  f"{median / reference[0]:>11.2f}", flush=True)
            rows.append({"mode": name, "cache_mb": cache_mb, "seconds": median,
                         "runs_seconds": seconds, "sweeps": result.n_sweeps,
                         "kernel_rows_computed": computed, "objective": result.objective,
                         "objective_relative_difference": diff,
                         "seconds_over_cached": median / reference[0]})
            record.lap(name)
    record.write(gamma=kernel.gamma, whole_kernel_mb=whole_mb, results=rows)


if __name__ == "__main__":
    main()
