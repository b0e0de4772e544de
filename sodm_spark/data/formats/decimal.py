"""Correctly rounded decimal text -> float64 inside numba loops (pure numpy + numba, no Spark).

:func:`parse_decimal` reads one ASCII number token from a byte buffer. It agrees bit for bit
with Python's ``float()`` on every token it accepts; whatever it declines (more than 19
significant digits, results that are subnormal or overflow, ``nan``/``inf``, underscores) the
caller hands to ``float()``. Two exact routes:

* Clinger's fast path: a mantissa below 2**53 and a power of ten up to 10**22 are both exact
  doubles, so one IEEE multiply or divide rounds correctly.
* Eisel-Lemire (Lemire, "Number parsing at a gigabyte per second", 2021; fast_float's
  ``compute_float``): the mantissa times a 128-bit truncation of 5**q, with its rounding rules;
  the 128-bit table is built here from Python integers, exactly.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

#: Powers of ten in the Eisel-Lemire table; results that would be subnormal or infinite are
#: declined (``ok`` False) and left to ``float()``.
SMALLEST_POWER, LARGEST_POWER = -342, 308


def _power_of_five_table():
    """fast_float's 128-bit powers of five for q in [-342, 308], as (high, low) uint64 pairs."""
    rows = []
    for q in range(SMALLEST_POWER, LARGEST_POWER + 1):
        if q < 0:
            power5 = 5 ** -q
            z = power5.bit_length() if power5 & (power5 - 1) else power5.bit_length() - 1
            if q >= -27:
                c = 2 ** (z + 127) // power5 + 1
            else:
                c = 2 ** (2 * z + 128) // power5 + 1
                while c >= 1 << 128:
                    c //= 2
        else:
            c = 5 ** q
            while c < 1 << 127:
                c *= 2
            while c >= 1 << 128:
                c //= 2
        rows.append((c >> 64, c & ((1 << 64) - 1)))
    return np.array(rows, dtype=np.uint64)


_POW5 = _power_of_five_table()
_POW10 = np.array([10.0 ** k for k in range(23)])
_MASK32 = np.uint64(0xFFFFFFFF)
_ALL_ONES = np.uint64(0xFFFFFFFFFFFFFFFF)


@njit(cache=True, inline="always")
def _full_multiply(a, b):
    """(high, low) 64-bit words of the 128-bit product of two uint64."""
    a_lo, a_hi = a & _MASK32, a >> np.uint64(32)
    b_lo, b_hi = b & _MASK32, b >> np.uint64(32)
    p0, p1, p2, p3 = a_lo * b_lo, a_lo * b_hi, a_hi * b_lo, a_hi * b_hi
    middle = (p0 >> np.uint64(32)) + (p1 & _MASK32) + (p2 & _MASK32)
    low = (p0 & _MASK32) | (middle << np.uint64(32))
    high = p3 + (p1 >> np.uint64(32)) + (p2 >> np.uint64(32)) + (middle >> np.uint64(32))
    return high, low


@njit(cache=True, inline="always")
def _leading_zeros(w):
    n = 0
    for shift in (32, 16, 8, 4, 2, 1):
        if (w >> np.uint64(64 - shift)) == np.uint64(0):
            w = w << np.uint64(shift)
            n += shift
    return n


