"""Real data sets shipped by registry packages in formats other than plain numpy files.

UCI *letter* (20,000 rows × 16 integer features, 26 capital letters) ships in Debian's
``r-cran-mlbench`` package as the R data file ``LetterRecognition.rda``; it is read with the
pure-Python PyPI package ``rdata`` (Debian: ``python3-rdata``). The rows keep the file's order,
which is the UCI order: the customary split trains on the first 16,000 rows and tests on the
last 4,000.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

MLBENCH_DATA_DIR = Path("/usr/lib/R/site-library/mlbench/data")
LETTER_TRAIN_ROWS = 16000


def _read_rda_frame(path: Path, name: str):
    """The data frame ``name`` stored in the R data file ``path``."""
    try:
        import rdata
    except ImportError as error:
        raise ImportError(
            f"Reading {path.name} needs the Python package 'rdata': pip install rdata "
            "(or apt-get install python3-rdata).") from error
    with warnings.catch_warnings():  # mlbench's files declare no string encoding (ASCII)
        warnings.simplefilter("ignore", UserWarning)
        frames = rdata.read_rda(str(path))
    if name not in frames:
        raise ValueError(f"{path} holds {sorted(frames)}, not {name!r}.")
    return frames[name]


def load_letter(binary: bool = True, data_dir: str | Path = MLBENCH_DATA_DIR):
    """UCI letter as ``(X, y)``: X float64 (20,000 × 16), rows in the UCI order.

    ``binary=True`` gives the usual two-class task "A-M vs N-Z" (Caruana & Niculescu-Mizil's
    LETTER.p2; the CSVRG and SODM papers do not use letter): y = +1 for A-M, -1 for N-Z,
    nearly balanced (9,940 vs 10,060). ``binary=False`` gives the letters as strings.
    Split with ``X[:LETTER_TRAIN_ROWS]`` / ``X[LETTER_TRAIN_ROWS:]``.
    """
    path = Path(data_dir) / "LetterRecognition.rda"
    if not path.exists():
        raise FileNotFoundError(
            f"{path} not found: the UCI letter data ships in Debian's r-cran-mlbench package "
            "(apt-get install r-cran-mlbench), or pass data_dir= the folder holding "
            "LetterRecognition.rda.")
    frame = _read_rda_frame(path, "LetterRecognition")
    letters = np.asarray(frame["lettr"].astype(str))
    X = np.ascontiguousarray(frame.drop(columns="lettr").to_numpy(dtype=np.float64))
    if X.shape != (20000, 16):
        raise ValueError(f"{path} has shape {X.shape}, expected (20000, 16); damaged file?")
    if not binary:
        return X, letters
    return X, np.where(letters <= "M", 1, -1)
