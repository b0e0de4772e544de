"""The files of a saved :class:`~sodm_spark.models.expansion.KernelExpansion` (its format's
names and versions) and the one check every reader of a model directory goes through before
using any of them (:func:`read_model_files`): ``KernelExpansion.load``, and through it
``ODMClassifier.load``, the pyspark.ml model's ``data`` folder, the MLflow flavor, the predict
and ONNX export jobs. A damaged directory is refused with one InputError line naming the file
and the fault, and nothing is written.
"""
from __future__ import annotations

import io
import json
import zipfile
from dataclasses import dataclass

import numpy as np
import scipy.sparse

from ..core.categories import CategoryEncoding, encoding_from_json
from ..core.errors import InputError
from ..core.kernels import Kernel
from ..core.sparse_rows import Rows
from ..data.storage import current_version, join, read_saved_file, split
from .calibration import IsotonicCalibration, SigmoidCalibration, calibration_from_dict

FORMAT_NAME = "sodm_spark.KernelExpansion"
# 2: the feature scaling (written only when a model has one, else 1); 3: sparse support
# vectors, a scaling of some columns only, or a projection of the inputs (written only then)
FORMAT_VERSION = 3
READ_VERSIONS = (1, 2, 3)
#: The CSR arrays of sparse support vectors in ``arrays.npz``.
SPARSE_ARRAYS = ("sv_data", "sv_indices", "sv_indptr", "sv_shape")
MODEL_FILES = ("arrays.npz", "metadata.json")  # in a version folder (or a pre-version directory)
#: The optional arrays of a model's input map (its feature scaling and projection).
INPUT_ARRAYS = ("feature_offset", "feature_scale", "feature_columns", "projection_center",
                "projection_components")

# What a refusal of a damaged model directory asks for
_REDO = ("Copy the whole model directory again, or retrain and save it "
         "(KernelExpansion.save, or a job's --model-out DIR).")
_REQUIRED_METADATA = ("kernel", "n_support", "n_features")


@dataclass(frozen=True)
class ModelFiles:
    """The checked contents of a model directory's current version (:func:`read_model_files`):
    its folder, the parsed ``metadata.json`` and its kernel and calibration, the arrays of
    ``arrays.npz`` by name and the support vectors (dense, or CSR from the ``sv_*`` arrays)."""

    folder: str
    metadata: dict
    kernel: Kernel
    calibration: SigmoidCalibration | IsotonicCalibration | None
    arrays: dict
    support_vectors: Rows
    feature_names: tuple[str, ...] | None = None
    feature_types: tuple[str, ...] | None = None
    categories: CategoryEncoding | None = None


def read_model_files(store, path: str) -> ModelFiles:
    """The files of the model directory ``path`` on ``store``, every one checked before any is
    used: the one validation of a saved model, whoever reads it (``KernelExpansion.load``).

    Refused with an InputError (one line naming the file and what is wrong; nothing is
    written): a path that is not a directory; versions of which none has its ``_COMPLETE``
    marker; a missing ``metadata.json`` or ``arrays.npz``; metadata that is truncated, not
    JSON, not an object, of another format or version, or without its kernel and sizes;
    arrays that are not a zip archive, truncated or corrupt, or lack one the model needs;
    arrays whose shapes disagree with the metadata or with each other; a calibration that
    cannot be read, holds NaN or infinite numbers, or maps another number of outputs.
    A store that cannot be reached raises its own one-line StoreError.
    """
    folder, present = _model_folder(store, path)
    metadata_path, arrays_path = join(folder, "metadata.json"), join(folder, "arrays.npz")
    metadata, kernel, calibration = _read_metadata(store, folder, metadata_path)
    if "arrays.npz" not in present:
        raise InputError(f"{folder} is an incomplete (truncated) model: arrays.npz is "
                         f"missing. {_REDO}")
    arrays, support_vectors = _read_arrays(store, arrays_path)
    _check_shapes(arrays_path, metadata, arrays, support_vectors, calibration)
    names, types = _feature_columns(metadata_path, metadata)
    return ModelFiles(folder, metadata, kernel, calibration, arrays, support_vectors, names,
                      types, _categories(metadata_path, metadata, names))


def _categories(metadata_path: str, metadata: dict, names) -> CategoryEncoding | None:
    """The categorical encoding ``metadata.json`` keeps (None: the model has none), refused
    unless it reads and gives the model's feature names."""
    document = metadata.get("categories")
    if document is None:
        return None
    try:
        encoding = encoding_from_json(document)
    except (KeyError, TypeError, ValueError) as error:
        raise InputError(f"{metadata_path} is corrupt: its categorical encoding cannot be "
                         f"read ({error}); the model cannot be read. {_REDO}") from None
    if names is None or encoding.feature_names != tuple(names):
        raise InputError(f"{metadata_path} is corrupt: its categorical encoding does not give "
                         f"its feature_names; the model cannot be read. {_REDO}")
    return encoding


