"""The feature rows of a scoring task's Arrow batches (:mod:`.predict`), every row checked.

A row is refused, with a message that names it, when its length is not the model's (an array
column, or an ML vector; LIBSVM vectors of any length have the values beyond the model's
features left out and counted, see :class:`BatchLayout`) or a value is missing, NaN or
infinite. A row is named by its key, or by its input partition and row taken from its row id.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..core.errors import InputError
from ..core.sparse_rows import dense_if_full
from .io import ROW_ID_SHIFT, batch_matrix
from .io.arrow import vector_rows


class BatchLayout(NamedTuple):
    """What a scoring task finds in its Arrow batches: the features' ``kind`` (``"vector"``,
    ``"array"`` or ``"columns"``), the model's ``n_features``, the ``key_col`` that names a
    refused row (None: its row id), and ``any_vector_size``: rows read from LIBSVM text, whose
    vectors are as long as the file's largest index (values beyond the model's features are
    left out, shorter vectors padded; otherwise a vector of another length is refused)."""

    kind: str
    n_features: int
    key_col: str | None
    any_vector_size: bool = False
    # a model's encoding of string columns (core/categories.py): the batch's numeric columns
    # come first, then its string columns, encoded here
    categories: object = None


def _which_row(keys, index, key_col):
    """A row named for an error: its key, or its input partition and row from its row id."""
    key = keys[index].as_py()
    if key_col:
        return f"the row with {key_col} {key!r}"
    return f"row {key & ((1 << ROW_ID_SHIFT) - 1)} of partition {key >> ROW_ID_SHIFT}"


def _encoded(batch, encoding, values_unseen):
    """The model's features of a batch of its input columns (key, numeric, strings), the
    values not seen in training added to the accumulator ``values_unseen``."""
    from .io.string_columns import text_values

    numeric = len(encoding.numeric)
    X = batch_matrix(batch, "columns", 1, numeric) if numeric else \
        np.zeros((batch.num_rows, 0))
    strings = {column.name: text_values(batch.column(1 + numeric + k))
               for k, column in enumerate(encoding.columns)}
    encoded = encoding.encode(X, strings)
    if values_unseen is not None and sum(encoded.unseen.values()):
        values_unseen.add(sum(encoded.unseen.values()))
    return encoded.X


def checked_rows(batch, layout: BatchLayout, values_ignored=None, values_unseen=None):
    """The feature rows of a non-empty Arrow batch whose column 0 is the key (dense, or CSR:
    dense again when full), every row checked; values left out beyond the model's features
    are added to the accumulator ``values_ignored``, values of string columns not seen in
    training to ``values_unseen`` (None: not counted)."""
    keys, n, n_features = batch.column(0), batch.num_rows, layout.n_features
    if layout.kind == "array":
        column = batch.column(1)
        lengths = np.diff(np.asarray(column.offsets))
        if column.null_count or np.any(lengths != n_features):
            bad = int(np.flatnonzero((lengths != n_features) |
                                     np.asarray(column.is_null()))[0])
            raise InputError(f"{_which_row(keys, bad, layout.key_col)} has {lengths[bad]} "
                             f"features (or none); the model was trained on {n_features}.")
    if layout.kind == "vector":  # CSR rows, whatever the width
        X, sizes, beyond = vector_rows(batch.column(1), n_features)
        if beyond and values_ignored is not None:
            values_ignored.add(beyond)
        wrong = sizes < 0 if layout.any_vector_size else sizes != n_features
        if np.any(wrong):
            bad = int(np.flatnonzero(wrong)[0])
            raise InputError(f"{_which_row(keys, bad, layout.key_col)} has "
                             f"{'no features' if sizes[bad] < 0 else sizes[bad]} "
                             f"features; the model was trained on {n_features}.")
        rows = np.repeat(np.arange(n), np.diff(X.indptr))
        finite = np.ones(n, dtype=bool)
        finite[rows[~np.isfinite(X.data)]] = False
        X = dense_if_full(X)  # dense vectors: one GEMM a block
    elif layout.categories is not None:
        X = _encoded(batch, layout.categories, values_unseen)
        finite = np.isfinite(X).all(axis=1)
    else:
        X = batch_matrix(batch, layout.kind, 1, n_features)
        finite = np.isfinite(X).all(axis=1)
    if not finite.all():
        bad = int(np.flatnonzero(~finite)[0])
        raise InputError(f"{_which_row(keys, bad, layout.key_col)} has a missing, NaN or "
                         "infinite feature; fill or drop such rows before scoring.")
    return X


def input_columns(df, columns, encoding):
    """(Columns, "columns", left out) of a model that encodes string columns: its numeric
    input columns as doubles, then its string ones as text, taken by name."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import NumericType

    from ..core.feature_names import columns_by_name

    wanted = list(encoding.input_columns)
    _, extra = columns_by_name(wanted, columns, "the data")  # a missing one refused
    fields = {field.name: field.dataType for field in df.schema.fields}
    numeric = set(encoding.numeric)
    bad = [c for c in wanted if c in numeric and not isinstance(fields[c], NumericType)]
    if bad:
        raise InputError(f"column(s) {bad[:10]} are not numeric, as the model's training "
                         "columns were.")
    return ([F.col(c).cast("double").alias(f"f{j}") if c in numeric else
             F.col(c).cast("string").alias(f"s{j}") for j, c in enumerate(wanted)],
            "columns", extra)
