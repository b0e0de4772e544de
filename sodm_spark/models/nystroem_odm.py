"""Nyström ODM: the primal of Eqn 1 with w in the span of m centres, in any array library.

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

The numerics are written once against the array namespace of their arrays
(:mod:`~sodm_spark.core.array_namespace`: the Python array API standard, numpy on the CPU,
PyTorch or CuPy on a GPU), the kernel blocks through :mod:`~sodm_spark.core.kernel_blocks`:
Spark's tasks call :func:`pass_sums` on numpy blocks, and :func:`fit_on_device` runs the whole
fit on one device without Spark, its rows copied there once.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from ..core.array_namespace import Array, ArrayDevice, DType, device_of, namespace_of
from ..core.kernel_blocks import BLOCK_BYTES, kernel_block, squared_norms
from ..core.kernels import Kernel

#: Eigen-directions of K_ZZ below this share of its largest eigenvalue are dropped: float64
#: kernel entries resolve about 1e-16 of the largest, and directions this weak carry no
#: function the rows can see.
EIGENVALUE_CUTOFF = 1e-10
#: Step lengths the line search tries along each Newton jump (one pass scores all of them).
LINE_STEPS = (1.0, 0.5, 0.25, 0.125, 0.0625, 0.03125, 0.0)
#: Newton steps at most, and the relative decrease of F below which the fit stops.
MAX_STEPS, RELATIVE_DECREASE = 30, 1e-7


def _float64(xp, values, where):
    """``values`` (an array of ``xp`` or numpy, a sequence) as float64 on ``where``."""
    return xp.asarray(values, dtype=xp.float64, device=where)


@dataclass(frozen=True)
class CentreBasis:
    """The m centres, the map T = U Λ^-½ (m × r) with α = T w and αᵀ K_ZZ α = ‖w‖², and the
    r eigenvalues Λ of K_ZZ it keeps; float64 arrays of the centres' namespace."""

    centres: Array
    transform: Array
    eigenvalues: Array


def centre_basis(kernel: Kernel, centres, cutoff: float = EIGENVALUE_CUTOFF) -> CentreBasis:
    """K_ZZ = U Λ Uᵀ and T = U Λ^-½ over the eigenvalues above ``cutoff`` of the largest,
    in the namespace of ``centres`` (a 2-D array)."""
    if getattr(centres, "ndim", None) != 2 or centres.shape[0] == 0:
        raise ValueError("the Nyström ODM needs at least one centre (a 2-D array of rows).")
    xp = namespace_of(centres)
    centres = _float64(xp, centres, device_of(centres))
    values, vectors = xp.linalg.eigh(kernel_block(xp, kernel, centres, centres))
    m = values.shape[0]
    # ascending eigenvalues: the kept ones are the last columns (a slice, not a mask, since
    # the standard indexes with a boolean array only on its own)
    threshold = cutoff * max(float(values[m - 1]), 1e-300)
    first = m - int(xp.sum(xp.astype(values > threshold, xp.int64)))
    kept = values[first:]
    return CentreBasis(centres, vectors[:, first:] / xp.sqrt(kept), kept)


@dataclass
class PassSums:
    """What one pass over rows returns, summed over blocks (``+``): for each step length t of
    the pass, Σ_i D_i (y_i f_i − τ_i)² at α + t·s (``losses``); at the first step length, the
    piece's normal matrix K_SZᵀ D K_SZ (``normal``), K_SZᵀ D (y∘τ) (``target``); the rows
    whose piece differs between the first and the last step length (``changed``). The
    arrays are float64 of the rows' namespace."""

    losses: Array
    normal: Array
    target: Array
    changed: int
    rows: int

    def __add__(self, other: "PassSums") -> "PassSums":
        return PassSums(self.losses + other.losses, self.normal + other.normal,
                        self.target + other.target, self.changed + other.changed,
                        self.rows + other.rows)


def pieces(margins, theta: float, v: float):
    """(D, τ) of each margin y·f: (1, 1−θ) below the band, (v, 1+θ) above it, (0, 1) in it."""
    xp = namespace_of(margins)
    # indicators times constants instead of where(): the values are exact (1.0 − θ·1 + θ·0
    # is 1 − θ) and no scalar arguments of where() are needed, which older standards lack
    below = xp.astype(margins < 1.0 - theta, margins.dtype)
    above = xp.astype(margins > 1.0 + theta, margins.dtype)
    return below + v * above, 1.0 - theta * below + theta * above


