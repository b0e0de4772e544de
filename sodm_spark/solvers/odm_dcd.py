"""Exact ODM by dual coordinate descent (design.md §1; SODM paper Eqns 1-3).

The dual of the ODM primal (SODM paper Sec. 2.1) is, with ``c = (1-θ)²/(λ v)`` and
``Q_ij = y_i y_j k(x_i, x_j)``,

    min_{ζ,β ≥ 0}  ½(ζ-β)ᵀQ(ζ-β) + (Mc/2)(v‖ζ‖² + ‖β‖²) + (θ-1)1ᵀζ + (θ+1)1ᵀβ      (Eqn 1)

Only ``γ = ζ - β`` is stored: at the optimum ζ_i β_i = 0, so each point's pair is minimized
jointly in closed form (the univariate problems of Eqn 3, solved for both signs at once).
``u = Qγ`` is maintained, each sweep visits the points in a seeded random order, points that
sit at γ_i = 0 with strictly satisfied conditions are shrunk (LIBLINEAR's rule), and the loop
stops when the largest projected gradient of a sweep over *all* points is at most ``tol``.

Two ways to get kernel rows:

* ``cached``: the whole ``Q`` (float32 by default) fits ``cache_mb`` and is computed once by
  blocked GEMM; each point update is one axpy of a row of ``Q``.
* ``blocked``: the points are cut (once, seeded) into blocks of ``block_size``; each visit to
  a block computes its B×m kernel rows with one GEMM (or takes them from an LRU cache bounded
  by ``cache_mb``), solves the block with a few inner sweeps, and updates ``u`` with the block's
  γ change. Memory is O(B·m), never m×m.
"""
from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from ..kernels import Kernel, rows_per_block
from ..resources import RESERVE_MB, available_memory_mb
from ..validation import check_odm_params
from . import _dcd_kernels as loops

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ODMProblem:
    """The constants of one local ODM dual (Eqn 1) on ``m`` rows; the local problem uses m·c."""

    lam: float
    theta: float
    v: float
    m: int

    @property
    def c(self) -> float:
        return (1.0 - self.theta) ** 2 / (self.lam * self.v)

    @property
    def a_zeta(self) -> float:
        """Diagonal added to Q for ζ: M·c·v."""
        return self.m * self.c * self.v

    @property
    def a_beta(self) -> float:
        """Diagonal added to Q for β: M·c."""
        return self.m * self.c

    @property
    def lower(self) -> float:
        return 1.0 - self.theta

    @property
    def upper(self) -> float:
        return 1.0 + self.theta

    def objective(self, gamma: np.ndarray, u: np.ndarray) -> float:
        """Dual objective of Eqn (1) from γ and u = Qγ."""
        zeta = np.maximum(gamma, 0.0)
        beta = np.maximum(-gamma, 0.0)
        return float(
            0.5 * gamma @ u
            + 0.5 * self.a_beta * (self.v * zeta @ zeta + beta @ beta)
            - self.lower * zeta.sum()
            + self.upper * beta.sum()
        )

    def violation(self, gamma: np.ndarray, u: np.ndarray) -> float:
        """Largest projected-gradient violation (the KKT residual used for stopping)."""
        return float(loops.max_violation(gamma, u, self.a_zeta, self.a_beta, self.lower, self.upper))


@dataclass
class DCDResult:
    """What a solve returns: γ = ζ - β, u = Qγ, and how the solve went."""

    gamma: np.ndarray
    u: np.ndarray
    objective: float
    n_sweeps: int
    violation: float
    converged: bool
    kernel_mode: str
    history: list = field(default_factory=list)
    kernel_rows_computed: int = 0  # rows of Q computed: m when cached, more when blocked

    @property
    def n_sv(self) -> int:
        return int(np.count_nonzero(self.gamma))


class _KernelRows:
    """Rows of Q = diag(y) K diag(y) for fixed blocks of points, with an LRU cache."""

    def __init__(self, kernel: Kernel, X: np.ndarray, y: np.ndarray, dtype, cache_bytes: float):
        self.kernel, self.dtype = kernel, np.dtype(dtype)
        # Converted once: every block's GEMM reads X in the cache's dtype.
        self.X = np.ascontiguousarray(X, dtype=self.dtype)
        self.sq_norms = np.einsum("ij,ij->i", self.X, self.X)
        self.y = y.astype(self.dtype)
        self.capacity = cache_bytes
        self.cache: OrderedDict[int, np.ndarray] = OrderedDict()
        self.cached_bytes = 0
        self.computed_rows = 0

    def visit_order(self, rng, n_blocks: int) -> np.ndarray:
        """A seeded random block order that visits the cached blocks first.

        Every sweep touches every block, so plain LRU over a random order would evict blocks
        just before they are needed; visiting the cached ones first makes each sweep hit all
        of them and leaves the most recently computed ones cached for the next sweep.
        """
        order = rng.permutation(n_blocks)
        cached = np.isin(order, np.fromiter(self.cache, dtype=np.int64, count=len(self.cache)))
        return np.concatenate([order[cached], order[~cached]])

    def rows(self, block_id: int, index: np.ndarray) -> np.ndarray:
        hit = self.cache.get(block_id)
        if hit is not None:
            self.cache.move_to_end(block_id)
            return hit
        out = np.empty((index.size, self.X.shape[0]), dtype=self.dtype)
        self.kernel.block(self.X[index], self.X, out=out, z_sq_norms=self.sq_norms)
        out *= self.y[index, None]
        out *= self.y[None, :]
        self.computed_rows += index.size
        if out.nbytes <= self.capacity:
            while self.cache and self.cached_bytes + out.nbytes > self.capacity:
                _, evicted = self.cache.popitem(last=False)
                self.cached_bytes -= evicted.nbytes
            self.cache[block_id] = out
            self.cached_bytes += out.nbytes
        return out


