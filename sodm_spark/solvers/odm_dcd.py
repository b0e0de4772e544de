"""Exact ODM by dual coordinate descent (docs/design.md §1; the SODM paper, Eqns 1-3: Wang, Cao,
Zhang, Shi & Jin, "Scalable Optimal Margin Distribution Machine").

The dual of the ODM primal (SODM paper Sec. 2.1) is, with ``c = (1-θ)²/(λ v)`` and
``Q_ij = y_i y_j k(x_i, x_j)``,

    min_{ζ,β ≥ 0}  ½(ζ-β)ᵀQ(ζ-β) + (Mc/2)(v‖ζ‖² + ‖β‖²) + (θ-1)1ᵀζ + (θ+1)1ᵀβ      (Eqn 1)

Only ``γ = ζ - β`` is stored: at the optimum ζ_i β_i = 0, so each point's pair is minimized
jointly in closed form (the univariate problems of Eqn 3, solved for both signs at once).
``u = Qγ`` is maintained, each sweep visits the points in a seeded random order, points that
sit at γ_i = 0 with strictly satisfied conditions are shrunk (LIBLINEAR's rule), and the loop
stops when the largest projected gradient of a sweep over *all* points is at most
``violation_tol``.

Both ways of getting kernel rows share one loop: every sweep starts from the exact violation
of every point (``u`` is exact), visits the points whose violation exceeds ``violation_tol``/10
in a seeded shuffled order cut into blocks, solves each block with a few inner sweeps on its B×B
sub-matrix (in cache), and updates ``u`` with the block's rows and its γ change. At large λ
(a tiny diagonal) a block's inner sweeps do the work of many plain sweeps: 7,400 Fashion-MNIST
rows at λ = 1e6 converge in 31 sweeps (0.87 s) instead of 191 per-coordinate sweeps (3.1 s).

* ``cached``: the whole ``Q`` (float32 by default, or int16 fixed point at half the memory)
  fits ``cache_mb`` and is computed once by blocked GEMM; a block's rows are read where they
  lie.
* ``blocked``: each block's B×m kernel rows come from an LRU cache of rows bounded by
  ``cache_mb`` or from one GEMM. Memory is O(B·m) plus the cache, never m×m.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from ..core.kernels import Kernel
from ..core.sparse_rows import as_float_rows, memory_width
from ..core.validation import check_odm_params
from . import _dcd_kernels as loops
from .kernel_rows import (FIXED_POINT, KernelRows, auto_cache_mb, fixed_point_scale,
                          full_q_matrix, kernel_mode_for, signed_kernel)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ODMProblem:
    """The constants of one local ODM dual (Eqn 1) on ``m`` rows; the local problem uses m·c.

    ``weights`` (one s_i > 0 per row, None: all 1) weight each row's margin loss in the primal,
    ``λ/(2S) · Σ_i s_i (ξ_i² + v·ε_i²) / (1-θ)²`` with ``S = Σ_i s_i`` in place of M: row i's
    diagonal terms in the dual become ``S·c·v / s_i`` and ``S·c / s_i``
    (docs/design.md §1.4). An integer weight is that many copies of the row; unit weights are
    Eqn 1 itself, bit for bit.
    """

    lam: float
    theta: float
    v: float
    m: int
    weights: np.ndarray | None = None

    @property
    def c(self) -> float:
        return (1.0 - self.theta) ** 2 / (self.lam * self.v)

    @property
    def total_weight(self) -> float:
        """S = Σ_i s_i: M for unit weights."""
        return self.m if self.weights is None else float(np.sum(self.weights))

    @property
    def inverse_weight(self) -> np.ndarray:
        """1/s_i per row: row i's share of the diagonal terms."""
        return np.ones(self.m) if self.weights is None else 1.0 / self.weights

    @property
    def a_zeta(self) -> float:
        """Diagonal added to Q for ζ: S·c·v (divided by s_i for row i)."""
        return self.total_weight * self.c * self.v

    @property
    def a_beta(self) -> float:
        """Diagonal added to Q for β: S·c (divided by s_i for row i)."""
        return self.total_weight * self.c

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
        zeta_w, beta_w = zeta, beta
        if self.weights is not None:  # each row's diagonal term over its weight
            zeta_w, beta_w = zeta / np.sqrt(self.weights), beta / np.sqrt(self.weights)
        return float(
            0.5 * gamma @ u
            + 0.5 * self.a_beta * (self.v * zeta_w @ zeta_w + beta_w @ beta_w)
            - self.lower * zeta.sum()
            + self.upper * beta.sum()
        )

    def violation(self, gamma: np.ndarray, u: np.ndarray) -> float:
        """Largest projected-gradient violation (the KKT residual used for stopping)."""
        return float(loops.max_violation(gamma, u, self.a_zeta, self.a_beta, self.inverse_weight,
                                         self.lower, self.upper))


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
    storage: str = "float32"  # the dtype Q was kept in ('int16': fixed point, kernel_rows)

    @property
    def n_sv(self) -> int:
        return int(np.count_nonzero(self.gamma))


