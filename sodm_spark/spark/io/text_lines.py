"""Text input (LIBSVM, CSV) named by file and 1-based line in every check.

``sc.textFile`` partitions are consecutive byte ranges of the input's files, so one validation
job that counts each partition's lines gives every line its file and number
(:func:`line_locations`). The readers' validation jobs refuse, besides lines that do not parse,
the lines whose values cannot be trained on or scored — NaN, ±inf, magnitudes beyond
:func:`~sodm_spark.core.validation.max_abs_value` (LIBSVM: :func:`value_summary` in the task,
:func:`refuse_bad_values` on the driver) and, for CSV, empty or non-numeric cells and missing
columns (:func:`check_csv_cells`) — so no such row reaches a block, whose rows only a partition
and a row number could name.
"""
from __future__ import annotations

import csv
import warnings

import numpy as np

from ...core.validation import bad_value_rows
from ..engine import reads_text_lines
from .blocks import DataFormatError

#: Lines named in a refusal besides the first.
SHOWN_LINES = 10

_RESCALE = ("Rescale those features (e.g. divide each column by its largest magnitude), or, if "
            "they are placeholders for missing values, remove those rows")


def split_files(text_rdd):
    """File of each partition of an ``sc.textFile`` RDD (its Hadoop FileSplit), or None."""
    try:
        names = []
        for part in text_rdd._jrdd.rdd().partitions():
            names.append(str(part.inputSplit().value().getPath().toString()))
        return names
    except Exception:  # not a HadoopRDD underneath, or internals changed: fall back
        return None


def line_locations(text_rdd, path, statuses, line_counts):
    """``locations[i] = (file, lines of that file before partition i or None, lines of the
    input before partition i)`` from every partition's line count; a single file is named as
    given. Without the files of the partitions (several files, and Spark's internals changed),
    the line within the file is not known (None)."""
    if len(statuses) == 1 and not statuses[0].isDirectory():
        files = [path] * len(line_counts)  # one file: partitions are its consecutive ranges
    else:
        files = split_files(text_rdd)
    locations, global_offset = [], 0
    seen_in_file: dict = {}
    for i, n_lines in enumerate(line_counts):
        if files is None:
            locations.append((path, None, global_offset))
        else:
            offset = seen_in_file.get(files[i], 0)
            locations.append((files[i], offset, global_offset))
            seen_in_file[files[i]] = offset + n_lines
        global_offset += n_lines
    return locations


def where_line(location, local_line):
    """``file, line N`` of the 0-based line ``local_line`` of a partition at ``location``
    (partition, line) when the line within the file is not known."""
    file, offset, _ = location[:3]
    if offset is not None:
        return f"{file}, line {offset + local_line + 1}"
    return (f"{file} (Spark partition {location[3]}, line {local_line + 1} within that "
            "partition; the line number within the file is not known)")


def _other_lines(found, total):
    """' (3 lines in all: also line 9, other.svm, line 2)' for the (location, line) pairs
    after the first (a line of the first one's file by its number only)."""
    if total <= 1:
        return ""
    first_file = found[0][0][0]
    shown = ", ".join(f"line {location[1] + line + 1}"
                      if location[0] == first_file and location[1] is not None
                      else where_line(location, line) for location, line in found[1:SHOWN_LINES])
    more = ", ..." if total > len(found[:SHOWN_LINES]) else ""
    return f" ({total} lines in all: also {shown}{more})"


# ------------------------------------------------------------------------------- LIBSVM values

def value_summary(parsed, limit: float):
    """What a partition's parsed LIBSVM rows hold that cannot be used: ``(non-finite lines,
    their count, first problem, huge lines, their count, first problem)``, the lines 0-based
    in the partition (at most :data:`SHOWN_LINES` of each), a problem ``(feature, value)``
    (feature 0: the label)."""
    bad, huge = bad_value_rows(parsed.indptr, parsed.values, parsed.labels, limit)

    def first(rows, test, label_too):
        if not rows.size:
            return None
        row = int(rows[0])
        if label_too and not test(np.array([parsed.labels[row]]))[0]:
            return 0, float(parsed.labels[row])
        start, end = parsed.indptr[row], parsed.indptr[row + 1]
        k = start + int(np.flatnonzero(~test(parsed.values[start:end]))[0])
        return int(parsed.indices[k]) + 1, float(parsed.values[k])

    return ([int(line) for line in parsed.row_lines[bad[:SHOWN_LINES]]], int(bad.size),
            first(bad, np.isfinite, True),
            [int(line) for line in parsed.row_lines[huge[:SHOWN_LINES]]], int(huge.size),
            first(huge, lambda v: np.abs(v) <= limit, False))


