"""Core Vector Regression and the Core Vector Machine: kernel problems as minimum enclosing balls.

The CVR paper (Tsang, Kwok & Lai, "Core Vector Regression for Very Large Regression Problems",
ICML 2005). Both problems are a center-constrained MEB (Eqns 11-14) over "points" p with
a transformed kernel k̃ and a linear term ``lin``: ``max_α D(α) = αᵀlin - αᵀK̃α`` on the simplex,

    R² = η + D(α)   (Eqn 12 with Δ of Eqn 15),   dist²_p = R² + (g_p - αᵀg),  g = lin - 2K̃α,

with ``η = max_p (k̃_pp - lin_p)``, the smallest η keeping every Δ_p ≥ 0 (Eqn 15); dist²_p is
Eqn 13 written relative to R², so the ball test never subtracts two large numbers.

* **L2-SVR** (Eqns 6-8): each row i gives two points (i, +1) for λ_i and (i, -1) for λ*_i;
  ``k̃((i,s),(j,t)) = s·t·(k(x_i,x_j) + 1) + δ/C`` and ``lin_(i,s) = 2·s·y_i / C_paper``. Here C
  is the per-row weight of ``½ξ²`` (as scikit-learn's SVR C weighs its loss): the paper's
  ``C_paper = C·μ·m``, so its diagonal ``μm/C_paper`` is ``1/C``. Eqns 9-10 give
  ``f(x) = C_paper Σ s α (k(x_p,x)+1)``, ``b = C_paper Σ s α`` and ε̄; ``p* = C_paper²·d*``.
* **two-class L2-SVM** (Eqn 5, the CVM): one point per row with its label as the sign,
  ``lin = 0``; ``f(x) = Σ α y (k(x_p,x)+1)``, ``b = Σ α y``, ``ρ = αᵀK̃α``.

Algorithm (Sec. 3.3): from one random point, repeatedly (a) sample 59 rows and take the one
furthest from the center (Smola & Schölkopf's speed-up: the best of 59 is among the furthest
5% w.p. 0.95), (b) stop if it lies inside (1+ε)R, else add it to the core set, (c) re-solve
the core QP exactly, warm-started (the paper uses SMO; here an active-set method on a growing
Cholesky factor, see ``_CoreSet``). ``final_check="full"`` also scans every row in kernel
blocks before stopping and resumes from the furthest row outside: Property 3's ``(1+ε)²``
bound on ``p*`` then holds for certain. Kernel work per added point: one 59 × |core| block.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit
from threadpoolctl import threadpool_limits

from ..core.kernels import Kernel, iter_kernel_blocks

PROBABILISTIC_SAMPLE = 59  # Smola & Schölkopf (2000): 0.95^59 < 0.05


@dataclass(frozen=True)
class CoreSearch:
    """How the core set grows (Sec. 3.3): each iteration draws ``points_per_iter`` samples of
    ``n_samples`` rows (seeded by ``seed``) and adds the furthest row of each, until no sampled
    row lies outside (1+``tol``)·R (``final_check='full'``: no row at all, scanned in kernel
    blocks of ``block_mb`` MB), ``max_core`` core points or ``max_iter`` iterations (None:
    100·max_core)."""

    tol: float = 1e-6
    max_core: int = 5000
    max_iter: int | None = None
    n_samples: int = PROBABILISTIC_SAMPLE
    points_per_iter: int = 1
    final_check: str = "sample"
    seed: int = 0
    block_mb: float = 64.0


@njit(cache=True, fastmath=True)
def cholesky_append(L, K_new, n):
    """Extend the Cholesky factor in ``L[:n, :n]`` by ``b = len(K_new)`` rows at once.

    ``K_new[r]`` is row ``n + r`` of the matrix (its first ``n + b`` entries). Forward
    substitution reads each row of ``L`` once for all b new rows (contiguous dot products).
    Returns False if a pivot is not positive (K̃ is not numerically positive definite).
    """
    b = K_new.shape[0]
    for i in range(n + b):
        l_i = L[i]
        for r in range(max(0, i - n), b):
            l_row, s = L[n + r], K_new[r, i]
            for j in range(i):
                s -= l_i[j] * l_row[j]
            if i < n + r:
                l_row[i] = s / l_i[i]
            elif not s > 0.0:
                return False
            else:
                l_row[i] = np.sqrt(s)
    return True


@njit(cache=True)
def cholesky_remove(L, z, k, n):
    """Make point k a hole: the factor of K̃ with row/column k replaced by e_k, in O((n-k)²).

    The trailing block absorbs column k as a rank-one update ``L₂₂L₂₂ᵀ + llᵀ`` by Givens
    rotations, applied to groups of 16 rows at once (independent chains run in parallel);
    the same rotations carry ``z = L⁻¹ rhs`` over with ``rhs_k = 0``, so the hole's α is 0.
    """
    count = n - k - 1
    cos, sin, carry = np.empty(count), np.empty(count), np.empty(16)
    start = 0
    while start < count:
        size = min(16, count - start)
        base = k + 1 + start
        for r in range(size):
            carry[r] = L[base + r, k]
            L[base + r, k] = 0.0
        for b in range(start):  # rotations already known, applied to the whole group
            j, c, s = k + 1 + b, cos[b], sin[b]
            for r in range(size):
                l_ij, x = L[base + r, j], carry[r]
                L[base + r, j] = c * l_ij + s * x
                carry[r] = c * x - s * l_ij
        for r in range(size):  # rotations born inside the group, in order
            i, x = base + r, carry[r]
            for b in range(start, start + r):
                l_ij = L[i, k + 1 + b]
                L[i, k + 1 + b] = cos[b] * l_ij + sin[b] * x
                x = cos[b] * x - sin[b] * l_ij
            d = L[i, i]
            radius = np.sqrt(d * d + x * x)
            cos[start + r], sin[start + r] = d / radius, x / radius
            L[i, i] = radius
        start += size
    for c in range(z.shape[1]):
        z_k = z[k, c]
        for a in range(count):
            z_j = z[k + 1 + a, c]
            z[k + 1 + a, c] = cos[a] * z_j + sin[a] * z_k
            z_k = cos[a] * z_k - sin[a] * z_j
        z[k, c] = 0.0
    L[k, :k] = 0.0
    L[k, k] = 1.0


@njit(cache=True)
def compact_square(A, keep):
    """``A[:s, :s] = A[keep][:, keep]`` in place (``keep`` increasing, so reads stay ahead)."""
    for new_i in range(keep.size):
        for new_j in range(keep.size):
            A[new_i, new_j] = A[keep[new_i], keep[new_j]]


@njit(cache=True)
def back_substitute(L, z, n):
    """Solve ``Lᵀ x = z[r]`` for each row r of ``z`` (r × n) in place; rows of ``L`` read once."""
    for j in range(n - 1, -1, -1):
        l_j = L[j]
        for r in range(z.shape[0]):
            z_r = z[r]
            x = z_r[j] = z_r[j] / l_j[j]
            for i in range(j):
                z_r[i] -= l_j[i] * x


@dataclass
class CoreMEB:
    """A solved core set. Arrays are per core point (a row can enter with both signs)."""

    rows: np.ndarray       # row index of each core point
    signs: np.ndarray      # its sign s (SVR: +1 for λ, -1 for λ*; SVM: the label)
    alpha: np.ndarray      # its weight in the center, on the simplex
    radius2: float         # R² = η + D(α)
    eta: float             # the η of Eqn 15 (smallest with Δ ≥ 0)
    dual_objective: float  # D(α) = αᵀlin - αᵀK̃α
    quadratic: float       # αᵀK̃α
    n_iter: int            # iterations of the core-set loop
    full_checks: int       # full scans done (final_check='full')
    converged: bool        # False when max_core or max_iter stopped the growth


class _CoreSet:
    """Growing core set with the Cholesky factor of its K̃ and an exact active-set QP solve.

    ``K̃ = LLᵀ`` (positive definite thanks to its δ/C diagonal; K̃ itself is never stored)
    grows by O(n²) per point, and ``z = L⁻¹[lin, 1]`` with it: the core QP with every α free
    (``2K̃α = lin - ν1``, ``1ᵀα = 1``) costs one back substitution. The primal active-set
    method walks toward it until the first α reaches 0 (ratio test), drops that point (a hole,
    ``cholesky_remove``; its row may be sampled again) and repeats, ending at the exact
    optimum over the remaining points (every gradient = ν). Holes are compacted in O(n²).
    """

    def __init__(self, X, kernel, inv_C, max_core, targets, blocked, capacity=256):
        self.X, self.kernel, self.inv_C, self.max_core = X, kernel, inv_C, max_core
        self.targets, self.blocked = targets, blocked  # blocked: bit 1 (i, +1), bit 2 (i, -1)
        self.n = self.holes = 0
        self.nu = 0.0  # the common gradient g_p = ν of the live points at the optimum
        self._allocate(min(capacity, max_core))

    _VECTORS = ("z", "features", "rows", "signs", "lin", "alpha", "alive")
    # the buffers _allocate sets by name: the factor L, and per core point these vectors
    L: np.ndarray
    z: np.ndarray
    features: np.ndarray
    rows: np.ndarray
    signs: np.ndarray
    lin: np.ndarray
    alpha: np.ndarray
    alive: np.ndarray

    def _allocate(self, capacity):
        """Buffers for ``capacity`` points, the first ``n`` copied over from the old ones."""
        n, d = self.n, self.X.shape[1]
        shapes = {"L": (capacity, capacity), "z": (capacity, 2), "features": (capacity, d)}
        for name in ("L",) + self._VECTORS:
            dtype = {"rows": np.int64, "alive": bool}.get(name, np.float64)
            new, old = np.zeros(shapes.get(name, capacity), dtype), getattr(self, name, None)
            if old is not None:
                index = np.s_[:n, :n] if name == "L" else np.s_[:n]
                new[index] = old[index]
            setattr(self, name, new)

    def compact(self):
        """Delete the holes: their rows and columns of L are unit vectors, so LLᵀ stays K̃."""
        if not self.holes:
            return
        keep = np.flatnonzero(self.alive[:self.n])
        compact_square(self.L, keep)
        for name in self._VECTORS:
            buffer = getattr(self, name)
            buffer[:keep.size] = buffer[keep]
        self.n, self.holes = keep.size, 0

    def add(self, points):
        """Append points [(row, sign), ...] at α = 0: one kernel block against the core set."""
        if self.n + len(points) > self.L.shape[0]:
            self.compact()
        n, b = self.n, len(points)
        if n + b > self.L.shape[0]:
            self._allocate(min(max(2 * self.L.shape[0], n + b), self.max_core))
        new = slice(n, n + b)
        self.rows[new], self.signs[new] = zip(*points)
        for row, sign in points:
            self.blocked[row] |= 1 if sign > 0 else 2
        self.lin[new] = self.signs[new] * self.targets[self.rows[new]]
        self.features[new] = self.X[self.rows[new]]
        self.alive[new], self.alpha[new] = True, 0.0
        k_tilde = self.kernel.block(self.features[new], self.features[:n + b])
        k_tilde += 1.0
        k_tilde *= self.signs[new, None] * self.signs[None, :n + b]
        k_tilde[:, n:] += self.inv_C * np.eye(b)
        k_tilde[:, :n][:, ~self.alive[:n]] = 0.0  # holes stay unit rows/columns
        self.n = n + b
        if not cholesky_append(self.L, k_tilde, n):
            raise ValueError(
                f"The core-set matrix K̃ (kernel + 1 + I/C) is not positive definite in float64 "
                f"at C={1.0 / self.inv_C:g}: 1/C is below the rounding of the kernel values. "
                "Use a smaller C (C ≤ 1e6 is safe).")
        for q in range(n, n + b):
            rhs = np.array([self.lin[q], 1.0])
            self.z[q] = (rhs - self.L[q, :q] @ self.z[:q]) / self.L[q, q]

    def _remove(self, k):
        """Drop core point k (its α is 0): it becomes a hole and its row a candidate again."""
        cholesky_remove(self.L, self.z, k, self.n)
        self.alive[k], self.alpha[k] = False, 0.0
        self.blocked[self.rows[k]] &= ~np.int8(1 if self.signs[k] > 0 else 2)
        self.holes += 1

    def solve(self):
        """The exact core QP, warm-started from the current α (new points enter at 0)."""
        n = self.n
        alpha = self.alpha[:n].copy()
        while True:  # each round drops one point, and a point with α > 0 always stays
            Z = np.ascontiguousarray(self.z[:n].T)
            back_substitute(self.L, Z, n)
            nu = (Z[0].sum() - 2.0) / Z[1].sum()
            target = 0.5 * (Z[0] - nu * Z[1])  # holes solve to exactly 0
            blocking = np.flatnonzero(self.alive[:n] & (target < 0.0))
            if blocking.size == 0:
                break
            ratios = alpha[blocking] / (alpha[blocking] - target[blocking])
            k = int(np.argmin(ratios))
            alpha = np.maximum(alpha + ratios[k] * (target - alpha), 0.0)
            alpha[blocking[k]] = 0.0
            self._remove(int(blocking[k]))
        self.alpha[:n], self.nu = target, nu
        if self.holes > 0.1 * self.n:
            self.compact()

    def margins(self, block):
        """``u = Σ_q α_q s_q (k(x, x_q) + 1)`` for the rows of a kernel block against the core."""
        weights = self.alpha[:self.n] * self.signs[:self.n]
        return block @ weights + weights.sum()


def solve_core_meb(X, targets, kernel: Kernel, C: float, signs=None,
                   search: CoreSearch | None = None) -> CoreMEB:
    """Grow a core set until no sampled (or no) row lies outside (1+tol)·R (Sec. 3.3), as
    ``search`` (default ``CoreSearch()``) says.

    Point (i, s) has ``lin = s·targets[i]`` and ``k̃ = s·t·(k + 1) + δ/C``; ``signs=None`` lets
    a row enter with either sign (SVR), an array fixes one per row (SVM). Each iteration draws
    ``points_per_iter`` samples of ``n_samples`` rows and adds the furthest row of each (1 is
    the paper's loop). As in the paper, one sample per added point, and the run stops at the
    first sample with no row outside (1+tol)R: a batch stops if any of its samples is clean.
    """
    search = search or CoreSearch()
    tol, max_core, final_check = search.tol, search.max_core, search.final_check
    n_samples, points_per_iter = search.n_samples, search.points_per_iter
    if final_check not in ("sample", "full"):
        raise ValueError(f"final_check must be 'sample' or 'full', got {final_check!r}.")
    m, targets, inv_C = X.shape[0], np.asarray(targets, dtype=np.float64), 1.0 / C
    rng, diagonal = np.random.default_rng(search.seed), kernel.diagonal(X)
    if signs is None:  # η of Eqn 15: the smallest with Δ ≥ 0
        eta = float(diagonal.max()) + 1.0 + inv_C + float(np.abs(targets).max())
    else:
        signs = np.asarray(signs, dtype=np.float64)
        eta = float((diagonal + 1.0 + inv_C - signs * targets).max())
    # core points are blocked, and for the SVM so is the sign opposite to each label
    blocked = np.zeros(m, np.int8) if signs is None else np.where(signs > 0, 2, 1).astype(np.int8)
    core = _CoreSet(X, kernel, inv_C, max_core, targets, blocked)
    first = int(rng.integers(m))
    core.add([(first, 1.0 if signs is None else float(signs[first]))])
    core.alpha[0] = 1.0
    core.nu = core.lin[0] - 2.0 * core.L[0, 0] ** 2

    def gaps(rows, block):
        """Best gradient g_p over the signs of each row that may be added, and that sign."""
        v = targets[rows] - 2.0 * core.margins(block)
        plus = np.where(blocked[rows] & 1, -np.inf, v)
        minus = np.where(blocked[rows] & 2, -np.inf, -v)
        return np.maximum(plus, minus), np.where(plus >= minus, 1.0, -1.0)

    threshold_factor = (1.0 + tol) ** 2 - 1.0
    max_iter = 100 * max_core if search.max_iter is None else search.max_iter
    full_checks = n_iter = 0
    while True:
        n = core.n
        # at the core optimum αᵀg = ν, so D(α) = ½(αᵀlin + ν)
        radius2 = eta + 0.5 * (core.alpha[:n] @ core.lin[:n] + core.nu)
        # dist²_p > (1+tol)²R²  ⇔  g_p - αᵀg > ((1+tol)² - 1)·R²   (Eqn 13)
        threshold = threshold_factor * radius2 + core.nu
        rows = rng.integers(m, size=(points_per_iter, n_samples))
        gap, sign = gaps(rows.ravel(), kernel.block(X[rows.ravel()], core.features[:n]))
        gap, sign = gap.reshape(rows.shape), sign.reshape(rows.shape)
        best = np.argmax(gap, axis=1)
        picked = np.arange(points_per_iter)
        outside = gap[picked, best] > threshold
        candidates = [] if not outside.all() else list(dict.fromkeys(
            (int(rows[s, best[s]]), float(sign[s, best[s]])) for s in picked))
        if not candidates and final_check == "full":
            full_checks += 1
            best_gap = threshold
            for block_rows, block in iter_kernel_blocks(kernel, X, core.features[:n],
                                                        block_mb=search.block_mb):
                row_ids = np.arange(block_rows.start, block_rows.stop)
                gap, sign = gaps(row_ids, block)
                k = int(np.argmax(gap))
                if gap[k] > best_gap:
                    best_gap, candidates = gap[k], [(int(row_ids[k]), float(sign[k]))]
        converged = not candidates
        live = n - core.holes
        if converged or live >= max_core or n_iter >= max_iter:
            break
        core.add(candidates[:max_core - live])
        n_iter += 1
        core.solve()
    core.compact()
    n = core.n
    alpha = core.alpha[:n].copy()
    quadratic = 0.5 * float(alpha @ core.lin[:n] - core.nu)  # 2K̃α = lin - ν1 on the core
    dual = float(alpha @ core.lin[:n]) - quadratic
    return CoreMEB(core.rows[:n].copy(), core.signs[:n].copy(), alpha, eta + dual, eta, dual,
                   quadratic, n_iter, full_checks, converged)


def _merge_rows(meb: CoreMEB, scale: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(core rows, support rows, coef): ``scale·s·α`` summed over the core points of a row."""
    unique, inverse = np.unique(meb.rows, return_inverse=True)
    merged = np.zeros(unique.size)
    np.add.at(merged, inverse, scale * meb.signs * meb.alpha)
    return unique, unique[merged != 0.0], merged[merged != 0.0]


@dataclass
class CoreSolution:
    """A kernel expansion ``f(x) = Σ coef·k(x_sv, x) + intercept`` from a solved core set."""

    core_rows: np.ndarray     # every row in the core set (sorted, unique)
    support_rows: np.ndarray  # rows with a non-zero coefficient
    coef: np.ndarray          # one per support row
    intercept: float          # b (Eqn 9: the bias is penalized, b = C Σ(λ - λ*))
    margin: float             # SVR: ε̄ of Eqn 10; SVM: ρ
    primal_objective: float   # the primal value the dual point certifies (p = C²·D for SVR)
    meb: CoreMEB


def solve_l2_svr(X, y, kernel: Kernel, C: float = 1.0, mu: float = 0.1,
                 search: CoreSearch | None = None) -> CoreSolution:
    """L2-SVR (Eqn 6) as a center-constrained MEB (Eqns 7-8, 15); recovers Eqns 9-10.

    C weighs ``½(ξ_i² + ξ_i*²)`` per row, μ sets the mean slack (``Σ(ξ+ξ*) = μm`` at the optimum)
    and so the learned tube width ε̄. ``search`` goes to :func:`solve_core_meb`.
    """
    y = np.asarray(y, dtype=np.float64)
    C_paper = C * mu * X.shape[0]
    with threadpool_limits(1, user_api="blas"):  # small BLAS calls: threads only add overhead
        meb = solve_core_meb(X, 2.0 * y / C_paper, kernel, C, signs=None, search=search)
    beta = meb.signs * meb.alpha
    # Eqn 10: ε̄ = α̃ᵀ[y; -y] - C_paper · α̃ᵀK̃α̃
    epsilon_bar = float(beta @ y[meb.rows]) - C_paper * meb.quadratic
    return CoreSolution(*_merge_rows(meb, C_paper), C_paper * float(beta.sum()), epsilon_bar,
                        C_paper ** 2 * meb.dual_objective, meb)


def solve_l2_svm(X, y, kernel: Kernel, C: float = 1.0,
                 search: CoreSearch | None = None) -> CoreSolution:
    """Two-class L2-SVM ``min ‖w‖² + b² - 2ρ + C Σ ξ²`` as the MEB of Eqn 5 (labels ±1);
    ``search`` goes to :func:`solve_core_meb`."""
    y = np.asarray(y, dtype=np.float64)
    with threadpool_limits(1, user_api="blas"):
        meb = solve_core_meb(X, np.zeros_like(y), kernel, C, signs=y, search=search)
    # primal = dual = -αᵀK̃α; ρ = αᵀK̃α (strong duality, Tsang et al. 2005)
    return CoreSolution(*_merge_rows(meb, 1.0), float(meb.signs @ meb.alpha), meb.quadratic,
                        meb.dual_objective, meb)
