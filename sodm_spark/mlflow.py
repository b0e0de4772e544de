"""The MLflow flavor of the package's kernel models (docs/design.md §7): ``save_model``,
``log_model`` and ``load_model`` as MLflow's own flavors have them, and a ``python_function``
flavor, so ``mlflow.pyfunc.load_model(uri).predict(rows)`` scores a model wherever MLflow serves
one (pip install "sodm-spark[mlflow]").

Named ``sodm_spark.mlflow`` as MLflow names its flavors (``mlflow.sklearn``): an MLmodel file
names this module as the loader of its ``python_function`` flavor. It sits beside the folders,
over ``models/`` and ``core/`` only (docs/design.md §5): the job (``jobs/train_mlflow.py``) and a
user's code import it; no folder of the package does. ``import mlflow`` here is MLflow itself
(absolute imports; tests/test_mlflow.py checks it).

An MLflow model directory made here holds ``MLmodel``, the environment files and ``model/``: the
model as :meth:`KernelExpansion.save` writes it (``arrays.npz`` + ``metadata.json``, never
pickles), the same folder a job's ``--model-out`` gets. Any model holding a
:class:`KernelExpansion` is accepted: ``ODMClassifier`` (its ``model_``), pyspark.ml's
``SODMClassificationModel`` (its ``expansion``), the comparators.

The ``python_function`` flavor's ``predict`` takes a pandas DataFrame, a numpy array or a scipy
CSR matrix, and returns a pandas DataFrame: ``prediction`` (the labels, or f for a regression
model) and, for a calibrated model, one ``probability_<class>`` column per class in the order of
``classes`` (the values of :meth:`KernelExpansion.predict_proba`). Both come from one pass of
the decision function.

Feature names (:mod:`sodm_spark.core.feature_names`), so that columns in another order never
give a silently wrong answer. A model trained on named columns (``KernelExpansion.feature_names``)
is saved with an input schema of those columns by name (:func:`default_signature`), which
MLflow enforces before ``predict`` runs: it reorders the columns to the model's order, leaves
out the others with one logged warning naming them, and refuses a missing column with an
``MlflowException`` that ends in "Model is missing inputs ['x3']" (MLflow's own text, which
also shows the rows and the schema). Its types are those MLflow then casts safely: a column
trained as floats (float64 or float32) is declared ``double``, so float32, float64 and
integer rows of up to 32 bits pass; int64 rows are refused by MLflow ("Can not safely convert
int64 to float64") unless every value is 0 or 1, as 64-bit integers may not fit a float64
(cast them, ``rows.astype("float64")``); an integer column is declared ``long`` and a boolean
one ``boolean``. The schema asks for a DataFrame: arrays and CSR rows of a named model are
refused by MLflow (they have no names); score those with :func:`load_model`'s model, or save
with ``signature=default_signature(model, inputs=False)``. ``predict`` itself takes the
model's columns by name too, as the other doors do, whatever the signature: any order, the
others left out with one ``UserWarning`` line, a missing one refused in one line naming it.

A model without names (saved before names were kept, or trained on rows without them) has no
input schema, as before: a DataFrame's columns, an array or CSR rows are taken by position,
only their count checked, and float32 and integer rows pass.
"""
from __future__ import annotations

import importlib.metadata
import os
import sys
from dataclasses import dataclass
from typing import Any

import mlflow
import numpy as np
import pandas as pd
import yaml
from mlflow import pyfunc
from mlflow.exceptions import MlflowException
from mlflow.models import Model, ModelSignature
from mlflow.models.model import MLMODEL_FILE_NAME
from mlflow.models.utils import _save_example
from mlflow.types.schema import ColSpec, Schema
# MLflow's own flavors write their environment files with these helpers; the extra pins MLflow
# below 4, where they stand as they are (pyproject.toml)
from mlflow.utils.environment import (_CONDA_ENV_FILE_NAME, _CONSTRAINTS_FILE_NAME,
                                      _PYTHON_ENV_FILE_NAME, _REQUIREMENTS_FILE_NAME,
                                      _mlflow_conda_env, _process_conda_env,
                                      _process_pip_requirements, _PythonEnv,
                                      _validate_env_arguments)

from sodm_spark.core.errors import InputError
from sodm_spark.core.categories import encoded_frame
from sodm_spark.core.feature_names import frame_in_order
from sodm_spark.core.labels import labels_from_scores
from sodm_spark.models.expansion import FORMAT_NAME, KernelExpansion

