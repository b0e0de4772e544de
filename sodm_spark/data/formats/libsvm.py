"""LIBSVM text -> arrays, pure numpy + numba (no Spark): one line, or a whole buffer of lines.

* :func:`parse_libsvm_line` parses one line in Python and explains what is wrong with a bad one
  (which token, why, what to do).
* :func:`parse_libsvm_text` parses a buffer of many lines in a numba loop (numbers through
  :mod:`sodm_spark.data.formats.decimal`, correctly rounded), about 20x faster than line by line.
  Any line the loop does not accept as plain ASCII ``label [qid:N] index:value ...`` (an error,
  ``nan``, a non-ASCII byte, a 20-digit mantissa) goes to :func:`parse_libsvm_line`, so the two
  agree on every line: same values to the bit, same errors. (A file is parsed by the loop on
  the executors and by the line parser where the loop gives up: if they disagreed, a line's
  row would depend on what else is in its buffer.)

The format is SVMlight's, as scikit-learn's ``load_svmlight_file`` reads it: a line is
``label [qid:N] index:value ... [# comment]``. ``qid:N`` (a ranking query id, N a non-negative
integer written in ASCII digits) may come once, right after the label; rankers group rows by it,
classifiers do not need it, so it is skipped unless asked for (``query_ids=True``). ``#`` starts
a comment wherever it is, also straight after a value (``1:0.5#x`` is ``1:0.5``), as
scikit-learn cuts a line at its first ``#``; a line that is only a comment, or blank, has no row.
"""
from __future__ import annotations

from collections import namedtuple
from itertools import repeat
from operator import contains

import numpy as np
from numba import njit

from ...core.errors import InputError
from .decimal import parse_decimal

__all__ = ["parse_libsvm_line", "parse_libsvm_text", "ParsedText", "LineProblem",
           "NOT_TEXT", "NO_QID", "described"]

_EMPTY_COLS = np.empty(0, dtype=np.int64)
_EMPTY_VALS = np.empty(0, dtype=np.float64)
_EMPTY_COLS.setflags(write=False)
_EMPTY_VALS.setflags(write=False)



class LineProblem(InputError):
    """A problem with one LIBSVM line, before we know which file and line it came from (bad
    input data, so an :class:`~sodm_spark.core.errors.InputError`, hence a ValueError)."""

    def __init__(self, token, problem, advice):
        super().__init__(f"{problem}. {advice}")
        self.token, self.problem, self.advice = token, problem, advice

    def as_tuple(self):  # plain, picklable description to send from a task to the driver
        return self.token, self.problem, self.advice


_ADVICE_PAIR = ("Write every feature as index:value with no spaces around ':' "
                "(e.g. '1 3:0.5 7:1'), or remove the line")
_ADVICE_ZERO = ("LIBSVM indices are 1-based (the first feature is 1:...). If the file was "
                "written 0-based (e.g. scikit-learn's dump_svmlight_file with its default "
                "zero_based=True), rewrite it with zero_based=False or add 1 to every index")
_ADVICE_ORDER = ("Indices within a line must be strictly increasing: sort each line's "
                 "index:value pairs and merge duplicated indices")


_ADVICE_QID = ("A line may hold one query id, qid:N with N a whole number (0, 1, 2, ...), "
               "right after the label (e.g. '1 qid:3 1:0.5 2:1'); move it there or remove "
               "the others")
#: The largest query id: an int64's.
MAX_QID = 2**63 - 1
#: The query id of a row whose line has no ``qid:N`` (query ids are never negative).
NO_QID = -1


def _query_id(token):
    """The query id N of a ``qid:N`` token, or a :class:`LineProblem` if N is not a
    non-negative integer (ASCII digits only: what the buffer loop reads) that fits an int64."""
    value = token[4:]
    if not (value.isascii() and value.isdigit()):
        raise LineProblem(token, f"the query id {value!r} in token {token!r} is not a "
                          "non-negative integer (digits 0-9 only)", _ADVICE_QID)
    digits = value.lstrip("0")  # int() refuses strings of over 4,300 digits
    if len(digits) > len(str(MAX_QID)) or int(value) > MAX_QID:
        raise LineProblem(token, f"the query id in token {token!r} is larger than "
                          f"{MAX_QID} (an int64)", _ADVICE_QID)
    return int(value)


