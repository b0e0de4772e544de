"""The numba LIBSVM buffer parser against Python's own parsing (no Spark).

References: ``float()`` (correctly rounded, David Gay's dtoa) for every number token, bit for
bit; :func:`parse_libsvm_line` line by line for whole buffers (values, columns, labels, line
numbers, and the first error with its description); scipy for the CSR -> dense scatter.
"""
from decimal import Decimal

import numpy as np
import pytest
import scipy.sparse
from numba import njit

from sodm_spark.data.formats.decimal import parse_decimal
from sodm_spark.data.formats.libsvm import (LineProblem, csr_to_dense, parse_libsvm_line,
                                            parse_libsvm_text)


@njit(cache=True)
def _parse_tokens(buf, starts, ends, out, accepted):
    for k in range(starts.size):
        value, stop, ok = parse_decimal(buf, starts[k], ends[k])
        out[k] = value
        accepted[k] = ok and stop == ends[k]


def _tokens(rng):
    tokens = [repr(float(v)) for v in rng.random(20000)]  # 16-17 digit mantissas
    wide = rng.standard_normal(20000) * 10.0 ** rng.integers(-320, 308, 20000)
    tokens += [repr(float(v)) for v in wide if np.isfinite(v)]
    tokens += ["%.*e" % (int(p), v) for p, v in zip(rng.integers(0, 25, 10000),
                                                    rng.standard_normal(10000) * 1e3)]
    tokens += ["%.*f" % (int(p), v) for p, v in zip(rng.integers(0, 22, 10000),
                                                    rng.random(10000) * 1e3)]
    for _ in range(20000):  # random digit strings, any point position, wide exponents
        digits = "".join(map(str, rng.integers(0, 10, int(rng.integers(1, 22)))))
        cut = int(rng.integers(0, len(digits) + 1))
        token = digits[:cut] + "." + digits[cut:]
        if rng.random() < 0.5:
            token += f"e{int(rng.integers(-340, 320))}"
        tokens.append(token)
    for _ in range(5000):  # exact midpoints between neighbouring doubles: round to even
        v = float(rng.random() * 10.0 ** int(rng.integers(-15, 20)))
        midpoint = (Decimal(v) + Decimal(float(np.nextafter(v, np.inf)))) / 2
        tokens.append(format(midpoint, "e"))
    tokens += ["0", "-0", "0.0", "+1", "-1", "1.", ".5", "-.5e-3", "1e22", "1e23",
               "9007199254740992", "9007199254740993", "1.7976931348623157e308", "1e309",
               "2.2250738585072014e-308", "4.9e-324", "123456789012345678901234",
               "0.000000000000000000000000001234", "1" + "0" * 30, "0." + "0" * 30 + "1"]
    return tokens


def test_parse_decimal_matches_float_bit_for_bit():
    tokens = _tokens(np.random.default_rng(7))
    data = " ".join(tokens).encode()
    lengths = np.array([len(t) for t in tokens])
    starts = np.concatenate([[0], np.cumsum(lengths + 1)[:-1]])
    out, accepted = np.empty(len(tokens)), np.zeros(len(tokens), dtype=bool)
    _parse_tokens(np.frombuffer(data, np.uint8), starts, starts + lengths, out, accepted)
    reference = np.array([float(t) for t in tokens])
    assert accepted[:20000].all()  # the fast route takes every shortest repr in [0, 1) ...
    np.testing.assert_array_equal(out[accepted].view(np.uint64),
                                  reference[accepted].view(np.uint64))
    declined = [t for t, ok in zip(tokens, accepted) if not ok]
    assert "123456789012345678901234" in declined and "1e309" in declined  # ... not these
    assert "4.9e-324" in declined  # subnormal


def _line_by_line(text, n_features=None):
    labels, cols, vals, lines = [], [], [], []
    for number, line in enumerate(text.split("\n")):
        parsed = parse_libsvm_line(line, n_features)
        if parsed is not None:
            labels.append(parsed[0])
            cols.append(parsed[1])
            vals.append(parsed[2])
            lines.append(number)
    return labels, cols, vals, lines


