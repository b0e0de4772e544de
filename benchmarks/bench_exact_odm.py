"""Exact ODM (this package) side by side with scikit-learn's SVC and, if you have it built,
the ODM authors' C++ libodm — on real data in LIBSVM format. A benchmark, not a test.

    python benchmarks/bench_exact_odm.py --rows 5000,20000 --repeats 3 [--libodm-dir DIR]

Without --train/--test it writes the binary Fashion-MNIST task (Debian's dataset-fashion-mnist,
see sodm_spark.data.datasets) to LIBSVM files in --work-dir and reads them back. Every method gets
the same rows, the same numeric gamma and the same ODM hyperparameters (libodm's λ is half of
ours); seconds are medians over --repeats runs; "fit s" excludes reading the file except for
libodm, whose training binary parses the LIBSVM text itself (a few seconds at 20,000 rows).
``--record PATH`` writes the run's result record: the table's rows, the data's identity and a
stage a method and size (sodm_spark.benchmarking.records).
"""
from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import tempfile
import time
from functools import partial
from pathlib import Path

from sklearn.datasets import dump_svmlight_file, load_svmlight_file
from sklearn.svm import SVC

from sodm_spark import ODMClassifier
from sodm_spark.benchmarking.records import add_record_flag, start_record
from sodm_spark.core.kernels import resolve_gamma
from sodm_spark.data.datasets import load_fashion_mnist


def default_files(work_dir: Path) -> tuple[Path, Path]:
    work_dir.mkdir(parents=True, exist_ok=True)
    files = work_dir / "fmnist_binary_train.libsvm", work_dir / "fmnist_binary_test.libsvm"
    for path, split in zip(files, ("train", "test")):
        if not path.exists():
            X, y = load_fashion_mnist(split)
            dump_svmlight_file(X, y, str(path), zero_based=False)
    return files


def median_time(repeats: int, run) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def run_libodm(libodm_dir: Path, train: Path, test: Path, lam, theta, v, gamma, eps):
    """Train (RBF, dual coordinate descent) and predict with libodm; (train seconds, accuracy)."""
    with tempfile.TemporaryDirectory() as tmp:
        model, predictions = Path(tmp) / "model", Path(tmp) / "pred"
        command = [str(libodm_dir / "libodm-train"), "-s", "0", "-k", "2", "-l", repr(lam / 2),
                   "-m", repr(v), "-t", repr(theta), "-g", repr(gamma), "-e", repr(eps)]
        start = time.perf_counter()
        subprocess.run(command + [str(train), str(model)], check=True, capture_output=True)
        seconds = time.perf_counter() - start
        output = subprocess.run([str(libodm_dir / "libodm-predict"), str(test), str(model),
                                 str(predictions)], check=True, capture_output=True, text=True)
        text = output.stdout + predictions.read_text()[:200]
        accuracy = float(re.search(r"Acc(?:uracy)?\s*[:=]\s*([0-9.]+)", text).group(1))
        return seconds, accuracy / (100.0 if accuracy > 1 else 1.0)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", type=Path)
    parser.add_argument("--test", type=Path)
    parser.add_argument("--work-dir", type=Path, default=Path.home() / ".cache" / "sodm_spark")
    parser.add_argument("--rows", default="5000,20000", help="comma-separated training sizes")
    parser.add_argument("--lam", type=float, default=10000.0)
    parser.add_argument("--theta", type=float, default=0.1)
    parser.add_argument("--v", type=float, default=0.2)
    parser.add_argument("--gamma", default="scale", help="'scale' is resolved on the largest --rows")
    parser.add_argument("--tol", type=float, default=1e-3)
    parser.add_argument("--svc-C", type=float, default=10.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-svc", action="store_true")
    parser.add_argument("--libodm-dir", type=Path,
                        help="folder with libodm-train / libodm-predict (not shipped here)")
    add_record_flag(parser)
    return parser


def main(argv=None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    record = start_record(parser, args, __file__, argv)

    train, test = (args.train, args.test) if args.train else default_files(args.work_dir)
    X_all, y_all = load_svmlight_file(str(train))
    X_test, y_test = load_svmlight_file(str(test), n_features=X_all.shape[1])
    X_all, X_test = X_all.toarray(), X_test.toarray()
    record.add_data(train.name, (X_all, y_all), (X_test, y_test))
    sizes = [int(s) for s in args.rows.split(",")]
    gamma = resolve_gamma(args.gamma, X_all[:max(sizes)]) if args.gamma in ("scale", "auto") \
        else float(args.gamma)
    print(f"train {train} ({X_all.shape[0]} rows, {X_all.shape[1]} features), test {test} "
          f"({X_test.shape[0]} rows); gamma={gamma:.6g} lam={args.lam} theta={args.theta} "
          f"v={args.v}; median of {args.repeats}")
    header = f"{'method':<24}{'rows':>7}{'fit s':>9}{'accuracy':>10}{'SVs':>8}{'sweeps':>8}"
    print(header)
    print("-" * len(header))
    record.lap("data")
    results = []
    for rows in sizes:
        X, y = X_all[:rows], y_all[:rows]
        odm = ODMClassifier(gamma=gamma, lam=args.lam, theta=args.theta, v=args.v, tol=args.tol)
        seconds, odm = median_time(args.repeats, partial(odm.fit, X, y))
        accuracy = odm.score(X_test, y_test)
        print(f"{'ODM (sodm_spark)':<24}{rows:>7}{seconds:>9.2f}{accuracy:>10.4f}"
              f"{odm.n_support_:>8}{int(odm.n_iter_[0]):>8}", flush=True)
        results.append({"method": "ODM (sodm_spark)", "rows": rows, "fit_seconds": seconds,
                        "accuracy": accuracy, "n_support": int(odm.n_support_),
                        "sweeps": int(odm.n_iter_[0])})
        record.lap(f"ODM (sodm_spark), {rows} rows")
        if args.libodm_dir:
            with tempfile.TemporaryDirectory() as tmp:
                subset = Path(tmp) / "train.libsvm"
                dump_svmlight_file(X, y, str(subset), zero_based=False)
                runs = [run_libodm(args.libodm_dir, subset, test, args.lam, args.theta, args.v,
                                   gamma, args.tol) for _ in range(args.repeats)]
                seconds = statistics.median(train_seconds for train_seconds, _ in runs)
                print(f"{'libodm (C++, DCD)':<24}{rows:>7}{seconds:>9.2f}{runs[0][1]:>10.4f}"
                      f"{'':>8}{'':>8}", flush=True)
            results.append({"method": "libodm (C++, DCD)", "rows": rows, "fit_seconds": seconds,
                            "accuracy": runs[0][1]})
            record.lap(f"libodm (C++, DCD), {rows} rows")
        if not args.skip_svc:
            svc = SVC(C=args.svc_C, gamma=gamma)
            seconds, svc = median_time(args.repeats, partial(svc.fit, X, y))
            accuracy = svc.score(X_test, y_test)
            print(f"{f'SVC (C={args.svc_C:g})':<24}{rows:>7}{seconds:>9.2f}"
                  f"{accuracy:>10.4f}{svc.n_support_.sum():>8}{'':>8}", flush=True)
            results.append({"method": f"SVC (C={args.svc_C:g})", "rows": rows,
                            "fit_seconds": seconds, "accuracy": accuracy,
                            "n_support": int(svc.n_support_.sum())})
            record.lap(f"SVC (C={args.svc_C:g}), {rows} rows")
    record.write(gamma=gamma, results=results)


if __name__ == "__main__":
    main()
