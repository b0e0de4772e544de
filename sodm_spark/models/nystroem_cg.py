"""The Nyström ODM without its normal matrix: Newton steps solved by conjugate gradients on
kernel products, preconditioned as Falkon preconditions kernel ridge regression (no Spark).

:mod:`~sodm_spark.models.nystroem_odm` fits F(α) = ½ αᵀK_ZZα + C Σ_i s_i D_i (y_i f_i − τ_i)²
(docs/design.md §2.9) by jumping to the minimizer of the current piece, which it solves from
the piece's normal matrix K_SZᵀ D K_SZ: n·m² multiply-adds a pass, which caps m near 1,000
on millions of rows. Here each Newton jump is the solution of

    H s = −g,   H = K_ZZ + 2C K_SZᵀ S D K_SZ,   g = K_ZZ α + 2C K_SZᵀ S D (y∘(y∘f − τ)),

by preconditioned conjugate gradients, whose products H p are one pass over the rows
(:meth:`~.nystroem_passes.RowPasses.hessian`: n·m kernel entries, none stored), the inexact
Newton method of Dembo, Eisenstat & Steihaug ("Inexact Newton methods", SIAM J. Numer. Anal.
1982): CG stops when its preconditioned residual falls below ``forcing`` times the
gradient's, or ``min(forcing, √(‖g‖/‖g₀‖))`` of it as the gradient shrinks. A line search
along the jump then scores every step length of :data:`LINE_STEPS` in one pass, which also
returns the gradient at each, so the next step needs no further pass.

**The preconditioner** is Falkon's (Rudi, Carratino & Rosasco, "FALKON: An optimal large scale
kernel method", NeurIPS 2017): with K_ZZ + δI = TᵀT (T upper triangular, δ a jitter) and the
uniform-centres approximation K_SZᵀ S D K_SZ ≈ (Σ_i s_i D_i / m) K_ZZ², H ≈ Tᵀ AᵀA T with
AᵀA = I + c·TTᵀ, c = 2C Σ_i s_i D_i / m; CG runs on H with M⁻¹ = T⁻¹A⁻¹A⁻ᵀT⁻ᵀ (four
triangular solves). T and A cost m³/3 each (LAPACK's potrf, and lauum for TTᵀ), A is rebuilt
when Σ s D moves by :data:`REBUILD_SHARE`. The penalty's K_ZZ is TᵀT, the kernel plus the
jitter: F gains ½δ‖α‖², δ at most 1e-6 of the mean diagonal (:func:`centre_factor`).
The m × m algebra runs on the driver in float64; the passes run wherever the rows are.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import scipy.linalg
from scipy.linalg import lapack

from ..core.kernels import Kernel, kernel_matrix
from .nystroem_odm import loss_weight

#: Step lengths the line search scores along each jump (one pass: each costs the fused loops an
#: axpy a kernel entry, so fewer than the normal-matrix form's).
LINE_STEPS = (1.0, 0.5, 0.25, 0.125, 0.0)
#: Newton steps at most; CG iterations at most per step; the forcing term; the relative
#: decrease of F below which the fit stops.
MAX_STEPS, MAX_CG, FORCING, RELATIVE_DECREASE = 30, 25, 0.1, 1e-5
#: The preconditioner is rebuilt when the rows' weight in the pieces (Σ s D) has moved by more
#: than this share since it was built.
REBUILD_SHARE = 0.25
#: Jitters tried, relative to K_ZZ's mean diagonal times m as Falkon scales its own, until
#: the Cholesky factorization goes through (duplicate centres make K_ZZ singular).
JITTERS = (1e-13, 1e-11, 1e-9, 1e-7)
#: The λ path of :func:`fit_path`: λ times each factor, in order. The search chooses λ for
#: local models of a few thousand rows; a model of every row may want a weaker penalty, and
#: how much weaker differs by table (290,000 New York flights rows, 3,000 centres, 20 passes
#: each: validation 0.7883, 0.7910, 0.7912 at λ = 1e5, 1e6, 1e7; 2,390,000 US flights rows,
#: 2,000 centres: 0.8067 at λ = 1e6 and 0.8045 at 1e7), so each step is judged on the slice.
PATH_FACTORS = (1.0, 10.0, 100.0)


@dataclass(frozen=True)
class NewtonCGSettings:
    """How :func:`fit` stops: at most ``max_passes`` passes over the rows (None: no limit;
    the plan's budget), ``max_steps`` Newton steps of at most ``max_cg`` CG iterations each,
    the ``forcing`` term, and a ``relative_decrease`` of F."""

    max_passes: int | None = None
    max_steps: int = MAX_STEPS
    max_cg: int = MAX_CG
    forcing: float = FORCING
    relative_decrease: float = RELATIVE_DECREASE


@dataclass
class CGReport:
    """How :func:`fit` went: F after each step, the passes, each step's CG iterations, CG's
    relative residual and the step length, why it stopped, where it started."""

    objectives: list
    passes: int = 0
    steps: list = field(default_factory=list)
    reason: str = ""
    start: str = "zero"  # or "given": the start beat α = 0 on F
    jitter: float = 0.0


def centre_factor(kernel: Kernel, centres: np.ndarray) -> tuple[np.ndarray, float]:
    """(T upper triangular with K_ZZ + δI = TᵀT, δ): the least jitter of :data:`JITTERS`
    (times m × the mean diagonal) that lets the factorization through."""
    gram = kernel_matrix(kernel, centres, dtype=np.float64)
    m = gram.shape[0]
    scale = m * max(float(np.mean(np.diag(gram))), 1e-300)
    for jitter in JITTERS:
        shifted = gram.copy()
        shifted[np.diag_indices(m)] += jitter * scale
        factor, info = lapack.dpotrf(shifted, lower=0, clean=1, overwrite_a=1)
        if info == 0:
            return factor, jitter * scale
    raise np.linalg.LinAlgError("the centres' kernel stays singular after the largest jitter.")


def preconditioner_factor(upper: np.ndarray, scale: float) -> np.ndarray:
    """A upper triangular with AᵀA = I + ``scale``·TTᵀ (T = ``upper``): lauum, then potrf."""
    product, info = lapack.dlauum(upper, lower=0)
    if info != 0:
        raise np.linalg.LinAlgError(f"lauum failed ({info}).")
    product *= scale
    product[np.diag_indices(product.shape[0])] += 1.0
    factor, info = lapack.dpotrf(product, lower=0, clean=1, overwrite_a=1)
    if info != 0:
        raise np.linalg.LinAlgError(f"the preconditioner's factorization failed ({info}).")
    return factor


@dataclass
class Preconditioned:
    """T and A of the module docstring, and what each product and solve with them is."""

    upper: np.ndarray
    factor: np.ndarray
    built_for: float  # Σ s D the factor A was built for

    def penalty(self, coef: np.ndarray) -> np.ndarray:
        """(K_ZZ + δI) α = Tᵀ(Tα)."""
        return self.upper.T @ (self.upper @ coef)

    def apply(self, residual: np.ndarray) -> np.ndarray:
        """M⁻¹ r = T⁻¹A⁻¹A⁻ᵀT⁻ᵀ r."""
        solve = scipy.linalg.solve_triangular
        x = solve(self.upper, residual, trans="T", check_finite=False)
        x = solve(self.factor, x, trans="T", check_finite=False)
        x = solve(self.factor, x, check_finite=False)
        return solve(self.upper, x, check_finite=False)


def conjugate_gradients(product: Callable, rhs: np.ndarray, apply: Callable, tol: float,
                        max_iter: int) -> tuple[np.ndarray, int, float]:
    """(x, products taken, relative preconditioned residual) of preconditioned CG on
    product(x) = ``rhs`` from x = 0, stopping at ``tol`` of the first residual's M⁻¹-norm."""
    x = np.zeros_like(rhs)
    residual = rhs.copy()
    z = apply(residual)
    direction = z.copy()
    rz = float(residual @ z)
    first = np.sqrt(max(rz, 0.0))
    if first == 0.0 or max_iter <= 0:
        return x, 0, 0.0 if first == 0.0 else 1.0
    for taken in range(1, max_iter + 1):
        hp = product(direction)
        curvature = float(direction @ hp)
        if curvature <= 0.0:  # not positive: rounding, at a solution already
            return x, taken, np.sqrt(max(rz, 0.0)) / first
        step = rz / curvature
        x += step * direction
        residual -= step * hp
        z = apply(residual)
        rz_next = float(residual @ z)
        if np.sqrt(max(rz_next, 0.0)) <= tol * first:
            return x, taken, np.sqrt(max(rz_next, 0.0)) / first
        direction = z + (rz_next / rz) * direction
        rz = rz_next
    return x, max_iter, np.sqrt(max(rz, 0.0)) / first


def span_start(kernel: Kernel, centres: np.ndarray, values: np.ndarray, jitter: float,
               weight: float) -> np.ndarray:
    """α nearest another model whose values at the centres are ``values``: the minimizer of
    ½αᵀPα + ``weight``·‖Pα − f_Z‖² (P = K_ZZ + δI; the objective's penalty and a squared loss
    on the centres, each standing for M/m rows), i.e. (I + 2·weight·P) α = 2·weight·f_Z."""
    system = kernel_matrix(kernel, centres, dtype=np.float64)
    system[np.diag_indices(system.shape[0])] += jitter
    system *= 2.0 * weight
    system[np.diag_indices(system.shape[0])] += 1.0
    return scipy.linalg.cho_solve(scipy.linalg.cho_factor(system, check_finite=False),
                                  2.0 * weight * np.asarray(values, dtype=np.float64),
                                  check_finite=False)


@dataclass(frozen=True)
class Problem:
    """Eqn 1's λ, θ, v and M of C (the rows' total weight)."""

    lam: float
    theta: float
    v: float
    total: float


def fit(kernel: Kernel, centres: np.ndarray, passes, problem: Problem,
        settings: NewtonCGSettings = NewtonCGSettings(), start_values=None,
        on_step: Callable | None = None, start_coef: np.ndarray | None = None,
        factor: tuple[np.ndarray, float] | None = None) -> tuple[np.ndarray, CGReport]:
    """α (float64, m) of the Nyström ODM on ``centres`` and a :class:`CGReport`.

    ``passes`` has ``line(coef, direction, steps)`` and ``hessian(coef, direction)``
    (:class:`~.nystroem_passes.RowPasses`, or their sums over a cluster's partitions).
    ``start_values``: another model's values at the centres (the level's), whose
    :func:`span_start` is taken where F is lower there than at α = 0 (one pass scores both).
    ``on_step(step, objective, passes)`` after each Newton step. ``start_coef``: α to start
    from instead (another λ's solution on the same centres: :func:`fit_path`); ``factor``:
    :func:`centre_factor`'s (T, δ) of these centres when already computed."""
    weight = loss_weight(problem.lam, problem.theta, problem.total)
    m = centres.shape[0]
    upper, jitter = centre_factor(kernel, centres) if factor is None else factor
    if start_coef is not None:
        alpha, state, report = _from_coef(passes, np.asarray(start_coef, dtype=np.float64))
    else:
        alpha, state, report = _start(kernel, centres, passes,
                                      (weight, weight * problem.total / m), jitter, start_values)
    report.jitter = jitter
    precond = Preconditioned(upper, preconditioner_factor(upper, 2 * weight * state[2] / m),
                             state[2])
    objective = 0.5 * float(alpha @ precond.penalty(alpha)) + weight * state[0]
    report.objectives.append(objective)
    gradient = precond.penalty(alpha) + 2.0 * weight * state[1]
    first_norm = np.sqrt(max(float(gradient @ precond.apply(gradient)), 1e-300))
    for step in range(1, settings.max_steps + 1):
        left = None if settings.max_passes is None else settings.max_passes - report.passes
        if left is not None and left < 2:
            report.reason = f"the pass budget ({settings.max_passes} passes)"
            break
        active = state[2]
        if abs(active - precond.built_for) > REBUILD_SHARE * precond.built_for:
            precond = Preconditioned(upper, preconditioner_factor(upper, 2 * weight * active / m),
                                     active)
        norm = np.sqrt(max(float(gradient @ precond.apply(gradient)), 0.0))
        forcing = min(settings.forcing, np.sqrt(norm / first_norm))

        def product(direction, at=alpha, penalty=precond.penalty):
            return penalty(direction) + 2.0 * weight * passes.hessian(at, direction).products

        jump, taken, residual = conjugate_gradients(
            product, -gradient, precond.apply, forcing,
            settings.max_cg if left is None else min(settings.max_cg, left - 1))
        report.passes += taken + 1
        line = passes.line(alpha, jump, LINE_STEPS)
        values = _line_objectives(precond, alpha, jump, weight, line.losses)
        best = int(np.argmin(values))
        if LINE_STEPS[best] == 0.0 or values[best] >= objective:
            report.reason = "no step length decreases the objective"
            break
        alpha = alpha + LINE_STEPS[best] * jump
        decrease, objective = objective - values[best], float(values[best])
        state = (float(line.losses[best]), line.gradients[best], float(line.active[best]))
        gradient = precond.penalty(alpha) + 2.0 * weight * state[1]
        report.objectives.append(objective)
        report.steps.append({"cg": taken, "residual": residual, "step": LINE_STEPS[best],
                             "changed": line.changed})
        if on_step is not None:
            on_step(step, objective, report.passes)
        if best == 0 and line.changed == 0 and residual <= 1e-6:
            report.reason = "the jump stayed on its piece: the exact optimum"
            break
        if decrease <= settings.relative_decrease * abs(objective):
            report.reason = (f"objective decreased by less than {settings.relative_decrease:g} "
                             "of itself")
            break
    else:
        report.reason = f"{settings.max_steps} Newton steps"
    return alpha, report


@dataclass
class PathReport:
    """How :func:`fit_path` went: each λ tried, its :class:`CGReport` and how the judge scored
    it; the index of the λ kept; why the path ended."""

    lams: list = field(default_factory=list)
    reports: list = field(default_factory=list)
    judged: list = field(default_factory=list)
    chosen: int = 0
    reason: str = ""

    @property
    def passes(self) -> int:
        return sum(report.passes for report in self.reports)


def fit_path(kernel: Kernel, centres: np.ndarray, passes, problem: Problem,
             judge: Callable, ranks_higher: Callable,
             settings: NewtonCGSettings = NewtonCGSettings(), start_values=None,
             on_step: Callable | None = None,
             factors: tuple = PATH_FACTORS) -> tuple[np.ndarray, PathReport]:
    """(α of the λ the judge ranks first, a :class:`PathReport`): :func:`fit` at λ·f for each f
    of ``factors`` (λ of ``problem``), the first from ``start_values`` (as :func:`fit`), each
    next from the previous α; ``judge(α)`` scores each (the validation slice), and the path
    ends when ``ranks_higher(best, new)`` is false for a λ (a weaker penalty that does not pay
    on held-out rows will not pay at the next), or when the passes of ``settings`` run out:
    each λ may use the passes left divided over the λs left, and leaves what it does not use
    to the next."""
    factor = centre_factor(kernel, centres)
    report = PathReport()
    best_coef = coef = None
    for number, scale in enumerate(factors):
        left = None if settings.max_passes is None else settings.max_passes - report.passes
        if left is not None and left < 2 * (2 if number else 1):
            report.reason = f"the pass budget ({settings.max_passes} passes)"
            break
        share = None if left is None else max(2, left // (len(factors) - number))
        lam = problem.lam * scale
        coef, fitted = fit(kernel, centres, passes, Problem(lam, problem.theta, problem.v,
                                                             problem.total),
                           NewtonCGSettings(share, settings.max_steps, settings.max_cg,
                                            settings.forcing, settings.relative_decrease),
                           start_values=start_values if coef is None else None,
                           on_step=on_step, start_coef=coef, factor=factor)
        judged = judge(coef)
        report.lams.append(lam)
        report.reports.append(fitted)
        report.judged.append(judged)
        if best_coef is None or ranks_higher(report.judged[report.chosen], judged):
            best_coef, report.chosen = coef, number
            continue
        report.reason = (f"λ = {lam:g} did not rank above λ = {report.lams[report.chosen]:g} "
                         "on the held-out rows")
        break
    else:
        report.reason = f"the path's {len(factors)} values of λ"
    if best_coef is None:  # not one pass to fit the first λ with
        raise ValueError(f"a pass budget of {settings.max_passes} cannot fit λ's path.")
    return best_coef, report


def _line_objectives(precond: Preconditioned, alpha, jump, weight: float, losses) -> np.ndarray:
    """F at α + t·s for each t of :data:`LINE_STEPS`: the penalty's quadratic in t on the
    driver, the losses from the pass."""
    at = precond.penalty(alpha)
    along = precond.penalty(jump)
    steps = np.asarray(LINE_STEPS)
    quadratic = float(alpha @ at) + 2.0 * steps * float(alpha @ along) + \
        steps ** 2 * float(jump @ along)
    return 0.5 * quadratic + weight * np.asarray(losses)


def _from_coef(passes, coef: np.ndarray):
    """(α, (loss, loss gradient, Σ s D) there, the report) at the given α: one pass."""
    sums = passes.line(coef, np.zeros_like(coef), (0.0,))
    report = CGReport(objectives=[], passes=1, start="given")
    return coef, (float(sums.losses[0]), sums.gradients[0], float(sums.active[0])), report


def _start(kernel, centres, passes, weights, jitter, start_values):
    """(α, (loss, loss gradient, Σ s D) there, the report) at α = 0 or at the span start of
    ``start_values`` when F is lower there: one pass either way. ``weights``: (C, C·M/m)."""
    weight, centre_weight = weights
    m = centres.shape[0]
    zero = np.zeros(m)
    report = CGReport(objectives=[], passes=1)
    if start_values is None:
        sums = passes.line(zero, zero, (0.0,))
        return zero, (float(sums.losses[0]), sums.gradients[0], float(sums.active[0])), report
    start = span_start(kernel, centres, start_values, jitter, centre_weight)
    sums = passes.line(start, -start, (0.0, 1.0))
    # the start's penalty with the jittered kernel, as F counts it
    gram = kernel_matrix(kernel, centres, dtype=np.float64)
    at_start = 0.5 * float(start @ (gram @ start) + jitter * start @ start) + \
        weight * float(sums.losses[0])
    if at_start < weight * float(sums.losses[1]):
        report.start = "given"
        return start, (float(sums.losses[0]), sums.gradients[0], float(sums.active[0])), report
    return zero, (float(sums.losses[1]), sums.gradients[1], float(sums.active[1])), report