def solve_odm_dual(X: np.ndarray, y: np.ndarray, kernel: Kernel, lam: float, theta: float,
                   v: float, *, violation_tol: float = 1e-3, max_iter: int = 1000, gamma0=None,
                   seed=0, cache_mb: float | None = None, block_size: int = 1024,
                   inner_sweeps: int = 8, dtype=np.float32, shrinking: bool = True,
                   block_mb: float = 256.0, mode: str = "auto", callback=None,
                   kernel_values: np.ndarray | None = None,
                   signed_q: np.ndarray | None = None, weights=None) -> DCDResult:
    """Solve the ODM dual (Eqn 1) on ``X`` (m×d float, dense or CSR) and ``y`` (±1) by
    coordinate descent, until the largest projected-gradient violation over all rows
    (:meth:`ODMProblem.violation`) is at most ``violation_tol`` (the violation bound the package's
    callers hold as ``LocalSolve.violation_tol``).

    ``gamma0`` warm-starts from a given γ; ``seed`` (an int or a sequence such as
    ``[seed, level, partition]``) fixes every shuffle; ``cache_mb`` bounds the kernel cache
    (None: what this machine has available, :func:`auto_cache_mb`); ``mode`` is 'auto' (cached
    when m²·itemsize ≤ cache_mb), 'cached' or 'blocked'. ``max_iter`` bounds the sweeps;
    ``callback(sweep, violation, n_active)`` sees every sweep (progress on long solves).
    ``kernel_values`` is the m×m kernel matrix of ``X`` when the caller already has it (a
    hyperparameter search solves many problems on one matrix): the solve is then cached.
    ``signed_q`` is Q = diag(y) K diag(y) in ``dtype`` of the rows in their given order, for a
    caller solving many problems on one matrix and one y: the solve reads it as it is (no copy)
    and keeps the rows' order, so the caller shuffles them once instead (gathering a shuffled
    copy of a 2,000-row matrix took longer than many of a search's solves).

    ``weights``: one s_i > 0 per row, each row's margin loss weighted (:class:`ODMProblem`;
    None: all 1, Eqn 1 itself). Rows of weight 0 are the caller's to leave out.

    ``dtype`` int16 (:data:`~.kernel_rows.FIXED_POINT`) keeps a cached Q in fixed point, half
    the memory of float32, where the kernel bounds its values by its diagonal
    (:func:`~.kernel_rows.fixed_point_scale`); rows on demand, a given matrix and other
    kernels stay float32 (``DCDResult.storage`` says which was kept).
    """
    check_odm_params(lam, theta, v)
    if violation_tol <= 0 or not np.isfinite(violation_tol):
        raise ValueError(f"violation_tol must be a positive number, got {violation_tol!r}.")
    if int(max_iter) < 1:
        raise ValueError(f"max_iter must be at least 1, got {max_iter!r}.")
    # float32 rows stay float32 (the kernel blocks are float32 by default): half the memory
    X = as_float_rows(X, np.float32 if X.dtype == np.float32 else np.float64)
    y = np.asarray(y, dtype=np.float64)
    m = X.shape[0]
    if y.shape != (m,) or not np.all(np.abs(y) == 1.0):
        raise ValueError("y must hold one label per row of X, each -1 or +1.")
    dtype = np.dtype(dtype)
    scale = None
    if dtype == FIXED_POINT:
        scale = (None if kernel_values is not None or signed_q is not None
                 else fixed_point_scale(kernel, X))
        if scale is None:
            dtype = np.dtype(np.float32)
    weights = checked_weights(weights, m)
    if gamma0 is None:
        gamma = np.zeros(m)
    else:
        gamma = np.array(gamma0, dtype=np.float64, copy=True)
        if gamma.shape != (m,) or not np.all(np.isfinite(gamma)):
            raise ValueError(f"gamma0 must be a finite vector of length {m}.")
    if cache_mb is None:
        cache_mb = auto_cache_mb(m, memory_width(X))
    cache_bytes = cache_mb * 2**20
    if signed_q is not None and (signed_q.shape != (m, m) or signed_q.dtype != dtype):
        raise ValueError(f"signed_q must be the {m}×{m} {dtype} matrix diag(y) K diag(y) of the "
                         f"rows, got {signed_q.shape} {signed_q.dtype}.")
    if kernel_values is not None or signed_q is not None:
        mode = "cached"
    elif mode == "auto":
        mode = kernel_mode_for(m, cache_mb, dtype.itemsize)
    if mode not in ("cached", "blocked"):
        raise ValueError(f"mode must be 'auto', 'cached' or 'blocked', got {mode!r}.")
    if mode == "blocked" and scale is not None:  # kernel rows on demand are float32
        dtype, scale = np.dtype(np.float32), None
    rng = np.random.default_rng(seed)
    # rows in a seeded random order, so that the tiles of TILE_ROWS neighbours the sweeps group
    # are random groups whatever order the rows came in
    shuffled = np.arange(m) if signed_q is not None else rng.permutation(m)
    if signed_q is None:
        X, y, gamma = X[shuffled], y[shuffled], gamma[shuffled]
    problem = ODMProblem(lam, theta, v, m, None if weights is None else weights[shuffled])
    blocks: _CachedBlocks | _OnDemandBlocks
    if mode == "cached":
        if signed_q is not None:
            Q = signed_q
        elif kernel_values is not None:
            Q = signed_kernel(np.asarray(kernel_values)[np.ix_(shuffled, shuffled)], y, dtype)
        else:
            Q = full_q_matrix(kernel, X, y, dtype, block_mb, scale)
        blocks, block_size = _CachedBlocks(Q, scale), CACHED_BLOCK_ROWS
    else:
        blocks = _OnDemandBlocks(KernelRows(kernel, X, y, dtype, cache_bytes))
    n_sweeps, violation, converged, history, u = _solve_blocks(
        blocks, problem, gamma, rng, violation_tol, int(max_iter), shrinking, callback,
        int(block_size), int(inner_sweeps), TILE_ROWS)
    computed = blocks.computed_rows
    original = np.empty(m, dtype=np.int64)
    original[shuffled] = np.arange(m)
    gamma, u = gamma[original], u[original]
    problem = ODMProblem(lam, theta, v, m, weights)  # in the rows' given order
    return DCDResult(gamma=gamma, u=u, objective=problem.objective(gamma, u), n_sweeps=n_sweeps,
                     violation=violation, converged=converged, kernel_mode=mode, history=history,
                     kernel_rows_computed=computed, storage=dtype.name)


