"""CSVRG: coreset stochastic variance-reduced gradient for kernel ODM and SVMs (the CSVRG paper:
Tan, Zhang & Wang, "Coreset Stochastic Variance-Reduced Gradient with Application to Optimal
Margin Distribution Machine", AAAI 2019).

The model ``w = Σ_r σ_r φ(c_r)`` over r core points is trained by Algorithm 1: SVRG epochs
with coreset-approximated gradients (Eqns 6-9): the loss derivative at the sampled row's own
margin (Eqn 4, Remark 5's m×r kernel) times φ(c_t), its nearest core point (line 8). O(r)/step.

Objective ``f(w) = ½‖w‖² + (1/m) Σ_i ℓ(y_i wᵀφ(x_i))`` with

* ``odm`` (docs/design.md §1): ``ℓ(z) = λ/(2(1-θ)²)·(max(0, 1-θ-z)² + v·max(0, z-1-θ)²)``. The
  paper's ODM has ``λ_paper/m Σ (ξ² + μ ε²)/(1-θ)²``: ``λ_paper = λ/2``, ``μ = v``; Theorem
  1's radius becomes ``H = sqrt(λ/2·((1-θ)² + v(1+θ)²))/(1-θ)`` (≥ the dual bound √(λ/2)).
* ``hinge`` / ``squared_hinge``: Eqn 3 as written, ``ℓ = λ·max(0, 1-z)`` or
  ``λ·max(0, 1-z)²`` (λ/m is scikit-learn's C, no intercept). Theorem 1's radius λ for the
  squared hinge is below the dual bound √λ when λ < 1: ``max(λ, √λ)`` is used. The hinge is
  not projected (line 17).

Coreset (Definitions 1-2, Remark 1): :mod:`.csvrg_coreset` covers the rows with cells of
diameter ≤ δ in a seeded online pass and moves every row to its nearest core point (line 8).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
from numba import njit

from ..core.kernels import Kernel, iter_kernel_blocks, kernel_matrix
from ..core.validation import check_odm_params
from ..solvers.svrg import SVRGSchedule, epoch_rng, sample_rows
from .csvrg_coreset import METRICS, Coreset, CoverageSettings, build_coreset

LOSSES = {"odm": 0, "hinge": 1, "squared_hinge": 2}


@dataclass(frozen=True)
class MarginLoss:
    """The loss ℓ of f(w) (module docstring): ``kind`` 'odm' with the λ, θ, v of docs/design.md
    §1 (those of ``solvers.dcd_settings.ODMHyperparameters``), or 'hinge' / 'squared_hinge' with the λ of
    Eqn 3 (θ and v unused)."""

    lam: float = 1.0
    theta: float = 0.1
    v: float = 0.5
    kind: str = "odm"


@dataclass(frozen=True)
class CSVRGSchedule(SVRGSchedule):
    """SVRG's schedule (epochs, inner steps, step η: None for 1/(2L), relative_change_tol: 0
    runs every epoch, seed) with Algorithm 1's choices: ``option`` 'I' (the next snapshot is
    the last iterate) or 'II' (a random one), lines 20-21; ``step_decay``: η/s in epoch s
    (None: for the hinge only, which is not smooth, so outside Theorem 8)."""

    relative_change_tol: float = 0.0
    seed: int = 0  # one int: it seeds the coreset's order, and (seed, 1) the row draws
    step_decay: bool | None = None
    option: str = "I"


@dataclass(frozen=True)
class KernelCache:
    """Where the m×r kernel of rows and core points lives: cached in ``dtype`` when it fits
    ``cache_mb``, else recomputed every epoch in blocks of ``chunk_rows`` rows."""

    cache_mb: float = 1024.0
    dtype: type = np.float32
    chunk_rows: int = 1024


class StepRows(NamedTuple):
    """The rows of a run of steps: step t samples row ``rows[t]``, whose kernel row against the
    core points is ``Kx[local[t]]`` and ``xg[local[t]] = Σ_l k(x, c_l) ĝ_l``."""

    Kx: np.ndarray
    xg: np.ndarray
    local: np.ndarray
    rows: np.ndarray


class CoreTerms(NamedTuple):
    """The core points' side of a step: ``assign[i]``, row i's core point (line 8); ``Kcc``,
    their kernel matrix; and at the snapshot, ``coef_snap`` (each row's α̃_i), the
    full-gradient part ``g_hat`` (ĝ) of σ and ``Kg`` = Kcc·ĝ."""

    assign: np.ndarray
    Kcc: np.ndarray
    coef_snap: np.ndarray
    g_hat: np.ndarray
    Kg: np.ndarray


class LossCode(NamedTuple):
    """The loss as the numba loops read it: its ``LOSSES`` code, λ, θ and v."""

    code: int
    lam: float
    theta: float
    v: float


class StepRecord(NamedTuple):
    """What a run of steps records: ``step0`` steps came before it; the iterate after step
    ``capture`` (option II; -1: none) goes to ``snapshot``; σ after every step to ``trace``
    (0 rows: none kept)."""

    step0: int
    capture: int
    snapshot: np.ndarray
    trace: np.ndarray


@njit(cache=True)
def _coef_loss(z, code, lam, theta, v):
    """(c, ℓ) at margin z = y wᵀφ(x): ∇ψ = w + c·y·φ(x) (Eqns 4-5) and the row's loss ℓ."""
    if code == 0:  # ξ below the band [1-θ, 1+θ] weighs 1, ε above it weighs v
        d = z - (1.0 - theta) if z < 1.0 - theta else max(z - (1.0 + theta), 0.0)
        a = lam / (1.0 - theta) ** 2 * (1.0 if z < 1.0 - theta else v)
        return a * d, 0.5 * a * d * d
    if code == 1:  # the paper's subgradient takes the indicator of z ≤ 1
        return (-lam, lam * (1.0 - z)) if z <= 1.0 else (0.0, 0.0)
    return (-2.0 * lam * (1.0 - z), lam * (1.0 - z) ** 2) if z < 1.0 else (0.0, 0.0)


def ball_radius(loss: str, lam: float, theta: float, v: float) -> float:
    """Projection radius of Theorem 1 in this module's parameterization (inf: no projection)."""
    if loss == "odm":
        return math.sqrt(0.5 * lam * ((1 - theta) ** 2 + v * (1 + theta) ** 2)) / (1 - theta)
    return max(lam, math.sqrt(lam)) if loss == "squared_hinge" else math.inf


def smoothness(loss: str, lam: float, theta: float, v: float, max_diag: float) -> float:
    """L with every ψ_i L-smooth: 1 + λ·(curvature of ℓ)·max k(x,x) (hinge: its kink as if 1)."""
    curvature = {"odm": max(1.0, v) / (1 - theta) ** 2, "squared_hinge": 2.0, "hinge": 1.0}
    return 1.0 + lam * curvature[loss] * max_diag


@njit(cache=True)
def _full_pass(scores, y, code, lam, theta, v, coef_out):
    """Snapshot coefficients c_i·y_i (the α̃_i of Alg. 1 line 4) and Σ ℓ_i."""
    total = 0.0
    for i in range(scores.size):
        c, loss = _coef_loss(y[i] * scores[i], code, lam, theta, v)
        coef_out[i] = c * y[i]
        total += loss
    return total


@njit(cache=True, fastmath={"reassoc", "contract"})  # lets the dot products vectorize
def _inner_steps(chunk, y, core, p, state, eta, loss, radius_sq, record):
    """SVRG steps h_t (Eqns 8-9) of size ``eta`` on the rows of ``chunk`` (:class:`StepRows`),
    with ``core`` (:class:`CoreTerms`) and ``loss`` (:class:`LossCode`); ``record``
    (:class:`StepRecord`) keeps the iterates asked for. σ is kept lazily as ``a·p + b·ĝ``
    (ĝ: the snapshot's full-gradient part), so a step costs one dot product (two when
    α_t ≠ α̃_t); ``state`` = [‖w‖², ⟨w, g⟩, ⟨g, g⟩, a, b], ‖w‖² updated exactly in O(1) for
    the projection onto the ball of radius² ``radius_sq`` (lines 13/15)."""
    Kx, xg, local, rows = chunk
    assign, Kcc, coef_snap, g_hat, Kg = core
    code, lam, theta, v = loss
    step0, capture, snapshot, trace = record
    r = p.size
    n2, sg, gg, a, b = state[0], state[1], state[2], state[3], state[4]
    decay = 1.0 - eta
    for t in range(rows.size):
        i, k = rows[t], local[t]
        j = assign[i]
        dot = 0.0
        for l in range(r):
            dot += Kx[k, l] * p[l]
        c, _ = _coef_loss(y[i] * (a * dot + b * xg[k]), code, lam, theta, v)
        delta = c * y[i] - coef_snap[i]  # α_t - α̃_t of Eqn 9
        k_sigma_j = 0.0  # (Kσ)_j enters ‖w‖² only through δ·(Kσ)_j
        if delta != 0.0:
            k_sigma_j = b * Kg[j]
            for l in range(r):
                k_sigma_j += a * Kcc[j, l] * p[l]
        n2 = (decay * decay * n2 + eta * eta * (gg + delta * delta * Kcc[j, j])
              - 2.0 * eta * decay * (sg + delta * k_sigma_j) + 2.0 * eta * eta * delta * Kg[j])
        sg = decay * sg - eta * gg - eta * delta * Kg[j]
        a *= decay
        b = decay * b - eta
        p[j] -= eta * delta / a
        if n2 > radius_sq:
            scale = math.sqrt(radius_sq / n2)
            a, b, sg, n2 = a * scale, b * scale, sg * scale, radius_sq
        if a < 1e-6:  # fold the scale into p before it loses precision
            for l in range(r):
                p[l] = a * p[l] + b * g_hat[l]
            a, b = 1.0, 0.0
        step = step0 + t + 1
        if step == capture:  # option II: this iterate becomes the next snapshot
            snapshot[:] = a * p + b * g_hat
        if trace.shape[0] > 0:
            trace[step - 1, :] = a * p + b * g_hat
    state[0], state[1], state[3], state[4] = n2, sg, a, b


@dataclass
class CSVRGResult:
    """σ over ``coreset.points``; ``history[s]``: the exact f(w̃_s) (margins at the rows
    themselves) after epoch s, ``history[0]`` at w = 0; ``coverage``: the largest distance
    of a row to its core point."""

    sigma: np.ndarray
    coreset: Coreset
    history: list
    epochs: int
    converged: bool
    step: float
    radius: float
    kernel_mode: str
    trace: np.ndarray | None = field(default=None, repr=False)

    objective = property(lambda self: self.history[-1])
    core_points = property(lambda self: self.coreset.points)
    n_core = property(lambda self: self.coreset.size)
    coverage = property(lambda self: float(np.sqrt(self.coreset.dist_sq.max())))


def _check(X, y, loss: MarginLoss, coverage: CoverageSettings, schedule: CSVRGSchedule):
    """X and y as float64 arrays, once every setting is known to be valid."""
    kind, lam, theta, v = loss.kind, loss.lam, loss.theta, loss.v
    delta, max_core, metric = coverage.delta, coverage.max_core, coverage.metric
    epochs, inner_steps, step = schedule.epochs, schedule.inner_steps, schedule.step
    tol, option, refine = schedule.relative_change_tol, schedule.option, coverage.refine
    X, y = np.ascontiguousarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] == 0:
        raise ValueError(f"X must be a non-empty 2-D array (rows × features), got {X.shape}.")
    if y.shape != X.shape[:1] or not np.all(np.abs(y) == 1.0):
        raise ValueError("y must hold one label per row of X, each -1 or +1.")
    count = lambda x, low: isinstance(x, (int, np.integer)) and x >= low  # noqa: E731
    real = lambda x, low: isinstance(x, (int, float, np.number)) and low <= x < np.inf  # noqa: E731
    low_core = 2 if coverage.per_class else 1
    for name, value, ok, need in [
            ("loss", kind, kind in LOSSES, f"one of {', '.join(LOSSES)}"),
            ("lam (λ)", lam, real(lam, 0) and lam > 0, "a positive finite number"),
            ("metric", metric, metric in METRICS, "'kernel' or 'input'"),
            ("option", option, option in ("I", "II"), "'I' or 'II' (Alg. 1 lines 20-21)"),
            ("delta", delta, delta is None or real(delta, 0), "None or a finite number ≥ 0"),
            ("max_core", max_core, count(max_core, low_core), f"an integer ≥ {low_core}"),
            ("epochs", epochs, count(epochs, 1), "an integer ≥ 1"),
            ("inner_steps", inner_steps, inner_steps is None or count(inner_steps, 1),
             "None or an integer ≥ 1"),
            ("step", step, step is None or real(step, 0) and 0 < step < 1, "None or in (0, 1)"),
            ("tol", tol, real(tol, 0), "a finite number ≥ 0"),
            ("refine", refine, count(refine, 0), "an integer ≥ 0")]:
        if not ok:
            raise ValueError(f"{name} must be {need}, got {value!r}.")
    if kind == "odm":
        check_odm_params(lam, theta, v)
    return X, y


