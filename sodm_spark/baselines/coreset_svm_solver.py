"""Sensitivity coresets for the soft-margin SVM and merge-and-reduce: Algorithm 1 of the coreset
SVM paper ("Small Coresets to Represent Large Training Data for Support Vector Machines",
anonymous authors, a manuscript under double-blind review).

The SVM of that paper (Definition 2, Eqn 2): rows ``x_i``, labels ``y_i = ±1``, weights
``u_i ≥ 0``, bias ``b`` (the paper's extra coordinate of ``w``) not regularized::

    f((P, u), (w, b)) = ½‖w‖² + C · Σ_i u_i · max(0, 1 - y_i (wᵀx_i + b))

libsvm minimizes exactly this (``SVC(C=C).fit(X, y, sample_weight=u)`` scales each dual box
by its weight); :func:`solve_weighted_svm` runs it to a small tolerance. A weighted subset
``(S, v)`` is evaluated by the same formula (regularizer once, hinge sum weighted by ``v``).

:func:`build_coreset` is Algorithm 1: line 1 solves the weighted SVM (libsvm for the interior
point method, as Sec. 4.3 allows); lines 2-6 bound sensitivities by **Eqn 5 (Lemma 7)**, or
with ``bound="lemma11"`` by Lemma 11 with ξ = the solver's certified duality gap; line 8
draws ``m`` points from Multinomial(γ/t), ``t = Σ γ_i``; line 11 weighs them
``v_i = t·K_i·u_i/(γ_i·|S|)`` with ``|S|`` read as the number of draws ``m`` (the sample with
multiplicity): only so is ``f((S, v), w)`` the unbiased estimate of Sec. 4.1.

Eqn 5, for a point of label ``y``: ``U_y`` its class weight, ``x̄_y`` the class's weighted
mean, ``p_Δ = y·(x̄_y - x_i)`` (the bias coordinate cancels), ``K_y = u(P_{-y})/(2·u(P)·U_y)``
(Eqn 8) and ``f* = f(P, w*)``::

    γ_i = u_i/U_y + C·u_i/(2f*) · (sqrt((⟨w*,p_Δ⟩ - K_y/C)² + 2f*·‖p_Δ‖²) + ⟨w*,p_Δ⟩ - K_y/C)

The paper's setting is the linear kernel with ``‖x_i‖ ≤ 1``. Lemma 7's proof uses only inner
products, strong convexity and Cauchy-Schwarz, so it holds in an RKHS too (``‖p_Δ‖²`` and
``⟨w*, p_Δ⟩`` from kernel sums): 'rbf' (``‖φ(x)‖ = 1``, as assumed) and 'poly' work so;
Theorem 9's sample size (VC dimension d + 1) is linear-only. 'laplacian' is refused: libsvm
lacks it and a precomputed chunk kernel would be n × n.

Merge-and-reduce (Sec. 4.2): coresets of disjoint chunks unite into a coreset of the union;
:func:`merge_and_reduce` pairs them level by level and reduces each union by Algorithm 1.
Spark builds one coreset per partition (:func:`build_coreset`) and reduces on the driver.
No Spark import here.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.svm import SVC

from ..core.kernels import Kernel, decision_values, iter_kernel_blocks
from ..core.validation import check_finite_rows, describe_rows

__all__ = ["ReductionSettings", "SVMSolution", "WeightedCoreset", "build_coreset",
           "check_weighted_data", "merge_and_reduce", "sample_coreset", "sensitivity_bounds",
           "solve_weighted_svm", "svm_objective", "uniform_coreset"]

BOUNDS = ("lemma7", "lemma11")
LINEAR = Kernel("linear", 1.0, 3, 0.0)


# ---------------------------------------------------------------- input checks
def check_weighted_data(X, y, weights=None, what: str = "X"):
    """Dense float64 ``X`` (finite), labels ±1 and finite non-negative weights (default 1)."""
    X, y = np.ascontiguousarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64).ravel()
    if X.ndim != 2 or X.shape[0] == 0:
        raise ValueError(f"{what} must be a non-empty 2-D array (rows × features), "
                         f"got shape {X.shape}.")
    check_finite_rows(X, what)
    n = X.shape[0]
    if y.shape != (n,):
        raise ValueError(f"y must hold one label per row of {what} ({n}), got {y.shape[0]}.")
    bad = np.flatnonzero((y != 1.0) & (y != -1.0))
    if bad.size:
        raise ValueError(f"labels must be -1 or +1; {describe_rows(bad)} hold other values "
                         f"(first: {y[bad[0]]!r}). Map the two classes to ±1 first.")
    weights = np.ones(n) if weights is None else np.asarray(weights, np.float64).ravel()
    if weights.shape != (n,):
        raise ValueError(f"weights must hold one value per row of {what} ({n}), "
                         f"got {weights.shape[0]}.")
    bad = np.flatnonzero(~np.isfinite(weights) | (weights < 0))
    if bad.size or not weights.any():
        raise ValueError("weights must be finite, >= 0 and not all zero; " + (
            f"{describe_rows(bad)} are not (first: {weights[bad[0]]!r})." if bad.size else
            "all are zero."))
    return X, y, weights


def _check_positive(value, name: str) -> float:
    if not (isinstance(value, (int, float, np.number)) and np.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}.")
    return float(value)


def _check_size(size) -> int:
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
        raise ValueError(f"the coreset size (number of draws m) must be a positive integer, "
                         f"got {size!r}.")
    return int(size)


def _check_bound(bound) -> None:
    if bound not in BOUNDS:
        raise ValueError(f"bound must be one of {', '.join(BOUNDS)}, got {bound!r}.")


def _child_seed(seed, *path: int) -> list[int]:
    """A seed for one node of the merge tree: ``seed`` (int or ints) extended by ``path``."""
    return [int(s) for s in np.atleast_1d(np.asarray(seed, dtype=np.int64))] + list(path)


def _svc_kernel_params(kernel: Kernel) -> dict:
    """libsvm's kernels have our parameterization (kernels.py follows scikit-learn's SVC)."""
    if kernel.name not in ("linear", "rbf", "poly"):
        raise ValueError(f"the coreset SVM supports kernels 'linear', 'rbf' and 'poly', not "
                         f"{kernel.name!r} (libsvm has no such kernel); pick one of those.")
    return {"kernel": kernel.name, "gamma": kernel.gamma, "degree": kernel.degree,
            "coef0": kernel.coef0}


# ---------------------------------------------------------------- the SVM objective (Eqn 2)
def svm_objective(X, y, weights, C, coef, intercept=0.0):
    """Eqn 2, ``½‖w‖² + C Σ u_i max(0, 1 - y_i(wᵀx_i + b))``, for one or many linear queries.

    ``coef`` is (d,) with a scalar ``intercept``, or (q, d) with (q,) intercepts: one value per
    query, computed with one GEMM.
    """
    X, y, weights = check_weighted_data(X, y, weights)
    C = _check_positive(C, "C")
    coef = np.asarray(coef, dtype=np.float64)
    single = coef.ndim == 1
    W = np.atleast_2d(coef)
    if W.shape[1] != X.shape[1]:
        raise ValueError(f"coef has {W.shape[1]} entries per query, X has {X.shape[1]} columns.")
    b = np.broadcast_to(np.asarray(intercept, dtype=np.float64), (W.shape[0],))
    hinge = np.maximum(0.0, 1.0 - y[:, None] * (X @ W.T + b))
    values = 0.5 * np.einsum("qd,qd->q", W, W) + C * (weights @ hinge)
    return float(values[0]) if single else values


@dataclass
class SVMSolution:
    """A solved weighted SVM: ``g(x) = Σ_s dual_coef[s]·k(sv_s, x) + intercept``.

    ``dual_coef`` holds ``y_s·α_s`` with ``0 ≤ α_s ≤ C·u_s``; ``coef`` is ``w`` for the linear
    kernel (None otherwise); ``norm_sq`` is ``‖w‖²`` (in the RKHS for a kernel);
    ``duality_gap`` (objective minus the dual value of α) bounds ``objective - f*`` above.
    """

    kernel: Kernel
    support_vectors: np.ndarray
    dual_coef: np.ndarray
    intercept: float
    coef: np.ndarray | None
    norm_sq: float
    objective: float = float("nan")
    duality_gap: float = float("nan")
    converged: bool = True
    n_iter: int = 0

    def decision_function(self, X) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        if self.coef is not None:
            return X @ self.coef + self.intercept
        return decision_values(self.kernel, X, self.support_vectors,
                               self.dual_coef) + self.intercept

    def objective_on(self, X, y, weights, C) -> float:
        """Eqn 2 at this model (any kernel) on the weighted rows ``(X, y, weights)``."""
        X, y, weights = check_weighted_data(X, y, weights)
        hinge = np.maximum(0.0, 1.0 - y * self.decision_function(X))
        return 0.5 * self.norm_sq + _check_positive(C, "C") * float(weights @ hinge)


def solve_weighted_svm(X, y, weights, C, kernel: Kernel | None = None, tol: float = 1e-5,
                       cache_mb: float = 200.0, max_iter: int = -1) -> SVMSolution:
    """Minimize Eqn 2 on ``(X, y, weights)`` with libsvm (``SVC(C).fit(sample_weight=u)``).

    ``tol`` is libsvm's KKT tolerance; ``duality_gap`` of the result certifies how far its
    objective is from the optimum. If only one class has positive weight the optimum is
    ``w = 0, b = that label`` (objective 0), returned without calling libsvm.
    """
    X, y, weights = check_weighted_data(X, y, weights)
    C, kernel = _check_positive(C, "C"), LINEAR if kernel is None else kernel
    params = _svc_kernel_params(kernel)
    labels = np.unique(y[weights > 0])
    if labels.size == 1:
        linear_zero = np.zeros(X.shape[1]) if kernel.name == "linear" else None
        return SVMSolution(kernel, np.empty((0, X.shape[1])), np.empty(0), float(labels[0]),
                           linear_zero, 0.0, 0.0, 0.0)
    svc = SVC(C=C, tol=_check_positive(tol, "tol"), cache_size=cache_mb, max_iter=max_iter,
              **params)
    svc.fit(X, y, sample_weight=weights)
    dual_coef = np.asarray(svc.dual_coef_[0], dtype=np.float64)
    sv = np.asarray(svc.support_vectors_, dtype=np.float64)
    coef = dual_coef @ sv if kernel.name == "linear" else None
    # ‖w‖² = αᵀQα; for a kernel one block of k(SV, SV) at a time.
    norm_sq = float(coef @ coef if coef is not None else
                    dual_coef @ decision_values(kernel, sv, sv, dual_coef))
    solution = SVMSolution(kernel, sv, dual_coef, float(svc.intercept_[0]), coef, norm_sq,
                           converged=svc.fit_status_ == 0, n_iter=int(svc.n_iter_[0]))
    solution.objective = solution.objective_on(X, y, weights, C)
    # The dual of Eqn 2, Σ α_i - ½‖Σ α_i y_i φ(x_i)‖², bounds f* from below at any feasible α.
    solution.duality_gap = max(0.0, solution.objective - (np.abs(dual_coef).sum() - 0.5 * norm_sq))
    return solution


# ---------------------------------------------------------------- sensitivities (Eqn 5)
def _class_geometry(X, y, weights, solution: SVMSolution):
    """Per row: ``⟨w, p_Δ⟩`` and ``‖p_Δ‖²`` with ``p_Δ = y_i(x̄_{y_i} - x_i)`` in feature space."""
    kernel = solution.kernel
    scores = solution.decision_function(X) - solution.intercept  # ⟨w, φ(x_i)⟩ without bias
    inner, dist_sq = np.empty(X.shape[0]), np.empty(X.shape[0])
    for label in (-1.0, 1.0):
        rows = np.flatnonzero(y == label)
        u, total = weights[rows], weights[rows].sum()
        # ⟨w, φ̄⟩ is the weighted mean score, by linearity.
        inner[rows] = label * (u @ scores[rows] / total - scores[rows])
        if kernel.name == "linear":
            diff = X[rows] - u @ X[rows] / total
            dist_sq[rows] = np.einsum("ij,ij->i", diff, diff)
        else:
            # ‖φ̄ - φ(x_i)‖² = k(x_i,x_i) - 2 r_i/U + Σ_j u_j r_j/U², r_i = Σ_j u_j k(x_i,x_j).
            row_sums = np.empty(rows.size)
            for block_rows, block in iter_kernel_blocks(kernel, X[rows], X[rows]):
                row_sums[block_rows] = block @ u
            dist_sq[rows] = (kernel.diagonal(X[rows]) - 2.0 * row_sums / total
                             + (u @ row_sums) / total**2)
    return inner, np.maximum(dist_sq, 0.0)


def _sqrt_plus(z: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``sqrt(z² + q) + z`` without cancellation when z ≪ 0 (there it is q/(sqrt - z))."""
    root = np.sqrt(z * z + q)
    gap = np.where(z < 0, root - z, 1.0)
    return np.where(z < 0, np.divide(q, gap, out=np.zeros_like(q), where=gap > 0), root + z)


