"""SVRG numerics for the linear-kernel ODM primal (SODM paper Sec. 3.3, Algorithm 2).

With the linear kernel the ODM primal (SODM Sec. 2.1, docs/design.md §1) is solved directly:

    P(w) = (1/M) Σ_i p_i(w),
    p_i(w) = ½‖w‖² + λ/(2(1-θ)²) · (ξ_i² + v·ε_i²),
    ξ_i = max(0, 1-θ - y_i wᵀx_i),   ε_i = max(0, y_i wᵀx_i - 1-θ),

whose per-row gradient is the one of Sec. 3.3,

    ∇p_i(w) = w + c_i(w)·y_i x_i,
    c_i(w) = λ/(1-θ)² · [(m_i+θ-1)·1{m_i < 1-θ} + v·(m_i-θ-1)·1{m_i > 1+θ}],  m_i = y_i wᵀx_i.

**Intercept.** With ``fit_intercept`` the decision function is wᵀx + b and the margins are
m_i = y_i(wᵀx_i + b); the bias b is not penalized (only ½‖w‖²), as in Spark MLlib's
LinearSVC and LogisticRegression (LIBLINEAR instead appends a constant feature B and
penalizes its weight, so its bias shrinks towards 0 unless B is large). Unpenalized, the fit
does not depend on where the origin lies: shifting every row by a constant vector only
shifts b, which is what users of data that are not centred need. The parameter vector is
then (w, b), d+1 entries, the last one b; ∇p_i = (w, 0) + c_i·y_i(x_i, 1). Every function
below takes ``fit_intercept`` and the longer vector together.

**Centring.** That invariance also lets the solvers work on centred rows x_i - μ (μ the column
means) with b' = b + wᵀμ: the same problem, exactly, but far better conditioned when the data
are not centred (rows in [3, 4]^8, λ = 100: SVRG was still 8% above the optimum after 200
epochs on the raw rows, exact after 14 on centred ones). ``center`` = μ passes the centring to
the functions below, which then use and return (w, b'); rows are never densified: a CSR step
keeps μ's part of w lazily too (see ``_svrg_kernels.inner_csr``).

Every SVRG variant shares these pieces: the full gradient is ``w + grad_sum/M`` with
``(loss_sum, grad_sum) = loss_gradient_sum(...)`` (a sum over rows, so a Spark treeAggregate
sums it over partitions: Alg. 2 lines 6-9), and ``svrg_inner`` runs the variance-reduced steps
of Alg. 2 line 14 over given rows (one node's turn in the DSVRG round robin, or one epoch of
single-node SVRG). ``svrg`` is plain single-node SVRG (option I: the snapshot is the last
iterate), the ODM_svrg comparator. No Spark import here.

X is a dense float64 array or a scipy.sparse CSR matrix; sparse X is never densified: the
CSR inner loop costs O(nnz(x_i)) per step (lazy scaling, see ``_svrg_kernels.inner_csr``);
the numba loops live in :mod:`._svrg_kernels`.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from ..core.validation import check_odm_params
from .dcd_settings import ODMHyperparameters
from ._svrg_kernels import CSRRows, Intercept, LossBand, Snapshot, inner_csr, inner_dense

__all__ = ["SVRGResult", "SVRGSchedule", "Snapshot", "column_means", "default_step",
           "epoch_rng", "loss_gradient_sum", "penalized", "primal_objective", "row_factors",
           "row_sq_norms", "sample_rows", "smoothness", "step_for", "svrg", "svrg_inner"]


@dataclass(frozen=True)
class SVRGSchedule:
    """How SVRG runs: at most ``epochs`` epochs of ``inner_steps`` steps (None: one per row) of
    size ``step`` (None: the solver's safe default), stopping once an epoch changes the objective
    by at most ``relative_change_tol`` of it; ``seed`` (an int or ints) seeds ``epoch_rng``."""

    epochs: int = 30
    inner_steps: int | None = None
    step: float | None = None
    relative_change_tol: float = 1e-6
    seed: int | Sequence[int] = 0


# ---------------------------------------------------------------- input handling
def _as_matrix(X):
    """CSR float64 (kept sparse) or C-contiguous float64 2-D ndarray; no copy when already so."""
    if sp.issparse(X):
        if X.format != "csr":
            X = X.tocsr()
        if X.dtype != np.float64:
            X = X.astype(np.float64)
        return X
    X = np.ascontiguousarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be a 2-D array (rows × features), got shape {X.shape}.")
    return X


def _as_vector(w, d: int, what: str = "w", fit_intercept: bool = False) -> np.ndarray:
    w = np.asarray(w, dtype=np.float64)
    if w.shape != (d + bool(fit_intercept),):
        entries = "one entry per feature of X" + (", then the intercept" if fit_intercept else "")
        raise ValueError(f"{what} must be a vector of length {d + bool(fit_intercept)} "
                         f"({entries}), got shape {w.shape}.")
    return w


def penalized(w, fit_intercept: bool = False) -> np.ndarray:
    """The gradient of the regularizer ½‖w‖² at (w, b): w, with a 0 for the unpenalized b."""
    if not fit_intercept:
        return w
    out = np.array(w, dtype=np.float64, copy=True)
    out[-1] = 0.0
    return out


def _check_labels(y, n: int) -> np.ndarray:
    y = np.asarray(y, dtype=np.float64)
    if y.shape != (n,) or not np.all(np.abs(y) == 1.0):
        raise ValueError("y must hold one label per row of X, each -1 or +1.")
    return y


def _scale(lam: float, theta: float) -> float:
    """λ/(1-θ)², the factor in front of every row's loss gradient (Sec. 3.3)."""
    return lam / (1.0 - theta) ** 2


# ---------------------------------------------------------------- full objective / gradient
def _as_center(center, d: int, fit_intercept: bool):
    """μ as a float64 vector of length d, or None (no centring; only with an intercept)."""
    if center is None:
        return None
    if not fit_intercept:
        raise ValueError("center (the column means) only applies with fit_intercept: without "
                         "a bias, centring changes the problem.")
    return np.ascontiguousarray(_as_vector(center, d, "center"))


def loss_gradient_sum(w, X, y, lam, theta, v, fit_intercept=False, center=None, weights=None):
    """Σ_i λ/(2(1-θ)²)(ξ_i²+vε_i²) and Σ_i c_i(w) y_i x_i (the data part of Σ_i ∇p_i; with
    ``fit_intercept`` w = (w, b) and the gradient sum gains Σ_i c_i y_i as its last entry).
    With ``center`` μ the rows are x_i - μ and w = (w, b'), b' = b + wᵀμ. ``weights``: each
    row's s_i multiplies its terms (docs/design.md §1.4; the sums are then divided by
    S = Σ s_i, not M).

    One matvec X @ w and one X.T @ coeffs (BLAS or sparse); both sums add over rows, so a
    treeAggregate can sum partitions' results (Alg. 2 line 7).
    Full gradient = penalized(w) + grad_sum/M.
    """
    X = _as_matrix(X)
    d = X.shape[1]
    w = _as_vector(w, d, fit_intercept=fit_intercept)
    center = _as_center(center, d, fit_intercept)
    y = np.asarray(y, dtype=np.float64)
    a = _scale(lam, theta)
    scores = X @ w[:d]
    if fit_intercept:
        scores = scores + (w[d] - (0.0 if center is None else float(center @ w[:d])))
    margins = y * scores
    xi = np.maximum(1.0 - theta - margins, 0.0)
    eps = np.maximum(margins - 1.0 - theta, 0.0)
    if weights is None:
        loss_sum = 0.5 * a * float(xi @ xi + v * (eps @ eps))
        coeffs = a * (v * eps - xi) * y          # c_i(w)·y_i
    else:
        weights = np.asarray(weights, dtype=np.float64)
        loss_sum = 0.5 * a * float(weights @ (xi * xi + v * (eps * eps)))
        coeffs = a * (v * eps - xi) * y * weights
    grad_sum = np.asarray(X.T @ coeffs, dtype=np.float64).reshape(-1)
    if fit_intercept:
        total = float(coeffs.sum())
        if center is not None:
            grad_sum -= total * center
        grad_sum = np.append(grad_sum, total)
    return loss_sum, grad_sum


def primal_objective(w, X, y, lam, theta, v, fit_intercept=False) -> float:
    """P(w) = ½‖w‖² + λ/(2M)·Σ_i (ξ_i² + v·ε_i²)/(1-θ)² (SODM Sec. 2.1 / 3.3); with
    ``fit_intercept``, w = (w, b) and b is not penalized."""
    X = _as_matrix(X)
    w = _as_vector(w, X.shape[1], fit_intercept=fit_intercept)
    loss_sum, _ = loss_gradient_sum(w, X, y, lam, theta, v, fit_intercept)
    weights = w[:X.shape[1]]
    return 0.5 * float(weights @ weights) + loss_sum / X.shape[0]


def column_means(X) -> np.ndarray:
    """μ, the mean of every column (sparse X stays sparse)."""
    return np.asarray(X.mean(axis=0), dtype=np.float64).reshape(-1)


def row_sq_norms(X, center=None) -> np.ndarray:
    """‖x_i‖², or ‖x_i - μ‖² with ``center`` μ (O(nnz) for CSR: ‖x‖² - 2μᵀx + ‖μ‖²)."""
    if sp.issparse(X):
        sq = np.asarray(X.multiply(X).sum(axis=1), dtype=np.float64).reshape(-1)
    else:
        sq = np.einsum("ij,ij->i", X, X)
    if center is not None:
        center = np.asarray(center, dtype=np.float64)
        sq = np.maximum(sq - 2.0 * np.asarray(X @ center).reshape(-1) + center @ center, 0.0)
    return sq


def smoothness(X, lam, theta, v, fit_intercept=False, center=None, row_factor=None) -> float:
    """L_max = 1 + λ/(1-θ)²·max(1, v)·max_i ‖x_i‖² (‖(x_i - μ, 1)‖² with ``fit_intercept`` and
    ``center``): every p_i is L_max-smooth, since ∇²p_i ⪯ I + λ/(1-θ)²·max(1, v)·x_i x_iᵀ;
    with ``row_factor`` (:func:`row_factors`) each row's term times its factor."""
    X = _as_matrix(X)
    if X.shape[0] == 0:
        raise ValueError("X has no rows.")
    center = _as_center(center, X.shape[1], fit_intercept)
    norms = row_sq_norms(X, center) + bool(fit_intercept)
    if row_factor is not None:
        norms = norms * row_factor
    return 1.0 + _scale(lam, theta) * max(1.0, v) * float(norms.max())


def row_factors(weights, n_rows: int, total_weight: float) -> np.ndarray:
    """M·s_i/S per row: a uniformly sampled row's loss gradient times this is an unbiased
    sample of the weighted mean (1/S)·Σ_i s_i ∇ℓ_i (docs/design.md §1.4); 1 without weights."""
    weights = np.asarray(weights, dtype=np.float64)
    return weights * (float(n_rows) / float(total_weight))


def default_step(X, lam, theta, v, inner_steps=None, fit_intercept=False, center=None,
                 row_factor=None) -> float:
    """A safe SVRG step: η = 1/(2·L_max), smaller when an epoch is long (see ``step_for``).

    The classical analyses (Johnson & Zhang 2013; Xiao & Zhang's prox-SVRG) need η < 1/(4L)
    and more inner steps than M when L_max ≫ M, so they only bound the safe range from below.
    Measured with ``svrg`` (M steps per epoch, 26 problems: 50-1000 rows, 3-2000 features,
    Gaussian, lognormal row norms, correlated, sparse binary; λ 0.1-100, θ 0-0.8, v 0.1-1;
    L_max 1.4 to 3e6): η = 1/(4L), 1/(2L) and 1/L decreased P monotonically in every case;
    η = 1.5/L had upticks on 3 of the 12 problems it was tried on, and η = 2/L failed to
    converge on 1 of 6 (oscillated on another). Each doubling of η up to 1/L roughly halved
    the epochs on ill-conditioned problems (500×20, lognormal rows, λ=50: 1e-6 relative gap
    not reached in 60 epochs at 1/(2L), 56 epochs at 1/L); easy ones (L_max ≤ 40) took 1-5
    epochs at any of the three. 1/(2L) keeps a 3× margin to the first oscillation at about
    half the speed of 1/L. Since L_max ≥ 1, η < 1 always holds
    (``svrg_inner`` needs it for the (1-η) decay of its lazy scaling).
    ``inner_steps`` (m, the steps per epoch) lowers η for long epochs, see ``step_for``.
    """
    return step_for(smoothness(X, lam, theta, v, fit_intercept, center, row_factor),
                    inner_steps)


def step_for(l_max: float, inner_steps=None) -> float:
    """η = min(1/(2·L_max), 1/sqrt(2·L_max·μ·m)) for m steps per epoch (μ = 1: every p_i is
    1-strongly convex).

    Johnson & Zhang's bound on SVRG's per-epoch contraction (option II; option I behaves
    alike in practice), ρ(η) = 1/(μη(1-2Lη)m) + 2Lη/(1-2Lη), is smallest near
    η = 1/sqrt(2Lμm) when m ≫ L/μ: an epoch over many rows then contracts by about
    2·sqrt(2L/(μm)), and a larger step only raises the noise floor of the epoch (its
    SGD-like first part starts from a far snapshot). When m ≲ 2L/μ the second argument is
    larger and 1/(2L) (see ``default_step``) stays. Measured on the generated 10^6 × 50 problem
    (λ=1, θ=0.1, v=0.5, L_max=141, single-node ``svrg``): relative objective gap after epochs
    1, 2, 3 was 2.5e-2, 1.8e-3, 9.5e-5 at η = 1/(2L); 7.1e-3, 1.1e-4, 1.5e-6 at 1/(8L);
    4.6e-4, 4.6e-7, 4.3e-10 at 1/sqrt(2Lm) (= 1/(59L)).
    """
    step = 1.0 / (2.0 * float(l_max))
    if inner_steps:
        step = min(step, 1.0 / np.sqrt(2.0 * float(l_max) * float(inner_steps)))
    return step


# ---------------------------------------------------------------- the inner steps
def svrg_inner(w, snapshot: Snapshot, X, y, rows, step, odm: ODMHyperparameters, fit_intercept=False,
               center=None, row_factor=None) -> np.ndarray:
    """Run len(rows) SVRG steps w ← w - η(∇p_i(w) - ∇p_i(w̃) + μ̃) over ``rows`` in order.

    ``snapshot`` holds w̃ and ``mean_data_grad`` = grad_sum/M at w̃ (so μ̃ = penalized(w̃) +
    mean_data_grad is the full gradient, Alg. 2 line 9). This is one node's turn of the DSVRG
    round robin (Alg. 2 lines 12-20) or one epoch of SVRG. Returns a new array; inputs are not
    modified. Dense rows cost O(d) per step, CSR rows O(nnz(x_i)) plus O(d) once at the end.
    With ``fit_intercept`` the three vectors hold (w, b), d+1 entries; with ``center`` μ as
    well, (w, b') on the rows x_i - μ (``mean_data_grad`` from ``loss_gradient_sum`` with the
    same ``center``). ``row_factor`` (:func:`row_factors`): each row's loss gradient times its
    factor, for weighted rows (None: 1).
    """
    X = _as_matrix(X)
    n, d = X.shape
    fit_intercept = bool(fit_intercept)
    w = np.array(_as_vector(w, d, fit_intercept=fit_intercept), dtype=np.float64, copy=True)
    w_snap = np.ascontiguousarray(_as_vector(snapshot.w, d, "snapshot", fit_intercept))
    g = np.ascontiguousarray(_as_vector(snapshot.mean_data_grad, d, "mean_data_grad",
                                        fit_intercept))
    center = _as_center(center, d, fit_intercept)
    mu = np.zeros(d) if center is None else center
    y = np.ascontiguousarray(np.asarray(y, dtype=np.float64))
    if y.shape != (n,):
        raise ValueError(f"y must have one entry per row of X ({n}), got shape {y.shape}.")
    rows = np.ascontiguousarray(np.asarray(rows, dtype=np.int64).reshape(-1))
    if rows.size and (rows.min() < 0 or rows.max() >= n):
        raise ValueError(f"rows must be row indices in [0, {n}).")
    step = float(step)
    if not (0.0 < step < 1.0):
        raise ValueError(f"step must lie in (0, 1) (each p_i is 1-strongly convex, so "
                         f"L_max ≥ 1 and useful steps are < 1), got {step!r}.")
    if rows.size == 0:
        return w
    band = LossBand(_scale(odm.lam, odm.theta), 1.0 - odm.theta, 1.0 + odm.theta, float(odm.v))
    factor = np.ones(n) if row_factor is None else \
        np.ascontiguousarray(row_factor, dtype=np.float64)
    anchor, intercept = Snapshot(w_snap, g), Intercept(fit_intercept, mu)
    if sp.issparse(X):
        s, r, q, b = inner_csr(w, anchor, CSRRows(X.indptr, X.indices, X.data, d), y, rows,
                               step, band, factor, intercept)
        w[:d] *= s
        w[:d] += r * g[:d]
        if fit_intercept:
            w[:d] += q * mu
            w[d] = b
    else:
        inner_dense(w, anchor, X, y, rows, step, band, factor, intercept)
    return w


# ---------------------------------------------------------------- sampling and the driver
def sample_rows(n_rows: int, n_steps: int, rng) -> np.ndarray:
    """``n_steps`` row indices drawn without replacement (Alg. 2 lines 13/16): a prefix of a
    random permutation; beyond ``n_rows`` steps, further permutations are concatenated."""
    n_rows, n_steps = int(n_rows), int(n_steps)
    if n_rows < 1 or n_steps < 0:
        raise ValueError(f"need n_rows ≥ 1 and n_steps ≥ 0, got {n_rows}, {n_steps}.")
    parts, left = [], n_steps
    while left > 0:
        perm = rng.permutation(n_rows)
        parts.append(perm[:left])
        left -= perm.size
    return np.concatenate(parts).astype(np.int64) if parts else np.empty(0, dtype=np.int64)


def epoch_rng(seed, epoch: int) -> np.random.Generator:
    """The generator of one epoch: ``default_rng([*seed, epoch])`` (seed an int or a sequence),
    so reruns are bit-identical and never depend on how many draws earlier epochs made."""
    parts = list(seed) if isinstance(seed, (list, tuple, np.ndarray)) else [seed]
    return np.random.default_rng([int(s) for s in parts] + [int(epoch)])


@dataclass
class SVRGResult:
    """``w`` (and ``intercept`` b, 0 without one) after ``epochs`` epochs, P(w) as
    ``objective``; ``history[k]`` is P after epoch k (``history[0]`` at the start point);
    ``converged`` says whether ``relative_change_tol`` stopped the run."""

    w: np.ndarray
    objective: float
    epochs: int
    history: list = field(default_factory=list)
    converged: bool = False
    intercept: float = 0.0


def svrg(X, y, odm: ODMHyperparameters, schedule: SVRGSchedule | None = None, *, w0=None,
         fit_intercept=True, intercept0=0.0, weights=None) -> SVRGResult:
    """Single-node SVRG on the ODM primal (ODM_svrg, Johnson & Zhang 2013; SODM Sec. 3.3).

    Each epoch of the ``schedule`` (default ``SVRGSchedule()``): full gradient at the snapshot
    w̃ (= the last iterate, option I), then ``inner_steps`` (default: the number of rows) steps
    on rows sampled without replacement with ``epoch_rng(seed, epoch)``. Stops when
    |P_new - P_old| ≤ relative_change_tol·|P_new| or after ``epochs`` epochs. ``step`` defaults
    to ``default_step``. ``fit_intercept`` (default, as MLlib and scikit-learn) adds the
    unpenalized bias b, started at ``intercept0``; the steps then run on centred rows (module
    docstring) and the result is turned back into (w, b).
    ``weights``: each row's s_i > 0, P's loss a weighted mean (docs/design.md §1.4).
    """
    schedule = SVRGSchedule() if schedule is None else schedule
    check_odm_params(odm.lam, odm.theta, odm.v)
    X = _as_matrix(X)
    n, d = X.shape
    if n == 0:
        raise ValueError("X has no rows.")
    y = np.ascontiguousarray(_check_labels(y, n))
    if int(schedule.epochs) < 1:
        raise ValueError(f"epochs must be at least 1, got {schedule.epochs!r}.")
    tol = schedule.relative_change_tol
    if tol is None or not 0 <= tol < np.inf:
        raise ValueError(f"relative_change_tol must be a finite number ≥ 0, got {tol!r}.")
    inner_steps = n if schedule.inner_steps is None else int(schedule.inner_steps)
    if inner_steps < 1:
        raise ValueError(f"inner_steps must be at least 1, got {inner_steps!r}.")
    fit_intercept = bool(fit_intercept)
    total, factor = float(n), None
    if weights is not None:
        weights = np.asarray(weights, dtype=np.float64)
        total = float(weights.sum())
        factor = row_factors(weights, n, total)
    # the weighted column means centre as well as the plain ones (the centring only moves b)
    center = column_means(X) if fit_intercept else None
    step = (default_step(X, odm.lam, odm.theta, odm.v, inner_steps, fit_intercept, center, factor)
            if schedule.step is None else float(schedule.step))
    w = np.zeros(d) if w0 is None else np.array(_as_vector(w0, d, "w0"), copy=True)
    if fit_intercept:  # b' = b + wᵀμ on the centred rows
        w = np.append(w, float(intercept0) + float(w @ center))
    if not np.all(np.isfinite(w)):
        raise ValueError("w0 and intercept0 must be finite.")

    def regularizer(w):
        return 0.5 * float(w[:d] @ w[:d])

    loss_sum, grad_sum = loss_gradient_sum(w, X, y, odm.lam, odm.theta, odm.v, fit_intercept,
                                           center, weights)
    objective = regularizer(w) + loss_sum / total
    history, converged, epoch = [objective], False, 0
    for epoch in range(1, int(schedule.epochs) + 1):
        rows = sample_rows(n, inner_steps, epoch_rng(schedule.seed, epoch - 1))
        w = svrg_inner(w, Snapshot(w, grad_sum / total), X, y, rows, step, odm, fit_intercept,
                       center, factor)
        loss_sum, grad_sum = loss_gradient_sum(w, X, y, odm.lam, odm.theta, odm.v,
                                               fit_intercept, center, weights)
        new_objective = regularizer(w) + loss_sum / total
        history.append(new_objective)
        if not np.isfinite(new_objective):
            raise FloatingPointError(f"SVRG diverged at epoch {epoch} (step {step:g} too large).")
        change = abs(objective - new_objective)
        objective = new_objective
        if change <= tol * abs(new_objective):
            converged = True
            break
    intercept = float(w[d] - w[:d] @ center) if fit_intercept else 0.0
    return SVRGResult(w=w[:d], objective=objective, epochs=epoch, history=history,
                      converged=converged, intercept=intercept)
