"""The job's fit on one machine without Spark, on the device path: SODM's levels (and the global
step where the fit takes one) on the deformed Fashion-MNIST rows, through the package's own
in-process fit (``sodm_spark.spark.train.fit_in_process``: the same code the Spark job's tasks
run, on the in-process back end, docs/design.md §6.2), each stage timed and scored.

    python benchmarks/bench_gpu.py --rows 600000 --device gpu --record gpu.json

The rows are generated here (the seeded deformations of ``data.big_data``, in parallel over
the chunks) and handed to the fit as they are, with the 10,000 Fashion-MNIST test images as its
test rows: scaling, the validation slice, the input map, the landmarks' strata and partitions,
the job's default search of γ and λ, the levels and the stop rule are the fit's, with the job's
defaults unless a flag below sets one. ``--device gpu`` solves every partition on the GPU the
process sees (``SODMParams.device``; refused in one line where there is none), ``cpu`` the
device path on numpy, ``auto`` the numba solvers. Work is the fit's own seconds
(``SODMFit.train_seconds``), from the rows in memory to the model; the result record
(``--record PATH``, or ``--json PATH``; sodm_spark.benchmarking.records) holds the command, the
commit, the machine and its device, the rows' identity, the levels table and the fit's timeline.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from sodm_spark.core.array_namespace import resolve_device  # noqa: E402
from sodm_spark.core.errors import InputError, SettingsError  # noqa: E402
from sodm_spark.benchmarking.records import add_record_flag, start_record  # noqa: E402
from sodm_spark.core.timeline import Timeline  # noqa: E402
from sodm_spark.data.big_data import DEFORM_CHUNK, deformed_fashion_mnist  # noqa: E402
from sodm_spark.data.datasets import FASHION_MNIST_DIR, load_fashion_mnist  # noqa: E402
from sodm_spark.jobs.train_report import (levels_summary, printed_progress,  # noqa: E402
                                          show_timeline)
from sodm_spark.spark.sodm.fit import FitOptions  # noqa: E402
from sodm_spark.spark.sodm.params import GLOBAL_STEPS  # noqa: E402
from sodm_spark.spark.train import fit_in_process  # noqa: E402


def _chunk(arguments):
    start, stop, root = arguments
    return deformed_fashion_mnist(start, stop, root=root)


def generate(rows: int, root, workers: int):
    """The first ``rows`` deformed rows, one process per chunk of DEFORM_CHUNK."""
    ranges = [(start, min(start + DEFORM_CHUNK, rows), root)
              for start in range(0, rows, DEFORM_CHUNK)]
    if workers <= 1 or len(ranges) == 1:
        parts = [_chunk(arguments) for arguments in ranges]
    else:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            parts = pool.map(_chunk, ranges)
    return (np.concatenate([part[0] for part in parts]),
            np.concatenate([part[1] for part in parts]).astype(np.float64))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=600_000)
    parser.add_argument("--device", choices=("auto", "cpu", "gpu"), default="gpu")
    parser.add_argument("--fashion-root", default=str(FASHION_MNIST_DIR))
    parser.add_argument("--workers", type=int, default=os.cpu_count(),
                        help="processes generating the rows")
    parser.add_argument("--cores", type=int, default=None,
                        help="the cores the fit's plan is made for (default: all)")
    parser.add_argument("--levels", type=int, default=None, help="the fit's levels (default: auto)")
    parser.add_argument("--stop-level", type=int, default=None)
    parser.add_argument("--global-step", choices=GLOBAL_STEPS, default=None)
    parser.add_argument("--seed", type=int, default=0)
    add_record_flag(parser, "--json")
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        device = resolve_device(args.device) if args.device != "auto" else None
    except (SettingsError, ValueError, RuntimeError) as error:
        print(f"error: --device {args.device}: {error}", file=sys.stderr)
        return 2
    record = start_record(parser, args, __file__, argv)
    started = time.perf_counter()
    X, y = generate(args.rows, args.fashion_root, args.workers or 1)
    X_test, y_test = load_fashion_mnist("test", args.fashion_root)
    generated = time.perf_counter() - started
    print(f"{X.shape[0]:,} rows x {X.shape[1]} generated in {generated:.1f} s", flush=True)
    timeline = Timeline(time.perf_counter())  # the fit's stages, from the rows in memory
    settings = {name: value for name, value in (
        ("levels", args.levels), ("stop_level", args.stop_level),
        ("global_step", args.global_step)) if value is not None}
    report = SimpleNamespace(tune=False, tune_report=None, checkpoint_dir=None, resume=False,
                             kernel="rbf", metric="accuracy", class_weight=None,
                             weight_col=None)
    try:
        trained = fit_in_process(
            X, y, cores=args.cores, test=(X_test.astype(np.float64), y_test),
            device=args.device, seed=args.seed, progress=printed_progress(report),
            level_options=FitOptions(timeline=timeline, test_every_level=True), **settings)
    except (InputError, SettingsError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    fit = trained.fit
    levels_summary(fit, trained.params)
    show_timeline(timeline)
    described = device.describe() if device is not None else "the numba solvers (CPU)"
    print(json.dumps({"work_seconds": round(fit.train_seconds, 1),
                      "test_accuracy": fit.test_accuracy, "device": described}), flush=True)
    record.add_data("deformed Fashion-MNIST", (X, y), (X_test, y_test))
    record.write(
        machine={"device": described}, timeline=timeline,  # the fit's, from the rows in memory
        rows=int(X.shape[0]), features=int(X.shape[1]), test_rows=int(X_test.shape[0]),
        generate_seconds=generated, work_seconds=fit.train_seconds,
        test_accuracy=fit.test_accuracy,
        params={"gamma": trained.params.gamma, "lam": trained.params.lam,
                "theta": trained.params.theta, "v": trained.params.v},
        levels=[entry.to_dict() for entry in fit.levels], global_step=fit.global_step)
    return 0


if __name__ == "__main__":
    sys.exit(main())