def sensitivity_bounds(X, y, weights, C, solution: SVMSolution, bound: str = "lemma7",
                       xi: float | None = None) -> np.ndarray:
    """Upper bounds ``γ_i`` on each row's sensitivity (Eqn 4) for the weighted SVM of Eqn 2.

    ``bound="lemma7"`` is Eqn 5 (Algorithm 1 line 5), valid when ``solution`` is optimal;
    ``bound="lemma11"`` is Lemma 11 for a ξ-approximate solution (``xi`` defaults to the
    solution's duality gap), which needs ``ξ < f(P, ŵ)/2``. Both classes must be present.
    """
    X, y, weights = check_weighted_data(X, y, weights)
    C = _check_positive(C, "C")
    _check_bound(bound)
    class_weight = {label: weights[y == label].sum() for label in (-1.0, 1.0)}
    if min(class_weight.values()) <= 0:
        raise ValueError("sensitivity bounds (Eqn 5) need both classes with positive weight.")
    total_weight = weights.sum()
    own = np.where(y > 0, class_weight[1.0], class_weight[-1.0])
    k_over_c = (total_weight - own) / (2.0 * total_weight * own) / C  # K_{y_i}/C, Eqn 8
    inner, dist_sq = _class_geometry(X, y, weights, solution)
    f_value = solution.objective
    if bound == "lemma7":
        scale, spread = f_value, 2.0 * f_value
    else:
        xi = solution.duality_gap if xi is None else float(xi)
        scale = f_value - 2.0 * xi
        if not (xi >= 0 and scale > 0):
            raise ValueError(f"Lemma 11 needs 0 <= xi < f(P, w)/2 = {f_value / 2:.6g}, got "
                             f"xi={xi!r}; solve more accurately (smaller tol) or use 'lemma7'.")
        spread = 4.0 * scale
    return weights / own + C * weights / (2.0 * scale) * _sqrt_plus(inner - k_over_c,
                                                                    spread * dist_sq)


