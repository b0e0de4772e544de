"""The block contract every reader produces, the errors they raise, and the check before training.

A :class:`Block` is a run of at most :data:`MAX_BLOCK_BYTES` of one Spark partition's rows; the
readers (:mod:`.libsvm`, :mod:`.csv`,
:mod:`.arrow`) build them, :func:`check_blocks` verifies them in one job (label counts, NaN/inf,
magnitudes above ``MAX_ABS_VALUE``, malformed blocks) before a fit. The small argument and
message helpers the readers share live here too, so that each reader words its errors alike.
"""
from __future__ import annotations

from contextlib import contextmanager

from collections import deque, namedtuple

import numpy as np
import scipy.sparse

from ...core.errors import InputError, SettingsError, error_text
# DENSE_FROM_DENSITY unused here: spark.io re-exports it from this module
from ...core.sparse_rows import DENSE_FROM_DENSITY, dense_enough  # noqa: F401
from ...core.sparse_rows import Rows, stack_rows
from ...core.validation import max_abs_value
from ...data.formats.libsvm import csr_to_dense

Block = namedtuple("Block", "X y row_ids weights", defaults=(None,))
Block.__doc__ = """Rows of one partition: ``X`` (n, d) C-contiguous float64 or float32 (or CSR),
at most :data:`MAX_BLOCK_BYTES` of it unless one row is larger, ``y`` float64 (n,) raw labels as
read, ``row_ids`` int64 (n,) globally unique and deterministic, ``weights`` float64 (n,) each
row's weight s_i > 0 (a weight column, docs/design.md §1.4) or None (every row weighs 1). A
partition may hold several."""

BlockStats = namedtuple("BlockStats", "label_counts n_rows row_width", defaults=(None,))
BlockStats.__doc__ = """Result of :func:`check_blocks`: ``label_counts`` maps each distinct label
value (float) to its number of rows (``None`` when there are more than ``max_labels`` distinct
values), ``n_rows`` is the total number of rows, ``row_width`` the memory of a row in float64
columns: the width for dense rows (an int), 1.5 per stored value of sparse ones (a float; see
:func:`sodm_spark.core.sparse_rows.memory_width`)."""

#: Row ids of CSV/Parquet/DataFrame rows: ``(partition_index << ROW_ID_SHIFT) + local row``.
ROW_ID_SHIFT = 40



#: Most bytes of features in one Block. A block is one Spark record, and a record crosses the
#: JVM whole (cached, shuffled, handed to Python): 313 MB blocks (50,000 × 784 float64 rows, one
#: per Parquet file) killed a 4 GB driver heap while caching 600,000 rows; 16 MB ones cannot.
MAX_BLOCK_BYTES = 16 << 20
#: Dense feature dtypes a Block may hold: float64, or float32 for the kernel path, whose
#: kernel blocks are float32 anyway (half the memory and disk of the rows).
FEATURE_DTYPES = (np.dtype(np.float64), np.dtype(np.float32))

# ----------------------------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------------------------

class DataFormatError(InputError):
    """The input is readable but its content is wrong; ``path``/``line``/``token`` say where.
    A ValueError (through :class:`~sodm_spark.core.errors.InputError`)."""

    def __init__(self, message, path=None, line=None, token=None):
        super().__init__(message)
        self.path, self.line, self.token = path, line, token


class DataPathError(FileNotFoundError, InputError):
    """The input path does not exist (or cannot be listed); also a ``ValueError``."""


def spark_read(where, reader):
    """Run a Spark read, turning Spark's errors into a DataFormatError naming ``where``."""
    try:
        return reader()
    except Exception as exc:
        from py4j.protocol import Py4JJavaError
        from pyspark.errors import PySparkException
        if not isinstance(exc, (Py4JJavaError, PySparkException)):
            raise
        raise DataFormatError(f"{where}: Spark could not read it ({error_text(exc)}). "
                              "Check that the path holds files of this format.") from None


def empty_message(path, fmt, what):
    """The message for input that holds no data: ``what`` says how it is empty."""
    return (f"{path} (format {fmt!r}) {what}. Check the path, or point it at the file or "
            "folder that holds the data.")


def check_n_features(n_features):
    """``n_features`` as an int (or None), or a ValueError."""
    if n_features is None:
        return None
    if isinstance(n_features, bool) or not isinstance(n_features, (int, np.integer)) \
            or n_features < 1:
        raise SettingsError(f"n_features must be a positive integer or None, got {n_features!r}.")
    return int(n_features)


