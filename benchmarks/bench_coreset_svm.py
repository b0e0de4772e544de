"""Full SVM vs sensitivity-coreset SVM vs uniform subsample (the coreset SVM paper). A benchmark,
not a test.

    python benchmarks/bench_coreset_svm.py --datasets synthetic,digits --sizes 200,800 \\
        --C 1,100 --repeats 3 [--chunk-size 4000] [--record FILE]

Every method solves the paper's SVM (Eqn 2, linear kernel, bias not regularized) with libsvm:
'full' on all training rows; 'coreset' = Algorithm 1 on all rows (its line 1 is itself a full
solve, so it cannot be faster than 'full': it shows the approximation); 'coreset-mr' = one
coreset per chunk of --chunk-size rows, merged and reduced pairwise (Sec. 4.2: the fast path);
'uniform' = the same number of draws taken uniformly, weighted n/m per draw.

Columns: t = total sensitivity Σγ (Theorem 9 wants m ≫ t); test accuracy; fit seconds;
obj_err = f(P, w_S)/f(P, w*) - 1, the full-data objective at the subsample's solution
(Corollary 10 bounds it by 4ε); est_err = |f((S,v), w_S) - f(P, w*)| / f(P, w*), the paper's
Fig. 1 measure; query_err = mean |f((S,v), w) - f(P, w)| / f(P, w) over 40 fixed queries
around w* (the coreset property, Eqn 3). Sampling methods: medians over --repeats seeds.
Data: 'synthetic' (3% minority cluster, 1% flipped labels: importance sampling should help),
'digits' (scikit-learn's bundled 8×8 digits, "is it a 9?"), 'fmnist' (Fashion-MNIST binary from
Debian's dataset-fashion-mnist, first --fmnist-rows rows). Rows are standardized, then scaled
to ‖x‖ ≤ 1 as the paper assumes. ``--record PATH`` (or ``--json-out PATH``) writes the run's
result record: the rows of the table, each data set's identity and a stage a fit
(sodm_spark.benchmarking.records).
"""
from __future__ import annotations

import argparse
import statistics
import time
import warnings
from functools import partial

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from sodm_spark.baselines.coreset_svm import CoresetSVMClassifier
from sodm_spark.benchmarking.records import add_record_flag, start_record
from sodm_spark.baselines.coreset_svm_solver import (solve_weighted_svm, svm_objective,
                                                     uniform_coreset)


def synthetic(n=40000, d=5, minority=0.03, flipped=0.01, seed=0):
    rng = np.random.default_rng(seed)
    y = np.where(rng.random(n) < minority, 1.0, -1.0)
    X = rng.normal(0.0, 1.0, size=(n, d))
    X[:, 0] += 2.0 * y
    flip = rng.random(n) < flipped
    y[flip] *= -1
    return X, y


def load(name: str, fmnist_rows: int):
    if name == "synthetic":
        return synthetic()
    if name == "digits":
        X, labels = load_digits(return_X_y=True)
        return X.astype(float), np.where(labels == 9, 1.0, -1.0)
    if name == "fmnist":
        from sodm_spark.data.datasets import load_fashion_mnist
        X, y = load_fashion_mnist("train")
        return X[:fmnist_rows], y[:fmnist_rows].astype(float)
    raise SystemExit(f"unknown data set {name!r}; pick synthetic, digits or fmnist")


def prepare(X, y, seed=0):
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.25, random_state=seed,
                                                        stratify=y)
    scaler = StandardScaler().fit(X_train)
    X_train, X_test = scaler.transform(X_train), scaler.transform(X_test)
    radius = np.linalg.norm(X_train, axis=1).max()
    return X_train / radius, X_test / radius, y_train, y_test


def timed(run):
    start = time.perf_counter()
    result = run()
    return time.perf_counter() - start, result


def accuracy(coef, intercept, X, y):
    return float(np.mean(np.where(X @ coef + intercept > 0, 1.0, -1.0) == y))


def query_error(X, y, weights, C, queries, full_values):
    """Mean relative error of the coreset's Eqn 2 over the queries (the coreset property)."""
    W, b = queries
    return float(np.mean(np.abs(svm_objective(X, y, weights, C, W, b) - full_values)
                         / full_values))


