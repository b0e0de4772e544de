"""KernelExpansion: the model every kernel method here produces, saved as arrays + JSON."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse

from .kernels import Kernel, decision_values

FORMAT_NAME = "sodm_spark.KernelExpansion"
FORMAT_VERSION = 1


def move_into_place(staging: Path, path: Path) -> None:
    """Rename the finished directory ``staging`` to ``path``, replacing what is there: readers
    see the old complete directory or the new one, never a partial one."""
    if path.exists():
        retired = Path(tempfile.mkdtemp(prefix=f".{path.name}.old-", dir=path.parent))
        os.rename(path, retired / path.name)
        os.rename(staging, path)
        shutil.rmtree(retired)
    else:
        os.rename(staging, path)


@dataclass
class KernelExpansion:
    """``f(x) = Σ_i coef[i] · k(sv_i, x)`` (one column of ``coef`` per output).

    For ODM ``coef[i] = γ_i y_i`` (design.md §1); ``classes`` lists the labels the outputs stand
    for (binary: the column scores ``classes[1]`` against ``classes[0]``). ``intercept`` (one
    per output) is added to f for the comparators that have a bias (CVM, CVR, coreset SVM);
    ODM has none. A regression model has no classes: ``predict`` returns f itself.
    """

    support_vectors: np.ndarray
    coef: np.ndarray
    kernel: Kernel
    classes: np.ndarray
    intercept: np.ndarray | None = None

    @property
    def is_regression(self) -> bool:
        return np.asarray(self.classes).size == 0

    def decision_function(self, X: np.ndarray, block_mb: float = 256.0) -> np.ndarray:
        if not scipy.sparse.issparse(X):  # sparse rows work with the linear kernel
            X = np.asarray(X, dtype=np.float64)
        scores = decision_values(self.kernel, X, self.support_vectors, self.coef, block_mb)
        if self.intercept is not None:
            scores = scores + np.asarray(self.intercept, dtype=np.float64)[None, :]
        return scores[:, 0] if scores.shape[1] == 1 else scores

    def predict(self, X: np.ndarray) -> np.ndarray:
        scores = self.decision_function(X)
        if self.is_regression:
            return scores
        if scores.ndim == 1:
            return self.classes[(scores > 0).astype(int)]
        return self.classes[np.argmax(scores, axis=1)]

    def compress(self, max_sv: int, method: str = "kmeans", ridge: float = 1e-6,
                 seed: int = 0, fit: str = "data") -> "KernelExpansion":
        """This model over at most ``max_sv`` points (:func:`sodm_spark.compression.compress`:
        f projected onto the span of the chosen points)."""
        from .compression import compress

        return compress(self, max_sv, method, ridge, seed, fit)

    def save(self, path: str | os.PathLike, atomic: bool = False) -> None:
        """Write ``arrays.npz`` and ``metadata.json`` into the directory ``path`` (created).

        ``atomic=True`` writes a sibling temporary directory and renames it into place, so
        readers see the old complete model or the new complete one, never a partial one.
        """
        path = Path(path)
        if atomic:
            path.parent.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
            try:
                self.save(staging)
                move_into_place(staging, path)
            finally:
                if staging.exists():
                    shutil.rmtree(staging)
            return
        path.mkdir(parents=True, exist_ok=True)
        classes = np.asarray(self.classes)
        if classes.dtype.kind not in "iufbU":
            classes = classes.astype(str)
        arrays = {"support_vectors": self.support_vectors, "coef": self.coef, "classes": classes}
        if self.intercept is not None:
            arrays["intercept"] = np.asarray(self.intercept, dtype=np.float64)
        np.savez(path / "arrays.npz", **arrays)
        metadata = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION,
                    "kernel": self.kernel.to_dict(), "n_support": int(self.support_vectors.shape[0]),
                    "n_features": int(self.support_vectors.shape[1])}
        (path / "metadata.json").write_text(json.dumps(metadata, indent=2))

    @classmethod
    def load(cls, path: str | os.PathLike) -> "KernelExpansion":
        """Read a directory written by :meth:`save`; a ValueError says what is wrong with it.

        Refused, naming the directory and the file: a path that is not a directory, a missing
        or unparsable ``metadata.json`` or ``arrays.npz`` (an incomplete or truncated copy),
        another format or ``format_version`` (both versions named), arrays that disagree with
        the metadata.
        """
        path = Path(path)
        redo = ("Copy the whole model directory again, or retrain and save it "
                "(KernelExpansion.save, or a job's --model-out DIR).")
        if not path.is_dir():
            why = "it is a file, not a directory" if path.exists() else "no such directory"
            raise ValueError(f"{path} is not a saved model: {why}. Pass the directory that "
                             "holds metadata.json and arrays.npz (a job's --model-out DIR).")
        present = sorted(p.name for p in path.iterdir())
        if not (path / "metadata.json").is_file():
            partial = "arrays.npz" in present
            raise ValueError(
                f"{path} is {'an incomplete (truncated) model' if partial else 'not a saved model'}"
                f": metadata.json is missing (the directory holds {present[:8] or 'nothing'}). "
                + (redo if partial else "Pass the directory that holds metadata.json and "
                   "arrays.npz (a job's --model-out DIR)."))
        try:
            metadata = json.loads((path / "metadata.json").read_text(encoding="utf-8"))
            if not isinstance(metadata, dict):
                raise ValueError("not a JSON object")
        except (ValueError, UnicodeDecodeError) as error:
            raise ValueError(f"{path / 'metadata.json'} is truncated or corrupt ({error}); the "
                             f"model cannot be read. {redo}") from None
        if metadata.get("format") != FORMAT_NAME or metadata.get("format_version") != FORMAT_VERSION:
            raise ValueError(
                f"{path} holds format {metadata.get('format')!r} version "
                f"{metadata.get('format_version')!r}; this sodm_spark reads {FORMAT_NAME!r} "
                f"version {FORMAT_VERSION}. Retrain, or load it with the version that wrote it.")
        if not (path / "arrays.npz").is_file():
            raise ValueError(f"{path} is an incomplete (truncated) model: arrays.npz is missing. "
                             f"{redo}")
        try:
            kernel = Kernel.from_dict(metadata["kernel"])
            expected = (int(metadata["n_support"]), int(metadata["n_features"]))
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"{path / 'metadata.json'} is corrupt ({type(error).__name__}: "
                             f"{error}); the model cannot be read. {redo}") from None
        try:
            with np.load(path / "arrays.npz", allow_pickle=False) as arrays:
                model = cls(arrays["support_vectors"], arrays["coef"], kernel, arrays["classes"],
                            arrays["intercept"] if "intercept" in arrays.files else None)
        except (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile) as error:
            raise ValueError(f"{path / 'arrays.npz'} is truncated or corrupt "
                             f"({type(error).__name__}: {error}). {redo}") from None
        if model.support_vectors.shape != expected or model.coef.shape[0] != expected[0]:
            raise ValueError(f"{path}: arrays.npz holds {model.support_vectors.shape[0]} support "
                             f"vectors of {model.support_vectors.shape[1:]} features but "
                             f"metadata.json says {expected} (a truncated or mixed copy). {redo}")
        return model
