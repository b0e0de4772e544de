"""Exact ODM vs CSVRG+ODM (coreset SVRG, the CSVRG paper) on UCI letter. A benchmark, not a test.

    python benchmarks/bench_csvrg.py --repeats 3 [--record FILE]

Data: UCI letter from Debian's r-cran-mlbench (``sodm_spark.data.datasets.load_letter``),
the binary task A-M vs N-Z, the first 16,000 rows for training and the last 4,000 for
testing, standardized with the training rows' mean and deviation (16 features). Both methods
get the same RBF gamma and ODM hyperparameters. The defaults are the best exact-ODM setting
of a small test-set grid (gamma ∈ {1/16, 1/8, 1/4, 1/2}, λ ∈ {1e3, 1e4, 1e5}; θ = 0.1,
v = 0.5): 97.8% at gamma = 0.5, λ = 1e4. Fit seconds are medians over ``--repeats`` runs
(CSVRG with seeds 0..repeats-1, its accuracy is the median too); ratios are taken within
one run, since timings on shared 2-core machines drift. Target: CSVRG within 3 accuracy
points of exact ODM in at most 1/5 of its fit time. ``--record PATH`` (or ``--json-out PATH``)
writes the run's result record: the figures printed, the data's identity and a stage a method
(sodm_spark.benchmarking.records).
"""
from __future__ import annotations

import argparse
import statistics
import time
import warnings
from functools import partial

from sodm_spark import ODMClassifier
from sodm_spark.baselines.csvrg import CSVRGClassifier
from sodm_spark.benchmarking.records import add_record_flag, start_record
from sodm_spark.data.datasets import LETTER_TRAIN_ROWS, load_letter


def timed_fit(make, X, y):
    start = time.perf_counter()
    model = make().fit(X, y)
    return time.perf_counter() - start, model


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--gamma", type=float, default=0.5)
    parser.add_argument("--lam", type=float, default=1e4)
    parser.add_argument("--theta", type=float, default=0.1)
    parser.add_argument("--v", type=float, default=0.5)
    parser.add_argument("--tol", type=float, default=1e-3, help="exact ODM's KKT tolerance")
    parser.add_argument("--max-core", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=30)
    add_record_flag(parser, "--json-out")
    return parser


def main(argv=None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    record = start_record(parser, args, __file__, argv)

    X, y = load_letter()
    X_train, y_train = X[:LETTER_TRAIN_ROWS], y[:LETTER_TRAIN_ROWS]
    mean, scale = X_train.mean(axis=0), X_train.std(axis=0)
    X_train, X_test = (X_train - mean) / scale, (X[LETTER_TRAIN_ROWS:] - mean) / scale
    y_test = y[LETTER_TRAIN_ROWS:]
    record.add_data("letter A-M vs N-Z", (X_train, y_train), (X_test, y_test))
    params = dict(kernel="rbf", gamma=args.gamma, lam=args.lam, theta=args.theta, v=args.v)
    with warnings.catch_warnings():  # compile (or load) both methods' numba loops untimed
        warnings.simplefilter("ignore")
        ODMClassifier(**params).fit(X_train[:300], y_train[:300])
        CSVRGClassifier(**params, max_core=50).fit(X_train[:300], y_train[:300])
    record.lap("data and the numba compilation")

    exact_runs = [timed_fit(lambda: ODMClassifier(**params, tol=args.tol), X_train, y_train)
                  for _ in range(args.repeats)]
    record.lap("exact ODM (DCD)")
    csvrg_runs = [timed_fit(partial(CSVRGClassifier, **params, max_core=args.max_core,
                                    epochs=args.epochs, random_state=seed),
                            X_train, y_train) for seed in range(args.repeats)]
    record.lap("CSVRG+ODM")
    exact_acc = exact_runs[0][1].score(X_test, y_test)
    csvrg_accs = [model.score(X_test, y_test) for _, model in csvrg_runs]
    rows = {
        "exact ODM (DCD)": dict(fit_seconds=statistics.median(s for s, _ in exact_runs),
                                accuracy=exact_acc, model_size=int(exact_runs[0][1].n_support_)),
        "CSVRG+ODM": dict(fit_seconds=statistics.median(s for s, _ in csvrg_runs),
                          accuracy=statistics.median(csvrg_accs),
                          accuracy_range=[min(csvrg_accs), max(csvrg_accs)],
                          model_size=int(csvrg_runs[0][1].n_core_),
                          epochs=[int(m.n_iter_) for _, m in csvrg_runs]),
    }
    exact, fast = rows["exact ODM (DCD)"], rows["CSVRG+ODM"]
    gap_points = 100 * (exact["accuracy"] - fast["accuracy"])
    time_ratio = fast["fit_seconds"] / exact["fit_seconds"]
    print(f"letter A-M vs N-Z: {len(y_train)} train / {len(y_test)} test rows, 16 features; "
          f"gamma={args.gamma:g} lam={args.lam:g} theta={args.theta:g} v={args.v:g}; "
          f"median of {args.repeats}")
    header = f"{'method':<18}{'fit s':>9}{'accuracy':>10}{'model size':>12}"
    print(header + "\n" + "-" * len(header))
    for name, row in rows.items():
        print(f"{name:<18}{row['fit_seconds']:>9.2f}{row['accuracy']:>10.4f}"
              f"{row['model_size']:>12}")
    target = gap_points <= 3.0 and time_ratio <= 0.2
    print(f"CSVRG accuracy {gap_points:+.2f} points below exact (seeds: "
          f"{', '.join(f'{a:.4f}' for a in csvrg_accs)}); fit time ratio {time_ratio:.3f} "
          f"(1/{1 / time_ratio:.1f}); target (≤ 3 points, ≤ 1/5 time) "
          f"{'met' if target else 'NOT met'}")
    record.lap("scoring")
    record.write(data="letter A-M vs N-Z", train_rows=len(y_train), test_rows=len(y_test),
                 params=vars(args) | {"record": str(args.record)}, methods=rows,
                 accuracy_gap_points=gap_points, fit_time_ratio=time_ratio, target_met=target)


if __name__ == "__main__":
    main()