# ---------------------------------------------------------------- sampling (lines 7-12)
@dataclass
class WeightedCoreset:
    """Rows, labels ±1, weights ``v`` and row ids (as given to :func:`build_coreset`).

    ``total_sensitivity`` is ``t`` of the last reduction (nan if none); ``bound`` names the
    sampling distribution: 'lemma7', 'lemma11', 'uniform' (∝ u_i) or 'exact' (not sampled).
    """

    X: np.ndarray
    y: np.ndarray
    weights: np.ndarray
    indices: np.ndarray
    total_sensitivity: float = float("nan")
    bound: str = "exact"

    def __len__(self) -> int:
        return self.X.shape[0]

    def union(self, other: "WeightedCoreset") -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                      np.ndarray]:
        """``(X, y, weights, indices)`` of both: a coreset of the union of their inputs."""
        return (np.vstack([self.X, other.X]), np.concatenate([self.y, other.y]),
                np.concatenate([self.weights, other.weights]),
                np.concatenate([self.indices, other.indices]))


def _check_indices(indices, n: int) -> np.ndarray:
    indices = np.arange(n) if indices is None else np.asarray(indices).ravel()
    if indices.shape != (n,) or indices.dtype.kind not in "iu":
        raise ValueError(f"indices must be {n} integers (one id per row), got "
                         f"{indices.shape[0]} of dtype {indices.dtype}.")
    return indices.astype(np.int64)