def checked_weights(weights, m: int) -> np.ndarray | None:
    """``weights`` as float64, one positive finite number per row (None stays None)."""
    if weights is None:
        return None
    weights = np.asarray(weights, dtype=np.float64)
    if weights.shape != (m,):
        raise ValueError(f"weights must hold one number per row ({m}), got shape "
                         f"{weights.shape}.")
    bad = ~(np.isfinite(weights) & (weights > 0.0))
    if bad.any():
        raise ValueError(f"weights must be positive and finite; row {int(np.argmax(bad))} has "
                         f"{weights[bad][0]!r} (leave rows of weight 0 out of the solve).")
    return weights


def next_shrink_threshold(violation: float, shrinking: bool) -> float:
    """LIBLINEAR's rule for plain sweeps (the joint multi-class solver's): shrink against the
    previous sweep's largest violation; never when it is 0."""
    return violation if shrinking and violation > 0.0 else np.inf


#: On-demand sweeps visit the points whose violation exceeds this share of the violation bound
#: (``violation_tol``): at 1.0 the points just under it are never updated and the tail crawls
#: (5,000 Fashion-MNIST rows: 1,000 sweeps, not converged); at 0.1 the solve converges in 16
#: sweeps.
ACTIVE_SHARE_OF_TOL = 0.1
#: Block rows when Q is cached: 512 rows with 8 inner sweeps was the fastest of 256-2,048 and
#: 8-16 on 2,500 and 7,400 Fashion-MNIST rows at λ = 1e3 to 1e6 (1.5-4x faster than plain
#: sweeps; a 512×512 float32 block stays in L2).
CACHED_BLOCK_ROWS = 512
#: A sweep visits its points tile by tile (tiles of this many neighbouring rows, shuffled), so a
#: block's rows are a few runs of neighbours: gathering its sub-matrix then reads short runs of
#: each row instead of every cache line of it. Same sweeps, 1.8x faster on 22,000 Fashion-MNIST
#: rows (tiles of 64: 3.3 s against 5.8 s for single points at λ = 1e6).
TILE_ROWS = 64