FLAVOR_NAME = "sodm_spark"
#: The model's folder inside an MLflow model directory (KernelExpansion.save's format)
MODEL_DATA = "model"
PREDICTION = "prediction"
PROBABILITY_PREFIX = "probability_"
PACKAGE = "sodm-spark"
#: What the pyfunc's messages call the rows it is given.
INPUT = "the input"
#: MLflow's column type of a feature column trained as each type (Spark SQL's names, NumPy's,
#: lower case): the type whose rows MLflow casts safely to it. Floats of any width are declared
#: double, the type the model computes in, so that float32 rows and float64 rows both pass
#: (MLflow would refuse float64 rows for a ``float`` column); integers of any width long, which
#: takes int8 to int64 rows (``integer`` would refuse pandas' int64). Anything else: double.
MLFLOW_TYPES = {
    **dict.fromkeys(("float64", "double", "float32", "float", "float16", "real"), "double"),
    **dict.fromkeys(("int64", "long", "bigint", "int32", "int", "integer", "int16",
                     "smallint", "short", "int8", "tinyint", "byte", "uint8", "uint16",
                     "uint32", "uint64"), "long"),
    **dict.fromkeys(("bool", "boolean"), "boolean"),
}


def expansion_of(model) -> KernelExpansion:
    """The :class:`KernelExpansion` of ``model``: itself, an ``ODMClassifier``'s (or a
    comparator's) ``model_``, a pyspark.ml ``SODMClassificationModel``'s ``expansion``."""
    if isinstance(model, KernelExpansion):
        return model
    for attribute in ("expansion", "model_"):
        found = getattr(model, attribute, None)  # an unfitted estimator has no model_
        if isinstance(found, KernelExpansion):
            return found
    raise TypeError(f"{type(model).__name__} holds no fitted KernelExpansion: pass a "
                    "KernelExpansion, a fitted ODMClassifier (or comparator) or an "
                    "SODMClassificationModel.")


def _package_version() -> str | None:
    try:
        return importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:  # run from a source tree, not installed
        return None


def get_default_pip_requirements() -> list[str]:
    """What a served model needs: this package (its own dependencies come with it), pinned to
    the version that saved it when it is installed."""
    version = _package_version()
    return [PACKAGE if version is None else f"{PACKAGE}=={version}"]


def get_default_conda_env() -> dict:
    return _mlflow_conda_env(additional_pip_deps=get_default_pip_requirements())


def class_name(value) -> str:
    """A class label as a column name: ``1.0`` as ``1`` (LIBSVM labels are read as floats)."""
    value = value.item() if isinstance(value, np.generic) else value
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def probability_columns(expansion: KernelExpansion) -> list[str]:
    """The names of a calibrated model's probability columns, in the order of its classes."""
    return [PROBABILITY_PREFIX + class_name(c) for c in np.asarray(expansion.classes)]


def mlflow_type(kind: str | None) -> str:
    """MLflow's column type for a feature column trained as ``kind`` (:data:`MLFLOW_TYPES`)."""
    return MLFLOW_TYPES.get(str(kind).lower(), "double")


def input_schema(expansion: KernelExpansion) -> Schema | None:
    """The model's feature columns by name and type (:func:`mlflow_type`), in its order; None
    for a model without names (rows taken by position)."""
    names = expansion.feature_names
    if names is None:
        return None
    types = expansion.feature_types or (None,) * len(names)
    if expansion.categories is not None:  # the input columns: numeric ones, then the strings
        numeric = expansion.categories.numeric
        specs: list = [ColSpec(mlflow_type(kind), name)
                       for name, kind in zip(numeric, types[:len(numeric)])]
        specs += [ColSpec("string", column.name) for column in expansion.categories.columns]
        return Schema(specs)
    return Schema([ColSpec(mlflow_type(kind), name) for name, kind in zip(names, types)])


def default_signature(expansion: KernelExpansion, inputs: bool = True) -> ModelSignature:
    """The prediction (and probability) columns out; in, the model's named feature columns
    (:func:`input_schema`; the module docstring says what MLflow then does). No input schema
    for a model without names, or with ``inputs=False``: MLflow would refuse a tensor's other
    dtypes (the job's float32 rows, integer counts) and CSR rows by name, where
    :class:`ServedModel` reads any numeric rows (a DataFrame's columns by name) and checks
    their width itself."""
    classes = np.asarray(expansion.classes)
    kind = "double" if expansion.is_regression else {
        "i": "long", "u": "long", "f": "double", "b": "boolean"}.get(classes.dtype.kind, "string")
    probabilities = [] if expansion.calibration is None else probability_columns(expansion)
    return ModelSignature(inputs=input_schema(expansion) if inputs else None,
                          outputs=Schema([ColSpec(kind, PREDICTION),
                                          *(ColSpec("double", name) for name in probabilities)]))