def refuse_bad_values(path, locations, summaries, limit: float) -> None:
    """Raise a DataFormatError naming the file and line of the first row whose values cannot
    be used (NaN or ±inf first, then magnitudes beyond ``limit``), when a partition's
    :func:`value_summary` holds one; ``locations`` as :func:`line_locations` gives them, with
    the partition number appended."""
    for lines_at, count_at, first_at, what, advice in (
            (0, 1, 2, "is NaN or infinite", "Remove or impute those rows before training or "
             "scoring"),
            (3, 4, 5, f"lies beyond ±{limit:g}, whose square overflows the kernels to NaN",
             _RESCALE)):
        total = sum(summary[count_at] for summary in summaries)
        if not total:
            continue
        found = [(location, line) for location, summary in zip(locations, summaries)
                 for line in summary[lines_at]]
        partition = next(i for i, summary in enumerate(summaries) if summary[count_at])
        feature, value = summaries[partition][first_at]
        token = "the label" if feature == 0 else f"feature {feature}"
        raise DataFormatError(f"{where_line(*found[0])}: {token} ({value!r}) {what}"
                              f"{_other_lines(found, total)}. {advice}.", path=str(path))


# ---------------------------------------------------------------------------------- CSV cells

def _cells(line, sep):
    return next(csv.reader([line], delimiter=sep, quotechar='"'), [])


def _cell_problem(cells, columns, limit):
    """(position, kind, value) of the first unusable checked cell of a line, or None."""
    for position in columns:
        if position >= len(cells):
            return position, "missing", None
        text = cells[position].strip()
        if not text:
            return position, "empty", cells[position]
        try:
            value = float(text)
        except ValueError:
            return position, "text", cells[position]
        if not np.isfinite(value):
            return position, "nonfinite", cells[position]
        if limit is not None and abs(value) > limit:
            return position, "huge", cells[position]
    return None


def _scan_csv(sep, header_line, columns, limit):
    """Validation pass of one CSV partition: (index, lines, data rows, problem lines, first
    problem ``(line, position, kind, value, first cells)`` or None)."""
    columns = sorted(columns)

    def scan(index, lines):
        lines = list(lines)
        data = [(k, line) for k, line in enumerate(lines)
                if line.strip() and line != header_line]
        head = lines[0] if lines else None  # a file's header, where the partition starts one
        if not columns:
            yield index, len(lines), len(data), 0, None, head
            return
        try:  # numpy's C reader, the whole partition at once; one by one only on a failure
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "input contained no data"
                X = np.loadtxt([line for _, line in data], delimiter=sep, usecols=columns,
                               dtype=np.float64, comments=None, quotechar='"', ndmin=2)
        except ValueError:
            bad = [k for k, line in data if _cell_problem(_cells(line, sep), columns, limit)]
        else:
            out = ~np.isfinite(X) | (np.abs(X) > (np.inf if limit is None else limit))
            bad = [data[r][0] for r in np.flatnonzero(out.any(axis=1))]
        first = None
        if bad:
            cells = _cells(lines[bad[0]], sep)
            first = (bad[0], *_cell_problem(cells, columns, limit), cells[:12])
        yield index, len(lines), len(data), len(bad), first, head
    return scan


_CELL_PHRASES = {
    "missing": "is missing: the line has too few cells",
    "empty": "is empty (a missing value)",
    "text": "holds the non-numeric value {value!r}",
    "nonfinite": "holds {value!r}, which is not a finite number",
    "huge": "holds {value!r}, beyond ±{limit:g}, whose square overflows the kernels to NaN",
}


def _cell_advice(kind, role):
    if kind == "text" and role == "label":
        return "Labels must be numbers (e.g. 0/1 or -1/+1): map class names to numbers"
    if kind == "text":
        return ("The column holds numbers in most of the input's first rows, so it is read "
                "as numbers: fix or remove those cells, or drop the column (a column of text "
                "in its first rows is read as a string column and encoded in the model)")
    if kind == "missing":
        return "Every line needs a cell for every column: fix those lines or the separator"
    if kind == "huge":
        return _RESCALE
    return "Remove those rows or fill their cells before training or scoring"


