"""CSV files as a DataFrame of a ``label`` column and numeric ``f0..f{d-1}`` feature columns.

One Spark job over the text checks every cell (:func:`.text_lines.check_csv_cells`): the
first one that is not a finite number is reported with its file, line, column and role (label
or feature) before anything is trained.
:func:`sodm_spark.spark.io.arrow.dataframe_to_blocks` then turns the DataFrame into blocks.
"""
from __future__ import annotations

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


def read_csv_df(spark, path, label_col, header, sep, statuses, limit=None, weight_col=None,
                features=None):
    """The CSV as ``(DataFrame label (+ weight) + f0..f{d-1}, feature column names, where,
    the header's names of the features or None without a header)``, validated: every cell a
    finite number (at most ``limit`` in magnitude when given), every file's header the first
    one's. ``weight_col`` (a name or position) is read as the column ``weight``, not a
    feature. ``features``: the header's names of the feature columns, in the order wanted
    (None: every column but the label and the weight, in the file's order).

    ``header=None`` detects a header (first row not all numbers); see
    :func:`sodm_spark.spark.io.read_blocks` for ``label_col``; ``statuses`` are the input's
    Hadoop file statuses.
    """
    from pyspark.sql import functions as F

    where = f"{path} (format 'csv')"
    raw, header = _raw_table(spark, path, header, sep, where)
    names = raw.columns
    label_pos = _label_position(names, label_col, header, where)
    weight_pos = None if weight_col is None else \
        _weight_position(names, weight_col, label_pos, where)
    positional = [f"_c{i}" for i in range(len(names))]
    df = raw.toDF(*positional)

    # every cell a finite number, named by file and line (.text_lines); the DataFrame below
    # casts what that job has checked
    feature_pos = _feature_positions(names, features, (label_pos, weight_pos), header, where)
    checked = feature_pos + ([] if weight_pos is None else [weight_pos])  # not the extra ones
    if check_csv_cells(spark, path, statuses, names, dict.fromkeys(checked, "feature")
                       | {label_pos: "label"}, sep, bool(header), limit) == 0:
        raise DataFormatError(empty_message(path, "csv", "has no data rows"), path=path)
    weight = [] if weight_pos is None else \
        [F.col(positional[weight_pos]).try_cast("double").alias("weight")]
    out = df.select(F.col(positional[label_pos]).try_cast("double").alias("label"), *weight,
                    *[F.col(positional[j]).try_cast("double").alias(f"f{k}")
                      for k, j in enumerate(feature_pos)])
    return out, [f"f{k}" for k in range(len(feature_pos))], where, \
        [names[j] for j in feature_pos] if header else None


def _feature_positions(names, features, not_features, header, where):
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