def sample_coreset(X, y, weights, sensitivities, size, seed=0, indices=None,
                   bound: str = "lemma7") -> WeightedCoreset:
    """Algorithm 1 lines 6-12: ``m = size`` multinomial draws ∝ ``γ``, weights ``t K u/(γ m)``.

    Rows drawn several times appear once with their count folded into the weight. Rows with
    ``γ_i = 0`` (zero weight) are never drawn. ``seed``: an int or a sequence of ints.
    """
    X, y, weights = check_weighted_data(X, y, weights)
    size, indices = _check_size(size), _check_indices(indices, X.shape[0])
    gamma = np.asarray(sensitivities, dtype=np.float64).ravel()
    if gamma.shape != weights.shape:
        raise ValueError(f"sensitivities must hold one value per row ({weights.size}), "
                         f"got {gamma.size}.")
    bad = np.flatnonzero(~np.isfinite(gamma) | (gamma < 0) | ((gamma == 0) & (weights > 0)))
    if bad.size:
        raise ValueError("sensitivities must be finite, and positive wherever the weight is "
                         f"positive; {describe_rows(bad)} are not.")
    t = float(gamma.sum())
    counts = np.random.default_rng(seed).multinomial(size, gamma / t)
    chosen = np.flatnonzero(counts)
    v = t * counts[chosen] * weights[chosen] / (gamma[chosen] * size)
    return WeightedCoreset(X[chosen], y[chosen], v, indices[chosen], t, bound)


def uniform_coreset(X, y, size, weights=None, seed=0, indices=None) -> WeightedCoreset:
    """The uniform baseline: draws ∝ ``u_i`` (uniform for unit weights), same estimator."""
    X, y, weights = check_weighted_data(X, y, weights)
    return sample_coreset(X, y, weights, weights, size, seed, indices, "uniform")