def check_csv_cells(spark, path, statuses, names, columns, sep=",", header=True, limit=None,
                    min_partitions=2) -> int:
    """One Spark job over the text of the CSV input ``path`` (Hadoop ``statuses``): every
    checked cell of every line must be a finite number (within ±``limit`` when given);
    returns the data rows. ``names`` are the columns, ``columns`` maps the checked positions
    to their role (``"label"`` or ``"feature"``); with ``header`` the first line of every file
    is skipped (lines equal to it). Raises a DataFormatError naming the file, the 1-based line,
    the column and the cell, what is wrong and what to do. A session with no text RDD to
    number lines by (Spark Connect: :func:`~sodm_spark.spark.engine.reads_text_lines`) checks
    the parsed cells instead (:func:`_check_csv_frame`)."""
    if not reads_text_lines(spark):
        return _check_csv_frame(spark, path, names, columns, sep, header, limit)
    lines = spark.sparkContext.textFile(str(path), min_partitions)
    header_line = next(iter(lines.take(1)), None) if header else None
    stats = sorted(lines.mapPartitionsWithIndex(
        _scan_csv(sep, header_line, dict(columns), limit)).collect())
    locations = [(*location, index) for index, location in enumerate(
        line_locations(lines, str(path), statuses, [s[1] for s in stats]))]
    if header_line is not None:
        _check_headers(path, header_line, sep, locations, [s[5] for s in stats])
    total = sum(s[3] for s in stats)
    if total:
        index, _, _, _, (line, position, kind, value, cells), _ = next(s for s in stats
                                                                       if s[4])
        role = columns[position]
        shown = ", ".join(f"{names[j] if j < len(names) else j}={cell!r}"
                          for j, cell in enumerate(cells))
        more = ", ..." if len(names) > len(cells) else ""
        others = "" if total == 1 else f"; {total} lines of the input have such cells"
        phrase = _CELL_PHRASES[kind].format(value=value, limit=limit or 0.0)
        raise DataFormatError(
            f"{where_line(locations[index], line)} (format 'csv'): column {names[position]!r} "
            f"({'the label column' if role == 'label' else 'a feature column'}, column "
            f"{position + 1} of {len(names)}) {phrase} in the row [{shown}{more}]{others}. "
            f"{_cell_advice(kind, role)}.", path=str(path), token=value)
    return sum(s[2] for s in stats)


def _check_headers(path, header_line, sep, locations, heads) -> None:
    """Refuse a CSV input one of whose files starts with another header than the first
    file's (another set or order of columns: Spark would read its rows by position under the
    first file's names), naming that file and the difference. A partition whose line offset
    within its file is 0 starts a file; files of unknown offsets are not compared here."""
    from .file_schemas import header_difference

    first = _cells(header_line, sep)
    for (file, offset, *_), head in zip(locations, heads):
        if offset != 0 or head is None or head == header_line:
            continue
        cells = _cells(head, sep)
        raise DataFormatError(
            f"{path} (format 'csv'): the files do not describe the same columns: the header "
            f"of {file} differs from the first file's ({header_difference(first, cells)}). "
            "Write every file of one input with the same header, or give the files that "
            "agree.", path=str(file))


def _check_csv_frame(spark, path, names, columns, sep, header, limit) -> int:
    """:func:`check_csv_cells` through Spark's CSV reader: the first row with a checked cell
    that is empty, not a number, not finite or beyond ±``limit`` is refused naming its file,
    column and cell (a DataFrame has no line numbers); returns the data rows."""
    import functools

    from pyspark.sql import functions as F

    # enforceSchema off: Spark compares every file's header with the columns (by name and
    # position) and fails naming the file whose header differs
    raw = spark.read.option("enforceSchema", False).csv(str(path), header=bool(header), sep=sep)
    cells = raw.toDF(*[f"_c{j}" for j in range(len(raw.columns))])

    def bad(position):
        value = F.col(f"_c{position}").try_cast("double")
        wrong = value.isNull() | F.isnan(value) | (F.abs(value) == float("inf"))
        return wrong | (F.abs(value) > limit) if limit else wrong

    flags = [bad(position).alias(f"bad{position}") for position in columns]
    found = cells.select("*", F.input_file_name().alias("file"), *flags).where(
        functools.reduce(lambda a, b: a | b, [F.col(f"bad{p}") for p in columns])).limit(1)
    first = _headers_checked(path, found.collect)
    if first:
        row = first[0]
        position = next(p for p in columns if row[f"bad{p}"])
        role, value = columns[position], row[f"_c{position}"]
        raise DataFormatError(
            f"{row['file']} (format 'csv'): column {names[position]!r} "
            f"({'the label column' if role == 'label' else 'a feature column'}, column "
            f"{position + 1} of {len(names)}) holds {value!r}, not a finite number"
            f"{f' within ±{limit:g}' if limit else ''}. Fill or drop such rows, or fix the "
            "separator (Spark Connect names the file and the cell; a classic session also "
            "names the line).", path=str(path), token=value)
    return _headers_checked(path, cells.count)


def _headers_checked(path, action):
    """``action()`` (a job over the CSV read with ``enforceSchema`` off), Spark's refusal of a
    file whose header differs from the first file's as one DataFormatError line."""
    try:
        return action()
    except Exception as exc:
        text = str(exc)
        if "header does not conform to the schema" not in text:
            raise
        detail = text[text.find("Header:"):].split("\n")[:3] if "Header:" in text else []
        raise DataFormatError(
            f"{path} (format 'csv'): the files do not describe the same columns: a file's "
            f"header differs from the first file's ({' '.join(part.strip() for part in detail)}"
            "). Write every file of one input with the same header, or give the files that "
            "agree.", path=str(path)) from None
