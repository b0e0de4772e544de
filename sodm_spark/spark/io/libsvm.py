"""LIBSVM/SVMlight text (``label [qid:N] idx:val ... [# comment]``, 1-based indices) into blocks,
on the driver or Spark.

Every reader hands whole text buffers to :func:`sodm_spark.data.formats.libsvm.parse_libsvm_text`
(numpy + numba), so the driver and the executors parse alike, and the lines SVMlight and
scikit-learn's ``load_svmlight_file`` accept (a ranking query id after the label, ``#``
comments) are read everywhere. Errors name the file, the exact 1-based line and the token, and
so do the refusals of NaN, ±inf and too large values (:mod:`.text_lines`). Row ids are 0-based
line numbers over the input (files in Spark's listing order on a classic session, in URI order
through DataFrames; blank and comment lines use up their number).

A classic session reads the lines with ``sc.textFile`` (:func:`read_libsvm_spark`); a Spark
Connect session, which has no text RDD, with ``spark.read.text`` and ``mapInArrow`` tasks
(:func:`.libsvm_frames.read_libsvm_frames`), and the prediction job's ML-vector rows come the
same way (:func:`.libsvm_frames.read_libsvm_vectors`), instead of Spark's ``libsvm`` source.

Rows are CSR or dense (``sparse``: True, False, or "auto": CSR unless at least half of all
the input's cells hold a value — one decision for the whole input, so every block is alike).
Dense rows are only as wide as memory allows: a feature index beyond that (a typo such as
``2000000000:1``) is refused before any row is densified, naming the file and line it is on.
"""
from __future__ import annotations

import bz2
import gzip
from pathlib import Path

import numpy as np

from ...core.errors import reported_to_driver
from ...core.resources import available_memory_mb
from ...core.validation import MAX_ABS_VALUE, max_abs_value
from ...data.formats.libsvm import parse_libsvm_text
from .blocks import (DataFormatError, DataPathError, block_from_parsed,
                     blocks_from_parsed, check_n_features, dense_enough, dense_width_problem,
                     empty_message, too_wide_error)
from .text_lines import line_locations, refuse_bad_values, value_summary


def _where(file, line, partition=None, local_line=None):
    if line is not None:
        return f"{file}, line {line}"
    return (f"{file} (Spark partition {partition}, line {local_line} within that partition; "
            "the line number within the file is not known)")


def _libsvm_error(problem_tuple, file, line, partition=None, local_line=None):
    token, problem, advice = problem_tuple
    return DataFormatError(f"{_where(file, line, partition, local_line)}: {problem}. {advice}.",
                           path=file, line=line, token=token)


def _read_bytes(path):
    """The whole file's bytes (``.gz``/``.bz2`` decompressed)."""
    path = str(path)
    opener = gzip.open if path.endswith(".gz") else bz2.open if path.endswith(".bz2") else open
    with opener(path, "rb") as handle:
        return handle.read()


def _width(parsed):
    """Columns the parsed rows need: the largest 1-based index (0 if there are none)."""
    return int(parsed.indices.max()) + 1 if parsed.indices.size else 0


def _widest_line(parsed):
    """The 0-based line (in the parsed buffer) of the largest index, or None without any."""
    if not parsed.indices.size:
        return None
    value = int(np.argmax(parsed.indices))
    return int(parsed.row_lines[np.searchsorted(parsed.indptr, value, side="right") - 1])


def _no_data_lines(path):
    return DataFormatError(empty_message(path, "libsvm", "has no data lines (it is empty or "
                                         "holds only blank lines and # comments)"),
                           path=str(path))


def _no_features(path):
    return DataFormatError(f"{path} (format 'libsvm') has labels but no features (every "
                           "line is only a label). Pass n_features=... if that is intended.",
                           path=str(path))


def read_libsvm_local(path, n_features=None, sparse=False, check_values=False,
                      dense_advice=None, query_id=False):
    """Read a LIBSVM file on the driver into dense ``(X, y)`` (float64), pure numpy.

    ``sparse=True`` returns X as a scipy CSR matrix (wide data is never densified);
    ``sparse="auto"`` returns CSR unless at least half the cells hold a value. Dense rows wider
    than a block, or taking more than half the memory available, are refused naming the line
    of the largest index (``dense_advice``: what to do instead, for the message).

    For small sets (e.g. test data). ``n_features=None`` uses the largest index in the file;
    a larger ``n_features`` pads with zero columns. Errors name the file and the exact 1-based
    line (a line that is not UTF-8 text too: a compressed file without its .gz name, say);
    ``.gz``/``.bz2`` files are decompressed. NaN, inf and huge values parse as they are
    (as in scikit-learn's reader; the estimators refuse them naming the row) unless
    ``check_values``: then a NaN, ±inf or a magnitude beyond ±1e100 is refused naming the line.

    Lines may carry a ranking query id (``label qid:N index:value ...``) and ``#`` comments, as
    SVMlight writes them; the query ids are skipped, or with ``query_id=True`` returned as a
    third array, ``(X, y, qid)`` (int64, -1 for a line without one), as scikit-learn's
    ``load_svmlight_file(query_id=True)`` does.
    """
    n_features = check_n_features(n_features)
    p = Path(path)
    if not p.exists():
        raise DataPathError(f"{path} (format 'libsvm') does not exist. Check the path (a local "
                            "file on the driver; use read_blocks for HDFS/S3 or folders).")
    if p.is_dir():
        raise DataPathError(f"{path} (format 'libsvm') is a folder; read_libsvm_local reads "
                            "one file. Pass a file, or use read_blocks for folders.")
    parsed = parse_libsvm_text(_read_bytes(p), n_features, query_ids=query_id)
    if parsed.error is not None:
        line, problem = parsed.error
        raise _libsvm_error(problem, str(path), line + 1)
    if check_values:
        refuse_bad_values(path, [(str(path), 0, 0, 0)], [value_summary(parsed, MAX_ABS_VALUE)],
                          MAX_ABS_VALUE)
    if not parsed.labels.size:
        raise _no_data_lines(path)
    d = n_features if n_features is not None else _width(parsed)
    if d == 0:
        raise _no_features(path)
    if sparse == "auto":
        sparse = not dense_enough(parsed.values.size, parsed.labels.size, d)
    if not sparse:
        problem = dense_width_problem(d, parsed.labels.size, 8,
                                      available_memory_mb() * 2**19, "half the memory available")
        if problem is not None:
            line = _widest_line(parsed) if n_features is None else None
            where = f"{path}, line {line + 1}" if line is not None else \
                f"{path} (n_features={n_features})"
            raise too_wide_error(where, d, problem, dense_advice, str(path),
                                 None if line is None else line + 1)
    block = block_from_parsed(parsed, np.arange(parsed.labels.size), d, sparse)
    return (block.X, block.y, parsed.qids) if query_id else (block.X, block.y)


