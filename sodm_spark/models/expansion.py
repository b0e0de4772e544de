"""KernelExpansion: the model every kernel method here produces, saved as arrays + JSON.

Support vectors are dense rows or CSR rows (a model trained on sparse rows keeps them sparse);
``arrays.npz`` holds either the dense matrix or the CSR arrays (``sv_data``, ``sv_indices``,
``sv_indptr``, ``sv_shape``) — plain arrays, never pickles. The format's names and the check of
a saved model's files, before any is used: :mod:`.saved_files`.
"""
from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass, replace

import numpy as np
import scipy.sparse

from ..core.column_stats import scale_rows
from ..core.categories import CategoryEncoding, encoded_frame, encoding_to_json
from ..core.feature_names import checked_names, frame_in_order
from ..core.kernels import Kernel, decision_values
from ..core.labels import labels_from_scores  # noqa: F401 (the model's labels; importable here)
from ..core.sparse_rows import Rows
from ..data.storage import join, replace_versioned, store_for
from .calibration import IsotonicCalibration, SigmoidCalibration, fit_calibration
# the format's names are read here too (tests, the MLflow flavor)
from .saved_files import (FORMAT_NAME, FORMAT_VERSION, INPUT_ARRAYS,  # noqa: F401
                          MODEL_FILES, READ_VERSIONS, SPARSE_ARRAYS, read_model_files)


@dataclass(frozen=True)
class InputMap:
    """A raw row as a kernel's input: the feature scaling (``(x − offset) · scale`` per column,
    SODM's min-max scaling, or ``x · scale`` in ``columns`` only, its max-abs scaling of sparse
    rows: :func:`~sodm_spark.core.column_stats.scale_rows`), then a projection
    ``(x − center) @ components`` of dense rows (a compressed model's principal directions,
    :func:`sodm_spark.models.compression.principal_projection`); each optional. Plain arrays, so the
    scoring tasks apply the same map as the driver."""

    offset: np.ndarray | None = None
    scale: np.ndarray | None = None
    columns: np.ndarray | None = None
    center: np.ndarray | None = None
    components: np.ndarray | None = None  # (features, kernel inputs)

    def scaled(self, X):
        """The feature scaling alone (dense or CSR rows, in X's float dtype)."""
        return scale_rows(X, self.offset, self.scale, self.columns)

    def projected(self, X):
        """The projection alone, of rows already scaled (dense rows in their float dtype; CSR
        rows come out dense): ``x V − c V``, one product and no centred copy of the rows."""
        if self.components is None:
            return X
        dtype = X.dtype if X.dtype in (np.float32, np.float64) else np.dtype(np.float64)
        components = self.components.astype(dtype)
        X = X.astype(dtype) if scipy.sparse.issparse(X) else np.asarray(X, dtype=dtype)
        out = np.asarray(X @ components)
        out -= self.center.astype(dtype) @ components
        return out

    def followed_by(self, center: np.ndarray, components: np.ndarray) -> "InputMap":
        """This map with its projection followed by a second one, ``(y − center) @ components``
        of the projected rows y, as one projection: ``((x − c₁)V₁ − c₂)V₂ = (x − c)V₁V₂`` with
        ``c = c₁ + c₂V₁ᵀ``, since V₁'s columns are orthonormal (V₁ᵀV₁ = I)."""
        assert self.center is not None and self.components is not None  # this map projects
        return replace(self, center=self.center + np.asarray(center) @ self.components.T,
                       components=self.components @ np.asarray(components))

    def __call__(self, X):
        """The scaling, then the projection. Dense rows scaled per column take both in one
        product, ``((x − o)·s − c) V = x (s V) − (o·s + c) V``, without the two scaled copies of
        the rows (a scoring task's 10,000 × 784 rows: 0.47 s of fresh pages here, the product
        0.05 s)."""
        if self.components is None or self.scale is None or self.columns is not None \
                or scipy.sparse.issparse(X):
            return self.projected(self.scaled(X))
        dtype = X.dtype if X.dtype in (np.float32, np.float64) else np.dtype(np.float64)
        scale = np.asarray(self.scale, np.float64)
        offset = 0.0 if self.offset is None else np.asarray(self.offset, np.float64)
        components = np.asarray(self.components, np.float64)
        out = np.asarray(np.asarray(X, dtype) @ (scale[:, None] * components).astype(dtype))
        center = 0.0 if self.center is None else np.asarray(self.center, np.float64)
        out -= ((offset * scale + center) @ components).astype(dtype)
        return out


