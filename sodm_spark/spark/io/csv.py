"""CSV files checked and described (:class:`CsvTable`): which column is the label, the
weight, each numeric feature and each string feature.

A feature column most of whose first rows are not numbers is a string column, encoded inside
the model (:mod:`.string_columns`). One Spark job over the text checks every cell of the other
columns (:func:`.text_lines.check_csv_cells`): the first one that is not a finite number is
reported with its file, line, column and role (label or feature) before anything is trained.
The tasks then read the files with pyarrow (:mod:`.csv_files`), or Spark SQL reads them
(:func:`csv_frame`, then :func:`~sodm_spark.spark.io.arrow.dataframe_to_blocks`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...core.errors import InputError, SettingsError
from .blocks import DataFormatError, empty_message, spark_read
from .text_lines import check_csv_cells


def _is_number(text):
    if text is None or not str(text).strip():
        return True  # an empty cell says nothing about a header
    try:
        float(text)
    except ValueError:
        return False
    return True


def _label_position(names, label_col, header, where):
    """0-based position of the label column: ``label_col`` (a name or a position), else the
    column named ``label`` when the header has one, else the first column."""
    if label_col is None:
        return names.index("label") if header and "label" in names else 0
    if isinstance(label_col, (int, np.integer)) and not isinstance(label_col, bool):
        if not -len(names) <= label_col < len(names):
            raise InputError(f"label_col={label_col} is out of range for {where}, which has "
                             f"{len(names)} columns.")
        return int(label_col) % len(names)
    if label_col in names:
        return names.index(label_col)
    raise InputError(f"label_col={label_col!r} is not a column of {where}; its columns "
                     f"are {names[:20]}{' ...' if len(names) > 20 else ''}. Pass one of "
                     "them or a 0-based column position.")


def _weight_position(names, weight_col, label_pos, where):
    """0-based position of the weight column ``weight_col`` (a name or a position), which
    must not be the label column."""
    if isinstance(weight_col, (int, np.integer)) and not isinstance(weight_col, bool):
        if not -len(names) <= weight_col < len(names):
            raise InputError(f"weight_col={weight_col} is out of range for {where}, which has "
                             f"{len(names)} columns.")
        position = int(weight_col) % len(names)
    elif weight_col in names:
        position = names.index(weight_col)
    else:
        raise InputError(f"weight_col={weight_col!r} is not a column of {where}; its columns "
                         f"are {names[:20]}{' ...' if len(names) > 20 else ''}. Pass one of "
                         "them or a 0-based column position.")
    if position == label_pos:
        raise SettingsError(f"weight_col={weight_col!r} is the label column of {where}; name "
                            "the column that holds each row's weight.")
    return position


def _raw_table(spark, path, header, sep, where):
    """(the CSV as Spark reads it, its cells as text; whether its first line is a header):
    ``header=None`` detects one (the first row not all numbers). Refused without rows or with
    a single column."""
    if header is None:
        first = spark_read(where, lambda: spark.read.csv(path, header=False, sep=sep)
                           .limit(1).collect())
        if not first:
            raise DataFormatError(empty_message(path, "csv", "has no rows"), path=path)
        header = not all(_is_number(v) for v in first[0])
    raw = spark_read(where, lambda: spark.read.csv(path, header=bool(header), sep=sep))
    names = raw.columns
    if not names:
        raise DataFormatError(empty_message(path, "csv", "has no rows"), path=path)
    if len(names) < 2:
        raise DataFormatError(f"{where} has a single column {names[0]!r}; it needs a label "
                              f"column and at least one feature column (separator {sep!r}: "
                              "pass sep=... if the file uses another one).", path=path)
    return raw, bool(header)


def csv_feature_names(spark, path, label_col, header, sep, weight_col=None):
    """The header's names of the CSV's feature columns (every column but the label and the
    weight), None without a header; no job beyond :func:`_raw_table`'s look at the first
    line."""
    where = f"{path} (format 'csv')"
    raw, header = _raw_table(spark, path, header, sep, where)
    if not header:
        return None
    names = raw.columns
    label_pos = _label_position(names, label_col, header, where)
    weight_pos = None if weight_col is None else \
        _weight_position(names, weight_col, label_pos, where)
    return [name for j, name in enumerate(names) if j not in (label_pos, weight_pos)]


#: Data rows whose cells decide which feature columns hold text (:func:`_text_positions`).
TYPE_SAMPLE_ROWS = 1000


@dataclass(frozen=True)
class CsvTable:
    """A CSV input checked and ready to read: ``raw`` (Spark's DataFrame of its cells as
    text, columns ``names``: the header's, as Spark makes them distinct, or ``_c0`` ...),
    whether its files start with a ``header``, the separator ``sep``, ``where`` it is named
    in messages, and the 0-based positions of the ``label``, the ``weight`` (None: none),
    the ``numeric`` feature columns and the ``strings`` feature columns (text, encoded in
    the model: :mod:`.string_columns`)."""

    raw: Any  # a pyspark DataFrame
    names: tuple[str, ...]
    header: bool
    sep: str
    where: str
    label: int
    weight: int | None
    numeric: tuple[int, ...]
    strings: tuple[int, ...] = ()

    @property
    def numeric_names(self) -> tuple[str, ...]:
        return tuple(self.names[j] for j in self.numeric)

    @property
    def string_names(self) -> tuple[str, ...]:
        return tuple(self.names[j] for j in self.strings)


def checked_csv_table(spark, path, statuses, columns, limit=None, features=None) -> CsvTable:
    """The CSV input ``path`` (its Hadoop file ``statuses``) as a :class:`CsvTable`, validated
    by one job over its text: every cell of the label, weight and numeric feature columns a
    finite number (at most ``limit`` in magnitude when given), every file's header the first
    one's. ``columns`` (a :class:`~.read.TableColumns`) says where the label and the weight
    are (a name or a position; see :func:`sodm_spark.spark.io.read_blocks`), whether the files
    have a header (None: detected, the first row not all numbers), the separator, and a
    model's encoding of string columns (``categories``: its numeric, then its string input
    columns are read). ``features``: the header's names of the feature columns, in the order
    wanted (None: every column but the label and the weight, in the file's order). Without
    an encoding, a feature column most of whose first :data:`TYPE_SAMPLE_ROWS` cells are not
    numbers is a string column, unless ``columns.fit_strings`` is False (rows scored beside a
    model trained on numbers: every feature column is numeric, a word in it refused by its
    line).
    """
    label_col, header, sep = columns.label_col, columns.header, columns.sep
    weight_col, categories = columns.weight_col, columns.categories
    fit_strings = columns.fit_strings
    where = f"{path} (format 'csv')"
    raw, header = _raw_table(spark, path, header, sep, where)
    names = raw.columns
    label_pos = _label_position(names, label_col, header, where)
    weight_pos = None if weight_col is None else \
        _weight_position(names, weight_col, label_pos, where)
    if categories is not None:
        numeric = _feature_positions(names, list(categories.numeric), (), header, where)
        strings = _feature_positions(names, [c.name for c in categories.columns], (), header,
                                     where)
    else:
        positions = _feature_positions(names, features, (label_pos, weight_pos), header, where)
        strings = _text_positions(raw, positions, where) if fit_strings else []
        numeric = [j for j in positions if j not in strings]
        if strings and not header:
            raise DataFormatError(
                f"{where} has no header, and its column(s) "
                f"{[j + 1 for j in strings][:10]} (1-based) hold text: string columns are "
                "kept in the model by their names. Give the files a header line, or encode "
                "those columns as numbers.", path=str(path))
    # every checked cell a finite number, named by file and line (.text_lines)
    checked = numeric + ([] if weight_pos is None else [weight_pos])  # not the extra ones
    if check_csv_cells(spark, path, statuses, names, dict.fromkeys(checked, "feature")
                       | {label_pos: "label"}, sep, bool(header), limit) == 0:
        raise DataFormatError(empty_message(path, "csv", "has no data rows"), path=path)
    return CsvTable(raw, tuple(names), bool(header), sep, where, label_pos, weight_pos,
                    tuple(numeric), tuple(strings))


def _text_positions(raw, positions, where) -> list[int]:
    """Those of the feature ``positions`` whose cells among the first
    :data:`TYPE_SAMPLE_ROWS` data rows are mostly (more than half of the non-empty ones) not
    numbers: string columns. A numeric column with a few stray words stays numeric, so the
    check names the line of each (a typo is not silently a category)."""
    rows = spark_read(where, lambda: raw.limit(TYPE_SAMPLE_ROWS).collect())
    text = []
    for j in positions:
        cells = [row[j] for row in rows if row[j] is not None and str(row[j]).strip()]
        words = sum(not _is_number(cell) for cell in cells)
        if cells and 2 * words > len(cells):
            text.append(j)
    return text


def csv_frame(table: CsvTable):
    """(Spark SQL's DataFrame of ``table``: ``label`` (+ ``weight``), the numeric features
    as doubles ``f0`` ..., the string columns as text ``s0`` ...; the numeric columns'
    names in it, the string columns' names in it)."""
    from pyspark.sql import functions as F

    positional = [f"_c{i}" for i in range(len(table.names))]
    df = table.raw.toDF(*positional)
    weight = [] if table.weight is None else \
        [F.col(positional[table.weight]).try_cast("double").alias("weight")]
    numeric = [f"f{k}" for k in range(len(table.numeric))]
    strings = [f"s{k}" for k in range(len(table.strings))]
    out = df.select(F.col(positional[table.label]).try_cast("double").alias("label"), *weight,
                    *[F.col(positional[j]).try_cast("double").alias(name)
                      for name, j in zip(numeric, table.numeric)],
                    *[F.col(positional[j]).alias(name)
                      for name, j in zip(strings, table.strings)])
    return out, numeric, strings


def _feature_positions(names, features, not_features, header, where) -> list[int]:
    """0-based positions of the feature columns: every column but ``not_features``, or the
    named ``features`` (:func:`~sodm_spark.core.feature_names.columns_by_name`: in their order,
    refused naming a missing one), which need a header."""
    if features is None:
        return [j for j in range(len(names)) if j not in not_features]
    if not header:
        raise SettingsError(f"{where} has no header, so its feature columns cannot be taken by "
                            f"name ({len(features)} named); give the file a header line, or "
                            "its columns in the training data's order.")
    from ...core.feature_names import columns_by_name

    positions, _ = columns_by_name(list(features), names, where)
    return positions
