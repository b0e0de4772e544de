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
from typing import NamedTuple

import numpy as np

from ..core.kernels import Kernel
from ..core.sparse_rows import as_float_rows, memory_width
from . import _dcd_kernels as loops
from .dcd_settings import (DCD_DEFAULTS, NO_GIVEN_KERNEL, DCDSettings, GivenKernel,
                           ODMHyperparameters)
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

    @property
    def band(self) -> loops.Band:
        """Eqn 1's terms of a point's update (:data:`~._dcd_kernels.Band`), for the loops."""
        return loops.Band(self.a_zeta, self.a_beta, self.lower, self.upper)

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
    # rows visited over all sweeps (each sweep visits its active rows: shrinking); a row's
    # visits are what a level's cost model counts (spark/sodm/plan.py: modelled_seconds)
    visits: int = 0

    @property
    def n_sv(self) -> int:
        return int(np.count_nonzero(self.gamma))


def solve_odm_dual(X: np.ndarray, y: np.ndarray, kernel: Kernel, hyper: ODMHyperparameters, *,
                   settings: DCDSettings = DCD_DEFAULTS, gamma0=None, seed=0, weights=None,
                   given: GivenKernel = NO_GIVEN_KERNEL) -> DCDResult:
    """Solve the ODM dual (Eqn 1) of ``hyper``'s λ, θ, v on ``X`` (m×d float, dense or CSR)
    and ``y`` (±1) by coordinate descent run as ``settings`` say (:class:`DCDSettings`), until
    the largest projected-gradient violation over all rows (:meth:`ODMProblem.violation`) is
    at most ``settings.violation_tol`` (the violation bound the package's callers hold as
    ``LocalSolve.violation_tol``).

    ``gamma0`` warm-starts from a given γ; ``seed`` (an int or a sequence such as
    ``[seed, level, partition]``) fixes every shuffle. ``weights``: one s_i > 0 per row, each
    row's margin loss weighted (:class:`ODMProblem`; None: all 1, Eqn 1 itself). Rows of
    weight 0 are the caller's to leave out. ``given``: the kernel matrix of the rows when the
    caller already has it (:class:`GivenKernel`). ``DCDResult.storage`` says which dtype Q
    was kept in.
    """
    X, y, gamma, weights = _checked_rows(X, y, gamma0, weights)
    m = X.shape[0]
    storage = _kernel_storage(kernel, X, settings, given)
    rng = np.random.default_rng(seed)
    # rows in a seeded random order, so that the tiles of TILE_ROWS neighbours the sweeps group
    # are random groups whatever order the rows came in
    shuffled = np.arange(m) if given.signed_q is not None else rng.permutation(m)
    if given.signed_q is None:
        X, y, gamma = X[shuffled], y[shuffled], gamma[shuffled]
    lam, theta, v = hyper.lam, hyper.theta, hyper.v
    problem = ODMProblem(lam, theta, v, m, None if weights is None else weights[shuffled])
    blocks = _kernel_blocks(kernel, X, y, storage, given, shuffled, settings.block_mb)
    n_sweeps, violation, converged, history, u, visits = _solve_blocks(
        blocks, problem, gamma, rng, settings, TILE_ROWS)
    original = np.empty(m, dtype=np.int64)  # the rows back in their given order
    original[shuffled] = np.arange(m)
    gamma, u = gamma[original], u[original]
    problem = ODMProblem(lam, theta, v, m, weights)  # in the rows' given order
    return DCDResult(gamma=gamma, u=u, objective=problem.objective(gamma, u), n_sweeps=n_sweeps,
                     violation=violation, converged=converged, kernel_mode=storage.mode,
                     history=history, kernel_rows_computed=blocks.computed_rows,
                     storage=storage.dtype.name, visits=visits)


def _checked_rows(X, y, gamma0, weights):
    """:func:`solve_odm_dual`'s rows checked: ``X`` as float rows (float32 rows stay float32,
    as the kernel blocks are by default: half the memory), ``y`` as float64 ±1, the start γ (a
    copy, which the sweeps write) and the weights (:func:`checked_weights`)."""
    X = as_float_rows(X, np.float32 if X.dtype == np.float32 else np.float64)
    y = np.asarray(y, dtype=np.float64)
    m = X.shape[0]
    if y.shape != (m,) or not np.all(np.abs(y) == 1.0):
        raise ValueError("y must hold one label per row of X, each -1 or +1.")
    weights = checked_weights(weights, m)
    if gamma0 is None:
        gamma = np.zeros(m)
    else:
        gamma = np.array(gamma0, dtype=np.float64, copy=True)
        if gamma.shape != (m,) or not np.all(np.isfinite(gamma)):
            raise ValueError(f"gamma0 must be a finite vector of length {m}.")
    return X, y, gamma, weights


class _KernelStorage(NamedTuple):
    """How a binary solve keeps Q: ``mode`` 'cached' (all of it) or 'blocked' (rows on
    demand), the ``dtype`` of its values, their fixed-point ``scale`` (None: float values),
    the kernel cache's ``cache_bytes`` and the points a block holds."""

    mode: str
    dtype: np.dtype
    scale: float | None
    cache_bytes: float
    block_size: int