def full_q_matrix(kernel: Kernel, X: np.ndarray, y: np.ndarray, dtype=np.float32,
                  block_mb: float = 256.0) -> np.ndarray:
    """Q = diag(y) K diag(y), filled block by block (the caller checked it fits).

    Q is symmetric: each row block is computed only from its diagonal onwards (one GEMM) and
    mirrored below, which halves the kernel work.
    """
    m = X.shape[0]
    dtype = np.dtype(dtype)
    Q = np.empty((m, m), dtype=dtype)
    Xd = np.ascontiguousarray(X, dtype=dtype)
    sq_norms = np.einsum("ij,ij->i", Xd, Xd)
    yd = y.astype(dtype)
    step = rows_per_block(m, dtype.itemsize, block_mb)
    for start in range(0, m, step):
        stop = min(start + step, m)
        block = kernel.block(Xd[start:stop], Xd[start:], z_sq_norms=sq_norms[start:],
                             out=np.empty((stop - start, m - start), dtype=dtype))
        block *= yd[start:stop, None]
        block *= yd[None, start:]
        Q[start:stop, start:] = block
        Q[stop:, start:stop] = block[:, stop - start:].T
    return Q


def kernel_mode_for(m: int, cache_mb: float, itemsize: int = 4) -> str:
    """'cached' when the whole m×m kernel matrix fits ``cache_mb``, else 'blocked'."""
    return "cached" if m * m * itemsize <= cache_mb * 2**20 else "blocked"


def auto_cache_mb(m: int, n_features: int) -> float:
    """The kernel cache a solve on this machine can afford: the memory available now, less
    the solver's own arrays and :data:`~sodm_spark.resources.RESERVE_MB`."""
    room = available_memory_mb() - RESERVE_MB - solver_memory_mb(m, n_features)
    return max(0.0, room)


def solver_memory_mb(m: int, n_features: int, block_size: int = 1024,
                     itemsize: int = 4) -> float:
    """Memory (MB) a blocked solve of m rows needs besides its kernel cache: the rows (float64),
    about six m-vectors, one block of kernel rows and its float64 GEMM scratch."""
    rows = min(block_size, m)
    return (m * n_features * 8 + 6 * m * 8 + rows * m * (itemsize + 8)) / 2**20


def solve_odm_dual(X: np.ndarray, y: np.ndarray, kernel: Kernel, lam: float, theta: float,
                   v: float, *, tol: float = 1e-3, max_iter: int = 1000, gamma0=None,
                   seed=0, cache_mb: float | None = None, block_size: int = 1024,
                   inner_sweeps: int = 8, dtype=np.float32, shrinking: bool = True,
                   block_mb: float = 256.0, mode: str = "auto", callback=None) -> DCDResult:
    """Solve the ODM dual (Eqn 1) on ``X`` (m×d float) and ``y`` (±1) by coordinate descent.

    ``gamma0`` warm-starts from a given γ; ``seed`` (an int or a sequence such as
    ``[seed, level, partition]``) fixes every shuffle; ``cache_mb`` bounds the kernel cache
    (None: what this machine has available, :func:`auto_cache_mb`); ``mode`` is 'auto' (cached
    when m²·itemsize ≤ cache_mb), 'cached' or 'blocked'. ``max_iter`` bounds the sweeps;
    ``callback(sweep, violation, n_active)`` sees every sweep (progress on long solves).
    """
    check_odm_params(lam, theta, v)
    if tol <= 0 or not np.isfinite(tol):
        raise ValueError(f"tol must be a positive number, got {tol!r}.")
    if int(max_iter) < 1:
        raise ValueError(f"max_iter must be at least 1, got {max_iter!r}.")
    X = np.ascontiguousarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    m = X.shape[0]
    if y.shape != (m,) or not np.all(np.abs(y) == 1.0):
        raise ValueError("y must hold one label per row of X, each -1 or +1.")
    dtype = np.dtype(dtype)
    problem = ODMProblem(lam, theta, v, m)
    if gamma0 is None:
        gamma = np.zeros(m)
    else:
        gamma = np.array(gamma0, dtype=np.float64, copy=True)
        if gamma.shape != (m,) or not np.all(np.isfinite(gamma)):
            raise ValueError(f"gamma0 must be a finite vector of length {m}.")
    if cache_mb is None:
        cache_mb = auto_cache_mb(m, X.shape[1])
    cache_bytes = cache_mb * 2**20
    if mode == "auto":
        mode = kernel_mode_for(m, cache_mb, dtype.itemsize)
    if mode not in ("cached", "blocked"):
        raise ValueError(f"mode must be 'auto', 'cached' or 'blocked', got {mode!r}.")
    rng = np.random.default_rng(seed)
    run = _solve_cached if mode == "cached" else _solve_blocked
    kwargs = dict(problem=problem, gamma=gamma, rng=rng, tol=tol, max_iter=int(max_iter),
                  shrinking=shrinking, callback=callback)
    if mode == "cached":
        Q = full_q_matrix(kernel, X, y, dtype, block_mb)
        n_sweeps, violation, converged, history, u = run(Q=Q, **kwargs)
        computed = m
    else:
        source = _KernelRows(kernel, X, y, dtype, cache_bytes)
        n_sweeps, violation, converged, history, u = run(
            source=source, block_size=int(block_size), inner_sweeps=int(inner_sweeps), **kwargs)
        computed = source.computed_rows
    return DCDResult(gamma=gamma, u=u, objective=problem.objective(gamma, u), n_sweeps=n_sweeps,
                     violation=violation, converged=converged, kernel_mode=mode, history=history,
                     kernel_rows_computed=computed)


