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

Coreset (Definitions 1-2, Remark 1's online rule with Euclidean balls): in a seeded random
order a row within δ/2 of its nearest core point joins it, else opens a new cell (diameters
≤ δ, Theorem 4's proof). ``metric="kernel"``: ``k(x,x) + k(c,c) - 2k(x,c)``, the δ_φ of
Theorem 4 (any kernel); ``metric="input"``: the paper's input-space balls (the same for RBF
up to δ's scale). Past ``max_core`` cells, rows outside every ball join the nearest one
(``coverage`` reports the largest distance). Every row then moves to its nearest core point
(line 8). ``refine`` Lloyd steps move core points to their cells' means (inside the cell's
ball, so "a point of the cell" as in Definition 2, for rbf, laplacian, linear). ``per_class``
covers each label apart (a δ-coverage of the labelled set; cells never mix labels: +1 to
+1.5 accuracy points on letter). ``delta=None``: δ for ``max_core`` balls on ``3·max_core`` rows.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numba import njit
from threadpoolctl import threadpool_limits

from ..core.kernels import Kernel, iter_kernel_blocks, kernel_matrix
from ..core.validation import check_odm_params
from ..solvers.svrg import epoch_rng, sample_rows

LOSSES = {"odm": 0, "hinge": 1, "squared_hinge": 2}
METRICS = ("kernel", "input")
_LINEAR = Kernel("linear")


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
def _inner_steps(Kx, xg, local, rows, y, coef_snap, assign, Kcc, Kg, g_hat, p, state, eta,
                 code, lam, theta, v, radius_sq, step0, capture, snapshot, trace):
    """SVRG steps h_t (Eqns 8-9) on ``rows``; row ``rows[t]`` has kernel row ``Kx[local[t]]``
    and ``xg[local[t]] = Σ_l k(x, c_l) ĝ_l``. σ is kept lazily as ``a·p + b·ĝ`` (ĝ: the
    snapshot's full-gradient part), so a step costs one dot product (two when α_t ≠ α̃_t);
    ``state`` = [‖w‖², ⟨w, g⟩, ⟨g, g⟩, a, b], ‖w‖² updated exactly in O(1) for the projection
    (lines 13/15)."""
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


@njit(cache=True)
def _scan_chunk(d_old, d_in, limit_sq, n_old, budget, assign, dist_sq, is_new):
    """The online coverage rule on one chunk, row by row (d_* are squared distances to the
    ``n_old`` earlier core points and within the chunk); returns how many rows became cores."""
    new_rows = np.empty(d_in.shape[0], dtype=np.int64)
    n_new = 0
    for i in range(d_in.shape[0]):
        best, arg = np.inf, -1
        for l in range(n_old):
            if d_old[i, l] < best:
                best, arg = d_old[i, l], l
        for q in range(n_new):
            if d_in[i, new_rows[q]] < best:
                best, arg = d_in[i, new_rows[q]], n_old + q
        if best <= limit_sq or n_old + n_new >= budget:
            assign[i], dist_sq[i] = arg, best
        else:
            new_rows[n_new] = i
            assign[i], dist_sq[i], is_new[i] = n_old + n_new, 0.0, True
            n_new += 1
    return n_new


class _Metric:
    """Squared distances by GEMM on a base kernel. For RBF ‖φ(x)-φ(c)‖² = 2 - 2exp(-γ‖x-c‖²)
    grows with ‖x-c‖², so scans use input distances (no exp) and map thresholds/reports."""

    def __init__(self, kernel: Kernel, metric: str):
        self.mapped = metric == "kernel" and kernel.name == "rbf"
        self.base = kernel if metric == "kernel" and not self.mapped else _LINEAR
        self.gamma = kernel.gamma

    def sq_distances(self, A, B, a_sq, b_sq) -> np.ndarray:
        return np.maximum(a_sq[:, None] + b_sq[None, :] - 2.0 * self.base.block(A, B), 0.0)

    def to_metric(self, d_sq):
        return 2.0 - 2.0 * np.exp(-self.gamma * d_sq) if self.mapped else d_sq

    def from_metric(self, d_sq: float) -> float:
        if self.mapped:
            return -math.log1p(-0.5 * d_sq) / self.gamma if d_sq < 2.0 else math.inf
        return d_sq


@dataclass
class Coreset:
    """Core points (r×d); ``index[c]``: the row that opened cell c; ``assignment[i]``: row i's
    core point, at squared metric distance ``dist_sq[i]``; ``delta``: the largest δ used."""

    points: np.ndarray
    index: np.ndarray
    assignment: np.ndarray
    dist_sq: np.ndarray
    delta: float
    size = property(lambda self: int(self.index.size))


def cover(X, kernel: Kernel, delta: float, max_core: int, metric: str = "kernel", seed=0,
          chunk_rows: int = 512) -> np.ndarray:
    """Rows of X that open a cell in the online δ-coverage pass (Definition 1), in order.
    Distances come by GEMM per chunk, the row-by-row rule runs in numba: O(m·r·d). The GEMMs
    are small, so BLAS runs single-threaded (threads cost up to 8× on a busy machine)."""
    m, dist = X.shape[0], _Metric(kernel, metric)
    sq, order = dist.base.diagonal(X), np.random.default_rng(seed).permutation(m)
    core, r = np.empty(min(max_core, m), dtype=np.int64), 0
    with threadpool_limits(1, user_api="blas"):
        for start in range(0, m, chunk_rows):
            rows = order[start:start + chunk_rows]
            d_in = dist.sq_distances(X[rows], X[rows], sq[rows], sq[rows])
            d_old = dist.sq_distances(X[rows], X[core[:r]], sq[rows], sq[core[:r]])
            a, d, new = (np.empty(rows.size, np.int64), np.empty(rows.size),
                         np.zeros(rows.size, bool))
            n_new = _scan_chunk(d_old, d_in, dist.from_metric((0.5 * delta) ** 2), r, max_core,
                                a, d, new)
            core[r:r + n_new] = rows[new]
            r += n_new
    return core[:r].copy()


def build_coreset(X, kernel: Kernel, delta, max_core: int, metric: str = "kernel", seed=0,
                  refine: int = 0, labels=None) -> Coreset:
    """``cover``, nearest-core assignment, ``refine`` centroid steps (module docstring). With
    ``labels`` each label is covered apart with a share of ``max_core`` proportional to its
    size, and rows look for their nearest core point among their own label's. ``delta=None``
    picks δ per group with ``choose_delta``."""
    groups = [np.arange(X.shape[0])] if labels is None else [
        np.flatnonzero(labels == label) for label in np.unique(labels)]
    budgets = [max(1, max_core * g.size // X.shape[0]) for g in groups]
    budgets[-1] = max_core - sum(budgets[:-1])
    points: list[np.ndarray] = []
    index: list[np.ndarray] = []
    deltas: list[float] = []
    assignment, dist_sq = np.empty(X.shape[0], dtype=np.int64), np.empty(X.shape[0])
    for number, (rows, budget) in enumerate(zip(groups, budgets)):
        Xg, seed_g = X[rows], [*np.atleast_1d(seed), number]
        deltas.append(choose_delta(Xg, kernel, budget, metric, seed_g) if delta is None
                      else float(delta))
        opened = cover(Xg, kernel, deltas[-1], budget, metric, seed_g)
        centers = Xg[opened]
        near, d_sq = nearest_core(Xg, centers, kernel, metric)
        for _ in range(int(refine)):
            counts, sums = np.bincount(near, minlength=opened.size), np.zeros_like(centers)
            np.add.at(sums, near, Xg)
            filled = counts > 0  # an emptied cell keeps its point
            centers[filled] = sums[filled] / counts[filled, None]
            near, d_sq = nearest_core(Xg, centers, kernel, metric)
        assignment[rows], dist_sq[rows] = near + sum(len(c) for c in points), d_sq
        points.append(centers)
        index.append(rows[opened])
    return Coreset(np.vstack(points), np.concatenate(index), assignment, dist_sq, max(deltas))


def nearest_core(X, C, kernel: Kernel, metric: str = "kernel", block_mb: float = 64.0):
    """(index of the nearest row of C, squared metric distance) for every row of X."""
    dist = _Metric(kernel, metric)
    c_sq, x_sq = dist.base.diagonal(C), dist.base.diagonal(X)
    assign, dist_sq = np.empty(X.shape[0], dtype=np.int64), np.empty(X.shape[0])
    for rows, cross in iter_kernel_blocks(dist.base, X, C, np.float64, block_mb):
        d_sq = c_sq[None, :] - 2.0 * cross  # + ‖x‖², the same along a row
        assign[rows] = np.argmin(d_sq, axis=1)
        dist_sq[rows] = d_sq[np.arange(d_sq.shape[0]), assign[rows]] + x_sq[rows]
    return assign, dist.to_metric(np.maximum(dist_sq, 0.0))


def choose_delta(X, kernel: Kernel, max_core: int, metric: str = "kernel", seed=0,
                 iterations: int = 20) -> float:
    """δ for which the online rule opens at most ``max_core`` cells on a seeded sample of
    ``min(m, 3·max_core, 6000)`` rows, by geometric bisection over one precomputed distance
    matrix of the sample; 0 when the data has at most ``max_core`` rows."""
    m, dist = X.shape[0], _Metric(kernel, metric)
    if m <= max_core:
        return 0.0
    n = min(m, 3 * max_core, 6000)
    sample = X[np.random.default_rng([*np.atleast_1d(seed), 7]).choice(m, n, replace=False)]
    sq = dist.base.diagonal(sample)
    d_all = dist.sq_distances(sample, sample, sq, sq)
    high = 2.0 * math.sqrt(float(dist.to_metric(d_all.max()))) + 1e-300  # one ball covers all
    low = 1e-6 * high
    a, d, new = np.empty(n, np.int64), np.empty(n), np.zeros(n, bool)
    for _ in range(iterations):
        middle = math.sqrt(low * high)
        size = _scan_chunk(np.empty((n, 0)), d_all, dist.from_metric(0.25 * middle ** 2), 0,
                           max_core + 1, a, d, new)
        low, high = (middle, high) if size > max_core else (low, middle)
    return high


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


def _check(X, y, loss, lam, theta, v, metric, option, delta, max_core, epochs, inner_steps,
           step, tol, refine, per_class):
    X, y = np.ascontiguousarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] == 0:
        raise ValueError(f"X must be a non-empty 2-D array (rows × features), got {X.shape}.")
    if y.shape != X.shape[:1] or not np.all(np.abs(y) == 1.0):
        raise ValueError("y must hold one label per row of X, each -1 or +1.")
    count = lambda x, low: isinstance(x, (int, np.integer)) and x >= low  # noqa: E731
    real = lambda x, low: isinstance(x, (int, float, np.number)) and low <= x < np.inf  # noqa: E731
    low_core = 2 if per_class else 1
    for name, value, ok, need in [
            ("loss", loss, loss in LOSSES, f"one of {', '.join(LOSSES)}"),
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
    if loss == "odm":
        check_odm_params(lam, theta, v)
    return X, y


def csvrg(X, y, kernel: Kernel, lam: float = 1.0, theta: float = 0.1, v: float = 0.5, *,
          loss: str = "odm", delta=None, max_core: int = 1000, metric: str = "kernel",
          refine: int = 1, per_class: bool = True, epochs: int = 30, inner_steps=None,
          step=None, step_decay=None, option: str = "I", tol: float = 0.0, seed: int = 0,
          cache_mb: float = 1024.0, dtype=np.float32, chunk_rows: int = 1024,
          project: bool = True, trace: bool = False) -> CSVRGResult:
    """Algorithm 1 of the CSVRG paper on ``X`` (m×d) and ``y`` (±1); see the module docstring.

    Epoch s: a full pass at the snapshot w̃ gives each row's α̃_i and f(w̃); then ``inner_steps``
    (default m) steps from w_0 = w̃ on rows drawn without replacement; the next snapshot is
    the last iterate (option I) or a random one of w_0..w_{T-1} (option II). ``step`` η
    defaults to 1/(2L); ``step_decay`` (default: hinge only, which is not smooth, so outside
    Theorem 8) uses η/s in epoch s. Stops after ``epochs`` or when f changes by ≤ ``tol``
    (relative). The m×r cross kernel is cached in ``dtype`` when it fits ``cache_mb``, else
    recomputed blockwise per epoch. ``project=False`` / ``trace=True`` (σ after every step)
    are for tests on tiny data.
    """
    X, y = _check(X, y, loss, lam, theta, v, metric, option, delta, max_core, epochs,
                  inner_steps, step, tol, refine, per_class)
    m, code, seed = X.shape[0], LOSSES[loss], int(seed)
    step_decay = (loss == "hinge") if step_decay is None else bool(step_decay)
    coreset = build_coreset(X, kernel, delta, max_core, metric, seed, refine,
                            y if per_class else None)
    C, r, T = coreset.points, coreset.size, m if inner_steps is None else int(inner_steps)
    radius_sq = ball_radius(loss, lam, theta, v) ** 2 if project else math.inf
    if step is None:
        step = 1.0 / (2.0 * smoothness(loss, lam, theta, v, float(kernel.diagonal(X).max())))
    Kcc, c_sq = kernel_matrix(kernel, C, C), np.einsum("ij,ij->i", C, C)
    cached = m * r * np.dtype(dtype).itemsize <= cache_mb * 2**20
    Kxc = kernel_matrix(kernel, X, C, dtype=dtype) if cached else None
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
        args = (coef_snap, coreset.assignment, Kcc, Kg, g_hat, p, state,
                step / epoch if step_decay else step, code, lam, theta, v, radius_sq)
        tail = (step0 + capture if capture > 0 else -1, next_snapshot, traced)
        if Kxc is not None:  # cached
            _inner_steps(Kxc, Kxc @ g_hat.astype(Kxc.dtype), rows, rows, y, *args, step0, *tail)
        for start in range(0, T if not cached else 0, chunk_rows):
            chunk = rows[start:start + chunk_rows]
            block = kernel.block(X[chunk], C, z_sq_norms=c_sq)
            _inner_steps(block, block @ g_hat, np.arange(chunk.size), chunk, y, *args,
                         step0 + start, *tail)
        snapshot = state[3] * p + state[4] * g_hat if option == "I" else next_snapshot
        history.append(objective(snapshot))
        if not np.isfinite(history[-1]):
            raise FloatingPointError(f"CSVRG diverged at epoch {epoch}; use a smaller step "
                                     f"than {step:g}.")
        converged = abs(history[-2] - history[-1]) <= tol * abs(history[-1])
        if converged:
            break
    return CSVRGResult(snapshot, coreset, history, epoch, converged, step, math.sqrt(radius_sq),
                       "cached" if cached else "streamed", traced if trace else None)