def _kernel_storage(kernel, X, settings: DCDSettings, given: GivenKernel) -> _KernelStorage:
    """Where and in which dtype Q is kept (:class:`DCDSettings`' dtype, cache_mb and mode)."""
    m = X.shape[0]
    dtype = np.dtype(settings.dtype)
    scale = None
    if dtype == FIXED_POINT:
        scale = (None if given.kernel_values is not None or given.signed_q is not None
                 else fixed_point_scale(kernel, X))
        if scale is None:
            dtype = np.dtype(np.float32)
    cache_mb = settings.cache_mb
    if cache_mb is None:
        cache_mb = auto_cache_mb(m, memory_width(X))
    signed_q = given.signed_q
    if signed_q is not None and (signed_q.shape != (m, m) or signed_q.dtype != dtype):
        raise ValueError(f"signed_q must be the {m}×{m} {dtype} matrix diag(y) K diag(y) of the "
                         f"rows, got {signed_q.shape} {signed_q.dtype}.")
    mode = settings.mode
    if given.kernel_values is not None or signed_q is not None:
        mode = "cached"
    elif mode == "auto":
        mode = kernel_mode_for(m, cache_mb, dtype.itemsize)
    if mode not in ("cached", "blocked"):
        raise ValueError(f"mode must be 'auto', 'cached' or 'blocked', got {mode!r}.")
    if mode == "blocked" and scale is not None:  # kernel rows on demand are float32
        dtype, scale = np.dtype(np.float32), None
    block_size = CACHED_BLOCK_ROWS if mode == "cached" else int(settings.block_size)
    return _KernelStorage(mode, dtype, scale, cache_mb * 2**20, block_size)


def _kernel_blocks(kernel, X, y, storage: _KernelStorage, given: GivenKernel, shuffled,
                   block_mb: float) -> _CachedBlocks | _OnDemandBlocks:
    """Q's blocks for the sweeps, of the rows in the ``shuffled`` order (the given order when
    ``given.signed_q`` is): all of Q computed by blocked GEMMs of at most ``block_mb`` MB (or
    the given matrix), or rows on demand."""
    if storage.mode == "blocked":
        return _OnDemandBlocks(KernelRows(kernel, X, y, storage.dtype, storage.cache_bytes),
                               storage.block_size)
    if given.signed_q is not None:
        Q = given.signed_q
    elif given.kernel_values is not None:
        Q = signed_kernel(np.asarray(given.kernel_values)[np.ix_(shuffled, shuffled)], y,
                          storage.dtype)
    else:
        Q = full_q_matrix(kernel, X, y, storage.dtype, block_mb, storage.scale)
    return _CachedBlocks(Q, storage.scale, storage.block_size)


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
    ``scale``: Q is fixed point (int16 entries, each worth ``scale``); None: float.
    ``block_size``: the B points of a block."""

    def __init__(self, Q: np.ndarray, scale: float | None = None,
                 block_size: int = CACHED_BLOCK_ROWS):
        self.Q, self.scale, self.block_size = Q, scale, block_size
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
    """Blocks whose B×m rows come from the LRU row cache or one GEMM (:class:`KernelRows`),
    ``block_size`` points each."""

    def __init__(self, source: KernelRows, block_size: int):
        self.source, self.block_size = source, block_size

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


def _solve_blocks(blocks, problem, gamma, rng, settings: DCDSettings, tile_rows=1):
    """Block coordinate descent (module docstring), Q's rows from ``blocks``, run as
    ``settings`` say.

    ``u = Qγ`` is kept for every point, so every sweep starts from the exact violation of all
    points: the fit stops as soon as the largest is at most ``violation_tol``, and a sweep
    visits only the points whose violation exceeds :data:`ACTIVE_SHARE_OF_TOL` ·
    ``violation_tol`` (with ``shrinking``), in blocks of ``blocks.block_size`` cut from the
    points in shuffled tiles of ``tile_rows`` (:data:`TILE_ROWS`; 1: every point shuffled),
    each block solved with ``inner_sweeps`` sweeps over its sub-matrix. Returns (sweeps, the
    violation left, converged, each sweep's violation, u, the rows visited in all).
    """
    violation_tol, shrinking, callback = settings.violation_tol, settings.shrinking, \
        settings.callback
    max_iter, block_size = int(settings.max_iter), int(blocks.block_size)
    inner_sweeps = int(settings.inner_sweeps)
    m = gamma.size
    u = np.zeros(m)
    nonzero = np.flatnonzero(gamma)
    for start in range(0, nonzero.size, block_size):
        index = nonzero[start:start + block_size]
        blocks.add_rows(u, index, gamma[index])
    history = []
    violation, converged, sweep, visits = np.inf, False, 0, 0
    everyone = np.arange(m)
    inverse_weight, band = problem.inverse_weight, problem.band
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
        visits += int(order.size)
        for start in range(0, order.size, block_size):
            index, q_bb, add_rows = blocks.block(order[start:start + block_size])
            gamma_b, u_b = gamma[index].copy(), u[index].copy()
            orders = np.stack([rng.permutation(index.size) for _ in range(inner_sweeps)])
            loops.block_solve(q_bb, gamma_b, u_b, np.ones(index.size, dtype=np.bool_), orders,
                              band, inverse_weight[index], np.inf,
                              0.5 * violation_tol)  # a block's inner bound
            add_rows(u, gamma_b - gamma[index])
            gamma[index] = gamma_b
    return sweep, float(violation), converged, history, u, visits
