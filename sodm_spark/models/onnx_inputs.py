"""The inputs of a model's ONNX graph (:mod:`.onnx_export`): ``features``, the raw rows, its
columns named in the input's ``doc_string``; and the string columns of a model with a
categorical encoding (:mod:`sodm_spark.core.categories`).

Each string column is an input of its own, ``(batch,)`` strings named as the column; the
numeric columns stay the ``features`` input, ``(batch, numeric columns)``. An ONNX-ML
``LabelEncoder`` maps each string to its level's number (the number of levels for a value not
seen in training), and a ``Gather`` from a float64 table gives the column's features: the
identity's rows and a row of zeros for one-hot, the target table and the prior for target
encoding. The graph's features are so the model's own, in float64, and a new value scores as
:meth:`EncodedColumn.encode <sodm_spark.core.categories.EncodedColumn.encode>` scores it.
"""
from __future__ import annotations

import json

import numpy as np

from ..core.categories import ONE_HOT, CategoryEncoding
from .expansion import KernelExpansion

ML_DOMAIN, ML_OPSET = "ai.onnx.ml", 3


def lookup_table(column) -> np.ndarray:
    """(levels + 1, features) float64: each level's features, then an unseen value's."""
    width = len(column.levels)
    if column.kind == ONE_HOT:
        return np.vstack([np.eye(width), np.zeros((1, width))])
    return np.vstack([column.table, np.asarray(column.prior)[None, :]])


def categorical_rows(graph, encoding: CategoryEncoding, numeric_rows: str | None) -> str:
    """The name of the (batch, features) float64 rows of the model's features: the numeric
    input's columns (``numeric_rows``, float64; None when there are none), then each string
    input's encoded ones."""
    parts = [] if numeric_rows is None else [numeric_rows]
    for number, column in enumerate(encoding.columns):
        codes = graph.op("LabelEncoder", column.name, domain=ML_DOMAIN,
                         keys_strings=list(column.levels),
                         values_int64s=list(range(len(column.levels))),
                         default_int64=len(column.levels))
        table = graph.constant(f"category_table_{number}", lookup_table(column))
        parts.append(graph.op("Gather", table, codes, axis=0))
    return parts[0] if len(parts) == 1 else graph.op("Concat", *parts, axis=1)


def string_inputs(onnx, encoding: CategoryEncoding) -> list:
    """The graph's string inputs, one a column, ``(batch,)``."""
    return [onnx.helper.make_tensor_value_info(
        column.name, onnx.TensorProto.STRING, ["batch"],
        doc_string=f"the values of the string column {column.name!r}, one a row; "
        f"{len(column.levels):,} were seen in training ({column.kind})")
        for column in encoding.columns]


def _numeric_names(model: KernelExpansion):
    """The columns of the ``features`` input: the model's features, or the numeric input
    columns of a model that encodes string columns (those are inputs of their own)."""
    if model.categories is not None:
        return model.categories.numeric
    return model.feature_names


def input_doc(model: KernelExpansion) -> str:
    """The ``features`` input's ``doc_string``: the column order the input expects."""
    names = _numeric_names(model)
    count = model.n_features_in if names is None else len(names)
    width = f"{count:,} raw feature value{'s' if count != 1 else ''}"
    if names is None:
        return (f"{width} a row, by position in the training data's column order (the model "
                "has no column names).")
    return (f"{width} a row, by position, in this order of the training columns (the model's "
            "feature_names in metadata_props): " + json.dumps(list(names)))


def _input_tensor(onnx, model: KernelExpansion, input_type: str):
    """The graph's one input, ``features`` (batch, n_features_in), its columns named in its
    ``doc_string``."""
    element = onnx.TensorProto.DOUBLE if input_type == "double" else onnx.TensorProto.FLOAT
    names = _numeric_names(model)
    return onnx.helper.make_tensor_value_info(
        "features", element, ["batch", model.n_features_in if names is None else len(names)],
        doc_string=input_doc(model))


def graph_inputs(onnx, graph, model: KernelExpansion, input_type: str, opset: int):
    """(the float64 rows of the model's features, the graph's inputs, its operator sets):
    ``features`` (cast from float32 with ``input_type="float"``) and, for a model that encodes
    string columns, one string input a column, encoded in the graph (below)."""
    encoding = model.categories
    numeric = encoding is None or bool(encoding.numeric)  # a "features" input at all
    rows = "features"
    if input_type == "float" and numeric:
        rows = graph.op("Cast", rows, to=onnx.TensorProto.DOUBLE)
    inputs = [_input_tensor(onnx, model, input_type)] if numeric else []
    opsets = [onnx.helper.make_opsetid("", opset)]
    if encoding is not None:
        rows = categorical_rows(graph, encoding, rows if numeric else None)
        inputs += string_inputs(onnx, encoding)
        opsets.append(onnx.helper.make_opsetid(ML_DOMAIN, ML_OPSET))
    return rows, inputs, opsets
