"""Exact ODM by finite Newton steps with preconditioned conjugate gradients, in any array
namespace: the partition solver of the device path (docs/design.md §2.10).

The dual coordinate descent of :mod:`.odm_dcd` visits one row after the other, which a GPU
cannot do fast; this solver spends its work in products ``Q x`` with the m×m kernel resident
in the device's memory (one read of the matrix each, what a GPU's memory bandwidth is for).

With ``u = Qγ`` (row i's margin ``y_i f(x_i)``) the dual of Eqn 1 (SODM paper, Sec. 2.1;
docs/design.md §1.1) is, eliminating ζ and β as §1.2 does, the primal in the span of the rows

    P(γ) = ½ γᵀQγ + Σ_i h_i(u_i),   h_i(u) = (1−θ−u)₊² / (2a_i^ζ) + (u−1−θ)₊² / (2a_i^β),

``a_i^ζ = S·c·v/s_i`` and ``a_i^β = S·c/s_i`` the dual's diagonal terms (§1.4). P is convex and
piecewise quadratic; with the rows below the band (u_i < 1−θ) and above it (u_i > 1+θ) held
fixed (the "active" rows A), its minimizer solves the kernel ridge system

    (Q_AA + diag(a_A)) γ_A = τ_A,  γ_i = 0 off A,   τ_i = 1−θ below, 1+θ above,

whose residual on row i is exactly row i's projected-gradient violation of Eqn 1 (§1.2):
the modified finite Newton method of Keerthi & DeCoste ("A modified finite Newton method for
fast solution of large scale linear SVMs", JMLR 2005) jumps to that solution, searches the
step length along the jump exactly (P is a piecewise quadratic in it), and stops when the
largest violation over all rows, on the exact u, is at most ``violation_tol``: the same
stopping rule as :func:`~.odm_dcd.solve_odm_dual`, so both give the same model within it.

The system is solved by conjugate gradients on ``a_A^-½ (Q_AA + diag a_A) a_A^-½``, i.e.
``I`` plus a kernel matrix, preconditioned by a Nyström approximation of that kernel matrix
from ``rank`` seeded columns (Frangella, Tropp & Udell, "Randomized Nyström
preconditioning", SIAM J. Matrix Anal. Appl. 2023): the kernel's few large eigenvalues,
which make plain CG crawl at large λ, are inverted exactly and CG works on the flat rest.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from ..core.array_namespace import Array, ArrayDevice, device_of
from ..core.validation import check_odm_params

#: Eigenvalues of the sampled block below this share of the largest are dropped (K_JJ is
#: singular in floating point when two sampled rows nearly coincide).
EIGENVALUE_CUTOFF = 1e-10
#: CG stops when the largest residual of the system, i.e. the active rows' violation, is at
#: most this share of ``violation_tol``: the rows that switch pieces then decide the step.
CG_SHARE = 0.25
#: Steps without a new lowest violation after which the jumps are searched along (a cycle of
#: the active sets), and the dual objective's relative decrease over as many steps below which
#: the solve ends unconverged: a few rows near the band's edges then trade places while the
#: objective no longer moves (seen on Fashion-MNIST partitions at λ = 1e5, the objective below
#: the numba solver's at the same violation bound).
STALL_STEPS = 3
STALL_DECREASE = 1e-9


def _stalled(objectives: list[float]) -> bool:
    if len(objectives) <= 2 * STALL_STEPS:
        return False
    before, now = objectives[-STALL_STEPS - 1], objectives[-1]
    return before - now <= STALL_DECREASE * max(1.0, abs(now))


@dataclass
class NewtonResult:
    """What :func:`solve_odm_newton` returns, with :class:`~.odm_dcd.DCDResult`'s fields."""

    gamma: np.ndarray  # γ = ζ − β per row
    u: np.ndarray  # Qγ, from one exact product at the end
    objective: float  # the dual objective of Eqn 1
    n_sweeps: int  # Newton steps (each one a CG solve)
    violation: float
    converged: bool
    kernel_mode: str = "resident"
    history: list[float] = field(default_factory=list)  # the largest violation before each step
    cg_iterations: int = 0  # kernel products of all CG solves together
    storage: str = "float32"

    @property
    def n_sv(self) -> int:
        return int(np.count_nonzero(self.gamma))


