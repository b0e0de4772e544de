"""CSV files as a DataFrame of a ``label`` column and numeric ``f0..f{d-1}`` feature columns.

One Spark job counts, per column, the cells that are not numbers; the first offending cell is
reported with its row, file and column role (label or feature) before anything is trained.
:func:`sodm_spark.spark.io.arrow.dataframe_to_blocks` then turns the DataFrame into blocks.
"""
from __future__ import annotations

import numpy as np

from .blocks import DataFormatError, empty_message, spark_read


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
            raise ValueError(f"label_col={label_col} is out of range for {where}, which has "
                             f"{len(names)} columns.")
        return int(label_col) % len(names)
    if label_col in names:
        return names.index(label_col)
    raise ValueError(f"label_col={label_col!r} is not a column of {where}; its columns "
                     f"are {names[:20]}{' ...' if len(names) > 20 else ''}. Pass one of "
                     "them or a 0-based column position.")


def read_csv_df(spark, path, label_col, header, sep):
    """The CSV as ``(DataFrame label + f0..f{d-1}, feature column names, where)``, validated.

    ``header=None`` detects a header (first row not all numbers); see
    :func:`sodm_spark.spark.io.read_blocks` for ``label_col``.
    """
    from pyspark.sql import functions as F

    where = f"{path} (format 'csv')"
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
    label_pos = _label_position(names, label_col, header, where)
    positional = [f"_c{i}" for i in range(len(names))]
    df = raw.toDF(*positional)

    def bad(c):
        return F.col(c).isNotNull() & F.col(c).try_cast("double").isNull()

    counts = df.agg(F.count(F.lit(1)).alias("_n"),
                    *[F.sum(F.when(bad(c), 1).otherwise(0)).alias(f"_b{i}")
                      for i, c in enumerate(positional)]).first()
    if counts["_n"] == 0:
        raise DataFormatError(empty_message(path, "csv", "has no data rows"), path=path)
    bad_cols = [i for i in range(len(names)) if counts[f"_b{i}"]]
    if bad_cols:
        i = bad_cols[0]
        row = df.filter(bad(positional[i])).select(F.input_file_name().alias("_file"),
                                                   *positional).first()
        cells = ", ".join(f"{names[j]}={row[positional[j]]!r}" for j in range(min(len(names),
                                                                                   12)))
        more = ", ..." if len(names) > 12 else ""
        role = ("the label column" if i == label_pos else "a feature column")
        advice = ("Labels must be numbers (e.g. 0/1 or -1/+1): map class names to numbers"
                  if i == label_pos else "Every column other than the label must be numeric: "
                  "fix or remove those cells, or drop the column")
        others = (f"; non-numeric cells also in column(s) "
                  f"{[names[j] for j in bad_cols[1:6]]}" if len(bad_cols) > 1 else "")
        raise DataFormatError(
            f"{where}: column {names[i]!r} ({role}, column {i + 1} of {len(names)}) holds "
            f"the non-numeric value {row[positional[i]]!r} in the row [{cells}{more}] of "
            f"{row['_file']}; {counts[f'_b{i}']} cell(s) of that column are not numbers"
            f"{others}. {advice}.", path=path, token=row[positional[i]])
    feature_pos = [j for j in range(len(names)) if j != label_pos]
    out = df.select(F.col(positional[label_pos]).try_cast("double").alias("label"),
                    *[F.col(positional[j]).try_cast("double").alias(f"f{k}")
                      for k, j in enumerate(feature_pos)])
    return out, [f"f{k}" for k in range(len(feature_pos))], where