def save_model(model, path, mlflow_model=None, signature=None, input_example=None,
               pip_requirements=None, extra_pip_requirements=None, conda_env=None,
               metadata=None):
    """Save ``model`` as an MLflow model directory at the local ``path`` (which must not hold
    anything yet): ``model/`` in the package's own format, ``MLmodel`` with this flavor and
    ``python_function``, and the environment files. ``signature``: by default the model's
    (:func:`default_signature`); ``input_example``: a few rows, saved beside it."""
    expansion = expansion_of(model)
    _validate_env_arguments(conda_env, pip_requirements, extra_pip_requirements)
    path = os.path.abspath(path)
    if os.path.exists(path) and (not os.path.isdir(path) or os.listdir(path)):
        raise MlflowException(f"Path '{path}' already exists and is not empty: an MLflow "
                              "model is saved into a new directory.")
    os.makedirs(path, exist_ok=True)
    expansion.save(os.path.join(path, MODEL_DATA))
    mlflow_model = Model() if mlflow_model is None else mlflow_model
    mlflow_model.signature = default_signature(expansion) if signature is None else signature
    if input_example is not None:
        _save_example(mlflow_model, input_example, path)
    if metadata is not None:
        mlflow_model.metadata = metadata
    pyfunc.add_to_model(mlflow_model, loader_module=__name__, data=MODEL_DATA,
                        conda_env=_CONDA_ENV_FILE_NAME, python_env=_PYTHON_ENV_FILE_NAME)
    mlflow_model.add_flavor(FLAVOR_NAME, data=MODEL_DATA, format=FORMAT_NAME,
                            sodm_spark_version=_package_version(),
                            classes=[class_name(c) for c in np.asarray(expansion.classes)],
                            calibrated=expansion.calibration is not None)
    mlflow_model.save(os.path.join(path, MLMODEL_FILE_NAME))
    _write_environment(path, pip_requirements, extra_pip_requirements, conda_env)


def _write_environment(path, pip_requirements, extra_pip_requirements, conda_env):
    """conda.yaml, python_env.yaml, requirements.txt (and constraints.txt) as MLflow's flavors
    write them; no inference of requirements, which would load the model in a subprocess."""
    if conda_env is None:
        default = get_default_pip_requirements() if pip_requirements is None else None
        conda_env, pip_requirements, constraints = _process_pip_requirements(
            default, pip_requirements, extra_pip_requirements)
    else:
        conda_env, pip_requirements, constraints = _process_conda_env(conda_env)
    with open(os.path.join(path, _CONDA_ENV_FILE_NAME), "w") as handle:
        yaml.safe_dump(conda_env, stream=handle, default_flow_style=False)
    if constraints:
        with open(os.path.join(path, _CONSTRAINTS_FILE_NAME), "w") as handle:
            handle.write("\n".join(constraints))
    with open(os.path.join(path, _REQUIREMENTS_FILE_NAME), "w") as handle:
        handle.write("\n".join(pip_requirements))
    _PythonEnv.current().to_yaml(os.path.join(path, _PYTHON_ENV_FILE_NAME))


@dataclass(frozen=True)
class LoggedModelExtras:
    """What :func:`log_model` passes on to MLflow's ``Model.log`` beside the model, as MLflow's
    own flavors' ``log_model`` take these keywords: the LoggedModel's ``metadata`` (written to
    its MLmodel), ``params``, ``tags``, the metrics ``step`` it links and an existing
    ``model_id`` to log into; ``run_id`` (default: the active run), ``model_type``, and the
    seconds to ``await_registration_for`` a registered version (MLflow's default, 300)."""

    metadata: dict[str, Any] | None = None
    params: dict[str, Any] | None = None
    tags: dict[str, Any] | None = None
    step: int = 0
    model_id: str | None = None
    run_id: str | None = None
    model_type: str | None = None
    await_registration_for: int = 300


