"""Target encoding against one-hot for string columns of hundreds of levels: what each costs and
buys in the same fit. A benchmark, not a test.

    python benchmarks/bench_category_encodings.py [--rows 100000] [--test-rows 50000] \
        [--rounds 3] [--record PATH]

The rows: vega-datasets' 3,000,000 US flights of 2001 (``sodm_spark.data.us_flights``), a
seeded sample of --rows training and --test-rows test rows, the four numeric columns (month,
weekday, departure minute, distance) and the two airports as their IATA codes (``origin``,
``destination``: about 230 levels each). Two encodings of the same rows
(``sodm_spark.core.categories.fit_encoding``, folds from the rows' positions and the seed):

* ``target``: the package's rule (one-hot up to ``ONE_HOT_MAX_LEVELS`` levels, else a smoothed
  target encoding out of fold): 4 + 2 features;
* ``one-hot``: every level its own feature, weighted as the job weights one-hot features
  (``CategoryEncoding.feature_weights``): 4 + one a level.

Each is fitted in process with every default (``fit_in_process``: the job's search and fit on
2 cores) and scored on the test rows (encoded by the fitted encoding, unseen levels as the
encoding says). The record gives each round's seconds (encoding and fit; scoring), features,
support vectors, test accuracy and rows scored a second, the medians and the paired ratios
(one-hot over target).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sodm_spark.benchmarking.records import add_record_flag, start_record  # noqa: E402

NUMERIC = ("month", "weekday", "dep_minute", "distance")
STRINGS = ("origin", "destination")
ENCODINGS = {"target": None, "one-hot": 100_000}  # the most levels one-hot encoded


def sample(rows: int, test_rows: int, seed: int):
    """(training frame, test frame): seeded disjoint samples of the US flights."""
    from sodm_spark.data.us_flights import load_us_flights_frame

    frame = load_us_flights_frame()
    order = np.random.default_rng([seed, 23]).permutation(len(frame))
    return (frame.iloc[order[:rows]].reset_index(drop=True),
            frame.iloc[order[rows:rows + test_rows]].reset_index(drop=True))


def run(encoding_name: str, train, test, seed: int) -> dict:
    """One encoding fitted and scored (see the module)."""
    from sodm_spark.core.categories import ONE_HOT_MAX_LEVELS, fit_encoding
    from sodm_spark.spark.train import fit_in_process

    y = train["label"].to_numpy(np.float64)
    started = time.perf_counter()
    encoding, X = fit_encoding(NUMERIC, train[list(NUMERIC)].to_numpy(np.float64),
                               {name: train[name].to_numpy() for name in STRINGS}, y,
                               np.unique(y), seed=seed,
                               max_one_hot=ENCODINGS[encoding_name] or ONE_HOT_MAX_LEVELS)
    trained = fit_in_process(X, y, feature_weights=tuple(encoding.feature_weights().tolist()),
                             seed=seed)
    fit_seconds = time.perf_counter() - started
    model = trained.fit.model
    started = time.perf_counter()
    encoded = encoding.encode(test[list(NUMERIC)].to_numpy(np.float64),
                              {name: test[name].to_numpy() for name in STRINGS})
    predicted = model.predict(encoded.X)
    score_seconds = time.perf_counter() - started
    return {"features": len(encoding.feature_names), "fit_seconds": fit_seconds,
            "score_seconds": score_seconds, "rows_per_second": len(test) / score_seconds,
            "support_vectors": int(model.support_vectors.shape[0]),
            "test_accuracy": float(np.mean(predicted == test["label"].to_numpy())),
            "unseen": encoded.unseen}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000, help="training rows")
    parser.add_argument("--test-rows", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0, help="the sample's, the folds', the fit's")
    add_record_flag(parser)
    return parser


def main(argv=None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    record = start_record(parser, args, __file__, argv)
    train, test = sample(args.rows, args.test_rows, args.seed)
    levels = {name: int(train[name].nunique()) for name in STRINGS}
    majority = float(max(test["label"].mean(), 1 - test["label"].mean()))
    record.lap("data")
    order, rounds = list(ENCODINGS), []
    for number in range(args.rounds):
        turned = order[number % 2:] + order[:number % 2]
        rounds.append({name: run(name, train, test, args.seed) for name in turned})
        print({"round": number, **rounds[-1]}, flush=True)
        record.lap(f"round {number + 1}")
        record.write(finished=False, rounds=rounds, levels=levels)
    fields = ("features", "fit_seconds", "rows_per_second", "support_vectors", "test_accuracy")
    medians = {name: {field: statistics.median(r[name][field] for r in rounds)
                      for field in fields} for name in order}
    paired = [{"fit_ratio": r["one-hot"]["fit_seconds"] / r["target"]["fit_seconds"],
               "scoring_ratio": r["one-hot"]["rows_per_second"] / r["target"]["rows_per_second"],
               "accuracy_difference": r["one-hot"]["test_accuracy"] - r["target"]["test_accuracy"]}
              for r in rounds]
    record.write(rounds=rounds, levels=levels, medians=medians, paired=paired,
                 majority_class=majority, rows={"train": len(train), "test": len(test)},
                 paired_medians={key: statistics.median(p[key] for p in paired)
                                 for key in paired[0]})
    print({"medians": medians, "levels": levels, "majority_class": majority})


if __name__ == "__main__":
    main()
