"""LIBSVM text through DataFrames, parsed by the package's own parser in ``mapInArrow`` tasks:
the reader of a Spark Connect session (which has no text RDD) and the prediction job's sparse
vectors on any session (:func:`read_libsvm_vectors`).

Its own module beside :mod:`.libsvm` (the classic reader over ``sc.textFile`` and the driver's
reader), whose messages and checks it shares: the same files give the same rows, row ids and
refusals on every session.
"""
from __future__ import annotations

import io
import pickle
from collections import namedtuple

import numpy as np
from numba import njit

from ...core.validation import max_abs_value
from ...data.formats.libsvm import csr_to_dense, parse_libsvm_text
from ..engine import context_of, rows_of
from ..task import task_partition
from .arrow import CHUNK_ROWS, _payloads_to_blocks, _serialize_block
from .blocks import (MAX_BLOCK_BYTES, DataFormatError, dense_width_problem,
                     spark_read, sql_conf, to_feature_dtype, too_wide_error)
from .libsvm import (_libsvm_error, _width, _widest_line, _no_data_lines, _no_features)
from .text_lines import refuse_bad_values, value_summary


# ----------------------------------------------------------------------------------------------
# LIBSVM through DataFrames: a Spark Connect session (no text RDD), the prediction job's vectors
# ----------------------------------------------------------------------------------------------
# Spark's own ``libsvm`` source refuses what SVMlight allows (a ``qid:N`` after the label, ``#``
# comments: MLUtils.parseLibSVMRecord splits every token at ':' and parses an int), and names
# no line. Here ``spark.read.text`` reads the lines, with the file and the byte offset of the
# split each came from (a split's lines are consecutive lines of its file), and every task
# parses its splits with :func:`parse_libsvm_text`, the classic reader's parser: the same files
# give the same rows, the same row ids (0-based line numbers over the input), and a bad line is
# named by its file and line on every session.
#
# The parse is kept (a local checkpoint on the executors' disks, :data:`~..engine.PERSIST`):
# the blocks are built later, when the fit first reads them, and a DataFrame is planned again
# at each use under the session's settings of then, so a split (and the line numbers it starts
# at) found now could start elsewhere by then; a checkpoint's partitions are fixed.

#: The columns of the parse's rows: ``payload`` (a split's per-split statistics, pickled, when
#: ``kind`` is :data:`_STATS`; else up to CHUNK_ROWS of its rows as CSR arrays), ``kind``, and
#: the split they come from, ``file`` and ``start`` (its first byte).
_PARSED_COLUMNS = ("payload", "kind", "file", "start")
_STATS, _ROWS = 0, 1

SplitStats = namedtuple("SplitStats", "partition seq file start n_lines n_rows width error "
                        "summary nnz widest")
SplitStats.__doc__ = """What the parse found in one split of a file (``file``, its first byte
``start``), the ``seq``-th of task ``partition``: its lines and rows, the largest index
(``width``), the first bad line (``(1-based line within the split, problem)`` or None), the
rows whose values cannot be used (:func:`.text_lines.value_summary`, lines 0-based within the
split), the values stored and the 1-based line of the largest index (or None)."""


@njit(cache=True)
def _joined_lines(data, offsets):
    """The strings ``data[offsets[i]:offsets[i + 1]]`` joined by newlines (the buffer of
    :func:`parse_libsvm_text`)."""
    n = offsets.size - 1
    if n <= 0:
        return np.empty(0, dtype=np.uint8)
    out = np.empty(offsets[n] - offsets[0] + n - 1, dtype=np.uint8)
    pos = 0
    for i in range(n):
        if i:
            out[pos] = 10
            pos += 1
        for k in range(offsets[i], offsets[i + 1]):
            out[pos] = data[k]
            pos += 1
    return out


