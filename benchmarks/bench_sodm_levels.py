"""SODM per level and per partitioner, side by side with exact ODM and scikit-learn's SVC,
in one Spark session on one machine. A benchmark, not a test.

    python benchmarks/bench_sodm_levels.py --levels 3 --master 'local[2]' \\
        [--train F --test F] [--partitioners stratified,random,kmeans] [--warm-starts scaled,concat]

Without --train/--test it uses the binary Fashion-MNIST task (Debian's dataset-fashion-mnist:
60,000 training rows, 10,000 test rows, 784 features), written once as LIBSVM files into
--work-dir and read back through sodm_spark.spark.io. Every method gets the same data, the
same numeric gamma and the same ODM hyperparameters; SVC gets C=--svc-C. "cum s" is the
time from the start of the fit to the end of that level (partitioning included, test scoring
excluded); "train s" of the job's metrics excludes test scoring likewise. ``--record PATH`` (or
``--json-out PATH``) writes the run's result record: the table's rows, the data's identity and
a stage a method (sodm_spark.benchmarking.records).
"""
from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

import numpy as np
from sklearn.svm import SVC

from sodm_spark import ODMClassifier
from sodm_spark.benchmarking.records import add_record_flag, start_record
from sodm_spark.core.kernels import resolve_gamma
from sodm_spark.spark.io import read_blocks, read_libsvm_local
from sodm_spark.spark.session import get_session
from sodm_spark.spark.sodm.fit import fit_sodm
from sodm_spark.spark.sodm.params import SODMParams

sys.path.insert(0, str(Path(__file__).parent))
from bench_exact_odm import default_files  # noqa: E402


def row(method, level, partitions, cumulative, seconds, accuracy, n_sv, sweeps):
    level = "" if level is None else level
    print(f"{method:<26}{level!s:>6}{partitions!s:>6}{cumulative:>9.1f}{seconds:>9.1f}"
          f"{accuracy:>10.4f}{n_sv!s:>8}{sweeps!s:>7}", flush=True)
    return {"method": method, "level": level, "partitions": partitions, "cum_seconds": cumulative,
            "seconds": seconds, "accuracy": accuracy, "n_sv": n_sv, "sweeps": sweeps}