class _CachedBlocks:
    """Blocks of a cached Q: the B×B sub-matrix gathered, u updated from Q's rows in place.
    ``scale``: Q is fixed point (int16 entries, each worth ``scale``); None: float."""

    def __init__(self, Q: np.ndarray, scale: float | None = None):
        self.Q, self.scale = Q, scale
        self.computed_rows = Q.shape[0]

    def add_rows(self, u, index, deltas):
        if self.scale is None:
            loops.add_indexed_rows(u, self.Q, index, deltas)
        else:
            loops.add_scaled_rows(u, self.Q, index, deltas, self.scale)

    def block(self, index):
        """(the block's points in the order solved, Q_bb, a function adding Δγ's rows to u)."""
        index = np.sort(index)  # sequential row reads
        q_bb = (loops.gather_block(self.Q, index) if self.scale is None
                else loops.gather_scaled_block(self.Q, index, self.scale))
        return index, q_bb, lambda u, deltas: self.add_rows(u, index, deltas)


class _OnDemandBlocks:
    """Blocks whose B×m rows come from the LRU row cache or one GEMM (:class:`KernelRows`)."""

    def __init__(self, source: KernelRows):
        self.source = source

    @property
    def computed_rows(self):
        return self.source.computed_rows

    def add_rows(self, u, index, deltas):
        loops.add_rows(u, self.source.rows(index), deltas)

    def block(self, index):
        index = self.source.cached_first(index)
        rows = self.source.rows(index)
        return (index, np.ascontiguousarray(rows[:, index]),
                lambda u, deltas: loops.add_rows(u, rows, deltas))


def _solve_blocks(blocks, problem, gamma, rng, violation_tol, max_iter, shrinking, callback,
                  block_size, inner_sweeps, tile_rows=1):
    """Block coordinate descent (module docstring), Q's rows from ``blocks``.

    ``u = Qγ`` is kept for every point, so every sweep starts from the exact violation of all
    points: the fit stops as soon as the largest is at most ``violation_tol``, and a sweep
    visits only the points whose violation exceeds :data:`ACTIVE_SHARE_OF_TOL` ·
    ``violation_tol`` (with
    ``shrinking``), in blocks of ``block_size`` cut from the points in shuffled tiles of
    ``tile_rows`` (:data:`TILE_ROWS`; 1: every point shuffled).
    """
    m = gamma.size
    u = np.zeros(m)
    nonzero = np.flatnonzero(gamma)
    for start in range(0, nonzero.size, block_size):
        index = nonzero[start:start + block_size]
        blocks.add_rows(u, index, gamma[index])
    history = []
    violation, converged, sweep = np.inf, False, 0
    everyone = np.arange(m)
    inverse_weight = problem.inverse_weight
    for sweep in range(1, max_iter + 1):
        violations = loops.violations(gamma, u, problem.a_zeta, problem.a_beta, inverse_weight,
                                      problem.lower, problem.upper)
        violation = float(violations.max()) if m else 0.0
        active = (np.flatnonzero(violations > ACTIVE_SHARE_OF_TOL * violation_tol)
                  if shrinking else everyone)
        history.append(violation)
        if callback is not None:
            callback(sweep, violation, int(active.size))
        logger.debug("sweep %d violation %.3g active %d kernel rows computed %d", sweep,
                     violation, active.size, blocks.computed_rows)
        if violation <= violation_tol:
            converged = True
            break
        # a plain shuffle: visiting the cached rows first each sweep saves GEMMs but, always in
        # the same place in the order, slows convergence (12,000 rows, a cache of 25%: 33
        # sweeps and 14.2 s vs 13 sweeps and 8.3 s shuffled)
        if tile_rows > 1:
            rank = rng.permutation(-(-m // tile_rows))
            order = active[np.argsort(rank[active // tile_rows], kind="stable")]
        else:
            order = active[rng.permutation(active.size)]
        for start in range(0, order.size, block_size):
            index, q_bb, add_rows = blocks.block(order[start:start + block_size])
            gamma_b, u_b = gamma[index].copy(), u[index].copy()
            orders = np.stack([rng.permutation(index.size) for _ in range(inner_sweeps)])
            loops.block_solve(q_bb, gamma_b, u_b, np.ones(index.size, dtype=np.bool_), orders,
                              problem.a_zeta, problem.a_beta, inverse_weight[index],
                              problem.lower, problem.upper, np.inf,
                              0.5 * violation_tol)  # a block's inner bound
            add_rows(u, gamma_b - gamma[index])
            gamma[index] = gamma_b
    return sweep, float(violation), converged, history, u
