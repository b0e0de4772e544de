"""The coreset of CSVRG (the CSVRG paper: Tan, Zhang & Wang, "Coreset Stochastic Variance-Reduced
Gradient with Application to Optimal Margin Distribution Machine", AAAI 2019), whose core points
:mod:`.csvrg_solver` trains the model over.

Coreset (Definitions 1-2, Remark 1's online rule with Euclidean balls): in a seeded random order
a row within δ/2 of its nearest core point joins it, else opens a new cell (diameters ≤ δ,
Theorem 4's proof). ``metric="kernel"``: ``k(x,x) + k(c,c) - 2k(x,c)``, the δ_φ of Theorem 4
(any kernel); ``metric="input"``: the paper's input-space balls (the same for RBF up to δ's
scale). Past ``max_core`` cells, rows outside every ball join the nearest one (a
``CSVRGResult``'s ``coverage`` reports the largest distance). Every row then moves to its
nearest core point (line 8). ``refine`` Lloyd steps move core points to their cells' means
(inside the cell's ball, so "a point of the cell" as in Definition 2, for rbf, laplacian,
linear). ``per_class`` covers each label apart (a δ-coverage of the labelled set; cells never
mix labels: +1 to +1.5 accuracy points on letter). ``delta=None``: δ for ``max_core`` balls on
``3·max_core`` rows.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit
from threadpoolctl import threadpool_limits

from ..core.distance_kernels import RBFKernel
from ..core.kernels import Kernel, iter_kernel_blocks

METRICS = ("kernel", "input")
_LINEAR = Kernel("linear")


@dataclass(frozen=True)
class CoverageSettings:
    """How the coreset covers the rows (module docstring): cells of diameter ``delta`` δ (None:
    chosen for about ``max_core`` cells), at most ``max_core`` core points, distances in
    ``metric`` ('kernel' or 'input'), ``refine`` centroid steps, and with ``per_class`` each
    label covered apart (Definitions 1-2, Remark 1)."""

    delta: float | None = None
    max_core: int = 1000
    metric: str = "kernel"
    refine: int = 1
    per_class: bool = True


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
        self.mapped = metric == "kernel" and isinstance(kernel, RBFKernel)
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