@dataclass
class KernelExpansion:
    """``f(x) = Σ_i coef[i] · k(sv_i, x)`` (one column of ``coef`` per output).

    For ODM ``coef[i] = γ_i y_i`` (docs/design.md §1); ``classes`` lists the labels the outputs
    stand for (binary: the column scores ``classes[1]`` against ``classes[0]``). ``intercept`` (one
    per output) is added to f for the comparators that have a bias (CVM, CVR, coreset SVM);
    ODM has none. A regression model has no classes: ``predict`` returns f itself.
    ``feature_offset`` and ``feature_scale`` (one per column; SODM's min-max scaling) map a raw
    row x to ``(x − offset) · scale`` (:meth:`inputs`); with ``feature_columns`` (SODM's
    max-abs scaling of sparse rows) ``feature_scale`` holds the factors of those columns only,
    the others are kept, and there is no offset. A compressed model may also project the
    scaled rows, ``(x − projection_center) @ projection_components``, before the kernel
    (:class:`InputMap`). The support vectors (dense, or CSR) are stored mapped (scaled, and
    projected).
    """

    support_vectors: Rows  # dense, or CSR
    coef: np.ndarray
    kernel: Kernel
    classes: np.ndarray
    intercept: np.ndarray | None = None
    feature_offset: np.ndarray | None = None
    feature_scale: np.ndarray | None = None
    feature_columns: np.ndarray | None = None
    projection_center: np.ndarray | None = None
    projection_components: np.ndarray | None = None
    # class probabilities from f (Platt's sigmoid or an isotonic map, .calibration)
    calibration: SigmoidCalibration | IsotonicCalibration | None = None
    # the training input's feature columns (None: rows without names, scored by position)
    # and the type each had there (Spark SQL's name, or NumPy's for a pandas DataFrame):
    # every door that scores named rows takes these columns by name (core/feature_names.py)
    feature_names: tuple[str, ...] | None = None
    feature_types: tuple[str, ...] | None = None
    # string columns of the training input as features (core/categories.py): the model's
    # features are then the encoding's, and a DataFrame to score holds its input columns
    categories: CategoryEncoding | None = None

    def __post_init__(self):
        if self.categories is not None:
            encoded = self.categories.feature_names
            if self.feature_names is not None and tuple(self.feature_names) != encoded:
                raise ValueError("feature_names are not the categorical encoding's features")
            self.feature_names = encoded
        self.feature_names = checked_names(self.feature_names, "the model's features")
        if self.feature_types is not None:
            self.feature_types = tuple(str(kind) for kind in self.feature_types)
        for what, values in (("feature_names", self.feature_names),
                             ("feature_types", self.feature_types)):
            if values is not None and len(values) != self.n_features_in:
                raise ValueError(f"{what} has {len(values)} entries but the model takes "
                                 f"{self.n_features_in} features")

    def with_features(self, names, types=None, categories=None) -> "KernelExpansion":
        """This model with the training input's feature column ``names`` (and ``types``, and
        the ``categories`` that encoded its string columns); ``names`` None: unchanged (rows
        without names)."""
        if names is None:
            return self
        return replace(self, feature_names=tuple(names),
                       feature_types=None if types is None else tuple(types),
                       categories=categories)

    @property
    def input_map(self) -> InputMap:
        return InputMap(self.feature_offset, self.feature_scale, self.feature_columns,
                        self.projection_center, self.projection_components)

    def inputs(self, X):
        """Raw rows (dense or CSR) with the feature scaling applied (in X's float dtype; CSR
        rows stay CSR unless a min-max offset has to shift their zeros); a projection, if the
        model has one, is :meth:`input_scores`' first step."""
        return self.input_map.scaled(X)

    @property
    def n_features_in(self) -> int:
        """Features of a raw row (the support vectors' width unless the model projects)."""
        if self.projection_components is not None:
            return int(self.projection_components.shape[0])
        return int(self.support_vectors.shape[1])

    @property
    def is_regression(self) -> bool:
        return np.asarray(self.classes).size == 0

    def decision_function(self, X, block_mb: float = 256.0) -> np.ndarray:
        """f on raw rows, dense or CSR (the feature scaling applied first); a DataFrame's
        columns by name when the model keeps its feature names (:func:`frame_in_order`), its
        string columns encoded as in training (:func:`encoded_frame`)."""
        X = frame_in_order(X, self.feature_names) if self.categories is None else \
            encoded_frame(X, self.categories)
        if not scipy.sparse.issparse(X):
            X = np.asarray(X, dtype=np.float64)
        return self.input_scores(self.inputs(X), block_mb)

    def input_scores(self, X, block_mb: float = 256.0) -> np.ndarray:
        """f on rows already mapped by :meth:`inputs`: (n,) for one output, else (n, K)."""
        X = self.input_map.projected(X)
        scores = decision_values(self.kernel, X, self.support_vectors, self.coef, block_mb)
        if self.intercept is not None:
            scores = scores + np.asarray(self.intercept, dtype=np.float64)[None, :]
        return scores[:, 0] if scores.shape[1] == 1 else scores

    def predict(self, X: np.ndarray) -> np.ndarray:
        scores = self.decision_function(X)
        return scores if self.is_regression else labels_from_scores(scores, self.classes)

    def predict_proba(self, X) -> np.ndarray:
        """(n, C) class probabilities of raw rows, in the order of ``classes``, from the
        model's calibration (:mod:`.calibration`: Platt's sigmoid or an isotonic map of f,
        fitted on rows held out from training; one-vs-rest maps normalized for 3+ classes)."""
        if self.calibration is None:
            raise ValueError("this model has no calibration, so no probabilities: calibrate it "
                             "on held-out rows (KernelExpansion.calibrated(X, y)) first.")
        return self.calibration.probabilities(self.decision_function(X))

    def calibrated(self, X, y, method: str = "sigmoid") -> "KernelExpansion":
        """This model with a calibration of ``method`` ("sigmoid": Platt's; "isotonic")
        fitted on raw rows ``X`` with labels ``y`` (values of ``classes``): rows held out from
        its training, whose decision values are honest. "none": without one."""
        classes = np.asarray(self.classes)
        y = np.asarray(y)
        unknown = ~np.isin(y, classes)
        if self.is_regression or unknown.any():
            raise ValueError("a calibration needs the labels of a classifier's classes"
                             + ("" if self.is_regression else
                                f"; row {int(np.flatnonzero(unknown)[0])} has label "
                                f"{y[unknown][0].item()!r}, not one of {classes.tolist()}")
                             + ".")
        labels = np.searchsorted(classes, y) if classes.size > 1 else np.zeros(y.size, int)
        return replace(self, calibration=fit_calibration(
            method, self.decision_function(X), labels, classes.size))

    def compress(self, max_sv: int, method: str = "kmeans", ridge: float = 1e-6,
                 seed: int = 0, fit: str = "data") -> "KernelExpansion":
        """This model over at most ``max_sv`` points (:func:`.compression.compress`: f projected
        onto the span of the chosen points)."""
        from .compression import compress

        return compress(self, max_sv, method, ridge, seed, fit)

    def save(self, path: str | os.PathLike, store=None) -> None:
        """Save to the model directory ``path`` (a local path, or any store by URI: ``file:``,
        ``hdfs://``, ``s3a://``, ...; :func:`sodm_spark.data.storage.store_for`) as
        ``arrays.npz`` and ``metadata.json`` in a new version of it
        (:mod:`sodm_spark.data.storage`): readers see the old complete model or the new complete
        one, never a partial one, and a writer killed at any point leaves one of them, on
        stores without renames too. ``store``: the file system to write (default: by the
        path)."""
        replace_versioned(path, self.write_files, flat_names=MODEL_FILES, store=store)

    def write_files(self, store, folder: str) -> None:
        """``arrays.npz`` and ``metadata.json`` into ``folder`` of ``store`` (created)."""
        classes = np.asarray(self.classes)
        if classes.dtype.kind not in "iufbU":
            classes = classes.astype(str)
        sparse = scipy.sparse.issparse(self.support_vectors)
        arrays = {"coef": self.coef, "classes": classes}
        if sparse:
            csr = self.support_vectors.tocsr()
            arrays.update(sv_data=csr.data, sv_indices=csr.indices, sv_indptr=csr.indptr,
                          sv_shape=np.asarray(csr.shape, dtype=np.int64))
        else:
            arrays["support_vectors"] = self.support_vectors
        if self.intercept is not None:
            arrays["intercept"] = np.asarray(self.intercept, dtype=np.float64)
        for name in INPUT_ARRAYS:
            if getattr(self, name) is not None:
                dtype = np.int64 if name == "feature_columns" else np.float64
                arrays[name] = np.asarray(getattr(self, name), dtype=dtype)
        buffer = io.BytesIO()
        # numpy's stub lets the named arrays reach savez's allow_pickle flag, which none is named
        np.savez(buffer, **arrays)  # type: ignore[arg-type]
        # the oldest version that holds these arrays, so older readers keep reading dense models
        newer = sparse or self.feature_columns is not None or \
            self.projection_components is not None
        version = 3 if newer else 2 if self.feature_scale is not None else 1
        metadata = {"format": FORMAT_NAME, "format_version": version,
                    "kernel": self.kernel.to_dict(), "n_support": int(self.support_vectors.shape[0]),
                    "n_features": int(self.support_vectors.shape[1])}
        if self.projection_components is not None:
            metadata["n_features_in"] = self.n_features_in
        if self.calibration is not None:  # plain numbers; older readers skip the key
            metadata["calibration"] = self.calibration.to_dict()
        if self.feature_names is not None:  # older readers skip these keys too
            metadata["feature_names"] = list(self.feature_names)
            if self.feature_types is not None:
                metadata["feature_types"] = list(self.feature_types)
        if self.categories is not None:
            metadata["categories"] = encoding_to_json(self.categories)
        store.mkdirs(folder)
        store.write_bytes(join(folder, "arrays.npz"), buffer.getbuffer())
        store.write_bytes(join(folder, "metadata.json"),
                          json.dumps(metadata, indent=2).encode("utf-8"))

    @classmethod
    def load(cls, path: str | os.PathLike, store=None) -> "KernelExpansion":
        """Read a model directory written by :meth:`save` (its current version; a directory
        with the files at its top, as earlier versions wrote, too). Every reader of a saved
        model comes here (the pyspark.ml model's ``data`` folder, ``ODMClassifier.load``, the
        MLflow flavor, the predict and ONNX export jobs), so the checks of
        :func:`read_model_files` are the same for all. ``store``: the file system to read
        (default: by the path)."""
        store = store or store_for(path)
        files = read_model_files(store, str(path).rstrip("/") or "/")
        optional = {name: files.arrays.get(name) for name in ("intercept", *INPUT_ARRAYS)}
        return cls(files.support_vectors, files.arrays["coef"], files.kernel,
                   files.arrays["classes"], calibration=files.calibration,
                   feature_names=files.feature_names, feature_types=files.feature_types,
                   categories=files.categories, **optional)