def csvrg(X, y, kernel: Kernel, loss: MarginLoss | None = None, *,
          coverage: CoverageSettings | None = None, schedule: CSVRGSchedule | None = None,
          cache: KernelCache | None = None, project: bool = True,
          trace: bool = False) -> CSVRGResult:
    """Algorithm 1 of the CSVRG paper on ``X`` (m×d) and ``y`` (±1) for the ``loss`` (default
    ``MarginLoss()``), over the coreset ``coverage`` asks for; see the module docstring.

    Epoch s of the ``schedule``: a full pass at the snapshot w̃ gives each row's α̃_i and f(w̃);
    then ``inner_steps`` (default m) steps from w_0 = w̃ on rows drawn without replacement; the
    next snapshot is the last iterate (option I) or a random one of w_0..w_{T-1} (option II).
    ``step`` η defaults to 1/(2L); ``step_decay`` (default: hinge only, which is not smooth, so
    outside Theorem 8) uses η/s in epoch s. Stops after ``epochs`` or when f changes by ≤
    ``relative_change_tol`` (relative). The m×r cross kernel is held as ``cache`` says.
    ``project=False`` / ``trace=True`` (σ after every step) are for tests on tiny data.
    """
    loss, coverage = loss or MarginLoss(), coverage or CoverageSettings()
    schedule, cache = schedule or CSVRGSchedule(), cache or KernelCache()
    X, y = _check(X, y, loss, coverage, schedule)
    lam, theta, v, epochs, step = loss.lam, loss.theta, loss.v, schedule.epochs, schedule.step
    m, code, seed, option = X.shape[0], LOSSES[loss.kind], int(schedule.seed), schedule.option
    step_decay = loss.kind == "hinge" if schedule.step_decay is None else bool(schedule.step_decay)
    coreset = build_coreset(X, kernel, coverage.delta, coverage.max_core, coverage.metric, seed,
                            coverage.refine, y if coverage.per_class else None)
    C, r = coreset.points, coreset.size
    T = m if schedule.inner_steps is None else int(schedule.inner_steps)
    radius_sq = ball_radius(loss.kind, lam, theta, v) ** 2 if project else math.inf
    if step is None:
        step = 1.0 / (2.0 * smoothness(loss.kind, lam, theta, v, float(kernel.diagonal(X).max())))
    Kcc, c_sq = kernel_matrix(kernel, C, C), np.einsum("ij,ij->i", C, C)
    cached = m * r * np.dtype(cache.dtype).itemsize <= cache.cache_mb * 2**20
    Kxc = kernel_matrix(kernel, X, C, dtype=cache.dtype) if cached else None
    traced = np.zeros((epochs * T if trace else 0, r))
    scores, coef_snap = np.empty(m), np.empty(m)

    def objective(sigma):  # exact f(w̃) at the rows' own margins; fills coef_snap (α̃)
        if cached:  # one GEMV in the cache's dtype (float32: ~1e-7 relative error in margins)
            scores[:] = Kxc @ sigma.astype(Kxc.dtype)
        else:
            for rows, block in iter_kernel_blocks(kernel, X, C, np.float64, 64.0):
                scores[rows] = block @ sigma
        loss_sum = _full_pass(scores, y, code, lam, theta, v, coef_snap)
        return 0.5 * float(sigma @ Kcc @ sigma) + loss_sum / m

    snapshot = np.zeros(r)
    history, converged, epoch = [objective(snapshot)], False, 0
    for epoch in range(1, epochs + 1):
        g_hat = np.bincount(coreset.assignment, weights=coef_snap, minlength=r) / m
        Kg = Kcc @ g_hat
        p = snapshot.copy()
        state = np.array([p @ Kcc @ p, p @ Kg, g_hat @ Kg, 1.0, 0.0])
        rng = epoch_rng((seed, 1), epoch - 1)  # rows without replacement (svrg.sample_rows)
        rows = sample_rows(m, T, rng)
        capture = int(rng.integers(0, T)) if option == "II" else 0
        next_snapshot, step0 = p.copy(), (epoch - 1) * T  # option II with t = 0 keeps w_0
        args = (y, CoreTerms(coreset.assignment, Kcc, coef_snap, g_hat, Kg), p, state,
                step / epoch if step_decay else step, LossCode(code, lam, theta, v), radius_sq)
        tail = (step0 + capture if capture > 0 else -1, next_snapshot, traced)
        if Kxc is not None:  # cached
            _inner_steps(StepRows(Kxc, Kxc @ g_hat.astype(Kxc.dtype), rows, rows), *args,
                         StepRecord(step0, *tail))
        for start in range(0, T if not cached else 0, cache.chunk_rows):
            chunk = rows[start:start + cache.chunk_rows]
            block = kernel.block(X[chunk], C, z_sq_norms=c_sq)
            _inner_steps(StepRows(block, block @ g_hat, np.arange(chunk.size), chunk), *args,
                         StepRecord(step0 + start, *tail))
        snapshot = state[3] * p + state[4] * g_hat if option == "I" else next_snapshot
        history.append(objective(snapshot))
        if not np.isfinite(history[-1]):
            raise FloatingPointError(f"CSVRG diverged at epoch {epoch}; use a smaller step "
                                     f"than {step:g}.")
        converged = (abs(history[-2] - history[-1])
                     <= schedule.relative_change_tol * abs(history[-1]))
        if converged:
            break
    return CSVRGResult(snapshot, coreset, history, epoch, converged, step, math.sqrt(radius_sq),
                       "cached" if cached else "streamed", traced if trace else None)
