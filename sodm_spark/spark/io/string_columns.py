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
    # False: rows scored beside a model trained on numbers, whose text columns are refused
    fit: bool = True

    def refuse_unfitted(self, names, where: str) -> None:
        """Refuse the string columns ``names`` of rows scored beside a model that has no
        encoding of them (its columns were numbers): an encoding fitted on these rows would
        not be the model's."""
        if self.encoding is None and not self.fit and names:
            raise InputError(f"{where}: the column(s) {list(names)[:10]} hold text, but the "
                             "model was trained on numbers there; give those columns as "
                             "numbers, as in the training rows.")


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


def encoded_features(encoding: CategoryEncoding, names, types) -> tuple[list, list | None]:
    """(the model's feature names, their types) of a table read with ``encoding``: its
    numeric columns with the types they were read as (``names``, ``types``: the table's
    feature columns), then the encoded features, doubles."""
    read = dict(zip(names or (), types or ()))
    features = list(encoding.feature_names)
    if not read:
        return features, None
    numeric = set(encoding.numeric)
    return features, [read[name] if name in numeric else "double" for name in features]


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
    parts = sc.parallelize(plans, max(1, len(plans))).map(count).collect()
    return _fitted(parts, numeric, names, seed, where)


def _fitted(parts, numeric, names, seed: int, where: str) -> TableCategories:
    """The encoding of the string columns ``names`` from the tasks' counts (``parts``: one
    {column: LevelCounts} a task), added up."""
    merged: dict[str, LevelCounts] = {}
    for part in parts:
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


def encoded_columns(encoding: CategoryEncoding, columns, where: str) -> tuple[list, list]:
    """(Spark Columns of the model's features from a DataFrame's input columns, the columns
    left out): the numeric ones as doubles, each one-hot feature a comparison with its
    level, each target feature a lookup in a map of the levels' float64 values (a value not
    seen in training: the prior), a missing string as the level ``None``, as
    :meth:`EncodedColumn.codes <sodm_spark.core.categories.EncodedColumn.codes>` reads it."""
    from itertools import chain

    from pyspark.sql import functions as F

    from ...core.categories import ONE_HOT
    from ...core.feature_names import columns_by_name

    _, extra = columns_by_name(list(encoding.input_columns), list(columns), where)
    features = [F.col(name).cast("double") for name in encoding.numeric]
    for column in encoding.columns:
        text = F.coalesce(F.col(column.name).cast("string"), F.lit("None"))
        if column.kind == ONE_HOT:
            features += [F.when(text == F.lit(level), F.lit(1.0)).otherwise(F.lit(0.0))
                         for level in column.levels]
            continue
        assert column.table is not None and column.prior is not None  # a target column
        for k in range(len(column.outputs)):
            lookup = F.create_map(*chain.from_iterable(
                (F.lit(level), F.lit(float(value)))
                for level, value in zip(column.levels, column.table[:, k])))
            features.append(F.coalesce(F.try_element_at(lookup, text),
                                       F.lit(float(column.prior[k]))))
    return features, extra


def _frame_counts(names, seed: int, numbered_batches):
    """The ``mapInArrow`` function of :func:`frame_categories`: each task's counts, pickled."""
    def count(batches):
        import pickle

        import pyarrow as pa

        found: dict[str, LevelCounts] = {}
        for batch, first_id, _ in numbered_batches(batches):
            folds = training_folds(np.arange(first_id, first_id + batch.num_rows), seed)
            y = np.asarray(batch.column(0).to_numpy(zero_copy_only=False), dtype=np.float64)
            for name in names:
                counts = level_counts(text_values(batch.column(name)), y, folds)
                found[name] = counts if name not in found else found[name].merged(counts)
        yield pa.RecordBatch.from_arrays([pa.array([pickle.dumps(found)], type=pa.binary())],
                                         names=["payload"])
    return count


def frame_categories(prepared, numeric, names, strings: StringEncoding, where: str,
                     numbered_batches) -> TableCategories:
    """How the tasks of :func:`~.arrow.dataframe_to_blocks` encode the string columns
    ``names`` of ``prepared`` (its column 0 the label; ``numeric`` the numeric feature
    columns' names): by ``strings.encoding``, else by an encoding fitted on the rows in one
    job that counts their levels, each row's fold drawn from the row id its payload will have
    (the same partitions, numbered by the payloads' own ``numbered_batches``)."""
    import pickle

    if strings.encoding is not None:
        expected = (tuple(strings.encoding.numeric),
                    tuple(column.name for column in strings.encoding.columns))
        if expected != (tuple(numeric), tuple(names)):
            raise InputError(f"{where}: the model's input columns are {list(expected[0])} "
                             f"and the string columns {list(expected[1])}; these rows have "
                             f"{list(numeric)} and {list(names)}.")
        return TableCategories(strings.encoding)
    strings.refuse_unfitted(names, where)
    rows = prepared.select(prepared.columns[0], *names).mapInArrow(
        _frame_counts(tuple(names), strings.seed, numbered_batches),
        "payload binary").collect()
    return _fitted([pickle.loads(row[0]) for row in rows], numeric, names, strings.seed, where)