def bench_dataset(name, data, C, args, record):
    """The table's rows of one data set (``data``: its (X, y)) and one C; a stage of
    ``record`` a fit."""
    X_train, X_test, y_train, y_test = prepare(*data)
    rows = []
    seconds, full = timed(lambda: solve_weighted_svm(X_train, y_train, None, C, tol=args.tol))
    record.lap(f"{name} C={C:g}: full")
    f_star = full.objective
    # 40 queries around w*: half within 30% of it (per coordinate), half within 300%.
    rng = np.random.default_rng(1)
    scales = np.repeat([0.3, 3.0], 20)
    queries = (full.coef * (1 + scales[:, None] * rng.normal(size=(40, full.coef.size))),
               full.intercept + scales * rng.normal(size=40))
    full_values = svm_objective(X_train, y_train, None, C, *queries)
    rows.append(dict(dataset=name, C=C, method="full", size=len(y_train),
                     n_coreset=len(y_train), t=float("nan"),
                     accuracy=accuracy(full.coef, full.intercept, X_test, y_test),
                     seconds=seconds, obj_err=0.0, est_err=0.0, query_err=0.0))
    for size in args.sizes:
        runs = {"coreset": [], "coreset-mr": [], "uniform": []}
        for seed in range(args.repeats):
            # A chunk must hold more rows than the draws, else nothing is reduced.
            chunk_rows = args.chunk_size if args.chunk_size < len(y_train) else max(
                2 * size, len(y_train) // 4)
            for method, chunk in (("coreset", None), ("coreset-mr", chunk_rows)):
                model = CoresetSVMClassifier(coreset_size=size, C=C, chunk_size=chunk,
                                             tol=args.tol, random_state=seed)
                with warnings.catch_warnings():  # a one-class coreset shows in the accuracy
                    warnings.simplefilter("ignore", UserWarning)
                    seconds, _ = timed(partial(model.fit, X_train, y_train))
                rows_s = model.coreset_indices_
                runs[method].append((seconds, model.coef_[0], model.intercept_[0],
                                     model.objective_, model.n_coreset_,
                                     model.total_sensitivity_,
                                     query_error(X_train[rows_s], y_train[rows_s],
                                                 model.coreset_weights_, C, queries,
                                                 full_values)))
                record.lap(f"{name} C={C:g} m={size} seed {seed}: {method}")

            def uniform_fit(size=size, seed=seed):  # this draw's size and seed, bound here
                sample = uniform_coreset(X_train, y_train, size, seed=seed)
                solved = solve_weighted_svm(sample.X, sample.y, sample.weights, C, tol=args.tol)
                return solved, sample
            seconds, (solved, sample) = timed(uniform_fit)
            runs["uniform"].append((seconds, solved.coef, solved.intercept, solved.objective,
                                    len(sample), float("nan"),
                                    query_error(sample.X, sample.y, sample.weights, C, queries,
                                                full_values)))
            record.lap(f"{name} C={C:g} m={size} seed {seed}: uniform")
        for method, results in runs.items():
            med = lambda values: float(statistics.median(values))  # noqa: E731
            rows.append(dict(
                dataset=name, C=C, method=method, size=size,
                n_coreset=med([r[4] for r in results]), t=med([r[5] for r in results]),
                accuracy=med([accuracy(r[1], r[2], X_test, y_test) for r in results]),
                seconds=med([r[0] for r in results]),
                obj_err=med([svm_objective(X_train, y_train, None, C, r[1], r[2]) / f_star
                             - 1 for r in results]),
                est_err=med([abs(r[3] - f_star) / f_star for r in results]),
                query_err=med([r[6] for r in results])))
    return rows


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", default="synthetic,digits")
    parser.add_argument("--sizes", default="200,800",
                        type=lambda text: [int(v) for v in text.split(",")])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--C", default="1,100", help="the paper's C values (Eqn 2)",
                        type=lambda text: [float(v) for v in text.split(",")])
    parser.add_argument("--tol", type=float, default=1e-3)
    parser.add_argument("--chunk-size", type=int, default=4000)
    parser.add_argument("--fmnist-rows", type=int, default=10000)
    add_record_flag(parser, "--json-out")
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    record = start_record(parser, args, __file__, argv)
    rows = []
    print(f"{'dataset':<10} {'C':>6} {'method':<11} {'m':>6} {'|S|':>6} {'t':>8} {'acc':>7} "
          f"{'seconds':>8} {'obj_err':>8} {'est_err':>8} {'query_err':>9}")
    for name in args.datasets.split(","):
        data = load(name, args.fmnist_rows)
        record.add_data(name, data)
        record.lap(f"{name}: rows")
        for C in args.C:
            for row in bench_dataset(name, data, C, args, record):
                rows.append(row)
                print(f"{row['dataset']:<10} {C:>6g} {row['method']:<11} {row['size']:>6} "
                      f"{row['n_coreset']:>6.0f} {row['t']:>8.1f} {row['accuracy']:>7.4f} "
                      f"{row['seconds']:>8.3f} {row['obj_err']:>8.4f} {row['est_err']:>8.4f} "
                      f"{row['query_err']:>9.4f}",
                      flush=True)
    record.write(results=rows)


if __name__ == "__main__":
    main()
