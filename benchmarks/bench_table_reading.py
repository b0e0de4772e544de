"""How fast the training job's reading stage turns Parquet and CSV tables into blocks, layout by
layout, beside one pyarrow process reading the same files into numpy. A benchmark, not a test.

    python benchmarks/bench_table_reading.py --array-folder DIR --columns-folder DIR \\
        [--rounds 3] [--s3] [--record PATH]
    python benchmarks/bench_table_reading.py --csv-folder DIR [--csv-from PARQUET_DIR] \\
        [--rounds 3] [--record PATH]

Each folder holds ``train/*.parquet`` (benchmarks/make_big_data.py writes the array layout: a
``label`` and a ``features`` array column; the columns layout has a column per feature). Each
round measures, one after the other and each in a fresh process with a fresh local[2] Spark
session under conf/ (as the job starts):

* ``array``, ``columns``: the reading stage's work as the job does it (``read_blocks`` with the
  kernel path's float32 rows, persisted as the job persists them, one checking job,
  ``check_blocks``), in seconds from the session's start, split into planning (read_blocks
  returns) and reading (the checking job computes and stores the blocks);
* ``columns-spark-sql``: the same columns through Spark SQL's reader (``dataframe_to_blocks``
  over ``spark.read.parquet``), the path every such table took before the tasks read them;
* ``columns-s3`` (``--s3``): the columns files on a local S3 server (moto's, on loopback,
  the object-store tests' server), read by the tasks through pyarrow;
* ``pyarrow``: one Python process reading the columns files into one float32 numpy matrix
  (``pyarrow.parquet.read_table``, a column at a time into the matrix): the reference;
* ``csv``, ``csv-spark-sql``, ``csv-pyarrow`` (``--csv-folder``: ``train/*.csv`` with a header,
  a ``label`` and numeric columns): the same three for CSV files, the job's reading (the check
  of every cell over the text, then the tasks' pyarrow parse), Spark SQL's CSV reader after the
  same check (the path before), and one process's ``pyarrow.csv.read_csv``. ``--csv-from``
  writes that folder first from a folder of numeric Parquet files (``train/*.parquet``), a CSV
  file each (pyarrow's ``write_csv``: a header, the shortest text that reads back each value).

The order of the measurements turns round by round. The record gives every round's seconds,
the medians, the paired ratios (columns over array, columns over pyarrow, and the others), and
the bytes decoded a second.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))
from job_runs import S3Copy  # noqa: E402

from sodm_spark.benchmarking.records import (add_record_flag, paired_ratios,  # noqa: E402
                                             parquet_identity, start_record)

LAYOUTS = ("array", "columns", "columns-spark-sql", "columns-s3", "pyarrow", "csv",
           "csv-spark-sql", "csv-pyarrow")
BUCKET = "sodm-reading"


def _spark_sql_blocks(spark, path: str, fmt: str):
    """The blocks Spark SQL's reader gives (the path before the tasks read the files)."""
    from sodm_spark.spark.io import TableColumns, dataframe_to_blocks
    from sodm_spark.spark.io.blocks import sql_conf
    from sodm_spark.spark.io.csv import checked_csv_table, csv_frame
    from sodm_spark.spark.io.read import input_slices, input_statuses

    statuses = input_statuses(spark, path, fmt)
    with sql_conf(spark, "spark.sql.files.minPartitionNum", str(input_slices(spark, statuses))):
        if fmt == "parquet":
            return dataframe_to_blocks(spark.read.parquet(path), "features", "label",
                                       dtype=np.float32)
        df, numeric, _ = csv_frame(checked_csv_table(spark, path, statuses,
                                                     TableColumns(header=True)))
        return dataframe_to_blocks(df, numeric, "label", dtype=np.float32)