# ----------------------------------------------------------------------------------------------
# LIBSVM on Spark
# ----------------------------------------------------------------------------------------------

def _partition_text(lines):
    """A partition's lines as one UTF-8 buffer, and how many lines it holds."""
    lines = list(lines)
    return "\n".join(lines).encode("utf-8"), len(lines)


def _scan_libsvm(n_features, limit):
    """Validation pass of one partition: (index, n_lines, n_rows, max index, error or None,
    the rows whose values are not finite or beyond ±``limit`` (a
    :func:`.text_lines.value_summary`), stored values, 1-based local line of the max index or
    None)."""
    def scan(index, lines):
        text, n_lines = _partition_text(lines)
        parsed = parse_libsvm_text(text, n_features)
        error = None
        if parsed.error is not None:
            line, problem = parsed.error
            error = (line + 1, problem)
        widest = _widest_line(parsed)
        yield (index, n_lines, int(parsed.labels.size), _width(parsed), error,
               value_summary(parsed, limit), int(parsed.values.size),
               None if widest is None else widest + 1)
    return scan


def _parse_libsvm(d, locations, sparse=False, dtype=np.float64):
    """A partition's lines as bounded Blocks (:func:`bounded_blocks`); ``locations[i] = (file,
    first line in file - 1, first global line number)`` for error messages and row ids."""
    @reported_to_driver  # the input changed since the validation pass: still its line
    def build(index, lines):
        file, file_offset, row_offset = locations[index]
        parsed = parse_libsvm_text(_partition_text(lines)[0], d)
        if parsed.error is not None:
            local, problem = parsed.error
            line_no = None if file_offset is None else file_offset + local + 1
            raise _libsvm_error(problem, file, line_no, index, local + 1)
        if parsed.labels.size:
            yield from blocks_from_parsed(parsed, row_offset + parsed.row_lines, d, sparse,
                                          dtype)
    return build


def read_libsvm_spark(spark, path, statuses, n_features, min_partitions, sparse=False,
                      dtype=np.float64, dense_advice=None):
    """``(RDD[Block], d)`` of the LIBSVM input ``path`` (its Hadoop ``statuses`` listed by
    :func:`read_blocks`): one validation job, then a lazy parse (see :func:`read_blocks`)."""
    sc = spark.sparkContext
    lines = sc.textFile(path, min_partitions)
    limit = max_abs_value(dtype)
    stats = sorted(lines.mapPartitionsWithIndex(_scan_libsvm(n_features, limit)).collect())
    # line offsets: within each file (partitions of a file are consecutive) and globally
    locations = line_locations(lines, path, statuses, [s[1] for s in stats])
    for index, _, _, _, error, *_ in stats:
        if error is not None:
            local_line, problem = error
            file, offset, _ = locations[index]
            line_no = None if offset is None else offset + local_line
            raise _libsvm_error(problem, file, line_no, index, local_line)
    refuse_bad_values(path, [(*location, index) for index, location in enumerate(locations)],
                      [s[5] for s in stats], limit)
    if sum(s[2] for s in stats) == 0:
        raise _no_data_lines(path)
    d = n_features if n_features is not None else max(s[3] for s in stats)
    if d == 0:
        raise _no_features(path)
    n_rows = sum(s[2] for s in stats)
    if sparse == "auto":  # one decision for the whole input: every block alike
        sparse = not dense_enough(sum(s[6] for s in stats), n_rows, d)
    if not sparse:
        problem = dense_width_problem(d, n_rows, np.dtype(dtype).itemsize, None, "")
        if problem is not None:
            raise too_wide_error(_widest_where(stats, locations, path, n_features), d, problem,
                                 dense_advice)
    return lines.mapPartitionsWithIndex(_parse_libsvm(d, tuple(locations), sparse, dtype)), d


def _widest_where(stats, locations, path, n_features):
    """Where the largest index of the input is: its file and 1-based line (or partition)."""
    if n_features is not None:
        return f"{path} (n_features={n_features})"
    index, *_, local_line = max(stats, key=lambda s: (s[3], -s[0]))
    file, offset, _ = locations[index]
    return _where(file, None if offset is None else offset + local_line, index, local_line)