def _next_shrink_threshold(violation: float, shrinking: bool) -> float:
    # LIBLINEAR: shrink against the previous sweep's largest violation; never when it is 0.
    return violation if shrinking and violation > 0.0 else np.inf


def _solve_cached(Q, problem, gamma, rng, tol, max_iter, shrinking, callback):
    m = gamma.size
    u = np.zeros(m)
    nonzero = np.flatnonzero(gamma)
    loops.add_indexed_rows(u, Q, nonzero, gamma[nonzero])
    active = np.arange(m)
    threshold = np.inf
    history = []
    violation, converged, sweep = np.inf, False, 0
    for sweep in range(1, max_iter + 1):
        order = active[rng.permutation(active.size)]
        keep = np.ones(order.size, dtype=np.bool_)
        violation = loops.cached_sweep(Q, gamma, u, order, keep, problem.a_zeta, problem.a_beta,
                                       problem.lower, problem.upper, threshold)
        full = active.size == m and keep.all()
        history.append(violation)
        if callback is not None:
            callback(sweep, violation, int(keep.sum()))
        if violation <= tol:
            if full:
                converged = True
                break
            active, threshold = np.arange(m), np.inf  # re-check every point before stopping
            continue
        active = order[keep]
        active.sort()
        threshold = _next_shrink_threshold(violation, shrinking)
    return sweep, float(violation), converged, history, u


def _solve_blocked(source: _KernelRows, problem, gamma, rng, tol, max_iter, shrinking, callback,
                   block_size, inner_sweeps):
    m = gamma.size
    permutation = rng.permutation(m)
    blocks = [np.sort(permutation[s:s + block_size]) for s in range(0, m, block_size)]
    u = np.zeros(m)
    if np.any(gamma):
        for block_id, index in enumerate(blocks):
            loops.add_rows(u, source.rows(block_id, index), gamma[index])
    active = np.ones(m, dtype=np.bool_)
    threshold = np.inf
    history = []
    violation, converged, sweep = np.inf, False, 0
    for sweep in range(1, max_iter + 1):
        was_full = bool(active.all())
        violation = 0.0
        for block_id in source.visit_order(rng, len(blocks)):
            index = blocks[block_id]
            active_b = active[index]
            orders = np.stack([rng.permutation(index.size) for _ in range(inner_sweeps)])
            if not active_b.any():
                continue
            rows = source.rows(block_id, index)
            q_bb = np.ascontiguousarray(rows[:, index])
            gamma_b, u_b = gamma[index].copy(), u[index].copy()
            block_violation = loops.block_solve(
                q_bb, gamma_b, u_b, active_b, orders, problem.a_zeta, problem.a_beta,
                problem.lower, problem.upper, threshold, 0.5 * tol)
            violation = max(violation, block_violation)
            active[index] = active_b
            loops.add_rows(u, rows, gamma_b - gamma[index])
            gamma[index] = gamma_b
        history.append(violation)
        if callback is not None:
            callback(sweep, violation, int(active.sum()))
        logger.debug("sweep %d violation %.3g active %d kernel rows computed %d", sweep,
                     violation, active.sum(), source.computed_rows)
        if violation <= tol:
            if was_full and active.all():
                converged = True
                break
            active[:] = True
            threshold = np.inf
            continue
        threshold = _next_shrink_threshold(violation, shrinking)
    return sweep, float(violation), converged, history, u