def log_model(model, name=None, artifact_path=None, signature=None, input_example=None,
              registered_model_name=None, pip_requirements=None, extra_pip_requirements=None,
              conda_env=None, extras: LoggedModelExtras | None = None):
    """Log ``model`` as an MLflow model of the active run (MLflow 3: a LoggedModel ``name``;
    ``artifact_path`` is MLflow's older word for it), registered under
    ``registered_model_name`` if given. The rarer keywords of MLflow's flavors (metadata,
    params, tags, step, model id, run id, ...) come in one :class:`LoggedModelExtras`.
    Returns MLflow's ``ModelInfo`` (its ``model_uri`` loads it again)."""
    extras = LoggedModelExtras() if extras is None else extras
    return Model.log(artifact_path=artifact_path, name=name, flavor=sys.modules[__name__],
                     model=expansion_of(model), registered_model_name=registered_model_name,
                     signature=signature, input_example=input_example,
                     pip_requirements=pip_requirements,
                     extra_pip_requirements=extra_pip_requirements, conda_env=conda_env,
                     metadata=extras.metadata, params=extras.params, tags=extras.tags,
                     step=extras.step, model_id=extras.model_id, run_id=extras.run_id,
                     model_type=extras.model_type,
                     await_registration_for=extras.await_registration_for)


def _local_model_path(model_uri, dst_path=None) -> str:
    """A local directory holding the MLflow model ``model_uri`` names (a local path as it is)."""
    if os.path.isdir(model_uri):
        return model_uri
    return mlflow.artifacts.download_artifacts(artifact_uri=str(model_uri), dst_path=dst_path)


def load_model(model_uri, dst_path=None) -> KernelExpansion:
    """The :class:`KernelExpansion` of an MLflow model saved or logged here: a local path,
    ``runs:/<run id>/model``, ``models:/<name>/<version>``, ``models:/<model id>``, any artifact
    URI. ``dst_path``: where a remote model is downloaded to (default: a temporary folder)."""
    local = _local_model_path(str(model_uri), dst_path)
    flavors = Model.load(os.path.join(local, MLMODEL_FILE_NAME)).flavors
    if FLAVOR_NAME not in flavors:
        raise MlflowException(f"{model_uri} is not a {FLAVOR_NAME} model: its MLmodel has the "
                              f"flavors {sorted(flavors)}. Load it with one of those.")
    return KernelExpansion.load(os.path.join(local, flavors[FLAVOR_NAME].get("data",
                                                                             MODEL_DATA)))


class ServedModel:
    """What ``mlflow.pyfunc.load_model`` wraps: ``predict`` as the module docstring says."""

    def __init__(self, expansion: KernelExpansion):
        self.expansion = expansion

    def get_raw_model(self) -> KernelExpansion:
        """``PyFuncModel.get_raw_model()``: the model itself."""
        return self.expansion

    def predict(self, model_input, params=None) -> pd.DataFrame:
        expansion = self.expansion
        if isinstance(model_input, pd.DataFrame):
            rows = _frame_rows(expansion, model_input)
        elif isinstance(model_input, dict) and len(model_input) == 1:  # a named tensor
            rows = next(iter(model_input.values()))
        else:
            rows = model_input
        shape = np.shape(rows)  # a CSR matrix's too
        if len(shape) != 2 or shape[1] != expansion.n_features_in:
            raise InputError(f"the model scores rows of {expansion.n_features_in} features; "
                             f"got input of shape {shape}. Pass the training data's feature "
                             "columns, in their order.")
        scores = expansion.decision_function(rows)
        labels = scores if expansion.is_regression else \
            labels_from_scores(scores, expansion.classes)
        columns = {PREDICTION: labels}
        if expansion.calibration is not None:
            probabilities = expansion.calibration.probabilities(scores)
            columns.update(zip(probability_columns(expansion), probabilities.T))
        index = model_input.index if isinstance(model_input, pd.DataFrame) else None
        return pd.DataFrame(columns, index=index)


def _frame_rows(expansion: KernelExpansion, frame: pd.DataFrame) -> np.ndarray:
    """A DataFrame's feature values, float64, in the model's order: by name when the model and
    the frame both have names (:func:`~sodm_spark.core.feature_names.frame_in_order`: the
    others left out with one ``UserWarning`` line, a missing one refused naming it), else its
    columns by position."""
    if expansion.categories is not None:  # string columns encoded as in training
        return np.asarray(encoded_frame(frame, expansion.categories, INPUT, stacklevel=4),
                          dtype=np.float64)
    return np.asarray(frame_in_order(frame, expansion.feature_names, INPUT, stacklevel=4),
                      dtype=np.float64)


def _load_pyfunc(data_path, model_config=None) -> ServedModel:
    """The ``python_function`` flavor's loader: ``data_path`` is the model's ``model/``."""
    return ServedModel(KernelExpansion.load(data_path))