def _assert_same_rows(parsed, reference):
    labels, cols, vals, lines = reference
    np.testing.assert_array_equal(parsed.labels, labels)
    np.testing.assert_array_equal(parsed.row_lines, lines)
    np.testing.assert_array_equal(np.diff(parsed.indptr), [c.size for c in cols])
    np.testing.assert_array_equal(parsed.indices, np.concatenate(cols))
    np.testing.assert_array_equal(np.concatenate(vals).view(np.uint64),
                                  parsed.values.view(np.uint64))


def test_buffer_parser_agrees_with_the_line_parser_on_mixed_lines():
    rng = np.random.default_rng(3)
    lines = []
    for _ in range(400):
        columns = np.sort(rng.choice(60, size=int(rng.integers(0, 12)), replace=False)) + 1
        values = rng.standard_normal(columns.size).tolist()
        pairs = " ".join(f"{c}:{v!r}" for c, v in zip(columns, values))
        lines.append(f"{rng.choice(['1', '-1', '+1', '0', '2.5'])} {pairs}")
    # everything the fast loop hands over to Python, and what it takes itself
    lines[5] = "1 3:nan 4:inf"
    lines[9] = "-1\t2:0.5\r"
    lines[13] = "1 2:0.1234567890123456789012345"  # > 19 digits
    lines[17] = "1 7:1_000"
    lines[21] = "   # a comment"
    lines[25] = ""
    lines[29] = "1 2:0.5 # trailing comment 9:9"
    lines[33] = "1\u00a02:1"  # a non-ASCII space
    lines[37] = "1 2:4.9e-324 3:1e-320"  # subnormal
    lines[41] = "1#2:3"
    lines[45] = "nan 1:1"
    lines[49] = "1 03:2"  # leading zero index
    text = "\n".join(lines)
    parsed = parse_libsvm_text(text.encode())
    assert parsed.error is None and parsed.n_lines == len(lines)
    _assert_same_rows(parsed, _line_by_line(text))
    limited = parse_libsvm_text(text.encode(), n_features=60)
    _assert_same_rows(limited, _line_by_line(text, 60))


@pytest.mark.parametrize("bad", ["1 0:1.5", "1 3:1 2:1", "1 2:1 2:4", "1 2:abc", "1 2=0.5",
                                 "yes 1:1", "1 2:", "1 2:0.5:1", "3:1 4:1", "1 2:1 qid:3",
                                 "1 61:1", "1 -2:1"])
def test_buffer_parser_reports_the_first_bad_line_as_the_line_parser_does(bad):
    text = "1 1:1\n# comment\n\n" + bad + "\n-1 2:1\n1 0:9\n"
    parsed = parse_libsvm_text(text.encode(), n_features=60)
    with pytest.raises(LineProblem) as expected:
        parse_libsvm_line(bad, 60)
    assert parsed.error == (3, expected.value.as_tuple())
    assert parsed.labels.tolist() == [1.0]  # parsing stopped at the bad line


def test_bytes_that_are_not_utf8_are_reported_as_not_text():
    parsed = parse_libsvm_text(b"1 1:1\n1 2:\xff\xfe\n")
    assert parsed.error[0] == 1 and parsed.error[1][1] == "the line is not UTF-8 text"


def test_line_count_and_trailing_newlines():
    assert parse_libsvm_text(b"").n_lines == 0
    assert parse_libsvm_text(b"1 1:1\n").n_lines == 1
    assert parse_libsvm_text(b"1 1:1\n\n").n_lines == 2
    parsed = parse_libsvm_text(b"\n\n2 3:4")
    assert parsed.n_lines == 3 and parsed.row_lines.tolist() == [2]


def test_csr_to_dense_matches_scipy():
    matrix = scipy.sparse.random(50, 30, density=0.2, format="csr", random_state=0)
    dense = csr_to_dense(matrix.indptr.astype(np.int64), matrix.indices.astype(np.int64),
                         matrix.data, 30)
    np.testing.assert_array_equal(dense, matrix.toarray())
    assert dense.flags.c_contiguous and dense.dtype == np.float64