def _diagnose_pairs(tokens, had_qid=False):
    """Find the first malformed ``index:value`` token and raise a :class:`LineProblem`
    (``had_qid``: the line's query id came before ``tokens``)."""
    for tok in tokens:
        if tok.startswith("qid:"):  # a query id is only taken right after the label
            what = "a second query id" if had_qid else \
                "a query id after the first index:value pair"
            raise LineProblem(tok, f"token {tok!r} is {what}", _ADVICE_QID)
        parts = tok.split(":")
        if len(parts) != 2 or not parts[0] or not parts[1]:
            raise LineProblem(tok, f"token {tok!r} is not of the form index:value",
                               _ADVICE_PAIR)
        index, value = parts
        try:
            int(index)
        except ValueError:
            raise LineProblem(tok, f"index {index!r} in token {tok!r} is not an integer",
                               "Indices must be positive integers (1-based)") from None
        try:
            float(value)
        except ValueError:
            raise LineProblem(tok, f"value {value!r} in token {tok!r} is not a number",
                               "Fix the value (a decimal number such as 0.5 or 1e-3) or "
                               "remove the line") from None
    raise LineProblem(" ".join(tokens), "the index:value pairs could not be parsed",
                       _ADVICE_PAIR)


def parse_libsvm_line(line, n_features=None, query_id=False):
    """Parse one LIBSVM line ``label [qid:N] idx:val idx:val ...`` (1-based, increasing
    indices).

    Returns ``None`` for a blank or comment-only line (anything after ``#`` is a comment), else
    ``(label, cols, vals)`` with ``cols`` the 0-based column numbers (``index - 1``, int64,
    strictly increasing) and ``vals`` float64; with ``query_id`` ``(label, cols, vals, qid)``,
    ``qid`` the line's query id or :data:`NO_QID` (-1) without one. Raises ``ValueError`` (an
    internal subclass with ``token``/``problem``/``advice``; callers add the file and line) for
    a non-numeric label or value, a token that is not ``index:value``, a query id that is not
    a non-negative integer or is not right after the label (or a second one), an index < 1,
    unsorted or duplicated indices, or an index above ``n_features``. ``nan``/``inf`` values
    parse; :func:`check_blocks` refuses them later. Shared by :func:`read_libsvm_local` and the
    Spark readers.
    """
    cut = line.find("#")
    if cut >= 0:
        line = line[:cut]
    tokens = line.split()
    if not tokens:
        return None
    label_token = tokens[0]
    try:
        label = float(label_token)
    except ValueError:
        if ":" in label_token:
            raise LineProblem(label_token, f"the line starts with {label_token!r} instead of "
                               "a label", "Every LIBSVM line starts with a numeric label "
                               "(e.g. '+1 3:0.5'); add the label or remove the line") from None
        raise LineProblem(label_token, f"the label {label_token!r} is not a number",
                           "Labels must be numbers (e.g. 0/1 or -1/+1); map class names "
                           "to numbers first") from None
    rest = tokens[1:]
    qid = NO_QID
    if rest and rest[0].startswith("qid:"):
        qid = _query_id(rest[0])
        rest = rest[1:]
    found = _parse_pairs(rest, n_features, qid >= 0)
    return (label, *found, qid) if query_id else (label, *found)


def _parse_pairs(rest, n_features, had_qid):
    """``(cols, vals)`` of a line's ``index:value`` tokens ``rest`` (:func:`parse_libsvm_line`)."""
    n = len(rest)
    if n == 0:
        return _EMPTY_COLS, _EMPTY_VALS
    # Fast path: split all pairs at once and let numpy parse the numbers; any failure falls
    # through to a token-by-token diagnosis that names the culprit.
    pieces = " ".join(rest).replace(":", " ").split()
    if len(pieces) != 2 * n or not all(map(contains, rest, repeat(":"))):
        _diagnose_pairs(rest, had_qid)  # always raises
    try:
        index = np.array(pieces[0::2], dtype=np.int64)
        vals = np.array(pieces[1::2], dtype=np.float64)
    except (ValueError, OverflowError):
        _diagnose_pairs(rest, had_qid)
        raise  # unreachable: _diagnose_pairs always raises
    # Index checks; report the first offending token in line order.
    low = np.flatnonzero(index < 1)
    order = np.flatnonzero(np.diff(index) <= 0) + 1
    high = (np.flatnonzero(index > n_features) if n_features is not None
            else _EMPTY_COLS)
    first = min(a[0] if a.size else n for a in (low, order, high))
    if first < n:
        tok, i = rest[first], int(index[first])
        if low.size and low[0] == first:
            if i == 0:
                raise LineProblem(tok, f"index 0 in token {tok!r}", _ADVICE_ZERO)
            raise LineProblem(tok, f"negative index {i} in token {tok!r}",
                               "Indices must be positive integers (1-based)")
        if order.size and order[0] == first:
            prev = int(index[first - 1])
            what = (f"index {i} in token {tok!r} repeats the previous index" if prev == i
                    else f"index {i} in token {tok!r} comes after index {prev}")
            raise LineProblem(tok, what, _ADVICE_ORDER)
        raise LineProblem(tok, f"index {i} in token {tok!r} exceeds n_features={n_features}, "
                           "the features expected",
                           "Give rows with the expected features (a model scores the ones it "
                           "was trained on), or pass n_features=None to read the largest index")
    return index - 1, vals


