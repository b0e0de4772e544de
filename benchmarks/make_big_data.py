"""Write the data of the benchmarks at scale as Parquet: Fashion-MNIST grown by elastic
deformations (the MNIST8M / infiMNIST recipe, :func:`sodm_spark.big_data.deformed_fashion_mnist`)
or a low-dimensional table in raw units (:func:`sodm_spark.big_data.make_tabular`).

    python benchmarks/make_big_data.py --rows 600000 --out ~/.cache/sodm_spark/fmnist-600k
    python benchmarks/make_big_data.py --dataset tabular --rows 2000000 --out DIR

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

from sodm_spark.big_data import deformed_fashion_mnist, make_tabular
from sodm_spark.datasets import DatasetUnavailable, load_fashion_mnist

TABULAR_TEST_ROWS = 50_000


def write_table(path: Path, X: np.ndarray, y: np.ndarray) -> None:
    """One Parquet file of (label, features) written atomically."""
    features = pa.FixedSizeListArray.from_arrays(pa.array(X.astype(np.float32).ravel()),
                                                 X.shape[1]).cast(pa.list_(pa.float32()))
    table = pa.table({"label": pa.array(y.astype(np.float64)), "features": features})
    staging = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, staging, compression="zstd")
    os.replace(staging, path)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", choices=("fashion", "tabular"), default="fashion")
    parser.add_argument("--rows", type=int, required=True, help="training rows (>= 1)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--file-rows", type=int, default=50_000)
    parser.add_argument("--classes", choices=("2", "10"), default="2")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.rows < 1 or args.file_rows < 1:
        parser.error("--rows and --file-rows must be positive")
    binary = args.classes == "2"
    train, test = args.out / "train", args.out / "test"
    for folder in (train, test):
        folder.mkdir(parents=True, exist_ok=True)
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
        raise SystemExit(f"error: {error}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