def check_positive(value, name):
    """``value`` as a positive int (or None), or a ValueError naming ``name``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise SettingsError(f"{name} must be a positive integer or None, got {value!r}.")
    return int(value)


# ----------------------------------------------------------------------------------------------
# Building blocks
# ----------------------------------------------------------------------------------------------

def feature_bytes(X) -> int:
    """Bytes of a dense or CSR feature matrix."""
    if scipy.sparse.issparse(X):
        return int(X.data.nbytes + X.indices.nbytes + X.indptr.nbytes)
    return int(X.nbytes)


def to_feature_dtype(X, dtype):
    """Dense ``X`` as C-contiguous ``dtype``. Finite values beyond float32's range stay finite
    (its largest value), so that such a placeholder is refused as too large, not as infinite."""
    dtype = np.dtype(dtype)
    if dtype == np.float32 and X.dtype != np.float32:
        big = float(np.finfo(np.float32).max)
        over = np.isfinite(X) & (np.abs(X) > big)
        if over.any():
            X = np.where(over, np.copysign(big, X), X)
    return np.ascontiguousarray(X, dtype=dtype)


def bounded_blocks(X, y, row_ids, max_bytes: int = MAX_BLOCK_BYTES, weights=None):
    """Blocks of consecutive rows of (X, y, row_ids[, weights]), each at most ``max_bytes`` of
    features (at least one row)."""
    n = X.shape[0]
    step = max(1, int(max_bytes * n // max(1, feature_bytes(X)))) if n else 1
    for start in range(0, n, step):
        rows = slice(start, start + step)
        yield Block(X[rows], y[rows], row_ids[rows], None if weights is None else weights[rows])


def block_from_parsed(parsed, row_ids, d, sparse=False, dtype=np.float64):
    """A Block from :class:`ParsedText` arrays: dense C-contiguous in ``dtype``, or CSR
    (float64; ``sparse`` True, or "auto" and under :data:`DENSE_FROM_DENSITY` full)."""
    if sparse == "auto":
        sparse = not dense_enough(parsed.values.size, parsed.labels.size, d)
    if sparse:
        X = scipy.sparse.csr_matrix((parsed.values, parsed.indices, parsed.indptr),
                                    shape=(parsed.labels.size, d))
    else:
        X = to_feature_dtype(csr_to_dense(parsed.indptr, parsed.indices, parsed.values, d),
                             dtype)
    return Block(X, parsed.labels, np.asarray(row_ids, dtype=np.int64))


def blocks_from_parsed(parsed, row_ids, d, sparse=False, dtype=np.float64,
                       max_bytes: int = MAX_BLOCK_BYTES):
    """Bounded Blocks (:func:`bounded_blocks`) of :class:`ParsedText` rows: CSR when
    ``sparse``, else dense rows made one block at a time, so that a partition of text never
    needs more memory than its CSR arrays and one dense block."""
    ids = np.asarray(row_ids, dtype=np.int64)
    X = scipy.sparse.csr_matrix((parsed.values, parsed.indices, parsed.indptr),
                                shape=(parsed.labels.size, d))
    if sparse:
        yield from bounded_blocks(X, parsed.labels, ids, max_bytes)
        return
    step = max(1, max_bytes // max(1, d * np.dtype(dtype).itemsize))
    for start in range(0, X.shape[0], step):
        rows = X[start:start + step]
        yield Block(to_feature_dtype(csr_to_dense(rows.indptr, rows.indices, rows.data, d),
                                     dtype), parsed.labels[start:start + step],
                    ids[start:start + step])


def dense_width_problem(d, n_rows, itemsize, limit_bytes, what):
    """Why rows ``d`` columns wide cannot be dense, or None: one row wider than a block
    (:data:`MAX_BLOCK_BYTES`, a Spark record's bound), or all ``n_rows`` rows beyond
    ``limit_bytes`` (``what`` names that limit)."""
    row = d * itemsize
    if row > MAX_BLOCK_BYTES:
        return (f"one dense row would take {row / 2**20:,.0f} MB, more than a block of rows "
                f"may ({MAX_BLOCK_BYTES >> 20} MB)")
    if limit_bytes is not None and n_rows * row > limit_bytes:
        return (f"{n_rows:,} dense rows would take {n_rows * row / 2**30:,.1f} GB, more than "
                f"{what} ({limit_bytes / 2**30:,.1f} GB)")
    return None


#: What to do about rows too wide to be dense, unless the caller knows better.
DENSE_ADVICE = ("read the rows as sparse (sparse=True, or 'auto': CSR unless at least half the "
                "cells hold a value)")


def too_wide_error(where, index, problem, advice=None, path=None, line=None):
    """The refusal of a feature index that makes dense rows too wide: one line naming the file
    and 1-based line (``where``) of the largest index, and what to do."""
    return DataFormatError(
        f"{where}: feature index {index:,} makes every dense row {index:,} columns wide, and "
        f"{problem}. Either {advice or DENSE_ADVICE}, or correct the index on that line.",
        path=path, line=line, token=str(index))


# ----------------------------------------------------------------------------------------------
# Checking blocks before training
# ----------------------------------------------------------------------------------------------

def _summarize_blocks(n_features, max_labels):
    def summarize(index, blocks):
        n_rows, n_bad, problem = 0, 0, None
        bad_ids: list = []
        counts: dict | None = {}  # None once there are more label values than max_labels
        n_huge, largest = 0, 0.0
        huge_ids: list = []
        n_values, any_sparse = 0, False
        for block in blocks:
            X, y, ids = block[:3]
            is_csr = scipy.sparse.issparse(X) and X.format == "csr"
            if not ((isinstance(X, np.ndarray) or is_csr) and isinstance(y, np.ndarray)
                    and isinstance(ids, np.ndarray)):
                problem = "X (ndarray or CSR), y and row_ids must be numpy arrays"
            elif is_csr and X.dtype != np.float64:
                problem = f"X is CSR with dtype {X.dtype}; expected float64"
            elif not is_csr and (X.dtype not in FEATURE_DTYPES or X.ndim != 2
                                 or not X.flags.c_contiguous):
                problem = (f"X has dtype {X.dtype}, shape {X.shape}, C-contiguous="
                           f"{X.flags.c_contiguous}; expected C-contiguous float64 or float32 "
                           "(n, d)")
            elif X.shape[1] != n_features:
                problem = f"X has {X.shape[1]} columns but n_features={n_features}"
            elif y.dtype != np.float64 or y.shape != (X.shape[0],):
                problem = f"y has dtype {y.dtype} and shape {y.shape}; expected float64 (n,)"
            elif ids.dtype != np.int64 or ids.shape != (X.shape[0],):
                problem = (f"row_ids has dtype {ids.dtype} and shape {ids.shape}; expected "
                           "int64 (n,)")
            elif np.unique(ids).size != ids.size:
                problem = "row_ids repeat within the block"
            if problem is not None:
                deque(blocks, maxlen=0)  # drain, so that Spark can reuse this Python worker
                break
            limit = max_abs_value(X.dtype)
            largest = max(largest, limit)
            if is_csr:
                value_rows = np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))
                finite = np.isfinite(y)
                finite[value_rows[~np.isfinite(X.data)]] = False
                huge = np.zeros(X.shape[0], dtype=bool)
                huge[value_rows[np.abs(X.data) > limit]] = True
            else:
                finite = np.isfinite(X).all(axis=1) & np.isfinite(y)
                huge = (np.abs(X) > limit).any(axis=1)
            if not finite.all():
                bad = ids[~finite]
                n_bad += int(bad.size)
                bad_ids.extend(int(i) for i in bad[:10 - len(bad_ids)])
            huge &= finite
            if huge.any():
                n_huge += int(huge.sum())
                huge_ids.extend(int(i) for i in ids[huge][:10 - len(huge_ids)])
            n_rows += int(X.shape[0])
            n_values += int(X.nnz if is_csr else X.size)
            any_sparse = any_sparse or is_csr
            if counts is not None:
                values, numbers = np.unique(y[finite], return_counts=True)
                for value, number in zip(values.tolist(), numbers.tolist()):
                    counts[value] = counts.get(value, 0) + number
                if len(counts) > max_labels:
                    counts = None
        yield (index, n_rows, n_bad, bad_ids, counts, problem, n_huge, huge_ids, largest,
               n_values, any_sparse)
    return summarize


def _shown_ids(summaries, field, total):
    """The first rows of ``field`` as their partition and row: the row ids of DataFrame
    blocks (text input names its lines in its reader's validation job)."""
    ids = [i for s in summaries for i in s[field]][:10]
    shown = ", ".join(f"row {i & ((1 << ROW_ID_SHIFT) - 1)} of partition {i >> ROW_ID_SHIFT}"
                      for i in ids)
    return shown + (f" and {total - len(ids)} more" if total > len(ids) else "")


def check_blocks(blocks_rdd, n_features, max_labels=1000, where=None):
    """One Spark job over the blocks: label counts and row total, or a ValueError (its message
    begins with ``where``, naming the data, when given).

    Returns ``BlockStats(label_counts, n_rows, row_width)``: ``label_counts`` maps each
    distinct label to its row count (``None`` if more than ``max_labels`` distinct values, e.g.
    regression targets). Raises ``ValueError`` when a row holds NaN or ±inf (in X or y) or a feature
    beyond ±``MAX_ABS_VALUE`` (1e100; 1e15 for float32 rows: kernels would overflow, see
    :data:`sodm_spark.core.validation.MAX_ABS_VALUE`), naming the first 10 rows by partition and
    row (the readers of text input refuse such lines first, naming them); when a block
    is malformed (dtype, shape, contiguity, ``n_features``); or when there are no rows.
    """
    n_features = check_n_features(n_features)
    summaries = sorted(blocks_rdd.mapPartitionsWithIndex(
        _summarize_blocks(n_features, max_labels)).collect(), key=lambda s: s[0])
    for summary in summaries:
        index, problem = summary[0], summary[5]
        if problem is not None:
            raise InputError(f"malformed block in partition {index}: {problem}. Blocks must "
                             "come from read_blocks/dataframe_to_blocks (or follow the Block "
                             "contract of sodm_spark.spark.io).")
    n_rows = sum(s[1] for s in summaries)
    if n_rows == 0:
        raise InputError("the data has no rows: every partition is empty. Check the input.")
    named = "" if where is None else f"{where}: "
    n_bad = sum(s[2] for s in summaries)
    if n_bad:
        raise DataFormatError(
            f"{named}{n_bad} row(s) contain NaN or infinity (in the features or the label): "
            f"{_shown_ids(summaries, 3, n_bad)} (0-based). Remove or impute those rows (or "
            "empty cells) before training.")
    n_huge = sum(s[6] for s in summaries)
    if n_huge:
        limit = min(s[8] for s in summaries if s[6])
        raise DataFormatError(
            f"{named}{n_huge} row(s) hold feature values beyond ±{limit:g}"
            f", whose squares overflow the kernels to NaN: {_shown_ids(summaries, 7, n_huge)} "
            "(0-based). Rescale those features (e.g. divide each column by its largest "
            "magnitude), or, if they are placeholders for missing values, remove those rows.")
    counts: dict | None = {}
    for summary in summaries:
        if summary[4] is None or counts is None:
            counts = None
            continue
        for value, number in summary[4].items():
            counts[value] = counts.get(value, 0) + number
    if counts is not None and len(counts) > max_labels:
        counts = None
    if counts is not None:
        counts = dict(sorted(counts.items()))
    width = int(n_features) if not any(s[10] for s in summaries) else \
        1.5 * sum(s[9] for s in summaries) / n_rows + 1.0
    return BlockStats(counts, n_rows, width)


def numpy_to_blocks(sc, X: Rows, y: np.ndarray, n_slices: int | None = None,
                    first_row_id: int = 0, weights=None):
    """An RDD of Blocks holding ``X``/``y`` (row ids = row numbers; ``weights``: each row's
    weight, positive, or None), for driver-side data; ``X`` dense (blocks of float64) or a
    scipy sparse matrix (blocks of float64 CSR).

    By default one slice per 5,000 rows (at least 2, at most 64): a function of the data only,
    not of how many executors have registered yet, so the partitioning seeded from these
    blocks is the same on every run.
    """
    n_slices = n_slices or int(np.clip(-(-X.shape[0] // 5000), 2, 64))
    bounds = np.linspace(0, X.shape[0], n_slices + 1).astype(int)
    if scipy.sparse.issparse(X):
        X = X.tocsr().astype(np.float64)
        X.sum_duplicates()

    def rows(a, b):
        return X[a:b] if scipy.sparse.issparse(X) else \
            np.ascontiguousarray(X[a:b], dtype=np.float64)

    pieces = [Block(rows(a, b), np.asarray(y[a:b], np.float64),
                    np.arange(a, b, dtype=np.int64) + first_row_id,
                    None if weights is None else np.asarray(weights[a:b], np.float64))
              for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
    return sc.parallelize(pieces, len(pieces))


def collect_blocks(blocks) -> tuple[np.ndarray, np.ndarray]:
    """All rows of a Block RDD on the driver, in row-id order (small data only)."""
    pieces = blocks.collect()
    ids = np.concatenate([b.row_ids for b in pieces])
    order = np.argsort(ids, kind="stable")
    return (stack_rows([b.X for b in pieces])[order],
            np.concatenate([b.y for b in pieces])[order])


@contextmanager
def sql_conf(spark, key, value):
    """``key`` set to ``value`` in the session for the block's duration, then restored."""
    conf = spark.conf
    previous = conf.get(key, None)
    conf.set(key, value)
    try:
        yield
    finally:
        if previous is None:
            conf.unset(key)
        else:
            conf.set(key, previous)