NOT_TEXT = ("the line is not UTF-8 text", "Is the file compressed or binary? Decompress it "
            "(or give it a .gz/.bz2 name), or re-save it as UTF-8 text")


def described(problem, line):
    """The problem tuple of a bad line; Hadoop replaces undecodable bytes by U+FFFD, so a line
    holding one is reported as not being text rather than by the token it garbled."""
    return (None, *NOT_TEXT) if "\ufffd" in line else problem.as_tuple()


# ----------------------------------------------------------------------------------------------
# A buffer of lines
# ----------------------------------------------------------------------------------------------

ParsedText = namedtuple("ParsedText", "labels indptr indices values row_lines n_lines error qids",
                        defaults=(None,))
ParsedText.__doc__ = """Rows of a LIBSVM buffer in CSR form: ``labels`` float64 (n,), ``indptr``
int64 (n + 1,), ``indices`` int64 0-based columns (strictly increasing within a row), ``values``
float64, ``row_lines`` int64 0-based line of each row in the buffer (blank and comment lines
have a number but no row), ``n_lines`` lines read, ``error`` ``None`` or ``(line, (token,
problem, advice))`` for the first bad line (parsing stops there), ``qids`` int64 (n,) each
row's query id (:data:`NO_QID` for a line without ``qid:N``) when asked for, else None."""


@njit(cache=True, inline="always")
def _is_space(c):
    """ASCII whitespace as ``str.split()`` sees it, other than the line end."""
    return c == 32 or 9 <= c <= 13 and c != 10 or 28 <= c <= 31


@njit(cache=True, inline="always")
def _ends_token(buf, i, n):
    return i >= n or buf[i] == 10 or buf[i] == 35 or _is_space(buf[i])


RowBuffers = namedtuple("RowBuffers", "labels indptr indices values row_lines qids")
RowBuffers.__doc__ = """The arrays :func:`_parse_rows` fills, sized for the whole buffer:
:class:`ParsedText`'s first five fields and ``qids`` before they are cut to the rows read
(``qids`` empty when the query ids are not asked for: the loop then skips them)."""
ParseCursor = namedtuple("ParseCursor", "pos line n_rows nnz")
ParseCursor.__doc__ = """Where a parse of a buffer stands: ``pos`` the byte the next line
starts at, ``line`` its 0-based number, ``n_rows`` and ``nnz`` the rows and values written."""