def _feature_columns(metadata_path: str, metadata: dict):
    """(the feature names, their types) of ``metadata.json``, None where it has none (a
    model of rows without names, or saved before names were kept); refused unless each is a
    list of strings, one per input feature, the names distinct."""
    inputs = metadata.get("n_features_in", metadata["n_features"])
    found = []
    for key in ("feature_names", "feature_types"):
        values = metadata.get(key)
        if values is not None and (not isinstance(values, list) or len(values) != inputs
                                   or not all(isinstance(v, str) for v in values)):
            raise InputError(f"{metadata_path} is corrupt: {key} is not a list of {inputs} "
                             f"strings, one per feature; the model cannot be read. {_REDO}")
        found.append(None if values is None else tuple(values))
    if found[0] is not None and len(set(found[0])) != len(found[0]):
        raise InputError(f"{metadata_path} is corrupt: its feature_names repeat a name; the "
                         f"model cannot be read. {_REDO}")
    if found[1] is not None and found[0] is None:
        found[1] = None
    return found[0], found[1]


def _model_folder(store, path: str) -> tuple[str, list]:
    """(the folder of the model directory ``path``'s current version, the names it holds);
    refused unless ``path`` is a directory whose current version (one with ``_COMPLETE``:
    :func:`~sodm_spark.data.storage.current_version`) has ``metadata.json``."""
    if not store.is_dir(path):
        why = "it is a file, not a directory" if store.exists(path) else "no such directory"
        raise InputError(f"{path} is not a saved model: {why}. Pass the directory that "
                         "holds metadata.json and arrays.npz (a job's --model-out DIR).")
    folder = current_version(store, path, "metadata.json")
    present = store.list(folder)
    if "metadata.json" not in present:
        partial = "arrays.npz" in present
        raise InputError(
            f"{folder} is {'an incomplete (truncated) model' if partial else 'not a saved model'}"
            f": metadata.json is missing (the directory holds {present[:8] or 'nothing'}). "
            + (_REDO if partial else "Pass the directory that holds metadata.json and "
               "arrays.npz (a job's --model-out DIR)."))
    return folder, present


def _read_metadata(store, folder: str, metadata_path: str):
    """(``metadata.json`` of ``folder`` as a dict, its kernel, its calibration or None),
    refused unless it parses, names a format and version this module reads and holds a
    kernel, the sizes of the arrays and, if any, a calibration of finite numbers."""
    data = read_saved_file(store, metadata_path, _REDO)
    try:
        metadata = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise InputError(f"{metadata_path} is truncated or corrupt, not valid JSON "
                         f"({error}); the model cannot be read. {_REDO}") from None
    if not isinstance(metadata, dict):
        raise InputError(f"{metadata_path} holds a JSON {type(metadata).__name__}, not the "
                         f"object a model's metadata is; the model cannot be read. {_REDO}")
    if metadata.get("format") != FORMAT_NAME or \
            metadata.get("format_version") not in READ_VERSIONS:
        raise InputError(
            f"{folder} holds format {metadata.get('format')!r} version "
            f"{metadata.get('format_version')!r}; this sodm_spark reads {FORMAT_NAME!r} "
            f"versions {', '.join(map(str, READ_VERSIONS))}. Retrain, or load it with the "
            "version that wrote it.")
    missing = [key for key in _REQUIRED_METADATA if key not in metadata]
    if missing:
        raise InputError(f"{metadata_path} is corrupt: it has no {', '.join(missing)}; the "
                         f"model cannot be read. {_REDO}")
    try:
        kernel = Kernel.from_dict(metadata["kernel"])
        for key in ("n_support", "n_features", "n_features_in"):
            if key in metadata and (not isinstance(metadata[key], int) or metadata[key] < 0):
                raise ValueError(f"{key} is {metadata[key]!r}, not a count")
    except (KeyError, TypeError, ValueError) as error:
        raise InputError(f"{metadata_path} is corrupt ({type(error).__name__}: "
                         f"{error}); the model cannot be read. {_REDO}") from None
    calibration = None
    if "calibration" in metadata:
        try:
            calibration = calibration_from_dict(metadata["calibration"])
        except (KeyError, TypeError, ValueError) as error:
            raise InputError(f"{metadata_path}: its calibration cannot be read "
                             f"({type(error).__name__}: {error}). {_REDO}") from None
    return metadata, kernel, calibration