@dataclass(frozen=True)
class ReductionSettings:
    """How Algorithm 1 reduces a chunk: line 1's weighted SVM with ``kernel`` (a resolved
    :class:`Kernel`, numeric gamma, the same for every chunk; None: linear) solved by libsvm to
    ``tol`` with a ``cache_mb`` kernel cache, and the sensitivity ``bound`` of lines 2-6
    ('lemma7': Eqn 5; 'lemma11': Lemma 11)."""

    kernel: Kernel | None = None
    bound: str = "lemma7"
    tol: float = 1e-5
    cache_mb: float = 200.0


def build_coreset(X, y, size, C, weights=None, seed=0, indices=None,
                  reduction: ReductionSettings | None = None) -> WeightedCoreset:
    """Algorithm 1 on one chunk: solve, bound sensitivities (Eqn 5 or Lemma 11), sample, as
    ``reduction`` (default ``ReductionSettings()``) says.

    ``size`` is the number of draws ``m``; ``indices`` the rows' ids (default 0..n-1). A chunk
    with at most ``m`` positive-weight rows is returned as it is (its own exact coreset). A
    chunk holding one class has no finite bound (``f* = 0``, the weighted SVM is degenerate),
    so it is sampled ∝ ``u_i`` instead ('uniform'); merging it with other chunks brings the
    bound back.
    """
    X, y, weights = check_weighted_data(X, y, weights)
    size, C = _check_size(size), _check_positive(C, "C")
    reduction = reduction or ReductionSettings()
    bound = reduction.bound
    _check_bound(bound)
    indices, keep = _check_indices(indices, X.shape[0]), np.flatnonzero(weights > 0)
    X, y, weights, indices = X[keep], y[keep], weights[keep], indices[keep]
    if X.shape[0] <= size:
        return WeightedCoreset(X, y, weights, indices)
    if np.all(y == y[0]):
        return sample_coreset(X, y, weights, weights, size, seed, indices, "uniform")
    solution = solve_weighted_svm(X, y, weights, C, reduction.kernel, reduction.tol,
                                  reduction.cache_mb)
    gamma = sensitivity_bounds(X, y, weights, C, solution, bound)
    return sample_coreset(X, y, weights, gamma, size, seed, indices, bound)


def _as_coreset(item, offset: int) -> WeightedCoreset:
    if isinstance(item, WeightedCoreset):
        return item
    if not isinstance(item, (tuple, list)) or len(item) not in (3, 4):
        raise ValueError("a coreset must be a WeightedCoreset or a tuple (X, y, weights[, "
                         f"indices]), got {type(item).__name__}.")
    X, y, weights = check_weighted_data(*item[:3])
    ids = item[3] if len(item) == 4 else np.arange(offset, offset + X.shape[0])
    return WeightedCoreset(X, y, weights, _check_indices(ids, X.shape[0]))


def merge_and_reduce(coresets, size, C, seed=0,
                     reduction: ReductionSettings | None = None) -> WeightedCoreset:
    """Reduce per-chunk coresets to one of ``size`` draws by pairwise merging (Sec. 4.2).

    Level by level, coresets 2j and 2j+1 are concatenated and reduced with Algorithm 1 on
    their weighted union (seed ``[seed, level, j]``, as ``reduction`` says); an odd one out moves up unchanged. Items
    are :class:`WeightedCoreset` or tuples ``(X, y, weights[, indices])``; tuples without
    indices get their row numbers in the concatenation of all items, in order. The result is
    finally reduced once more if it still holds more than ``size`` rows.
    """
    size, C = _check_size(size), _check_positive(C, "C")
    current, offset = [], 0
    for item in coresets:
        current.append(_as_coreset(item, offset))
        offset += len(current[-1])
    widths = sorted({c.X.shape[1] for c in current})
    if len(widths) != 1:
        raise ValueError("merge_and_reduce needs at least one coreset, all with the same "
                         f"number of columns; got column counts {widths}.")

    def reduce(X, y, weights, indices, level, j):
        return build_coreset(X, y, size, C, weights, _child_seed(seed, level, j), indices,
                             reduction)

    level = 0
    while len(current) > 1:
        merged = [reduce(*current[j].union(current[j + 1]), level, j // 2)
                  for j in range(0, len(current) - 1, 2)]
        current, level = merged + current[len(merged) * 2:], level + 1  # odd one moves up
    final = current[0]
    if len(final) > size:
        final = reduce(final.X, final.y, final.weights, final.indices, level, 0)
    return final
