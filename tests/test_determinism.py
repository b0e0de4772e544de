"""The same fit on 1 and 2 cores gives the same model, bit for bit: input is sliced by its size
(LIBSVM lines, CSV/Parquet file splits), never by the session's parallelism."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sklearn.datasets import dump_svmlight_file

from conftest import make_problem, model_files

ROOT = Path(__file__).resolve().parents[1]
FORMATS = ("libsvm", "parquet")


def _write_inputs(directory: Path):
    X, y = make_problem(m=1500, d=6, seed=61, noise=0.3)
    libsvm = directory / "train.libsvm"
    dump_svmlight_file(X, (y > 0).astype(int), str(libsvm), zero_based=False)
    parquet = directory / "train.parquet"
    parquet.mkdir()
    for number, rows in enumerate(np.array_split(np.arange(X.shape[0]), 3)):
        table = pa.table({"label": pa.array(y[rows]),
                          "features": pa.array([list(row) for row in X[rows]],
                                               type=pa.list_(pa.float64()))})
        pq.write_table(table, parquet / f"part-{number:05d}.parquet")
    return {"libsvm": libsvm, "parquet": parquet}


def _fit_all(master: str, inputs: dict, out: Path) -> dict:
    """{format: (model arrays, metadata text)} of the training job on each input, all in one
    spark-submit (tests/determinism_fits.py) with ``master``: the same settings, conf/ and
    open cost for every core count."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_CONF_DIR=str(ROOT / "conf"),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    # a small open cost: Spark would pack the three Parquet files into as many read
    # partitions as it has cores, were the slicing left to it
    command = ["spark-submit", "--master", master, "--conf",
               "spark.sql.files.openCostInBytes=1024", str(ROOT / "tests" / "determinism_fits.py"),
               str(out), *(f"{fmt}={data}" for fmt, data in inputs.items())]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    fits = {}
    for fmt in inputs:
        files = model_files(out / fmt)
        with np.load(files / "arrays.npz") as arrays:
            fits[fmt] = ({name: arrays[name] for name in arrays.files},
                         (files / "metadata.json").read_text())
    return fits


@pytest.fixture(scope="module")
def fits(tmp_path_factory):
    """The fits of every format on 1 core and on 2: {cores: {format: (arrays, metadata)}}."""
    folder = tmp_path_factory.mktemp("determinism")
    inputs = _write_inputs(folder)
    return {cores: _fit_all(f"local[{cores}]", inputs, folder / f"cores-{cores}")
            for cores in (1, 2)}


@pytest.mark.parametrize("fmt", FORMATS)
def test_one_and_two_cores_fit_the_same_model_bit_for_bit(fits, fmt):
    (one, one_meta), (two, two_meta) = fits[1][fmt], fits[2][fmt]
    assert one_meta == two_meta
    assert sorted(one) == sorted(two)
    for name in one:
        assert one[name].tobytes() == two[name].tobytes(), name