def _read_arrays(store, arrays_path: str) -> tuple[dict, Rows]:
    """(the arrays of ``arrays.npz`` by name, the support vectors: dense, or CSR from the
    ``sv_*`` arrays), refused when the file is not a zip archive, is truncated or corrupt, or
    lacks an array every model has."""
    data = read_saved_file(store, arrays_path, _REDO)
    if not data.startswith(b"PK"):  # every zip archive, and so every .npz, starts so
        raise InputError(f"{arrays_path} is not a NumPy .npz archive (its first bytes are "
                         f"{data[:8]!r}, not a zip file's). {_REDO}")
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
    except (OSError, EOFError, ValueError, KeyError, IndexError,
            zipfile.BadZipFile) as error:
        raise InputError(f"{arrays_path} is truncated or corrupt "
                         f"({type(error).__name__}: {error}). {_REDO}") from None
    sparse = "sv_data" in arrays
    needed = ("coef", "classes", *(SPARSE_ARRAYS if sparse else ("support_vectors",)))
    missing = [name for name in needed if name not in arrays]
    if missing:
        raise InputError(f"{arrays_path} lacks the array{'s' if len(missing) > 1 else ''} "
                         f"{', '.join(missing)} (a truncated or mixed copy). {_REDO}")
    if not sparse:
        return arrays, arrays["support_vectors"]
    data_, indices, indptr, shape = (arrays[name] for name in SPARSE_ARRAYS)
    try:
        support_vectors = scipy.sparse.csr_matrix((data_, indices, indptr),
                                                  shape=tuple(int(n) for n in shape))
        support_vectors.check_format(full_check=True)
    except (ValueError, TypeError, IndexError) as error:
        raise InputError(f"{arrays_path}: its sparse support vectors are damaged "
                         f"({error}). {_REDO}") from None
    return arrays, support_vectors


def _check_shapes(arrays_path: str, metadata: dict, arrays: dict, support_vectors: Rows,
                  calibration) -> None:
    """Refuse arrays whose shapes disagree with ``metadata.json`` (support vectors, features,
    inputs of a projection) or with each other (one coefficient row per support vector, one
    intercept and one calibration map per output, one scale per input column, a projection
    onto the support vectors' features)."""
    expected = (metadata["n_support"], metadata["n_features"])
    coef = arrays["coef"]

    def refuse(what: str) -> InputError:
        return InputError(f"{arrays_path}: {what} (a truncated or mixed copy). {_REDO}")

    if support_vectors.shape != expected:
        raise refuse(f"the support vectors have shape {support_vectors.shape} but "
                     f"metadata.json says {expected}")
    if coef.ndim != 2 or coef.shape[0] != expected[0]:
        raise refuse(f"coef has shape {coef.shape}, not one row per each of the "
                     f"{expected[0]} support vectors")
    outputs = coef.shape[1]
    intercept = arrays.get("intercept")
    if intercept is not None and intercept.shape != (outputs,):
        raise refuse(f"intercept has shape {intercept.shape}, not one per each of the "
                     f"{outputs} outputs")
    components, center = arrays.get("projection_components"), arrays.get("projection_center")
    inputs = expected[1]
    if components is not None:
        if components.ndim != 2 or components.shape[1] != expected[1] or center is None or \
                center.shape != components.shape[:1]:
            raise refuse(f"a projection of shape {components.shape} (centre "
                         f"{None if center is None else center.shape}) does not map onto "
                         f"support vectors of {expected[1]} features")
        inputs = components.shape[0]
        if metadata.get("n_features_in", inputs) != inputs:
            raise refuse(f"the projection takes {inputs} features but metadata.json says "
                         f"n_features_in {metadata['n_features_in']}")
    scale, offset = arrays.get("feature_scale"), arrays.get("feature_offset")
    columns = arrays.get("feature_columns")
    scaled = (columns.shape if columns is not None else (inputs,))
    if scale is not None and scale.shape != scaled:
        raise refuse(f"feature_scale has shape {scale.shape}, not {scaled}")
    if offset is not None and offset.shape != (inputs,):
        raise refuse(f"feature_offset has shape {offset.shape}, not ({inputs},)")
    maps = None if calibration is None else calibration.outputs
    if maps is not None and maps != outputs:
        raise InputError(f"{join(split(arrays_path)[0], 'metadata.json')}: its calibration "
                         f"maps {maps} outputs but coef in arrays.npz has {outputs} (a "
                         f"truncated or mixed copy). {_REDO}")
