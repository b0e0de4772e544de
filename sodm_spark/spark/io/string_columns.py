"""String columns of a Parquet table encoded as features by the tasks that read it
(:mod:`.parquet_files`), with the encoding a model keeps (:mod:`sodm_spark.core.categories`).

Training rows: one job first counts each string column's levels by fold and label (the tasks
read only the label and those columns, each row's fold drawn from its row id and the seed:
:func:`~sodm_spark.core.categories.training_folds`); the driver adds the counts and decides
each column's encoding; the reading tasks then encode every row, target-encoded columns out of
fold. Rows scored beside a model (``--test-data``): the model's encoding, applied whole.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...core.categories import (CategoryEncoding, LevelCounts, column_from_counts,
                                level_counts, training_features, training_folds)
from ...core.errors import InputError, reported_to_driver

#: Most distinct label values a table with string columns may have (the target encoding
#: counts each level's rows of each label: a regression target is not a label).
MAX_LABELS = 1000


def is_string_type(arrow_type) -> bool:
    """Whether a Parquet column of ``arrow_type`` holds text: strings, or a dictionary of
    them (pandas' categoricals, Spark's dictionary pages)."""
    import pyarrow.types as pt

    if pt.is_dictionary(arrow_type):
        arrow_type = arrow_type.value_type
    return pt.is_string(arrow_type) or pt.is_large_string(arrow_type)


@dataclass(frozen=True)
class StringEncoding:
    """How a read encodes string columns: by a model's ``encoding`` (rows scored beside it),
    else by one fitted on the rows, their target-encoding folds drawn with ``seed``."""

    encoding: CategoryEncoding | None = None
    seed: int = 0


@dataclass(frozen=True)
class TableCategories:
    """How the tasks encode a table's string columns: the ``encoding`` (its numeric columns,
    then each string column), and for training rows the ``counts`` each column's encoding was
    made from (None: rows scored beside a model, encoded by the whole tables), the label
    values ``classes`` and the ``seed`` of the rows' folds."""

    encoding: CategoryEncoding
    counts: dict | None = None
    classes: tuple = ()
    seed: int = 0

    def features(self, table, first_id: int) -> np.ndarray:
        """The (n, encoded features) of the string columns of ``table``, whose first row has
        the row id ``first_id``."""
        parts = []
        counts = self.counts
        folds = None if counts is None else \
            training_folds(np.arange(first_id, first_id + table.num_rows), self.seed)
        for column in self.encoding.columns:
            values = text_values(table.column(column.name))
            if counts is None:
                parts.append(column.encode(column.codes(values)))
            else:
                parts.append(training_features(column, counts[column.name], values, folds,
                                               self.classes))
        return np.hstack(parts) if parts else np.zeros((table.num_rows, 0))


def text_values(column) -> np.ndarray:
    """An Arrow string (or dictionary) column's values as NumPy objects, nulls None."""
    import pyarrow.types as pt

    column = column.combine_chunks() if hasattr(column, "combine_chunks") else column
    if pt.is_dictionary(column.type):
        column = column.dictionary_decode()
    return column.to_numpy(zero_copy_only=False)


def _task_counts(plan, label: str, names, seed: int, split_tables):
    """One task's {column: LevelCounts} of the rows of its ``plan``."""
    found: dict[str, LevelCounts] = {}
    first_id = plan.first_id
    for split in plan.splits:
        for table, _ in split_tables(split, (label, *names)):
            ids = np.arange(first_id, first_id + table.num_rows)
            first_id += table.num_rows
            folds = training_folds(ids, seed)
            y = np.asarray(table.column(label).to_numpy(zero_copy_only=False), dtype=np.float64)
            for name in names:
                counts = level_counts(text_values(table.column(name)), y, folds)
                found[name] = counts if name not in found else found[name].merged(counts)
    return found


def fit_table_categories(sc, plans, label: str, numeric, names, seed: int, split_tables,
                         where: str) -> TableCategories:
    """The encoding of the training table's string columns ``names`` (after its
    ``numeric`` columns), from one job that counts their levels (the module)."""
    count = reported_to_driver(lambda plan: _task_counts(plan, label, names, seed,
                                                         split_tables))
    merged: dict[str, LevelCounts] = {}
    for part in sc.parallelize(plans, max(1, len(plans))).map(count).collect():
        for name, counts in part.items():
            merged[name] = counts if name not in merged else merged[name].merged(counts)
    labels = sorted({value for counts in merged.values() for value in counts.labels})
    if len(labels) > MAX_LABELS:
        raise InputError(f"{where}: the label column holds more than {MAX_LABELS:,} values; "
                         "string columns are encoded by the labels of a classifier's classes. "
                         "Check that the label column is the right one.")
    classes = tuple(labels)
    columns = tuple(column_from_counts(name, merged[name], classes) for name in names
                    if name in merged)
    return TableCategories(CategoryEncoding(tuple(numeric), columns), merged, classes, seed)
