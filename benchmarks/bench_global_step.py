"""The global step's Nyström ODM on every training row, without Spark: how its accuracy grows
with the centres, on the CPU or on one GPU, beside a kernel ridge regression of the same centres
and passes (docs/design.md §2.9).

    python benchmarks/bench_global_step.py --data DIR --centres 2000,5000 --device cpu
    python benchmarks/bench_global_step.py --data DIR --centres 10000,20000 --device gpu

``DIR`` holds ``train/`` and ``test/`` Parquet files of ``label`` and ``features``
(``benchmarks/make_big_data.py``). The rows are min-max scaled on the training rows, the RBF
kernel takes γ = ``--gamma-scale`` × 1 / (d · variance) (the job's search's default multiple is
2), the centres are a seeded uniform sample of the training rows, and each fit is
:func:`sodm_spark.models.nystroem_cg.fit` with :class:`~sodm_spark.models.nystroem_passes.
RowPasses` over all the rows at once: the fused numba loops on the CPU, GEMM blocks on a GPU
(PyTorch or CuPy through the array namespace), the m × m algebra on the CPU in float64. Two
losses per centre count: the ODM of the job (θ, v, λ), and θ = 0, v = 1, which charges every
margin's distance from 1 — the kernel ridge regression of the ±1 labels (its λ as the ODM's:
C = λ / 2M). Each fit stops after ``--passes`` passes. A result record (command, commit,
machine, data identity, each fit's figures, a stage a fit) is written with ``--record``
(sodm_spark.benchmarking.records).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))

from bench_at_scale import load_rows  # noqa: E402

from sodm_spark.benchmarking.records import add_record_flag, start_record  # noqa: E402
from sodm_spark.core.array_namespace import resolve_device  # noqa: E402
from sodm_spark.core.kernels import Kernel  # noqa: E402
from sodm_spark.models import nystroem_cg  # noqa: E402
from sodm_spark.models.nystroem_passes import RowPasses  # noqa: E402

LOSSES = {"odm": None, "ridge": (0.0, 1.0)}  # (θ, v) of the ridge; the ODM's from the flags


def scores(device, kernel, centres, coef, X, block_rows: int = 65_536) -> np.ndarray:
    """f on ``X`` (device rows) of the model on ``centres``, as numpy."""
    from sodm_spark.core.kernel_blocks import kernel_block

    xp = device.xp
    Z = device.asarray(centres, dtype=X.dtype)
    alpha = device.asarray(coef, dtype=xp.float64)
    out = []
    for start in range(0, X.shape[0], block_rows):
        block = kernel_block(xp, kernel, X[start:start + block_rows, :], Z)
        out.append(device.to_numpy(xp.astype(block, xp.float64) @ alpha))
    return np.concatenate(out)


def one_fit(args, device, kernel, rows, centres, loss: str) -> dict:
    """One Nyström fit: its test accuracy, seconds, passes and Newton steps."""
    X, y, X_test, y_test = rows
    theta, v = LOSSES[loss] or (args.theta, args.v)
    passes = RowPasses(kernel, centres, X, y, None, theta, v, threads=args.threads,
                       block_rows=args.block_rows)
    device.synchronize()
    started = time.perf_counter()
    coef, report = nystroem_cg.fit(kernel, centres, passes,
                                   nystroem_cg.Problem(args.lam, theta, v, int(X.shape[0])),
                                   nystroem_cg.NewtonCGSettings(max_passes=args.passes))
    device.synchronize()
    seconds = time.perf_counter() - started
    decided = np.where(scores(device, kernel, centres, coef, X_test) > 0, 1.0, -1.0)
    return {"loss": loss, "centres": int(centres.shape[0]), "seconds": seconds,
            "passes": report.passes, "newton_steps": len(report.steps),
            "cg_iterations": [step["cg"] for step in report.steps], "stopped": report.reason,
            "objective": report.objectives[-1],
            "test_accuracy": float(np.mean(decided == args.y_test_host))}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--rows", type=int, default=None, help="the first rows (all: None)")
    parser.add_argument("--centres", default="2000,5000")
    parser.add_argument("--losses", default="odm,ridge")
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--gamma-scale", type=float, default=2.0)
    parser.add_argument("--lam", type=float, default=1e6)
    parser.add_argument("--theta", type=float, default=0.1)
    parser.add_argument("--v", type=float, default=0.2)
    parser.add_argument("--passes", type=int, default=40)
    parser.add_argument("--threads", type=int, default=2, help="numba's, on the CPU")
    parser.add_argument("--block-rows", type=int, default=65_536, help="GEMM blocks (GPU)")
    parser.add_argument("--seed", type=int, default=0)
    add_record_flag(parser)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    record = start_record(parser, args, __file__, argv)
    X, y = load_rows(args.data / "train", args.rows)
    X_test, y_test = load_rows(args.data / "test")
    low, high = X.min(axis=0), X.max(axis=0)
    scale = np.where(high > low, 1.0 / np.where(high > low, high - low, 1.0), 0.0)
    X, X_test = ((X - low) * scale).astype(np.float32), ((X_test - low) * scale).astype(np.float32)
    kernel = Kernel.create("rbf", args.gamma_scale / (X.shape[1] * X.astype(np.float64).var()))
    device = resolve_device(args.device)
    if device is None:  # "cpu" on numpy: the fused numba loops
        device = resolve_device("cpu")
    # numpy rows stay numpy (the fused loops read them); a GPU's are copied there once
    rows = (X if device.kind == "cpu" else device.asarray(X),
            y.astype(np.float64) if device.kind == "cpu" else device.asarray(y),
            X_test if device.kind == "cpu" else device.asarray(X_test), y_test)
    args.y_test_host = y_test
    record.lap("data")
    rng = np.random.default_rng([args.seed, 41])
    results = []
    for m in [int(value) for value in args.centres.split(",")]:
        centres = X[np.sort(rng.choice(X.shape[0], m, replace=False))].astype(np.float64)
        for loss in args.losses.split(","):
            result = one_fit(args, device, kernel, rows, centres, loss)
            results.append(result)
            print(f"{m:>7,} centres {loss:<6} test {result['test_accuracy']:.4f}  "
                  f"{result['seconds']:8.1f} s  {result['passes']} passes  "
                  f"({result['stopped']})", flush=True)
            record.lap(f"{m} centres, {loss}")
    majority = float(max(np.mean(y_test > 0), np.mean(y_test < 0)))
    print(f"the test rows' majority class: {majority:.4f}", flush=True)
    record.add_data(args.data.name, args.data / "train", args.data / "test")
    record.write(device=device.describe(), rows_used=len(y), test_rows=len(y_test),
                 majority_class=majority, results=results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