class SignedKernel:
    """Products with ``Q = diag(y) K diag(y)`` for a kernel matrix ``K`` on a device, in K's
    dtype, returned in float64 (the solver's vectors stay float64)."""

    def __init__(self, xp: ModuleType, K: Array, y: Array) -> None:
        self.xp, self.K, self.y = xp, K, y
        self.products = 0

    def __matmul__(self, x: Array) -> Array:
        xp = self.xp
        self.products += 1
        signed = xp.astype(self.y * x, self.K.dtype)
        return self.y * xp.astype(self.K @ signed, xp.float64)

    def exact(self, x: Array, block_bytes: int = 1 << 28) -> Array:
        """``Q x`` with every product summed in float64 (the rows converted a block at a time):
        the margins the stopping rule reads, as the numba solver's float64 u."""
        xp = self.xp
        if self.K.dtype == xp.float64:
            return self @ x
        m = self.K.shape[0]
        step = max(1, block_bytes // (8 * max(1, self.K.shape[1])))
        signed = self.y * x
        parts = [xp.astype(self.K[start:min(start + step, m), :], xp.float64) @ signed
                 for start in range(0, m, step)]
        return self.y * (xp.concat(parts) if len(parts) > 1 else parts[0])

    def columns(self, index: Array) -> Array:
        """``Q[:, index]`` in float64."""
        xp = self.xp
        block = xp.astype(xp.take(self.K, index, axis=1), xp.float64)
        return self.y[:, None] * block * xp.take(self.y, index)[None, :]


class Band(NamedTuple):
    """Eqn 1's terms per row: the diagonal terms a^ζ = S·c·v/s_i and a^β = S·c/s_i (arrays)
    and the band's edges 1−θ and 1+θ."""

    a_zeta: Array
    a_beta: Array
    lower: float
    upper: float


@dataclass(frozen=True)
class NewtonSettings:
    """How :func:`solve_odm_newton` runs: its stopping rule (§1.3's violation bound), the most
    Newton steps, the preconditioner's columns, the most CG iterations per step, and the size
    up to which each step's system is solved directly."""

    violation_tol: float = 1e-3
    max_iter: int = 100
    # columns of the kernel in the preconditioner (all when m is smaller)
    rank: int = 1000
    max_cg_iter: int = 1000
    # problems of at most this many rows solve each Newton system directly (xp.linalg.solve)
    direct_rows: int = 4000


def _violations(xp: ModuleType, gamma: Array, u: Array, band: Band) -> Array:
    """Every row's projected-gradient violation (``_dcd_kernels._point_violation``)."""
    a_zeta, a_beta, lower, upper = band
    zero = xp.zeros_like(gamma)
    zeta, beta = xp.maximum(gamma, zero), xp.maximum(-gamma, zero)
    grad_zeta = u + a_zeta * zeta - lower
    grad_beta = -u + a_beta * beta + upper
    pg_zeta = xp.where(zeta > 0.0, grad_zeta, xp.minimum(grad_zeta, zero))
    pg_beta = xp.where(beta > 0.0, grad_beta, xp.minimum(grad_beta, zero))
    return xp.maximum(xp.abs(pg_zeta), xp.abs(pg_beta))


class NystromPreconditioner:
    """Nyström factors of Q from ``rank`` seeded columns: ``Q ≈ G Gᵀ`` (m × r), from which the
    preconditioner of each active set is one r×r eigendecomposition (Frangella et al.)."""

    def __init__(self, xp: ModuleType, Q: SignedKernel, m: int, rank: int,
                 seed: int | Sequence[int]) -> None:
        self.xp = xp
        rng = np.random.default_rng(seed)
        picked = np.sort(rng.choice(m, size=min(rank, m), replace=False))
        index = xp.asarray(picked, device=device_of(Q.y))
        columns = Q.columns(index)  # Q[:, J]
        values, vectors = xp.linalg.eigh(xp.take(columns, index, axis=0))
        keep = values > EIGENVALUE_CUTOFF * float(xp.max(values))
        kept = int(xp.sum(xp.astype(keep, xp.int64)))
        order = xp.argsort(values, descending=True)[:kept]
        vectors, values = xp.take(vectors, order, axis=1), xp.take(values, order)
        self.G = (columns @ vectors) / xp.sqrt(values)[None, :]

    def for_rows(self, scale: Array) -> Callable[[Array], Array]:
        """``z ↦ P⁻¹ z`` for ``I + diag(scale) Q diag(scale)`` (scale 0 off the active rows)."""
        xp = self.xp
        F = scale[:, None] * self.G
        sigma, R = xp.linalg.eigh(F.T @ F)
        keep = sigma > EIGENVALUE_CUTOFF * float(xp.max(sigma))
        kept = int(xp.sum(xp.astype(keep, xp.int64)))
        if kept == 0:
            return lambda z: z
        order = xp.argsort(sigma, descending=True)[:kept]
        sigma, R = xp.take(sigma, order), xp.take(R, order, axis=1)
        U = (F @ R) / xp.sqrt(sigma)[None, :]
        # Frangella et al.'s preconditioner: (λ_r + 1)·U (Λ + I)⁻¹ Uᵀ + (I − U Uᵀ)
        shrink = (sigma[-1] + 1.0) / (sigma + 1.0) - 1.0
        return lambda z: z + U @ (shrink * (U.T @ z))


def _conjugate_gradients(xp: ModuleType, apply: Callable[[Array], Array],
                         precondition: Callable[[Array], Array], rhs: Array, start: Array,
                         residual_scale: Array, bound: float,
                         max_iter: int) -> tuple[Array, int]:
    """Preconditioned CG for ``apply(z) = rhs`` from ``start``; stops when
    ``max |residual_scale · residual| ≤ bound``. Returns (z, iterations)."""
    z = start
    residual = rhs - apply(z)
    iterations, rho_old = 0, 1.0
    direction: Array = None  # set by the first iteration
    while float(xp.max(xp.abs(residual_scale * residual))) > bound and iterations < max_iter:
        preconditioned = precondition(residual)
        rho = float(xp.sum(residual * preconditioned))
        if iterations == 0:
            direction = preconditioned
        else:
            direction = preconditioned + (rho / rho_old) * direction
        product = apply(direction)
        step = rho / float(xp.sum(direction * product))
        z = z + step * direction
        residual = residual - step * product
        rho_old = rho
        iterations += 1
    return z, iterations


def _line_search(xp: ModuleType, gamma: Array, u: Array, step: Array, u_step: Array,
                 band: Band) -> float:
    """The step length s ∈ (0, 1] minimizing the dual objective of Eqn 1 along γ + s·step.

    The dual, not the primal P, is the merit: P is flat along Q's null space (a smooth kernel's
    matrix is singular in floating point), so the sign pattern the dual asks of γ would not be
    reached there; the dual is strictly convex (its diagonal terms), and its derivative along
    the step is increasing and piecewise linear, with jumps where a γ_i crosses 0. Its root is
    found by Newton's method on the pieces, safeguarded by bisection."""
    a_zeta, a_beta, lower, upper = band
    quadratic = float(xp.sum(step * u_step))  # ΔᵀQΔ
    linear = float(xp.sum(step * u))  # ΔᵀQγ
    zero = xp.zeros_like(gamma)

    def derivative(s: float) -> tuple[float, float]:
        values = gamma + s * step
        positive, negative = values > 0.0, values < 0.0
        terms = xp.where(positive, a_zeta * values - lower,
                         xp.where(negative, a_beta * values - upper, zero))
        curvature = xp.where(positive, a_zeta, xp.where(negative, a_beta, zero))
        return (linear + s * quadratic + float(xp.sum(step * terms)),
                quadratic + float(xp.sum(curvature * step * step)))

    value, slope = derivative(1.0)
    if value <= 0.0:
        return 1.0  # still descending at the full jump: take it
    s, low, high = 1.0, 0.0, 1.0
    for _ in range(60):
        if value > 0.0:
            high = s
        else:
            low = s
        s_next = s - value / slope if slope > 0.0 else 0.5 * (low + high)
        s = s_next if low < s_next < high else 0.5 * (low + high)
        if high - low <= 1e-12:
            break
        value, slope = derivative(s)
        if abs(value) <= 1e-13 * max(1.0, abs(linear)):
            break
    # a root a rounding away from the full jump is the jump: the rows it takes to γ_i = 0 must
    # land on 0 exactly (γ − 1·γ), not on a remainder that reads as a support vector
    return 1.0 if s > 1.0 - 1e-9 else s


def _dual_objective(xp: ModuleType, gamma: Array, u: Array, band: Band) -> float:
    a_zeta, a_beta, lower, upper = band
    zero = xp.zeros_like(gamma)
    zeta, beta = xp.maximum(gamma, zero), xp.maximum(-gamma, zero)
    return float(xp.sum(0.5 * gamma * u + 0.5 * (a_zeta * zeta * zeta + a_beta * beta * beta)
                        - lower * zeta + upper * beta))


def _newton_change(xp: ModuleType, Q: SignedKernel, solver: Array | NystromPreconditioner,
                   gamma: Array, u: Array, band: Band, settings: NewtonSettings) -> Array:
    """The jump of one Newton step, as a change of γ (float32 products then round only the
    change): rows that leave the active set go to 0, the active rows' change solves the ridge
    system (module docstring) with the residual of the current point, exact from u, on its
    right-hand side. ``solver``: a dense Q (small problems) or the preconditioner."""
    a_zeta, a_beta, lower, upper = band
    below, above = u < lower, u > upper
    zero = xp.zeros_like(u)
    diagonal = xp.where(below, a_zeta, xp.where(above, a_beta, xp.ones_like(u)))
    targets = xp.where(below, lower, xp.where(above, upper, zero))
    active = xp.astype(below | above, xp.float64)
    scale = active / xp.sqrt(diagonal)  # a_A^-½ on the active rows, 0 elsewhere
    leaving = (1.0 - active) * gamma
    residual = active * (targets - u - diagonal * gamma)
    if float(xp.max(xp.abs(leaving))) > 0.0:
        residual = residual + active * (Q @ leaving)
    if isinstance(solver, NystromPreconditioner):
        change, _ = _conjugate_gradients(
            xp, lambda z: scale * (Q @ (scale * z)) + z, solver.for_rows(scale),
            scale * residual, xp.zeros_like(u), xp.sqrt(diagonal) * active,
            CG_SHARE * settings.violation_tol, settings.max_cg_iter)
    else:
        m = u.shape[0]
        system = scale[:, None] * solver * scale[None, :] + xp.eye(m, dtype=xp.float64,
                                                                  device=device_of(u))
        change = xp.linalg.solve(system, (scale * residual)[:, None])[:, 0]
    return scale * change - leaving


def _band(device: ArrayDevice, m: int, lam: float, theta: float, v: float,
          weights: np.ndarray | None) -> Band:
    xp = device.xp
    c = (1.0 - theta) ** 2 / (lam * v)
    total = float(m if weights is None else weights.sum())
    inverse = np.ones(m) if weights is None else 1.0 / weights
    return Band(device.asarray(total * c * v * inverse, dtype=xp.float64),
                device.asarray(total * c * inverse, dtype=xp.float64), 1.0 - theta, 1.0 + theta)


def solve_odm_newton(device: ArrayDevice, K: Array, y: npt.ArrayLike, lam: float, theta: float,
                     v: float, *, weights: npt.ArrayLike | None = None,
                     gamma0: npt.ArrayLike | None = None, seed: int | Sequence[int] = 0,
                     settings: NewtonSettings = NewtonSettings()) -> NewtonResult:
    """Solve the dual of Eqn 1 for ``K`` (the m×m kernel matrix on ``device``, float32 or
    float64) and labels ``y`` (±1, numpy); ``weights`` s_i > 0 per row or None; ``gamma0``
    warm-starts (γ of a previous level, numpy or None). ``seed`` (an int or a sequence) draws
    the preconditioner's columns. Returns γ, u = Qγ and the dual objective as numpy."""
    check_odm_params(lam, theta, v)
    xp, m = device.xp, int(K.shape[0])
    weights = None if weights is None else np.asarray(weights, dtype=np.float64)
    band = _band(device, m, lam, theta, v, weights)
    y_dev = device.asarray(np.asarray(y, dtype=np.float64), dtype=xp.float64)
    Q = SignedKernel(xp, K, y_dev)
    gamma = (xp.zeros(m, dtype=xp.float64, device=device_of(y_dev)) if gamma0 is None
             else device.asarray(np.asarray(gamma0, dtype=np.float64), dtype=xp.float64))
    u, u_is_exact = (Q.exact(gamma) if gamma0 is not None else xp.zeros_like(gamma)), True
    # a small problem's systems are solved directly: an m×m solve costs less than building
    # the preconditioner's factors (the search's pieces of 2,500 rows)
    solver = (xp.astype(K, xp.float64) * (y_dev[:, None] * y_dev[None, :])
              if m <= settings.direct_rows else
              NystromPreconditioner(xp, Q, m, settings.rank, seed))
    history: list[float] = []
    objectives: list[float] = []
    for _ in range(settings.max_iter):
        violation = float(xp.max(_violations(xp, gamma, u, band)))
        if violation <= settings.violation_tol and not u_is_exact:
            # the updated u carries the rounding of float32 products: decide on the exact one
            u, u_is_exact = Q.exact(gamma), True
            violation = float(xp.max(_violations(xp, gamma, u, band)))
        history.append(violation)
        objectives.append(_dual_objective(xp, gamma, u, band))
        if violation <= settings.violation_tol or _stalled(objectives):
            break
        step = _newton_change(xp, Q, solver, gamma, u, band, settings)
        u_step = Q @ step
        # full jumps (the primal-dual active set method of Hintermüller, Ito & Kunisch, "The
        # primal-dual active set strategy as a semismooth Newton method", SIAM J. Optim. 2002)
        # took 6-10 steps where a line search from the first step took dozens; once the
        # violation has not fallen for STALL_STEPS steps (a cycle), each jump is searched
        searched = len(history) > STALL_STEPS and min(history[-STALL_STEPS:]) >= min(
            history[:-STALL_STEPS])
        s = _line_search(xp, gamma, u, step, u_step, band) if searched else 1.0
        gamma, u, u_is_exact = gamma + s * step, u + s * u_step, False
    if not u_is_exact:
        u = Q.exact(gamma)
    violation = float(xp.max(_violations(xp, gamma, u, band)))
    gamma_np, u_np = device.to_numpy(gamma), device.to_numpy(u)
    from .odm_dcd import ODMProblem  # the one definition of the dual objective

    objective = ODMProblem(lam, theta, v, m, weights).objective(gamma_np, u_np)
    return NewtonResult(gamma_np, u_np, objective, len(history), violation,
                        violation <= settings.violation_tol, history=history,
                        cg_iterations=Q.products, storage=str(K.dtype).rsplit(".", 1)[-1])
