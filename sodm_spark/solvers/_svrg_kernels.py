"""Numba loops of the SVRG inner steps on the linear-kernel ODM primal (see :mod:`.svrg` for
the math, SODM paper Sec. 3.3 and Algorithm 2 line 14): one over dense rows, one over CSR rows
in O(nnz(x_i)) a step. :func:`.svrg.svrg_inner` checks the inputs and calls them.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit


class Snapshot(NamedTuple):
    """The SVRG snapshot w̃ and ``mean_data_grad`` = grad_sum/M at it, so that the full gradient
    is μ̃ = penalized(w̃) + mean_data_grad (Alg. 2 line 9); with an intercept both hold (w, b)."""

    w: np.ndarray
    mean_data_grad: np.ndarray


class LossBand(NamedTuple):
    """The constants of c_i (Sec. 3.3): ``scale`` = λ/(1-θ)², the band [``lower``, ``upper``] =
    [1-θ, 1+θ] of margins without loss, and ``v``, the weight of the margins above it."""

    scale: float
    lower: float
    upper: float
    v: float


class Intercept(NamedTuple):
    """``fitted``: whether w[d] is the unpenalized bias b'; ``center``: the column means μ the
    rows are centred by (zeros: no centring; only used with ``fitted``)."""

    fitted: bool
    center: np.ndarray


class CSRRows(NamedTuple):
    """The rows as a CSR matrix's arrays, and its number of columns d."""

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    n_features: int


@njit(cache=True, inline="always")
def _coef(m, a, lower, upper, v):
    """c_i for margin m = y_i wᵀx_i (Sec. 3.3): the scalar in front of y_i x_i in ∇p_i."""
    if m < lower:
        return a * (m - lower)
    if m > upper:
        return a * v * (m - upper)
    return 0.0


@njit(cache=True, inline="always")
def _delta(yi, score, score_snap, a, lower, upper, v):
    """δ_i = (c_i(w) - c_i(w̃))·y_i from the scores of x̃_i under w and under the snapshot w̃."""
    return (_coef(yi * score, a, lower, upper, v) - _coef(yi * score_snap, a, lower, upper, v)) * yi


@njit(cache=True, inline="always")
def _dot(a, b, d):
    """Σ_{k<d} a_k·b_k, added in index order."""
    total = 0.0
    for k in range(d):
        total += a[k] * b[k]
    return total


@njit(cache=True)
def inner_dense(w, snapshot, X, y, rows, step, band, row_factor, intercept):
    """Alg. 2 line 14 over ``rows``: w ← (1-η)w - η·g - η·δ_i x̃_i, in place on ``w``, with
    (w̃, g) the ``snapshot``; row i's loss weighs ``a · row_factor[i]`` (a = ``band.scale``,
    the row's weight :func:`.svrg.row_factors`).

    The SVRG direction ∇p_i(w) - ∇p_i(w̃) + μ̃ with μ̃ = w̃ + g equals w + g + δ_i x̃_i,
    δ_i = (c_i(w) - c_i(w̃))·y_i. With ``intercept.fitted``, x̃_i = x_i - mu (mu =
    ``intercept.center``, 0: no centring) and w[d] is the unpenalized b': b' ← b' - η·g_b - η·δ_i
    (no decay).
    """
    w_snap, g = snapshot
    a, lower, upper, v = band
    has_bias, mu = intercept
    d = X.shape[1]
    decay = 1.0 - step
    for t in range(rows.shape[0]):
        i = rows[t]
        dot = 0.0
        dot_snap = 0.0
        if has_bias:
            dot = w[d]
            dot_snap = w_snap[d]
            for k in range(d):
                x = X[i, k] - mu[k]
                dot += x * w[k]
                dot_snap += x * w_snap[k]
        else:
            for k in range(d):
                dot += X[i, k] * w[k]
                dot_snap += X[i, k] * w_snap[k]
        delta = _delta(y[i], dot, dot_snap, a * row_factor[i], lower, upper, v)
        if has_bias:
            for k in range(d):
                w[k] = decay * w[k] - step * g[k] - step * delta * (X[i, k] - mu[k])
            w[d] -= step * (g[d] + delta)
        else:
            for k in range(d):
                w[k] = decay * w[k] - step * g[k] - step * delta * X[i, k]


@njit(cache=True)
def inner_csr(z, snapshot, csr, y, rows, step, band, row_factor, intercept):
    """The same steps as ``inner_dense`` in O(nnz(x_i)) each, on the CSR rows ``csr``.

    w is kept lazily as w = s·z + r·g + q·mu: the dense part (1-η)w - η·g + η·δ_i·mu of a step
    only updates the scalars (s ← (1-η)s, r ← (1-η)r - η, q ← (1-η)q + η·δ_i), and -η·δ_i x_i
    touches x_i's nonzeros of z (divided by s). The centred margin needs wᵀmu, kept from
    zᵀmu (updated with z, O(nnz)), gᵀmu and muᵀmu. When s underflows towards 0, z is rescaled
    once (O(d), rare). The bias b' (z[d] with ``intercept.fitted``) is not decayed, so it is
    kept apart as a plain scalar. Returns (s, r, q, b'); the caller materializes
    w = s·z + r·g + q·mu.
    """
    w_snap, g = snapshot
    indptr, indices, data, d = csr
    a, lower, upper, v = band
    has_bias, mu = intercept
    s = 1.0
    r = 0.0
    q = 0.0
    b = g_b = z_mu = g_mu = mu_mu = snap_mu = 0.0
    if has_bias:
        b = z[d]
        g_b = g[d]
        z_mu = _dot(z, mu, d)
        g_mu = _dot(g, mu, d)
        mu_mu = _dot(mu, mu, d)
        snap_mu = _dot(w_snap, mu, d) - w_snap[d]  # the snapshot's centred margin: - (w̃ᵀmu - b̃')
    decay = 1.0 - step
    for t in range(rows.shape[0]):
        i = rows[t]
        zx = 0.0
        gx = 0.0
        wx = 0.0
        mx = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            x = data[p]
            zx += z[j] * x
            gx += g[j] * x
            wx += w_snap[j] * x
            mx += mu[j] * x
        if has_bias:  # (s·z + r·g + q·mu)ᵀ(x_i - mu) + b'
            score = s * (zx - z_mu) + r * (gx - g_mu) + q * (mx - mu_mu) + b
            score_snap = wx - snap_mu
        else:
            score = s * zx + r * gx
            score_snap = wx
        delta = _delta(y[i], score, score_snap, a * row_factor[i], lower, upper, v)
        s *= decay
        r = decay * r - step
        if has_bias:
            q = decay * q + step * delta
            b -= step * (g_b + delta)
        if s < 1e-100:
            for k in range(d):
                z[k] *= s
            z_mu *= s
            s = 1.0
        f = step * delta / s
        if f != 0.0:
            for p in range(indptr[i], indptr[i + 1]):
                z[indices[p]] -= f * data[p]
            z_mu -= f * mx
    return s, r, q, b

