"""Compact kernel models by reduced-set projection; pure numpy, no Spark.

ODM duals are dense, so a SODM model keeps most training rows. A model
``f = Σ_i α_i k(x_i, ·)`` (one column of α per output) is replaced by
``f̃ = Σ_j β_j k(z_j, ·)`` over at most N points z, with β the RKHS least-squares projection
of f onto span{k(z_j, ·)}: minimizing ‖f − f̃‖²_H gives ``K_ZZ β = K_ZX α``, and
``K_ZX α`` is f evaluated at the z (one pass of the model over N rows). A small ridge
(relative to the kernel's diagonal) keeps the Cholesky of K_ZZ stable. With ``fit="data"``
β is instead the least-squares fit of f on a sample of rows (:func:`fit_coefficients`: the
normal equations for small fits, preconditioned conjugate gradients for large ones).

Rows of many features are first projected onto their top principal directions
(:func:`principal_projection`): the compressed model's kernel then takes r = 100 inputs, not
d, so a point costs r instead of d multiply-adds a row, and the projection removes the
directions of pixel noise (measured beside :data:`PROJECTION_COMPONENTS`). The z are chosen
among the support vectors by

* ``random``: a seeded sample of the support vectors (as good as k-means centres at scale, and
  free; the measurements are beside :data:`KMEANS_CANDIDATES`);
* ``landmarks``: Eqn (8)'s greedy determinant maximization (pivoted incomplete Cholesky, as
  the strata use) on the support vectors — spread over the data in the RKHS;
* ``largest``: the rows with the largest |α| (summed over outputs);
* ``kmeans``: k-means centres of the support vectors (points of input space, not rows).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np
import scipy.linalg
import scipy.sparse

from ..core.kernels import decision_values, kernel_matrix
from ..core.labels import labels_from_scores
from ..core.resources import available_memory_mb
from ..core.sparse_rows import as_float_rows
from ..partition import kmeans, select_landmarks
from .expansion import InputMap, KernelExpansion
from .input_projection import principal_directions

METHODS = ("random", "landmarks", "largest", "kmeans")
#: Why k-means compression refuses a model of sparse rows, and what to use instead.
SPARSE_KMEANS = ("compression method 'kmeans' places its points at k-means centres, which for "
                 "sparse rows are dense vectors of every feature; use 'random' or 'landmarks' "
                 "(points among the support vectors, kept sparse)")
FITS = ("data", "rkhs")
# "data" fits f on a seeded sample of the support vectors, FIT_ROWS_PER_POINT per point and at
# least FIT_ROWS. On 600,000 deformed Fashion-MNIST rows (a model of 338,829 SVs, test accuracy
# 0.9791), 5,000 random SVs fitted on 10,000 rows kept 0.9745, on 20,000 rows 0.9767
FIT_ROWS, FIT_ROWS_PER_POINT = 10_000, 4
# A SODM level's compression fits instead each row's own partition's f (times the partition
# count; free in the level's tasks, see sodm_spark.spark.sodm.level_model): LOCAL_FIT_ROWS_PER_POINT
# per point. Six exact ODMs on 22,222 deformed Fashion-MNIST rows each (their sum: test
# accuracy 0.9777), 5,000 random points: whole-model targets on 20,000 rows 0.9759; own-partition
# targets on 20,000 rows 0.9730, 40,000 0.9757, 60,000 0.9767. Twenty-seven exact ODMs on
# 21,481 rows each (their sum: 0.9790 test, 0.9724 on 20,000 held-out deformed rows), 8,000
# points projected on 100 components: 60,000 rows 0.9773 test, 120,000 rows 0.9790 / 0.9780
# (two draws; held-out 0.9714 / 0.9720): more points need more rows. In the job at 600,000
# rows, 20 rows a point (168,000) gave 0.9776 test accuracy against 15's 0.9781-0.9782, in
# 357.7 s against 326-333 s: no gain past 15. Fitting those targets as decisions (each one's sign
# times the median |target|: a partition's noise lives in the magnitudes) gave 0.9787 / 0.9780 /
# 0.9782 in three seeds against 0.9782 / 0.9782 / 0.9781: the median unchanged, not kept. Refitted
# offline from one job's level (beside AUTO_POINTS), held-out / test: 7, 10, 15 rows a point
# 0.9709 / 0.9771, 0.9705 / 0.9775, 0.9716 / 0.9782; the fit's ridge 1e-8, 1e-7, 1e-6 (the
# default), 1e-4, 1e-3: 0.9718, 0.9716, 0.9716, 0.9698, 0.9655 held-out
LOCAL_FIT_ROWS_PER_POINT = 15
# Eqn (8) keeps an n × N factor of the candidates: at most this many support vectors (a
# seeded sample) are candidates, which bounds it at 20,000 × N float64
MAX_CANDIDATES = 20_000
# k-means: centres only need to cover the support vectors, not to converge. On the binary
# Fashion-MNIST model (33,269 SVs → 2,000): 20,000 candidates and 100 iterations 34.5 s, test
# accuracy 0.9749; 10,000 and 5 iterations 16.5 s, 0.9755 (the full model: 0.9768). On the
# 338,829-SV model above, 5,000 centres (10 iterations, 25,000 candidates) kept 0.9770 and took
# 124 s; 5,000 random support vectors kept 0.9767 and took nothing.
KMEANS_CANDIDATES, KMEANS_ITERATIONS = 10_000, 10
#: ``max_sv="auto"``: models of more than AUTO_ABOVE support vectors are compressed to AUTO_POINTS
#: random ones — scoring then costs 2·AUTO_POINTS·r flops a row (r: the kernel's inputs, at most
#: PROJECTION_COMPONENTS for wide rows), not 2·n_sv·d: a 338,829-SV model scores ~330 rows/s on
#: 2 cores at d = 784. On the 27 ODMs above (0.9790 test), with 100 components and 15 rows a
#: point: 5,000 points 0.9774, 6,000 0.9772, 8,000 0.9790 / 0.9780, 10,000 0.9791 (held-out
#: rows 0.9699, 0.9701, 0.9714 / 0.9720, 0.9723 against the sum's 0.9724). In the job at
#: 600,000 rows 10,000 points (157,500 fit rows) took 70.7 s to compress against 8,000's 46.4,
#: scored 9,302 rows/s against 14,985, and gave 0.9773 test accuracy against 0.9782. Refitted
#: offline from one such job's level (338,431 SVs; the 126,009 rows and own-partition targets
#: its tasks returned), three draws each, on 20,000 held-out deformed rows / the test rows:
#: 8,000 points 0.9716, 0.9716, 0.9721 / 0.9782, 0.9772, 0.9781; 10,000 points 0.9728, 0.9724,
#: 0.9725 / 0.9788, 0.9769, 0.9779; 12,000 (one draw) 0.9727 / 0.9786. The held-out gain of
#: 10,000 points (+0.08) does not reach the test rows (mean 0.9779 against 0.9778): kept at 8,000.
AUTO_ABOVE, AUTO_POINTS = 100_000, 8_000
#: Wide rows (radial kernels) are projected onto this many principal directions of the points when
#: they keep PROJECTION_MIN_VARIANCE of the variance. Same 27 ODMs, 5,000 points fitted on 60,000
#: rows: all 784 pixels 0.9759 / 0.9770 test (two draws; held-out 0.9680 / 0.9682), 50 components
#: (88% of the variance) 0.9768 (0.9684), 100 (93%) 0.9775 (0.9703), 200 (97%) 0.9772 (0.9697).
PROJECTION_COMPONENTS, PROJECTION_MIN_VARIANCE = 100, 0.9
#: Largest fit (rows × points²) solved through the normal equations; larger fits run conjugate
#: gradients, which converge in 20-30 steps here (held-out accuracy unchanged after 20; the
#: normal equations of 120,000 rows × 8,000 points are 7.7e12 multiply-adds).
DIRECT_FIT_WORK = 2e11
#: CG keeps K_SZ in float32 (half the memory traffic a step) unless K_ZZ has an eigenvalue below
#: this share of its mean diagonal: float32 entries then leave those directions unresolved and
#: CG diverges (min-max scaled rows of the 12-column table, gamma = 1/(d·var): 2,368 of 4,000
#: points' eigenvalues below 1e-7 of the largest, held-out error 19% against float64's 2.5%;
#: 4,000 deformed Fashion-MNIST points projected on 100 components: the smallest is 0.002).
SINGLE_PRECISION_EIGENVALUE = 1e-4
FIT_ITERATIONS, FIT_TOLERANCE = 40, 3e-4


def most_points(max_sv) -> int | None:
    """The most points ``max_sv`` can compress a model to, whatever its size; None: never."""
    if max_sv is None or max_sv == "none":
        return None
    return AUTO_POINTS if max_sv == "auto" else int(max_sv)


def local_fit_share(max_sv, n_rows: int) -> float:
    """The share of a level's rows whose own partition's scores its tasks keep as a compression's
    fit targets: 0 when ``max_sv`` never compresses a model of ``n_rows`` rows."""
    points = most_points(max_sv)
    if points is None or (max_sv == "auto" and n_rows <= AUTO_ABOVE) or n_rows <= points:
        return 0.0
    return min(1.0, 1.05 * LOCAL_FIT_ROWS_PER_POINT * points / n_rows)


def resolve_max_sv(max_sv, n_support: int) -> int | None:
    """The number of points to compress to: ``max_sv`` ("auto", "none"/None, or N) for a model
    of ``n_support`` support vectors; None to keep the model as it is."""
    if max_sv is None or max_sv == "none":
        return None
    if max_sv == "auto":
        return AUTO_POINTS if n_support > AUTO_ABOVE else None
    if isinstance(max_sv, bool) or int(max_sv) != max_sv or max_sv < 1:
        raise ValueError(f"max_sv must be 'auto', 'none' or a positive integer, got {max_sv!r}.")
    return int(max_sv) if n_support > max_sv else None


def candidates_wanted(method: str, n_points: int) -> int:
    """How many support vectors ``method`` chooses its ``n_points`` points among."""
    if method not in METHODS:
        raise ValueError(f"unknown compression method {method!r}; known: {', '.join(METHODS)}.")
    if method in ("random", "largest"):
        return n_points
    return max(KMEANS_CANDIDATES, 5 * n_points) if method == "kmeans" else MAX_CANDIDATES


def fit_rows_wanted(n_points: int) -> int:
    """Support vectors the data fit samples for ``n_points`` points."""
    return max(FIT_ROWS, FIT_ROWS_PER_POINT * n_points)


def choose_points(candidates: np.ndarray, n_points: int, method: str, kernel,
                  seed: int = 0) -> np.ndarray:
    """The N points (rows) the compressed expansion is built on, among ``candidates`` (a
    seeded sample of the support vectors; for "largest", those with the largest |α|)."""
    if method not in METHODS:
        raise ValueError(f"unknown compression method {method!r}; known: {', '.join(METHODS)}.")
    if method in ("random", "largest") or candidates.shape[0] <= n_points:
        return candidates[:n_points]
    if method == "kmeans":
        if scipy.sparse.issparse(candidates):
            raise ValueError(SPARSE_KMEANS + ".")
        return kmeans(candidates, n_points, seed=seed, max_iter=KMEANS_ITERATIONS)
    return candidates[np.sort(select_landmarks(candidates, kernel, n_points))]


def _candidates(model: KernelExpansion, n_points: int, method: str, seed: int) -> np.ndarray:
    sv = model.support_vectors
    if method == "largest":
        weight = np.abs(model.coef).sum(axis=1)
        return sv[np.sort(np.argsort(-weight, kind="stable")[:n_points])]
    limit = candidates_wanted(method, n_points)
    if sv.shape[0] <= limit:
        return sv
    return sv[np.sort(np.random.default_rng([seed, 12]).choice(sv.shape[0], limit,
                                                               replace=False))]


def principal_projection(sample: np.ndarray, kernel, components: int | None = None,
                         min_variance: float | None = None) -> InputMap | None:
    """The map onto the top ``components`` principal directions (center, components (d, r)) of
    ``sample`` (rows in the kernel's input space), or None when the kernel is not radial, the
    rows have at most 2·``components`` features (projecting them saves little) or the
    directions keep less than ``min_variance`` of the variance (not close to a subspace)."""
    components = components or PROJECTION_COMPONENTS
    min_variance = PROJECTION_MIN_VARIANCE if min_variance is None else min_variance
    if scipy.sparse.issparse(sample):  # sparse rows keep their kernel inputs
        return None
    n, d = sample.shape
    if not kernel.radial or d <= 2 * components or n < 2 * components:
        return None
    center, directions, shares = principal_directions(sample)
    if shares.sum() <= 0 or shares[:components].sum() < min_variance:
        return None
    return InputMap(center=center, components=directions[:, :components].copy())


def fit_coefficients(kernel, points: np.ndarray, rows: np.ndarray, targets: np.ndarray,
                     ridge: float = 1e-6, block_mb: float = 256.0, solver: str = "auto",
                     max_iter: int = FIT_ITERATIONS, tol: float = FIT_TOLERANCE) -> np.ndarray:
    """β of the data fit (module docstring): (K_ZS K_SZ + ρ·K_ZZ) β = K_ZS f(S), ρ = ``ridge``
    relative to the traces; targets (n,) or (n, outputs) give β (N, outputs).

    ``solver="direct"`` forms the N×N normal matrix a block of rows at a time (memory N² plus a
    block, work n·N²) and solves it by Cholesky; ``"cg"`` keeps K_SZ (n × N) and runs
    preconditioned conjugate gradients (:func:`_conjugate_gradients`: work N³ for the
    preconditioner and 2·n·N a step; when K_SZ would take more than half of the memory
    available, evenly spaced rows that fit are used), K_SZ in float32 unless K_ZZ has
    eigenvalues below :data:`SINGLE_PRECISION_EIGENVALUE` of its mean diagonal (then float64).
    ``"auto"`` takes the direct solve while n·N² is at most :data:`DIRECT_FIT_WORK`. A fit
    that comes out non-finite raises instead of giving a model that predicts nothing."""
    targets = np.asarray(targets, dtype=np.float64).reshape(rows.shape[0], -1)
    n, n_points = rows.shape[0], points.shape[0]
    if solver == "auto":
        solver = "direct" if float(n) * n_points ** 2 <= DIRECT_FIT_WORK else "cg"
    if solver not in ("direct", "cg"):
        raise ValueError(f"solver must be 'auto', 'direct' or 'cg', got {solver!r}.")
    gram = kernel_matrix(kernel, points, dtype=np.float64)
    if solver == "cg":
        gram_factor = _cholesky(gram, 1e-7)
        dtype = np.float32 if _smallest_eigenvalue(gram_factor) >= \
            SINGLE_PRECISION_EIGENVALUE * float(np.mean(np.diag(gram))) else np.float64
        # K_SZ is kept: at most half of the memory available, evenly spaced rows beyond
        most = max(n_points, int(available_memory_mb() * 2**20 / 2 /
                                 (np.dtype(dtype).itemsize * n_points)))
        keep = np.linspace(0, n - 1, min(n, most)).astype(np.int64)
        cross = kernel_matrix(kernel, rows[keep], points, dtype=dtype, block_mb=block_mb)
        rho = ridge * float(np.einsum("ij,ij->", cross, cross, dtype=np.float64)) / \
            max(np.trace(gram), 1e-300)
        return _finite(_conjugate_gradients(cross, gram, gram_factor, targets[keep], rho,
                                            max_iter, tol))
    lhs = np.zeros((n_points, n_points))
    rhs = np.zeros((n_points, targets.shape[1]))
    step = max(1, int(block_mb * 2**20 // (8 * max(n_points, 1))))
    for start in range(0, n, step):
        cross = kernel_matrix(kernel, rows[start:start + step], points, dtype=np.float64)
        lhs += cross.T @ cross  # one triangle (syrk) for a product with its own transpose
        rhs += cross.T @ targets[start:start + step]
    lhs += ridge * gram * (np.trace(lhs) / np.trace(gram))
    return _finite(_cholesky_solve(lhs, rhs, 1e-10))


def _finite(beta: np.ndarray) -> np.ndarray:
    if not np.all(np.isfinite(beta)):
        raise FloatingPointError(
            "the compressed model's coefficients came out non-finite (an ill-conditioned "
            "fit); keep every support vector (max_sv=None) or give another max_sv.")
    return beta


def _conjugate_gradients(cross, gram, gram_factor, targets, rho, max_iter, tol):
    """Solve (CᵀC + ρ·G) β = Cᵀt (C = ``cross``, G = ``gram``) by conjugate gradients
    preconditioned with G·((n/N)·G + ρI), the normal matrix as it would be if the N points
    were the rows (they are a sample of them): the preconditioner of Falkon (Rudi, Carratino
    & Rosasco, "FALKON: An optimal large scale kernel method", NeurIPS 2017), applied through
    two Cholesky factors (``gram_factor``: G's). One column of β per output, each with its
    own step sizes; stops when every residual is below ``tol`` relative to its right-hand
    side, or when rounding leaves a direction without positive curvature (the iterate so far
    is kept)."""
    n, n_points = cross.shape
    second = _cholesky(gram, 0.0, rho, scale=n / n_points)

    def precondition(residual):
        solved = scipy.linalg.cho_solve(gram_factor, residual, check_finite=False)
        return scipy.linalg.cho_solve(second, solved, check_finite=False)

    def normal(direction):  # the products with C in its own dtype, sums in float64
        return (cross.T @ (cross @ direction.astype(cross.dtype))).astype(np.float64) + \
            rho * (gram @ direction)

    rhs = (cross.T @ targets.astype(cross.dtype)).astype(np.float64)
    scale = np.maximum(np.linalg.norm(rhs, axis=0), 1e-300)
    beta, residual = np.zeros_like(rhs), rhs.copy()
    preconditioned = precondition(residual)
    direction = preconditioned.copy()
    product = np.sum(residual * preconditioned, axis=0)
    for _ in range(max_iter):
        applied = normal(direction)
        curvature = np.sum(direction * applied, axis=0)
        if not np.all(np.isfinite(curvature) & (curvature > 0)):
            break
        step = product / curvature
        beta += step * direction
        residual -= step * applied
        if np.all(np.linalg.norm(residual, axis=0) <= tol * scale):
            break
        preconditioned = precondition(residual)
        previous, product = product, np.sum(residual * preconditioned, axis=0)
        direction = preconditioned + (product / np.maximum(previous, 1e-300)) * direction
    return beta


def _smallest_eigenvalue(factor, steps: int = 20) -> float:
    """An estimate of the smallest eigenvalue of the matrix whose ``cho_factor`` is ``factor``
    (inverse iteration from a seeded start; converges from above)."""
    vector = np.random.default_rng(0).standard_normal(factor[0].shape[0])
    for _ in range(steps):
        vector = scipy.linalg.cho_solve(factor, vector / np.linalg.norm(vector),
                                        check_finite=False)
    return 1.0 / float(np.linalg.norm(vector))


def _cholesky(matrix, jitter, shift=0.0, scale=1.0):
    """cho_factor of ``scale·matrix + (shift + jitter·mean diagonal)·I`` (the mean diagonal
    of ``scale·matrix``), the jitter raised a hundredfold until the factor exists (a kernel
    matrix of close points is singular in floating point). The product is the one N×N copy
    made, the shift goes on its diagonal: no N×N identity (8,000 points: 0.5 GB and a second
    of page faults each)."""
    diagonal = scale * np.diag(matrix)
    mean_diagonal = float(np.mean(diagonal)) or 1.0
    while True:
        shifted = np.multiply(matrix, scale)
        shifted[np.diag_indices_from(shifted)] = diagonal + (shift + jitter * mean_diagonal)
        try:
            return scipy.linalg.cho_factor(shifted, lower=True, overwrite_a=True,
                                           check_finite=False)
        except np.linalg.LinAlgError:
            jitter = max(jitter * 100.0, 1e-12)
            if jitter > 1.0:
                raise


def _cholesky_solve(lhs, rhs, jitter):
    lhs[np.diag_indices_from(lhs)] += jitter * float(np.mean(np.diag(lhs)))
    factor = scipy.linalg.cho_factor(lhs, lower=True, check_finite=False)
    return scipy.linalg.cho_solve(factor, rhs, check_finite=False)


def compress(model: KernelExpansion, max_sv: int, method: str = "kmeans",
             ridge: float = 1e-6, seed: int = 0, fit: str = "data",
             project: bool = True) -> KernelExpansion:
    """A model over at most ``max_sv`` points approximating ``model``'s decision function
    (module docstring); the model itself when it already has no more.

    ``fit="rkhs"``: β minimizes ‖f − f̃‖ in the RKHS (K_ZZ β = f(Z)). ``fit="data"``: β
    minimizes Σ_s (f(x_s) − f̃(x_s))² over a seeded sample S of the support vectors (the rows
    near the boundary, where predictions are decided), i.e. (K_ZS K_SZ + ridge·K_ZZ) β =
    K_ZS f(S) — the RKHS fit spends its points on directions of the RKHS the data never visit.
    ``ridge`` is relative to the mean diagonal of the matrix solved. ``project`` (data fit
    only): wide rows go through :func:`principal_projection` of the chosen points first.
    """
    if int(max_sv) != max_sv or max_sv < 1:
        raise ValueError(f"max_sv must be a positive integer, got {max_sv!r}.")
    if not (np.isfinite(ridge) and ridge >= 0):
        raise ValueError(f"ridge must be a number >= 0, got {ridge!r}.")
    if fit not in FITS:
        raise ValueError(f"fit must be one of {', '.join(FITS)}, got {fit!r}.")
    if model.support_vectors.shape[0] <= max_sv:
        return model
    points = choose_points(_candidates(model, int(max_sv), method, seed), int(max_sv), method,
                           model.kernel, seed)
    coef = np.asarray(model.coef, dtype=np.float64)
    sv = model.support_vectors  # f in the kernel's input space (any feature scaling applied)
    if fit == "rkhs":
        gram = kernel_matrix(model.kernel, points, dtype=np.float64)
        beta = _cholesky_solve(gram, decision_values(model.kernel, points, sv, coef), ridge)
        return replace(model, support_vectors=points,
                       coef=beta.reshape(points.shape[0], coef.shape[1]))
    n_rows = min(sv.shape[0], fit_rows_wanted(points.shape[0]))
    rows = sv[np.sort(np.random.default_rng([seed, 13]).choice(sv.shape[0], n_rows,
                                                               replace=False))]
    targets = decision_values(model.kernel, rows, sv, coef, dtype=np.float32)
    projection = None
    if project and model.projection_components is None:
        projection = principal_projection(points, model.kernel)
    if projection is not None:
        rows = projection.projected(rows)
    return fitted_model(model, points, rows, targets, ridge, projection)


def fitted_model(model: KernelExpansion, points, rows, targets, ridge: float = 1e-6,
                 projection=None) -> KernelExpansion:
    """``model`` (its kernel, classes and scaling) over ``points`` (in its input space) with
    the coefficients of the data fit of ``targets`` on ``rows``; with a ``projection``
    (:func:`principal_projection`) the points are projected here and stored so, the rows
    must come projected (``projection.projected``), and the model projects its inputs."""
    if projection is not None:
        # the points as they are stored (float32), so that β fits the model that is saved
        points = projection.projected(np.asarray(points, np.float64)).astype(np.float32)
    beta = fit_coefficients(model.kernel, as_float_rows(points, np.float64),
                            as_float_rows(rows, np.float64), targets, ridge)
    compressed = replace(model, support_vectors=points, coef=beta.reshape(points.shape[0], -1))
    if projection is not None:
        compressed = replace(compressed, projection_center=projection.center,
                             projection_components=projection.components)
    return compressed


@dataclass(frozen=True, kw_only=True)
class ScoreComparison:
    """A model's scores f beside its compression's g on one set of rows (docs/design.md §6, step
    8); where f was not scored, only ``accuracy_after`` and ``rows`` are known."""

    accuracy_before: float | None = None
    accuracy_after: float
    relative_rms_error: float | None = None  # ‖g − f‖ / ‖f‖
    max_abs_error: float | None = None  # the largest |g − f|
    predictions_changed: float | None = None  # the share of rows whose prediction changed
    rows: int

    def to_dict(self) -> dict:
        """The figures measured, in the order the metrics JSON has always written them."""
        return {name: value for name, value in asdict(self).items() if value is not None}


def compare(original: KernelExpansion, compressed: KernelExpansion, X, y) -> dict:
    """Both models' :func:`compare_scores` on (X, y) and their support vectors, as a dict."""
    return {**compare_scores(original.decision_function(X), compressed.decision_function(X), y,
                             original.classes).to_dict(),
            "support_vectors_before": int(original.support_vectors.shape[0]),
            "support_vectors_after": int(compressed.support_vectors.shape[0])}


def compare_scores(f, g, y, classes) -> ScoreComparison:
    """The scores ``f`` (the model) and ``g`` (its compression) against the raw labels ``y``."""
    f, g, y = np.asarray(f, dtype=np.float64), np.asarray(g, dtype=np.float64), np.asarray(y)
    before, after = labels_from_scores(f, classes), labels_from_scores(g, classes)
    return ScoreComparison(
        accuracy_before=float(np.mean(before == y)), accuracy_after=float(np.mean(after == y)),
        relative_rms_error=float(np.linalg.norm(g - f) / max(float(np.linalg.norm(f)), 1e-300)),
        max_abs_error=float(np.max(np.abs(g - f))) if f.size else 0.0,
        predictions_changed=float(np.mean(before != after)), rows=int(y.size))