class PassLine(NamedTuple):
    """The points one pass scores: α = ``coef`` + t·``direction`` for each step length t in
    ``steps`` (a Newton jump's line search, :func:`fit`)."""

    coef: Array
    direction: Array
    steps: Sequence[float]


@dataclass(frozen=True)
class PassBlocks:
    """How a pass cuts its rows into blocks: ``block_rows`` rows each (None: ``block_mb``
    megabytes of float64 kernel entries), their kernels computed in ``kernel_dtype`` (None:
    float64; float32 on a GPU)."""

    block_rows: int | None = None
    block_mb: float = 64.0
    kernel_dtype: DType = None


def pass_sums(kernel: Kernel, centres, X, y, line: PassLine, theta: float, v: float,
              weights=None, blocks: PassBlocks = PassBlocks()) -> PassSums:
    """:class:`PassSums` of the rows ``X`` with labels ``y`` (±1) at the points of ``line``
    (α = coef + t·direction for t in its steps); the normal matrix at its first step.
    ``weights``: each row's s_i (None: 1), multiplying its D_i (docs/design.md §1.4; M of C
    is then Σ s_i).

    The namespace and device are ``X``'s; the other arrays are brought there. Rows in
    ``blocks`` (:class:`PassBlocks`): each block's kernel k(X_block, Z) is computed in their
    kernel dtype, then its products (f, the normal matrix by one GEMM) are formed in float64,
    so that the normal matrix's small eigen-directions are resolved whatever the kernel's
    dtype: the losses and the normal matrix then describe one and the same rounded kernel."""
    xp = namespace_of(X)
    where = device_of(X)
    dtype = xp.float64 if blocks.kernel_dtype is None else blocks.kernel_dtype
    lengths = [float(step) for step in line.steps]
    last = len(lengths) - 1
    y = _float64(xp, y, where)
    row_weight = None if weights is None else _float64(xp, weights, where)
    coef, direction = _float64(xp, line.coef, where), _float64(xp, line.direction, where)
    Z = xp.asarray(centres, dtype=dtype, device=where)
    z_sq = squared_norms(xp, Z)
    m, n = Z.shape[0], X.shape[0]
    step = blocks.block_rows or max(1, int(blocks.block_mb * 2**20) // max(1, m * 8))
    along_steps = _float64(xp, lengths, where)
    losses = xp.zeros(len(lengths), dtype=xp.float64, device=where)
    normal = xp.zeros((m, m), dtype=xp.float64, device=where)
    target = xp.zeros(m, dtype=xp.float64, device=where)
    changed = xp.zeros((), dtype=xp.int64, device=where)
    for begin in range(0, n, step):
        end = min(begin + step, n)
        rows = X[begin:end, :]
        if rows.dtype != dtype:
            rows = xp.astype(rows, dtype)
        block = kernel_block(xp, kernel, rows, Z, z_sq=z_sq)
        if block.dtype != xp.float64:
            block = xp.astype(block, xp.float64)
        labels = y[begin:end]
        start = labels * (block @ coef)
        along = labels * (block @ direction)
        # every step length at once: one column of margins each
        margins = start[:, None] + along[:, None] * along_steps[None, :]
        weight, tau = pieces(margins, theta, v)
        if row_weight is not None:
            weight = weight * row_weight[begin:end, None]
        deviation = margins - tau
        losses = losses + xp.sum(weight * (deviation * deviation), axis=0)
        first_weight, first_tau = weight[:, 0], tau[:, 0]
        moved = (weight[:, last] != first_weight) | (tau[:, last] != first_tau)
        changed = changed + xp.sum(xp.astype(moved, xp.int64))
        # rows inside the band weigh 0: their rows of the scaled block are zero
        scaled = block * xp.sqrt(first_weight)[:, None]
        normal = normal + scaled.T @ scaled
        target = target + block.T @ (first_weight * labels * first_tau)
    return PassSums(losses, normal, target, int(changed), int(n))


def pass_work(n_rows: int, n_centres: int, n_inputs: int) -> float:
    """Multiply-adds of one pass: the kernel (n·m·d) and the normal matrix (n·m², as a
    symmetric product half of it, counted whole: BLAS computes the GEMM)."""
    return float(n_rows) * n_centres * (n_inputs + n_centres)


def loss_weight(lam: float, theta: float, n_rows: float) -> float:
    """C = λ / (2M (1−θ)²) of the module docstring, M = ``n_rows``."""
    return lam / (2.0 * n_rows * (1.0 - theta) ** 2)


def newton_jump(basis: CentreBasis, sums: PassSums, weight: float):
    """w minimizing the piece of :class:`PassSums` ``sums``: (I + 2C·TᵀNT) w = 2C·Tᵀb
    (N = K_SZᵀ D K_SZ, b = K_SZᵀ D (y∘τ), C = ``weight``); α = T w."""
    transform = basis.transform
    xp = namespace_of(transform)
    rank = transform.shape[1]
    lhs = 2.0 * weight * (transform.T @ sums.normal @ transform) + \
        xp.eye(rank, dtype=xp.float64, device=device_of(transform))
    rhs = 2.0 * weight * (transform.T @ sums.target)
    # the matrix is symmetric with eigenvalues >= 1: a general solve (the standard has no
    # triangular solve for a Cholesky factor) is as accurate, at twice the m³/3 of Cholesky
    return xp.linalg.solve(lhs, rhs[:, None])[:, 0]


def span_start(basis: CentreBasis, values, weight: float):
    """w of the model in the centres' span nearest another model whose values at the centres
    are ``values`` (the level's f(z_j)): the minimizer of ½‖w‖² + ``weight``·‖K_ZZ T w − f_Z‖²,
    the objective's penalty and a squared loss on the centres (each standing for M/m rows:
    ``weight`` = C·M/m), so that a model the span cannot hold is smoothed, not interpolated.
    In the eigenbasis K_ZZ T = U Λ^½, whose Gram matrix is Λ: the normal equations are
    diagonal, w = 2c·Λ·Tᵀf_Z / (1 + 2c·Λ)."""
    transform = basis.transform
    xp = namespace_of(transform)
    twice = 2.0 * weight * basis.eigenvalues
    return twice * (transform.T @ _float64(xp, values, device_of(transform))) / (1.0 + twice)


@dataclass
class NewtonReport:
    """How :func:`fit` went: the objective after each step, the passes over the rows, the
    line-search steps taken, why it stopped and where it started."""

    objectives: list
    passes: int
    steps: list
    reason: str
    start: str = "zero"  # or "given": the start w beat α = 0 on F


def fit(basis: CentreBasis, run_pass, lam: float, theta: float, v: float, n_rows: float,
        max_steps: int = MAX_STEPS, relative_decrease: float = RELATIVE_DECREASE,
        on_step=None, start=None):
    """α of the Nyström ODM (module docstring): (α, :class:`NewtonReport`), α an array of
    the basis's namespace.

    ``run_pass(coef, direction, steps)`` returns the :class:`PassSums` of every training row
    (:func:`pass_sums` summed over blocks or partitions); ``n_rows`` is M of C. ``start``: a w
    to start from (:func:`span_start` of the level's model), taken where F is lower there
    than at α = 0: the first pass sums the normal matrix at ``start`` and scores both. From
    α = 0 every row lies below the band, so the first jump is the kernel ridge regression of
    the labels times 1−θ. ``on_step(step, objective, passes)`` is called after each step."""
    weight = loss_weight(lam, theta, n_rows)
    transform = basis.transform
    xp, where = namespace_of(transform), device_of(transform)
    w = xp.zeros(transform.shape[1], dtype=xp.float64, device=where)
    zero = xp.zeros(transform.shape[0], dtype=xp.float64, device=where)
    origin = "zero"
    if start is None:
        sums = run_pass(zero, zero, (0.0,))
        passes, objective = 1, weight * float(sums.losses[0])
    else:
        start = _float64(xp, start, where)
        # one pass: the normal matrix at the start, F there and at α = 0
        sums = run_pass(transform @ start, -(transform @ start), (0.0, 1.0))
        passes = 1
        at_start = 0.5 * float(start @ start) + weight * float(sums.losses[0])
        objective = weight * float(sums.losses[1])
        if at_start < objective:
            w, objective, origin = start, at_start, "given"
        else:  # α = 0 is better: its normal matrix
            sums = run_pass(zero, zero, (0.0,))
            passes += 1
    report = NewtonReport([objective], 0, [], "", origin)
    steps = LINE_STEPS
    for step in range(1, max_steps + 1):
        jump = newton_jump(basis, sums, weight) - w
        trial = run_pass(transform @ w, transform @ jump, steps)
        passes += 1
        values = [0.5 * float(xp.sum((w + t * jump) ** 2)) + weight * float(trial.losses[i])
                  for i, t in enumerate(steps)]
        best = values.index(min(values))  # the first (longest) step on a tie
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


@dataclass(frozen=True)
class NystroemFit:
    """The problem (λ, θ, v of Eqn 1) and how :func:`fit_on_device` fits it: the rows' blocks
    (``block_rows``, ``kernel_dtype``) and :func:`fit`'s stopping rule (``max_steps``,
    ``relative_decrease``)."""

    lam: float
    theta: float
    v: float
    block_rows: int | None = None
    kernel_dtype: DType | str | None = None
    max_steps: int = MAX_STEPS
    relative_decrease: float = RELATIVE_DECREASE


def fit_on_device(device: ArrayDevice, kernel: Kernel, centres, X, y, problem: NystroemFit,
                  weights=None, start_coef=None, start_values=None, on_step=None):
    """The Nyström ODM of the rows ``X`` (labels ``y``, ±1; row weights ``weights``) on one
    ``device``, without Spark: (α as float64 numpy, :class:`NewtonReport`). Each pass is
    :func:`pass_sums` over the rows in blocks of ``problem.block_rows`` (None: 64 MB of
    kernel entries on the CPU, :data:`~sodm_spark.core.kernel_blocks.BLOCK_BYTES` on a GPU),
    their kernels in ``problem.kernel_dtype`` (None: float64 on the CPU, float32 on a GPU; or
    a name such as "float32"), the m × m systems in float64.

    The arrays may be numpy or already ``device``'s; the rows are copied there once, in the
    kernel's dtype. A start, at most one: ``start_coef``, an α on these centres (an earlier
    fit's: its projection on the kept eigen-directions, w = Λ·Tᵀα), or ``start_values``, a
    model's values at the centres (:func:`span_start`, as the global step starts from the
    level's model); :func:`fit` takes it where F is lower there than at α = 0."""
    if start_coef is not None and start_values is not None:
        raise ValueError("give at most one start: start_coef or start_values.")
    xp = device.xp
    lam, theta, v = problem.lam, problem.theta, problem.v
    kernel_dtype, block_rows = problem.kernel_dtype, problem.block_rows
    if kernel_dtype is None:
        kernel_dtype = xp.float64 if device.kind == "cpu" else xp.float32
    elif isinstance(kernel_dtype, str):
        kernel_dtype = getattr(xp, kernel_dtype)
    basis = centre_basis(kernel, device.asarray(centres, dtype=xp.float64))
    X = device.asarray(X, dtype=kernel_dtype)
    y = device.asarray(y, dtype=xp.float64)
    row_weight = None if weights is None else device.asarray(weights, dtype=xp.float64)
    total = X.shape[0] if row_weight is None else float(xp.sum(row_weight))
    if block_rows is None and device.kind != "cpu":
        # a block holds about four float64 copies at once (its kernel's scratch, the
        # float64 block, its scaled copy): within the GPU's block budget
        block_rows = max(1, BLOCK_BYTES // (4 * 8 * basis.centres.shape[0]))

    blocks = PassBlocks(block_rows=block_rows, kernel_dtype=kernel_dtype)

    def run_pass(coef, direction, steps):
        return pass_sums(kernel, basis.centres, X, y, PassLine(coef, direction, steps), theta,
                         v, weights=row_weight, blocks=blocks)

    start = None
    if start_coef is not None:
        # Tᵀ K_ZZ α = Λ^½ Uᵀ α = Λ · Tᵀ α: the α = T w nearest α in K_ZZ's norm
        start = basis.eigenvalues * (basis.transform.T @ device.asarray(start_coef,
                                                                         dtype=xp.float64))
    elif start_values is not None:
        start = span_start(basis, device.asarray(start_values, dtype=xp.float64),
                           loss_weight(lam, theta, total) * total / basis.centres.shape[0])
    coef, report = fit(basis, run_pass, lam, theta, v, total, max_steps=problem.max_steps,
                       relative_decrease=problem.relative_decrease, on_step=on_step,
                       start=start)
    return device.to_numpy(coef), report


def objective(kernel: Kernel, centres, coef, X, y, lam: float, theta: float,
              v: float) -> float:
    """F(α) of the module docstring on rows ``X`` (M = their count), evaluated directly, in
    ``X``'s namespace: for tests and reports."""
    xp = namespace_of(X)
    where = device_of(X)
    centres, coef = _float64(xp, centres, where), _float64(xp, coef, where)
    gram = kernel_block(xp, kernel, centres, centres)
    sums = pass_sums(kernel, centres, X, y, PassLine(coef, xp.zeros_like(coef), (0.0,)), theta,
                     v)
    return 0.5 * float(coef @ gram @ coef) + loss_weight(lam, theta, X.shape[0]) * \
        float(sums.losses[0])