@njit(cache=True)
def _parse_rows(buf, limit, out, at):
    """Parse lines from ``buf[at.pos]`` on (a :class:`ParseCursor`), appending rows to ``out``
    (:class:`RowBuffers`); stop at the end or at a line the loop does not take. Returns
    ``(pos, line, n_rows, nnz, handed_over)``; when ``handed_over`` the line starting at
    ``pos`` is for :func:`parse_libsvm_line`."""
    labels, indptr, indices, values, row_lines, qids = out
    keep_qids = qids.size > 0
    pos, line, n_rows, nnz = at
    n = buf.size
    while pos < n:
        start = pos
        while pos < n and _is_space(buf[pos]):
            pos += 1
        if pos >= n or buf[pos] == 10 or buf[pos] == 35:  # blank or comment-only line
            while pos < n and buf[pos] != 10:
                pos += 1
            pos += 1
            line += 1
            continue
        label, pos, ok = parse_decimal(buf, pos, n)
        if not ok or not _ends_token(buf, pos, n):
            return start, line, n_rows, nnz, True
        while pos < n and _is_space(buf[pos]):
            pos += 1
        qid = -1  # NO_QID
        if pos + 3 < n and buf[pos] == 113 and buf[pos + 1] == 105 and buf[pos + 2] == 100 \
                and buf[pos + 3] == 58:  # "qid:" right after the label: a query id
            qid, digits = 0, 0
            pos += 4
            while pos < n and 48 <= buf[pos] <= 57 and digits < 18:
                qid = qid * 10 + (buf[pos] - 48)
                digits += 1
                pos += 1
            if digits == 0 or not _ends_token(buf, pos, n):  # not N, or 19+ digits
                return start, line, n_rows, nnz, True
        row_start, previous = nnz, 0
        while True:
            while pos < n and _is_space(buf[pos]):
                pos += 1
            if pos >= n or buf[pos] == 10 or buf[pos] == 35:
                break
            index, digits = 0, 0
            while pos < n and 48 <= buf[pos] <= 57 and digits < 18:
                index = index * 10 + (buf[pos] - 48)
                digits += 1
                pos += 1
            if digits == 0 or pos >= n or buf[pos] != 58 or index <= previous \
                    or (limit > 0 and index > limit):  # not ':', unsorted, 0, too large
                return start, line, n_rows, row_start, True
            value, pos, ok = parse_decimal(buf, pos + 1, n)
            if not ok or not _ends_token(buf, pos, n):
                return start, line, n_rows, row_start, True
            indices[nnz] = index - 1
            values[nnz] = value
            nnz += 1
            previous = index
        while pos < n and buf[pos] != 10:  # the rest is a comment
            pos += 1
        labels[n_rows] = label
        row_lines[n_rows] = line
        if keep_qids:
            qids[n_rows] = qid
        n_rows += 1
        indptr[n_rows] = nnz
        pos += 1
        line += 1
    return pos, line, n_rows, nnz, False


def parse_libsvm_text(data, n_features=None, query_ids=False):
    """Parse ``data`` (bytes: UTF-8 lines joined by ``\\n``) into a :class:`ParsedText`.

    Same rules as :func:`parse_libsvm_line` (1-based increasing indices, an optional
    ``qid:N`` right after the label, ``#`` comments, an index above ``n_features`` is an
    error); the first bad line stops parsing and is reported in ``error`` with its 0-based
    line number, as :func:`parse_libsvm_line` describes it. ``query_ids``: fill ``qids`` with
    each row's query id (:data:`NO_QID` where its line has none); else they are checked and
    skipped, and ``qids`` is None.
    """
    data = bytes(data)
    buf = np.frombuffer(data, dtype=np.uint8)
    row_capacity = data.count(b"\n") + 1
    nnz_capacity = data.count(b":")
    labels = np.empty(row_capacity)
    indptr = np.zeros(row_capacity + 1, dtype=np.int64)
    indices = np.empty(nnz_capacity, dtype=np.int64)
    values = np.empty(nnz_capacity)
    row_lines = np.empty(row_capacity, dtype=np.int64)
    qids = np.empty(row_capacity if query_ids else 0, dtype=np.int64)
    out = RowBuffers(labels, indptr, indices, values, row_lines, qids)
    limit = 0 if n_features is None else int(n_features)
    pos = line = n_rows = nnz = 0
    error = None
    while True:
        pos, line, n_rows, nnz, handed_over = _parse_rows(buf, limit, out,
                                                          ParseCursor(pos, line, n_rows, nnz))
        if not handed_over:
            break
        end = data.find(b"\n", pos)
        end = len(data) if end < 0 else end
        try:
            text = data[pos:end].decode("utf-8")
        except UnicodeDecodeError:
            error = (line, (None, *NOT_TEXT))
            break
        try:
            parsed = parse_libsvm_line(text, n_features, query_id=True)
        except LineProblem as problem:
            error = (line, described(problem, text))
            break
        if parsed is not None:
            label, cols, vals, qid = parsed
            indices[nnz:nnz + cols.size] = cols
            values[nnz:nnz + cols.size] = vals
            nnz += cols.size
            labels[n_rows] = label
            row_lines[n_rows] = line
            if query_ids:
                qids[n_rows] = qid
            n_rows += 1
            indptr[n_rows] = nnz
        pos, line = end + 1, line + 1
    return ParsedText(labels[:n_rows], indptr[:n_rows + 1], indices[:nnz], values[:nnz],
                      row_lines[:n_rows], line, error, qids[:n_rows] if query_ids else None)


@njit(cache=True)
def csr_to_dense(indptr, indices, values, d):
    """Dense C-contiguous float64 (n, d) from CSR arrays (no scipy round trip)."""
    n = indptr.size - 1
    X = np.zeros((n, d))
    for r in range(n):
        for k in range(indptr[r], indptr[r + 1]):
            X[r, indices[k]] = values[k]
    return X