@njit(cache=True)
def decimal_to_double(w, q):
    """``w * 10**q`` correctly rounded, for a uint64 ``w`` > 0; ``(value, ok)``.

    ``ok`` is False only where the result would be subnormal, infinite, or the product's
    truncation leaves the rounding undecided (then the caller uses ``float()``).
    """
    if w <= np.uint64(1 << 53) and -22 <= q <= 22:  # Clinger: both operands exact
        value = np.float64(w)
        return (value * _POW10[q] if q >= 0 else value / _POW10[-q]), True
    if q < SMALLEST_POWER or q > LARGEST_POWER:
        return 0.0, False
    lz = _leading_zeros(w)
    w = w << np.uint64(lz)
    index = q - SMALLEST_POWER
    high, low = _full_multiply(w, _POW5[index, 0])
    if (high & np.uint64(0x1FF)) == np.uint64(0x1FF):  # 55 bits of precision may be short
        second_high, _ = _full_multiply(w, _POW5[index, 1])
        low = low + second_high
        if second_high > low:
            high = high + np.uint64(1)
    if low == _ALL_ONES and (q < -27 or q > 55):
        return 0.0, False
    upper_bit = np.int64(high >> np.uint64(63))
    shift = np.uint64(upper_bit + 9)
    mantissa = high >> shift
    power2 = (((152170 + 65536) * q) >> 16) + 63 + upper_bit - lz + 1023
    if power2 <= 0:
        return 0.0, False
    if (low <= np.uint64(1) and -4 <= q <= 23 and (mantissa & np.uint64(3)) == np.uint64(1)
            and (mantissa << shift) == high):  # exactly halfway: round to even
        mantissa = mantissa & ~np.uint64(1)
    mantissa = mantissa + (mantissa & np.uint64(1))
    mantissa = mantissa >> np.uint64(1)
    if mantissa >= np.uint64(2 << 52):
        mantissa = np.uint64(1 << 52)
        power2 += 1
    if power2 >= 0x7FF:
        return 0.0, False
    # mantissa holds the implicit bit (< 2**53): the float64 conversion and ldexp are exact
    return math.ldexp(np.float64(mantissa), power2 - 1075), True


@njit(cache=True, inline="always")
def _digit_run(buf, i, end, w, n_digits, fraction):
    """Add a run of digits at ``buf[i:]`` to the mantissa ``w`` (19 significant digits at most).

    Returns ``(i, w, n_digits, scale, seen, ok)``: ``scale`` is the power of ten the run adds
    (-1 per kept fraction digit; +1 per integer zero dropped beyond 19 digits), ``seen``
    whether there was a digit, ``ok`` False at a nonzero digit beyond the 19th.
    """
    scale = 0
    seen = False
    while i < end and 48 <= buf[i] <= 57:
        seen = True
        digit = buf[i] - 48
        if n_digits < 19:
            if w != 0 or digit != 0:
                w = w * np.uint64(10) + np.uint64(digit)
                n_digits += 1
            if fraction:
                scale -= 1
        elif digit != 0:
            return i, w, n_digits, scale, seen, False
        elif not fraction:
            scale += 1
        i += 1
    return i, w, n_digits, scale, seen, True


@njit(cache=True)
def parse_decimal(buf, i, end):
    """Parse ``[+-]digits[.digits][(e|E)[+-]digits]`` at ``buf[i:end]`` (uint8).

    Returns ``(value, next_i, ok)``; ``next_i`` is the first byte after the number (the caller
    checks that a delimiter follows). ``ok`` is False for anything else Python's ``float()``
    might still accept or reject (no digits, ``nan``, ``1_0``, > 19 significant digits,
    subnormal or overflowing results): the caller falls back to ``float()`` on the whole token.
    """
    negative = False
    if i < end and (buf[i] == 43 or buf[i] == 45):  # + -
        negative = buf[i] == 45
        i += 1
    i, w, n_digits, exponent, any_digit, ok = _digit_run(buf, i, end, np.uint64(0), 0, False)
    if not ok:
        return 0.0, i, False
    if i < end and buf[i] == 46:  # .
        i, w, n_digits, scale, any_fraction, ok = _digit_run(buf, i + 1, end, w, n_digits, True)
        if not ok:
            return 0.0, i, False
        exponent += scale
        any_digit = any_digit or any_fraction
    if not any_digit:
        return 0.0, i, False
    if i < end and (buf[i] == 101 or buf[i] == 69):  # e E
        i += 1
        exponent_negative = False
        if i < end and (buf[i] == 43 or buf[i] == 45):
            exponent_negative = buf[i] == 45
            i += 1
        if not (i < end and 48 <= buf[i] <= 57):
            return 0.0, i, False
        written = 0
        while i < end and 48 <= buf[i] <= 57:
            if written < 100000:
                written = written * 10 + (buf[i] - 48)
            i += 1
        exponent += -written if exponent_negative else written
    if w == np.uint64(0):
        return (-0.0 if negative else 0.0), i, True
    value, ok = decimal_to_double(w, exponent)
    return (-value if negative else value), i, ok