def _arrow_lines(column):
    """The lines of an Arrow string column (a text source's ``value``) as one buffer, from its
    offsets and bytes (no Python string a line)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(column)
    if n == 0:
        return b""
    if column.null_count:
        column = pc.fill_null(column, "")
    offset_type = np.int64 if pa.types.is_large_string(column.type) else np.int32
    _, offsets, data = column.buffers()
    offsets = np.frombuffer(offsets, dtype=offset_type)[column.offset:column.offset + n + 1]
    data = np.empty(0, dtype=np.uint8) if data is None else np.frombuffer(data, dtype=np.uint8)
    return _joined_lines(data, offsets.astype(np.int64)).tobytes()


def _split_runs(batch):
    """``(first row, end row, file, start)`` of each run of a text batch's rows (columns value,
    file, start) that come from one split."""
    import pyarrow.compute as pc

    n = batch.num_rows
    files = batch.column(1)
    starts = np.asarray(batch.column(2).to_numpy(zero_copy_only=False), dtype=np.int64)
    cuts = np.empty(0, dtype=np.int64)
    if n > 1:
        same = pc.fill_null(pc.equal(files.slice(1), files.slice(0, n - 1)), False)
        same = np.asarray(same.to_numpy(zero_copy_only=False), dtype=bool)
        cuts = np.flatnonzero(~same | (starts[1:] != starts[:-1])) + 1
    bounds = [0, *cuts.tolist(), n]
    for first, end in zip(bounds[:-1], bounds[1:]):
        yield first, end, files[first].as_py(), int(starts[first])


def _saved(*arrays):
    buffer = io.BytesIO()
    for array in arrays:
        np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def _loaded(payload, count):
    buffer = io.BytesIO(payload)
    return [np.load(buffer, allow_pickle=False) for _ in range(count)]


def _parse_splits(n_features, limit):
    """The ``mapInArrow`` function of the parse: the text rows ``(value, file, start)`` of a
    task, split by split, as rows of :data:`_PARSED_COLUMNS` (:func:`_split_rows`)."""
    def parse(batches):
        partition, seq = task_partition(), 0
        key: tuple[str, int] | None = None
        parts: list[bytes] = []
        n_lines = 0
        for batch in batches:
            for first, end, file, start in _split_runs(batch):
                if key is not None and key != (file, start):
                    yield from _split_rows(key, parts, n_lines, (partition, seq), n_features,
                                           limit)
                    seq, parts, n_lines = seq + 1, [], 0
                key = (file, start)
                parts.append(_arrow_lines(batch.column(0).slice(first, end - first)))
                n_lines += end - first
        if key is not None:
            yield from _split_rows(key, parts, n_lines, (partition, seq), n_features, limit)
    return parse


def _split_rows(key, parts, n_lines, place, n_features, limit):
    """The parse's record batches of one split (``key``: file and first byte; ``parts``: its
    lines' buffers, ``n_lines`` lines; ``place``: its task and its number there): its CSR rows
    up to its first bad line, in payloads of at most CHUNK_ROWS rows, then its
    :class:`SplitStats`."""
    import pyarrow as pa

    parsed = parse_libsvm_text(b"\n".join(parts), n_features)
    error = None
    if parsed.error is not None:
        line, problem = parsed.error
        error = (line + 1, problem)
    for first in range(0, parsed.labels.size, CHUNK_ROWS):
        end = min(parsed.labels.size, first + CHUNK_ROWS)
        lo, hi = parsed.indptr[first], parsed.indptr[end]
        payload = _saved(parsed.labels[first:end], parsed.indptr[first:end + 1] - lo,
                         parsed.indices[lo:hi], parsed.values[lo:hi], parsed.row_lines[first:end])
        yield _parsed_batch(pa, payload, _ROWS, key)
    widest = _widest_line(parsed)
    stats = SplitStats(place[0], place[1], key[0], key[1], n_lines, int(parsed.labels.size),
                       _width(parsed), error, value_summary(parsed, limit),
                       int(parsed.values.size), None if widest is None else widest + 1)
    yield _parsed_batch(pa, pickle.dumps(tuple(stats)), _STATS, key)


def _parsed_batch(pa, payload, kind, key):
    return pa.RecordBatch.from_arrays(
        [pa.array([payload], type=pa.binary()), pa.array([kind], type=pa.int32()),
         pa.array([key[0]], type=pa.string()), pa.array([key[1]], type=pa.int64())],
        names=list(_PARSED_COLUMNS))


def _parsed_schema():
    """:data:`_PARSED_COLUMNS` as a StructType (a DDL string is parsed by the server at every
    ``mapInArrow``)."""
    from pyspark.sql.types import (BinaryType, IntegerType, LongType, StringType, StructField,
                                   StructType)

    return StructType([StructField("payload", BinaryType()), StructField("kind", IntegerType()),
                       StructField("file", StringType()), StructField("start", LongType())])


ParsedSplits = namedtuple("ParsedSplits", "rows offsets d n_rows partitions in_order widest")
ParsedSplits.__doc__ = """The LIBSVM input parsed through DataFrames (:func:`parsed_splits`):
``rows`` the checkpointed DataFrame of its CSR rows (:data:`_PARSED_COLUMNS`, kind
:data:`_ROWS`), ``offsets`` the 0-based input line each split starts at (by ``(file,
start)``), ``d`` the width, ``n_rows`` the rows, ``partitions`` the checkpoint's tasks,
``in_order`` whether those tasks hold the splits in the input's line order, ``widest`` where
the width comes from (the file and line of the largest index, or ``n_features``)."""


def parsed_splits(spark, path, statuses, slices, n_features=None, dtype=np.float64):
    """Parse the LIBSVM input ``path`` (its ``statuses`` from :func:`~.read.input_statuses`,
    read in at least ``slices`` splits) in one job, kept as a local checkpoint, and check it as
    :func:`read_libsvm_spark` does: the first bad line, NaN, ±inf and values beyond
    :func:`~sodm_spark.core.validation.max_abs_value` of ``dtype`` are refused naming the file
    and 1-based line; no data lines, or no features, are refused. Splits are ordered by file
    (URI order) and byte offset; their lines so numbered over the input. A
    :class:`ParsedSplits`."""
    from pyspark.sql import functions as F

    from ..engine import PERSIST

    limit = max_abs_value(dtype)
    where = f"{path} (format 'libsvm')"
    with sql_conf(spark, "spark.sql.files.minPartitionNum", str(slices)):
        text = spark_read(where, lambda: spark.read.text(str(path)).select(
            "value", F.col("_metadata.file_path").alias("file"),
            F.col("_metadata.file_block_start").alias("start")))
        parsed = text.mapInArrow(_parse_splits(n_features, limit), _parsed_schema()) \
            .localCheckpoint(eager=True, storageLevel=PERSIST)
    stats = [SplitStats(*pickle.loads(row[0])) for row in
             parsed.where(F.col("kind") == _STATS).select("payload").collect()]
    stats.sort(key=lambda s: (s.file, s.start))  # the input's line order
    single = len(statuses) == 1 and not statuses[0].isDirectory()
    locations: list[tuple] = []
    offsets: dict[tuple[str, int], int] = {}
    seen_in_file: dict[str, int] = {}
    line = 0
    for index, split in enumerate(stats):
        in_file = seen_in_file.get(split.file, 0)
        locations.append((str(path) if single else split.file, in_file, line, index))
        offsets[(split.file, split.start)] = line
        seen_in_file[split.file] = in_file + split.n_lines
        line += split.n_lines
    for split, (file, in_file, _, _) in zip(stats, locations):
        if split.error is not None:
            local_line, problem = split.error
            raise _libsvm_error(problem, file, in_file + local_line)
    refuse_bad_values(path, locations, [split.summary for split in stats], limit)
    n_rows = sum(split.n_rows for split in stats)
    if n_rows == 0:
        raise _no_data_lines(path)
    widest = max(stats, key=lambda s: s.width)  # the first split of the largest index
    d = n_features if n_features is not None else widest.width
    if d == 0:
        raise _no_features(path)
    placed = sorted(stats, key=lambda s: (s.partition, s.seq))
    in_order = [offsets[(s.file, s.start)] for s in placed] == sorted(offsets.values())
    if n_features is None:
        file, in_file = locations[stats.index(widest)][:2]
        widest_where = f"{file}, line {in_file + widest.widest}"
    else:
        widest_where = f"{path} (n_features={n_features})"
    return ParsedSplits(parsed.where(F.col("kind") == _ROWS), offsets, d, n_rows,
                        1 + max(s.partition for s in stats), in_order, widest_where)


def _dense_payloads(d, offsets, chunk_rows, dtype):
    """The ``mapInArrow`` function from the parse's CSR rows to Block payloads
    (:func:`.arrow._payloads_to_blocks` reads them): dense rows in ``dtype``, at most
    ``chunk_rows`` a payload, row ids the input's line numbers (``offsets`` by split), each
    payload with its first row id (``first_row``, to order them by)."""
    def build(batches):
        import pyarrow as pa

        for batch in batches:
            payloads, files, starts = batch.column(0), batch.column(2), batch.column(3)
            for i in range(batch.num_rows):
                labels, indptr, indices, values, lines = _loaded(payloads[i].as_buffer(), 5)
                ids = offsets[(files[i].as_py(), starts[i].as_py())] + lines
                for first in range(0, labels.size, chunk_rows):
                    end = min(labels.size, first + chunk_rows)
                    X = to_feature_dtype(csr_to_dense(indptr[first:end + 1], indices, values, d),
                                         dtype)
                    payload = _serialize_block(X, np.ascontiguousarray(labels[first:end]),
                                               np.ascontiguousarray(ids[first:end]))
                    yield pa.RecordBatch.from_arrays(
                        [pa.array([payload], type=pa.binary()),
                         pa.array([int(ids[first])], type=pa.int64())],
                        names=["payload", "first_row"])
    return build


def _in_line_order(frame, column, parsed, partitions):
    """``frame`` (rows of the parse, with their line number or that of their payload's first
    row in ``column``) with its partitions in the input's line order: as it is when the
    parse's tasks already hold the splits so (one file: Spark plans its splits in order) and
    ``partitions`` is theirs; else sorted into ``partitions`` ranges of lines (Spark plans the
    splits of several files largest first)."""
    if parsed.in_order and partitions == parsed.partitions:
        return frame
    return frame.repartitionByRange(partitions, column).sortWithinPartitions(column)


def read_libsvm_frames(spark, path, statuses, slices, n_features=None, min_partitions=None,
                       dtype=np.float64, dense_advice=None):
    """``(RDD[Block], d)`` of the LIBSVM input ``path`` through DataFrames (a Spark Connect
    session, which has no text RDD): :func:`parsed_splits` (one job: the checks of
    :func:`read_libsvm_spark`, named by file and line), then dense Blocks in ``dtype`` whose
    rows and row ids (0-based line numbers over the input) are those of the classic reader,
    in the input's line order, in at least ``min_partitions`` partitions when there are as
    many payloads of rows. Dense rows wider than a block are refused naming the line of the
    largest index (``dense_advice``: what to do instead)."""
    from pyspark.sql.types import BinaryType, LongType, StructField, StructType

    parsed = parsed_splits(spark, path, statuses, slices, n_features, dtype)
    d, itemsize = parsed.d, np.dtype(dtype).itemsize
    problem = dense_width_problem(d, parsed.n_rows, itemsize, None, "")
    if problem is not None:
        raise too_wide_error(parsed.widest, d, problem, dense_advice)
    partitions = max(parsed.partitions, min_partitions or 0)
    chunk_rows = max(1, min(CHUNK_ROWS, MAX_BLOCK_BYTES // (itemsize * d)))
    if partitions > parsed.partitions:  # enough payloads for every partition
        chunk_rows = max(1, min(chunk_rows, -(-parsed.n_rows // partitions)))
    schema = StructType([StructField("payload", BinaryType()),
                         StructField("first_row", LongType())])
    payloads = parsed.rows.mapInArrow(_dense_payloads(d, parsed.offsets, chunk_rows, dtype),
                                      schema)
    payloads = _in_line_order(payloads, "first_row", parsed, partitions).select("payload")
    return rows_of(payloads, context_of(spark)).mapPartitions(_payloads_to_blocks), d


#: The largest size of an ML vector (Spark's ``SparseVector.size`` is an int).
_MAX_VECTOR_SIZE = 2**31 - 1


def _vector_rows(d, offsets):
    """The ``mapInArrow`` function from the parse's CSR rows to ``(label, features, line)``:
    each row a sparse ML vector of size ``d`` (the struct Spark passes a VectorUDT as:
    :func:`.arrow.vector_rows`) and its 0-based line number over the input."""
    def build(batches):
        import pyarrow as pa

        for batch in batches:
            payloads, files, starts = batch.column(0), batch.column(2), batch.column(3)
            for i in range(batch.num_rows):
                labels, indptr, indices, values, lines = _loaded(payloads[i].as_buffer(), 5)
                n = labels.size
                offsets_32 = pa.array(indptr.astype(np.int32))
                vectors = pa.StructArray.from_arrays(
                    [pa.array(np.zeros(n, dtype=np.int8)), pa.array(np.full(n, d, np.int32)),
                     pa.ListArray.from_arrays(offsets_32, pa.array(indices.astype(np.int32))),
                     pa.ListArray.from_arrays(offsets_32, pa.array(values))],
                    names=["type", "size", "indices", "values"])
                line = offsets[(files[i].as_py(), starts[i].as_py())] + lines
                yield pa.RecordBatch.from_arrays([pa.array(labels), vectors, pa.array(line)],
                                                 names=["label", "features", "line"])
    return build


def read_libsvm_vectors(spark, path, statuses, slices):
    """The LIBSVM input ``path`` as a DataFrame of ``label`` (double) and ``features`` (a sparse
    ML vector as long as the input's largest index), rows in the input's line order: what
    Spark's ``libsvm`` source gives, from the package's own parse (:func:`parsed_splits`),
    which takes SVMlight's ``qid:N`` and ``#`` comments and refuses a bad line, NaN, ±inf and
    too large values naming its file and line, on a classic or a Spark Connect session."""
    from pyspark.ml.linalg import VectorUDT
    from pyspark.sql.types import DoubleType, LongType, StructField, StructType

    parsed = parsed_splits(spark, path, statuses, slices)
    if parsed.d > _MAX_VECTOR_SIZE:
        raise DataFormatError(f"{parsed.widest}: feature index {parsed.d:,} is beyond the "
                              f"largest size of a Spark ML vector ({_MAX_VECTOR_SIZE:,}). "
                              "Correct the index on that line.", path=str(path),
                              token=str(parsed.d))
    schema = StructType([StructField("label", DoubleType()), StructField("features", VectorUDT()),
                         StructField("line", LongType())])
    rows = parsed.rows.mapInArrow(_vector_rows(parsed.d, parsed.offsets), schema)
    return _in_line_order(rows, "line", parsed, parsed.partitions).select("label", "features")
