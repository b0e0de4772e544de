"""Nyström ODM: the primal of Eqn 1 with w in the span of m centres; pure numpy, no Spark.

SODM's levels solve local problems of a few thousand rows; on some tables (many rows, few
features, classes that overlap) no such local model learns more than the majority class,
while one kernel model that sees every row does. This is that model, cheap enough to fit on
all rows: restrict w of Eqn 1 (SODM paper, Sec. 2.1; docs/design.md §1.1) to the span of
φ(z_1..z_m) for m centres z, so that ``f(x) = Σ_j α_j k(z_j, x)`` and

    F(α) = ½ αᵀ K_ZZ α + C · Σ_i D_i(α) · (y_i f(x_i) − τ_i(α))²,   C = λ / (2M (1−θ)²),

with, for each row, D_i = 1 and τ_i = 1−θ below the band (y f < 1−θ), D_i = v and
τ_i = 1+θ above it (y f > 1+θ), D_i = 0 inside it: the squared deviations ξ² + v·ε² of
Eqn 1's primal, M the training rows.

F is convex and piecewise quadratic; on each piece (a fixed D and τ) it is a ridge problem.
:func:`fit` runs the modified finite Newton method of Keerthi & DeCoste ("A modified finite
Newton method for fast solution of large scale linear SVMs", JMLR 2005), the one Chapelle
("Training a support vector machine in the primal", Neural Computation 2007) uses for the
squared hinge: each step jumps to the minimizer of the piece of the current point, then a
line search along the jump; when the new point lies on the same piece it is the exact
optimum. A step needs the piece's normal matrix K_SZᵀ D K_SZ (m × m) and K_SZᵀ D (y∘τ),
which are sums over rows: :func:`pass_sums` computes them for one block of rows, a Spark job
sums them over the partitions (as Falkon sums its products: Rudi, Carratino & Rosasco,
"FALKON: An optimal large scale kernel method", NeurIPS 2017), and the driver solves the
m × m system. One pass over the rows per step (a second one when the line search stops short
of the jump); each pass costs n·m·d multiply-adds for the kernel and n·m² for the normal
matrix (:func:`pass_work`).

The system is solved in the basis of K_ZZ's eigenvectors (:func:`centre_basis`): α = T w
with T = U Λ^-½ over the eigenvalues above :data:`EIGENVALUE_CUTOFF` of the largest, so the
penalty is ‖w‖² and the matrix I + 2C·Tᵀ(K_SZᵀ D K_SZ)T is well conditioned whatever the
centres (close centres make K_ZZ singular in floating point).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg

from ..core.kernels import Kernel, iter_kernel_blocks, kernel_matrix

#: Eigen-directions of K_ZZ below this share of its largest eigenvalue are dropped: float64
#: kernel entries resolve about 1e-16 of the largest, and directions this weak carry no
#: function the rows can see.
EIGENVALUE_CUTOFF = 1e-10
#: Step lengths the line search tries along each Newton jump (one pass scores all of them).
LINE_STEPS = (1.0, 0.5, 0.25, 0.125, 0.0625, 0.03125, 0.0)
#: Newton steps at most, and the relative decrease of F below which the fit stops.
MAX_STEPS, RELATIVE_DECREASE = 30, 1e-7


@dataclass(frozen=True)
class CentreBasis:
    """The m centres, the map T = U Λ^-½ (m × r) with α = T w and αᵀ K_ZZ α = ‖w‖², and the
    r eigenvalues Λ of K_ZZ it keeps."""

    centres: np.ndarray
    transform: np.ndarray
    eigenvalues: np.ndarray


def centre_basis(kernel: Kernel, centres: np.ndarray,
                 cutoff: float = EIGENVALUE_CUTOFF) -> CentreBasis:
    """K_ZZ = U Λ Uᵀ and T = U Λ^-½ over the eigenvalues above ``cutoff`` of the largest."""
    centres = np.ascontiguousarray(centres, dtype=np.float64)
    if centres.ndim != 2 or centres.shape[0] == 0:
        raise ValueError("the Nyström ODM needs at least one centre (a 2-D array of rows).")
    values, vectors = scipy.linalg.eigh(kernel_matrix(kernel, centres), check_finite=False)
    keep = values > cutoff * max(float(values[-1]), 1e-300)
    return CentreBasis(centres, vectors[:, keep] / np.sqrt(values[keep]), values[keep])


@dataclass
class PassSums:
    """What one pass over rows returns, summed over blocks (``+``): for each step length t of
    the pass, Σ_i D_i (y_i f_i − τ_i)² at α + t·s (``losses``); at the first step length, the
    piece's normal matrix K_SZᵀ D K_SZ (``normal``), K_SZᵀ D (y∘τ) (``target``); the rows
    whose piece differs between the first and the last step length (``changed``)."""

    losses: np.ndarray
    normal: np.ndarray
    target: np.ndarray
    changed: int
    rows: int

    def __add__(self, other: "PassSums") -> "PassSums":
        return PassSums(self.losses + other.losses, self.normal + other.normal,
                        self.target + other.target, self.changed + other.changed,
                        self.rows + other.rows)


def pieces(margins: np.ndarray, theta: float, v: float) -> tuple[np.ndarray, np.ndarray]:
    """(D, τ) of each margin y·f: (1, 1−θ) below the band, (v, 1+θ) above it, (0, 1) in it."""
    below, above = margins < 1.0 - theta, margins > 1.0 + theta
    weight = np.where(below, 1.0, np.where(above, v, 0.0))
    target = np.where(below, 1.0 - theta, np.where(above, 1.0 + theta, 1.0))
    return weight, target


def pass_sums(kernel: Kernel, centres: np.ndarray, X: np.ndarray, y: np.ndarray,
              coef: np.ndarray, direction: np.ndarray, steps, theta: float, v: float,
              block_mb: float = 64.0, weights=None) -> PassSums:
    """:class:`PassSums` of the rows ``X`` with labels ``y`` (±1) at α = ``coef`` +
    t·``direction`` for t in ``steps``; the normal matrix at ``steps[0]``. Kernel blocks in
    float64 (the normal matrix's small eigen-directions are resolved). ``weights``: each row's
    s_i (None: 1), multiplying its D_i (docs/design.md §1.4; M of C is then Σ s_i)."""
    y = np.asarray(y, dtype=np.float64)
    row_weight = None if weights is None else np.asarray(weights, dtype=np.float64)
    steps = np.asarray(steps, dtype=np.float64)
    m = centres.shape[0]
    losses, normal, target = np.zeros(steps.size), np.zeros((m, m)), np.zeros(m)
    changed = 0
    for rows, block in iter_kernel_blocks(kernel, X, centres, dtype=np.float64,
                                          block_mb=block_mb):
        labels = y[rows]
        start = labels * (block @ coef)
        along = labels * (block @ direction)
        for index, step in enumerate(steps):
            weight, tau = pieces(start + step * along, theta, v)
            if row_weight is not None:
                weight = weight * row_weight[rows]
            deviation = start + step * along - tau
            losses[index] += float(np.dot(weight, deviation * deviation))
            if index == 0:
                first_weight, first_tau = weight, tau
        # weight and tau are the last step length's now
        changed += int(np.count_nonzero((weight != first_weight) | (tau != first_tau)))
        # rows inside the band weigh 0: their rows of the scaled block are zero
        scaled = block * np.sqrt(first_weight)[:, None]
        normal += scaled.T @ scaled
        target += block.T @ (first_weight * labels * first_tau)
    return PassSums(losses, normal, target, changed, int(y.size))


def pass_work(n_rows: int, n_centres: int, n_inputs: int) -> float:
    """Multiply-adds of one pass: the kernel (n·m·d) and the normal matrix (n·m², as a
    symmetric product half of it, counted whole: BLAS computes the GEMM)."""
    return float(n_rows) * n_centres * (n_inputs + n_centres)


def loss_weight(lam: float, theta: float, n_rows: int) -> float:
    """C = λ / (2M (1−θ)²) of the module docstring, M = ``n_rows``."""
    return lam / (2.0 * n_rows * (1.0 - theta) ** 2)


def newton_jump(basis: CentreBasis, sums: PassSums, weight: float) -> np.ndarray:
    """w minimizing the piece of :class:`PassSums` ``sums``: (I + 2C·TᵀNT) w = 2C·Tᵀb
    (N = K_SZᵀ D K_SZ, b = K_SZᵀ D (y∘τ), C = ``weight``); α = T w."""
    transform = basis.transform
    lhs = 2.0 * weight * (transform.T @ sums.normal @ transform)
    lhs[np.diag_indices_from(lhs)] += 1.0
    rhs = 2.0 * weight * (transform.T @ sums.target)
    w = scipy.linalg.cho_solve(scipy.linalg.cho_factor(lhs, lower=True, check_finite=False),
                               rhs, check_finite=False)
    return w


def span_start(basis: CentreBasis, values: np.ndarray, weight: float) -> np.ndarray:
    """w of the model in the centres' span nearest another model whose values at the centres
    are ``values`` (the level's f(z_j)): the minimizer of ½‖w‖² + ``weight``·‖K_ZZ T w − f_Z‖²,
    the objective's penalty and a squared loss on the centres (each standing for M/m rows:
    ``weight`` = C·M/m), so that a model the span cannot hold is smoothed, not interpolated.
    In the eigenbasis K_ZZ T = U Λ^½, whose Gram matrix is Λ: the normal equations are
    diagonal, w = 2c·Λ·Tᵀf_Z / (1 + 2c·Λ)."""
    twice = 2.0 * weight * basis.eigenvalues
    return twice * (basis.transform.T @ np.asarray(values, dtype=np.float64)) / (1.0 + twice)


@dataclass
class NewtonReport:
    """How :func:`fit` went: the objective after each step, the passes over the rows, the
    line-search steps taken, why it stopped and where it started."""

    objectives: list
    passes: int
    steps: list
    reason: str
    start: str = "zero"  # or "given": the start w beat α = 0 on F


def fit(basis: CentreBasis, run_pass, lam: float, theta: float, v: float, n_rows: int,
        max_steps: int = MAX_STEPS, relative_decrease: float = RELATIVE_DECREASE,
        on_step=None, start=None):
    """α of the Nyström ODM (module docstring): (α, :class:`NewtonReport`).

    ``run_pass(coef, direction, steps)`` returns the :class:`PassSums` of every training row
    (:func:`pass_sums` summed over blocks or partitions); ``n_rows`` is M of C. ``start``: a w
    to start from (:func:`span_start` of the level's model), taken where F is lower there
    than at α = 0: the first pass sums the normal matrix at ``start`` and scores both. From
    α = 0 every row lies below the band, so the first jump is the kernel ridge regression of
    the labels times 1−θ. ``on_step(step, objective, passes)`` is called after each step."""
    weight = loss_weight(lam, theta, n_rows)
    transform = basis.transform
    w = np.zeros(transform.shape[1])
    zero = np.zeros(transform.shape[0])
    origin = "zero"
    if start is None:
        sums = run_pass(zero, zero, (0.0,))
        passes, objective = 1, weight * float(sums.losses[0])
    else:
        start = np.asarray(start, dtype=np.float64)
        # one pass: the normal matrix at the start, F there and at α = 0
        sums = run_pass(transform @ start, -(transform @ start), (0.0, 1.0))
        passes = 1
        at_start = 0.5 * float(start @ start) + weight * float(sums.losses[0])
        objective = weight * float(sums.losses[1])
        if at_start < objective:
            w, objective, origin = start.copy(), at_start, "given"
        else:  # α = 0 is better: its normal matrix
            sums = run_pass(zero, zero, (0.0,))
            passes += 1
    report = NewtonReport([objective], 0, [], "", origin)
    steps = np.asarray(LINE_STEPS)
    for step in range(1, max_steps + 1):
        jump = newton_jump(basis, sums, weight) - w
        trial = run_pass(transform @ w, transform @ jump, steps)
        passes += 1
        values = [0.5 * float(np.sum((w + t * jump) ** 2)) + weight * float(loss)
                  for t, loss in zip(steps, trial.losses)]
        best = int(np.argmin(values))  # the first (longest) step on a tie
        if steps[best] == 0.0 or values[best] >= objective:
            report.reason = "no step length decreases the objective"
            break
        w = w + steps[best] * jump
        decrease = objective - values[best]
        objective = values[best]
        report.objectives.append(objective)
        report.steps.append(float(steps[best]))
        if on_step is not None:
            on_step(step, objective, passes)
        if best == 0 and trial.changed == 0:
            report.reason = "the jump stayed on its piece: the exact optimum"
            break
        if decrease <= relative_decrease * abs(objective):
            report.reason = f"objective decreased by less than {relative_decrease:g} of itself"
            break
        if best == 0:
            sums = trial
        else:  # the normal matrix of the point the line search chose
            sums = run_pass(transform @ w, zero, (0.0,))
            passes += 1
    else:
        report.reason = f"{max_steps} Newton steps"
    report.passes = passes
    return transform @ w, report


def objective(kernel: Kernel, centres: np.ndarray, coef: np.ndarray, X, y, lam: float,
              theta: float, v: float) -> float:
    """F(α) of the module docstring on rows ``X`` (M = their count), evaluated directly: for
    tests and reports."""
    gram = kernel_matrix(kernel, centres)
    sums = pass_sums(kernel, centres, X, y, coef, np.zeros_like(coef), (0.0,), theta, v)
    return 0.5 * float(coef @ gram @ coef) + loss_weight(lam, theta, len(y)) * \
        float(sums.losses[0])