def measure_spark(path: str, fmt: str, through_sql: bool) -> dict:
    """The reading stage's work on ``path`` (see the module) in this process."""
    started = time.perf_counter()
    from pyspark.sql import SparkSession

    from sodm_spark.spark.engine import PERSIST
    from sodm_spark.spark.io import check_blocks, read_blocks

    spark = SparkSession.builder.master("local[2]").getOrCreate()
    try:
        session = time.perf_counter()
        if through_sql:
            blocks, d = _spark_sql_blocks(spark, path, fmt)
        else:
            blocks, d = read_blocks(spark, path, fmt, dtype=np.float32)
        planned = time.perf_counter()
        blocks = blocks.persist(PERSIST)
        stats = check_blocks(blocks, d)
        done = time.perf_counter()
        return {"session_seconds": session - started, "plan_seconds": planned - session,
                "read_seconds": done - planned, "reading_seconds": done - session,
                "rows": stats.n_rows, "features": d, "partitions": blocks.getNumPartitions()}
    finally:
        spark.stop()


def measure_pyarrow(folder: str, csv: bool = False) -> dict:
    """One process: the Parquet (``csv``: CSV) files into one float32 matrix, a column at a
    time."""
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    started = time.perf_counter()
    parts = []
    for path in sorted(Path(folder).glob("*.csv" if csv else "*.parquet")):
        table = pcsv.read_csv(path) if csv else pq.read_table(path)
        names = [name for name in table.column_names if name != "label"]
        by_column = np.empty((len(names), table.num_rows), dtype=np.float32)
        for j, name in enumerate(names):
            by_column[j] = table.column(name).to_numpy()
        parts.append(np.ascontiguousarray(by_column.T))
    X = np.concatenate(parts)
    seconds = time.perf_counter() - started
    return {"reading_seconds": seconds, "rows": int(X.shape[0]), "features": int(X.shape[1])}


def _measure_in_process(layout: str, path: str) -> None:
    if layout in ("pyarrow", "csv-pyarrow"):
        figures = measure_pyarrow(path, csv=layout == "csv-pyarrow")
    else:
        figures = measure_spark(path, "csv" if layout.startswith("csv") else "parquet",
                                layout.endswith("spark-sql"))
    print(json.dumps(figures))