def summarize_seeds(results) -> None:
    """Mean accuracy and median cumulative seconds per (variant, level) over the seeds."""
    groups = {}
    for entry in results:
        variant = entry["method"].rsplit(" s", 1)[0]
        groups.setdefault((variant, entry["level"], entry["partitions"]), []).append(entry)
    print("\nover seeds: mean accuracy (min-max), median cum s")
    for (variant, level, parts), entries in groups.items():
        accuracies = [e["accuracy"] for e in entries]
        print(f"{variant:<26}{level!s:>6}{parts!s:>6}"
              f"{float(np.median([e['cum_seconds'] for e in entries])):>9.1f}"
              f"{np.mean(accuracies):>10.4f} ({min(accuracies):.4f}-{max(accuracies):.4f})"
              f" n={len(entries)}", flush=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", type=Path)
    parser.add_argument("--test", type=Path)
    parser.add_argument("--work-dir", type=Path, default=Path.home() / ".cache" / "sodm_spark")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--levels", type=int, default=3)
    parser.add_argument("--p", type=int, default=3)
    parser.add_argument("--strata", type=int, default=SODMParams.strata)
    parser.add_argument("--lam", type=float, default=10000.0)
    parser.add_argument("--theta", type=float, default=0.1)
    parser.add_argument("--v", type=float, default=0.2)
    parser.add_argument("--tol", type=float, default=1e-3)
    parser.add_argument("--gamma", default="scale")
    parser.add_argument("--cache-mb", type=float, help="kernel cache cap (default: the budget)")
    parser.add_argument("--partitioners", default="stratified,random,kmeans")
    parser.add_argument("--warm-starts", default="scaled")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds per SODM variant")
    parser.add_argument("--label-strata", action="store_true",
                        help="stratified: split every landmark stratum by class too")
    parser.add_argument("--landmark-candidates", type=int,
                        default=SODMParams.landmark_candidates,
                        help="stratified: landmark candidates per stratum (Eqn 8's sample)")
    parser.add_argument("--stop-level", type=int, default=0)
    parser.add_argument("--svc-C", type=float, default=10.0)
    parser.add_argument("--skip-svc", action="store_true")
    parser.add_argument("--skip-exact", action="store_true")
    add_record_flag(parser, "--json-out")
    parser.add_argument("--driver-memory", default="6g", help="JVM heap (local mode)")
    parser.add_argument("--memory-mb", type=float,
                        help="per-task memory budget (default: the executor's memory / running tasks)")
    return parser


def main(argv=None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    record = start_record(parser, args, __file__, argv)

    train, test = (args.train, args.test) if args.train else default_files(args.work_dir)
    spark, _ = get_session("sodm-spark: bench_sodm_levels", args.master,
                           {"spark.driver.memory": args.driver_memory,
                            "spark.ui.showConsoleProgress": "false"})
    sc = spark.sparkContext
    blocks, n_features = read_blocks(spark, str(train), "libsvm")
    blocks = blocks.persist()
    blocks.count()  # parse once before any clock starts
    X_test, y_test = read_libsvm_local(str(test), n_features=n_features)
    X_train, y_train = read_libsvm_local(str(train), n_features=n_features)
    record.add_data(train.name, (X_train, y_train), (X_test, y_test))
    gamma = resolve_gamma(args.gamma, X_train) if args.gamma in ("scale", "auto") else float(args.gamma)
    classes = np.unique(y_train)
    print(f"train {train}: {X_train.shape[0]} x {n_features}; test {X_test.shape[0]} rows; "
          f"gamma={gamma:.6g} lam={args.lam} theta={args.theta} v={args.v} tol={args.tol}; "
          f"Spark {args.master} ({sc.defaultParallelism} cores); levels={args.levels} p={args.p} "
          f"strata={args.strata} cache_mb={args.cache_mb}", flush=True)
    header = (f"{'method':<26}{'level':>6}{'parts':>6}{'cum s':>9}{'level s':>9}{'accuracy':>10}"
              f"{'SVs':>8}{'sweeps':>7}")
    print(header + "\n" + "-" * len(header), flush=True)
    record.lap("data")
    results = []
    seeds = [int(seed) for seed in args.seeds.split(",")]
    variants = itertools.product(args.partitioners.split(","), args.warm_starts.split(","), seeds)
    for partitioner, warm_start, seed in variants:
        params = SODMParams(gamma=gamma, lam=args.lam, theta=args.theta, v=args.v,
                            tol=args.tol, p=args.p, levels=args.levels, strata=args.strata,
                            stop_level=args.stop_level, partitioner=partitioner,
                            warm_start=warm_start, cache_mb=args.cache_mb, seed=seed,
                            label_strata=args.label_strata, memory_mb=args.memory_mb,
                            landmark_candidates=args.landmark_candidates, auto_stop=False)
        name = (f"SODM {partitioner}" + (f" ({warm_start})" if "," in args.warm_starts else "")
                + (f" s{seed}" if len(seeds) > 1 else ""))

        def show(entry, name=name):
            results.append(row(name, entry.level, entry.partitions, entry.elapsed,
                               entry.seconds, entry.test_accuracy, entry.n_sv,
                               entry.sweeps_max))

        fit = fit_sodm(sc, blocks, params, classes, test=(X_test, y_test), on_level=show)
        results[-1]["train_seconds"] = fit.train_seconds
        for entry in results[-len(fit.levels):]:
            entry["partition_seconds"] = fit.partition_seconds
        print(f"{name}: partitioning {fit.partition_seconds:.1f} s", flush=True)
        record.lap(name)
    if len(seeds) > 1:
        summarize_seeds(results)
    if not args.skip_exact:
        exact = ODMClassifier(gamma=gamma, lam=args.lam, theta=args.theta, v=args.v, tol=args.tol,
                              cache_mb=args.cache_mb)
        start = time.perf_counter()
        exact.fit(X_train, y_train)
        seconds = time.perf_counter() - start
        results.append(row("exact ODM (1 process)", None, 1, seconds, seconds,
                           exact.score(X_test, y_test), exact.n_support_, int(exact.n_iter_[0])))
        record.lap("exact ODM (1 process)")
    if not args.skip_svc:
        svc = SVC(C=args.svc_C, gamma=gamma, cache_size=2000)
        start = time.perf_counter()
        svc.fit(X_train, y_train)
        seconds = time.perf_counter() - start
        results.append(row(f"SVC C={args.svc_C:g} (1 process)", None, 1, seconds, seconds,
                           svc.score(X_test, y_test), int(svc.n_support_.sum()), ""))
        record.lap(f"SVC C={args.svc_C:g} (1 process)")
    record.write(gamma=gamma, results=results)
    spark.stop()


if __name__ == "__main__":
    main()