def _run(layout: str, path: str, env: dict) -> dict:
    """One measurement in a fresh process: its figures, and its whole wall seconds."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, "--measure", layout, "--path", path],
                          env=env, capture_output=True, text=True, timeout=3600)
    if done.returncode:
        raise SystemExit(f"error: {layout} on {path} failed: {done.stderr[-1500:]}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    figures["process_seconds"] = time.perf_counter() - started
    return figures


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--array-folder", type=Path)
    parser.add_argument("--columns-folder", type=Path)
    parser.add_argument("--csv-folder", type=Path, help="train/*.csv: the CSV layouts")
    parser.add_argument("--csv-from", type=Path, help="write --csv-folder from this Parquet one")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--s3", action="store_true", help="also read the columns from S3")
    parser.add_argument("--measure", choices=LAYOUTS, help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    add_record_flag(parser)
    return parser


def main(argv=None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.measure:
        _measure_in_process(args.measure, args.path)
        return
    if args.csv_folder is None and (args.array_folder is None or args.columns_folder is None):
        parser.error("--array-folder and --columns-folder, or --csv-folder, are required")
    record = start_record(parser, args, __file__, argv)
    if args.csv_folder is not None:
        return _measure_csv(args, record)
    columns_train = args.columns_folder / "train"
    env = _environment()
    s3 = S3Copy(BUCKET) if args.s3 else None
    try:
        paths = {"array": str(args.array_folder / "train"), "columns": str(columns_train),
                 "columns-spark-sql": str(columns_train), "pyarrow": str(columns_train)}
        if s3 is not None:
            paths["columns-s3"] = s3.upload(columns_train, "train")
            env.update(s3.env)
        rounds = _rounds(paths, env, args.rounds, record)
    finally:
        if s3 is not None:
            s3.stop()
    order = list(paths)
    files_bytes = sum(path.stat().st_size for path in columns_train.glob("*.parquet"))
    identity = parquet_identity(columns_train)
    decoded_bytes = identity["rows"] * identity["features"] * 4
    medians = {layout: {field: statistics.median(r[layout][field] for r in rounds)
                        for field in rounds[0][layout] if isinstance(rounds[0][layout][field],
                                                                     (int, float))}
               for layout in order}
    for figures in medians.values():
        figures["decoded_mb_per_second"] = decoded_bytes / 2**20 / figures["reading_seconds"]
    pairs = [("columns", "array"), ("columns", "pyarrow"), ("array", "pyarrow"),
             ("columns-spark-sql", "columns"), ("columns-s3", "columns")]
    ratios = {f"{top}/{bottom}": paired_ratios(rounds, top, bottom, "reading_seconds")
              for top, bottom in pairs if top in order}
    record.write(rounds=rounds, medians=medians, ratios=ratios,
                 ratio_medians={key: statistics.median(r["ratio"] for r in values)
                                for key, values in ratios.items() if values},
                 data={"array": parquet_identity(args.array_folder / "train"),
                       "columns": identity, "columns_file_bytes": files_bytes,
                       "decoded_float32_bytes": decoded_bytes})
    print(json.dumps({"medians": {k: round(v["reading_seconds"], 2) for k, v in medians.items()}}))


def _environment() -> dict:
    return {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_CONF_DIR": str(ROOT / "conf"),
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def _rounds(paths: dict, env: dict, count: int, record) -> list[dict]:
    """``count`` rounds of every layout of ``paths``, the order turning round by round."""
    order, rounds = list(paths), []
    for number in range(count):
        turned = order[number % len(order):] + order[:number % len(order)]
        rounds.append({layout: _run(layout, paths[layout], env) for layout in turned})
        print(json.dumps({"round": number, **{k: round(v["reading_seconds"], 2)
                                              for k, v in rounds[-1].items()}}), flush=True)
        record.lap(f"round {number + 1}")
        record.write(finished=False, rounds=rounds)
    return rounds


def _measure_csv(args, record) -> None:
    """The CSV layouts' rounds, medians and paired ratios (see the module)."""
    train = args.csv_folder / "train"
    if args.csv_from is not None and not train.exists():
        import pyarrow.csv as pcsv
        import pyarrow.parquet as pq

        train.mkdir(parents=True)
        for path in sorted((args.csv_from / "train").glob("*.parquet")):
            pcsv.write_csv(pq.read_table(path), train / f"{path.stem}.csv")
        record.lap("csv written")
    paths = {layout: str(train) for layout in ("csv", "csv-spark-sql", "csv-pyarrow")}
    rounds = _rounds(paths, _environment(), args.rounds, record)
    first = rounds[0]["csv"]
    text_bytes = sum(path.stat().st_size for path in train.glob("*.csv"))
    decoded_bytes = first["rows"] * first["features"] * 4
    medians = {layout: {field: statistics.median(r[layout][field] for r in rounds)
                        for field in rounds[0][layout]
                        if isinstance(rounds[0][layout][field], (int, float))}
               for layout in paths}
    for figures in medians.values():
        figures["text_mb_per_second"] = text_bytes / 2**20 / figures["reading_seconds"]
    pairs = [("csv", "csv-pyarrow"), ("csv-spark-sql", "csv")]
    ratios = {f"{top}/{bottom}": paired_ratios(rounds, top, bottom, "reading_seconds")
              for top, bottom in pairs}
    record.write(rounds=rounds, medians=medians, ratios=ratios,
                 ratio_medians={key: statistics.median(r["ratio"] for r in values)
                                for key, values in ratios.items()},
                 data={"csv": str(train), "rows": first["rows"], "features": first["features"],
                       "text_bytes": text_bytes, "decoded_float32_bytes": decoded_bytes})
    print(json.dumps({"medians": {k: round(v["reading_seconds"], 2) for k, v in medians.items()}}))


if __name__ == "__main__":
    main()
