"""Hyperparameter search for ODM on one partition; pure numpy, no Spark.

ODM has four hyperparameters (docs/design.md §1): the kernel width γ, λ, θ and v. A grid point
is (γ multiple, λ, θ, v); γ is given as a multiple of the fit's resolved γ ("scale" by default),
so one grid serves data of any scale. SODM's top level cuts the data into many small
partitions that each look like the whole (SODM paper, Eqns 7-8), so the search runs there:
every partition solves its local ODM (Eqn 1 with the partition's m, the block-diagonal
problem of Eqn 4) for every grid point, and a grid point's score on the validation rows is
the accuracy (or the fit's metric, :mod:`.metrics`) of the sum of the partitions' decision
functions — exactly the model the top level of a fit with that point would define, scored as
the job's automatic stopping scores a level.

Per partition the work is shared: the kernel matrix is computed once (one GEMM) and every
further γ multiple of the RBF and Laplacian kernels is an element-wise power of it
(exp(-sγ·d) = exp(-γ·d)^s); the duals are warm-started along increasing λ for each (γ, θ, v)
(the optimum moves continuously with λ). Every dual is strongly convex, so warm starts change
the sweeps, not the solution: each point's scores equal a cold solve's up to the violation
bound.
"""
from __future__ import annotations

import itertools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
import scipy.sparse

from ..core import defaults
from ..core.kernels import Kernel, operand_rows
from ..core.sparse_rows import as_float_rows
from ..core.validation import check_odm_params
from ..core.weights import combined_weights
from .metrics import Evaluation, paired_difference, score_of
from ..solvers.dcd_settings import GivenKernel
from ..solvers.local_solve import LocalSolve, expansion_coefficients
from ..solvers.kernel_rows import full_q_matrix, signed_kernel

# γ as multiples of "scale" (1/(d·Var x)) two octaves around it; λ over the decades where
# accuracy moves on real data (the linear path is flat from 100 up, docs/jobs.md "λ for the
# linear path"; the kernel path rises up to 1e5 on Fashion-MNIST); θ and v at the paper's small
# and large settings.
DEFAULT_GAMMA_SCALES = (0.5, 1.0, 2.0)
DEFAULT_LAMS = (1e3, 1e4, 1e5)
DEFAULT_THETAS = (0.1, 0.3)
DEFAULT_VS = (0.2, 0.8)
# The search a job runs when no hyperparameter is given (jobs/train_sodm.py): γ and λ, where
# the best values differ most between data sets (docs/jobs.md, "Default hyperparameters"), on a
# sample of the top level's partitions holding about SEARCH_SAMPLE_ROWS rows. Its default
# point is kept unless another beats it significantly on the validation rows: a search on
# 1,000 rows is noisy (docs/jobs.md, "Choosing hyperparameters").
DEFAULT_SEARCH_GRID_TEXT = "gamma=1,2 lam=1e3,1e4,1e5,1e6 theta=0.1 v=0.2"
SEARCH_SAMPLE_ROWS = 20_000
# A partition larger than this is searched as seeded disjoint pieces of this many of its rows
# (search_subsets; partitions are strata of the whole, and so is a uniform subset of one). On
# 600,000 deformed Fashion-MNIST rows the search chose the same point (γ × 2, λ = 1e6) on pieces
# of 2,500 rows of 22,186-row partitions in 8-10 s as on 2 whole ones in 126.5 s.
SEARCH_PARTITION_ROWS = 2_500
# The search solves each point to this multiple of the fit's violation bound (SODMParams.tol,
# LocalSolve.violation_tol): it only needs the sign of f on the validation rows. Measured on 36
# points of a 2,186-row Fashion-MNIST partition (the 0-4 vs 5-9 task): 10× the bound took 40%
# fewer sweeps, and the same validation accuracy on 34 points (the other two one row apart).
SEARCH_TOL_FACTOR = 10.0
MAX_SEARCH_TOL = 1e-2  # the fit's own default: no looser than what was measured
GRID_KEYS = ("gamma", "lam", "theta", "v")


@dataclass(frozen=True)
class GridPoint:
    gamma_scale: float  # multiple of the fit's resolved kernel γ
    lam: float
    theta: float
    v: float

    def to_dict(self) -> dict:
        return {"gamma_scale": self.gamma_scale, "lam": self.lam, "theta": self.theta,
                "v": self.v}


DEFAULT_SEARCH_POINT = GridPoint(gamma_scale=defaults.SEARCH_GAMMA_SCALE, lam=defaults.SEARCH_LAM,
                                 theta=defaults.THETA, v=defaults.V)


@dataclass(frozen=True)
class ParamGrid:
    """The values searched for each hyperparameter (their product is the grid)."""

    gamma_scales: tuple = DEFAULT_GAMMA_SCALES
    lams: tuple = DEFAULT_LAMS
    thetas: tuple = DEFAULT_THETAS
    vs: tuple = DEFAULT_VS

    def validate(self, kernel_name: str = "rbf") -> None:
        for name, values in zip(GRID_KEYS, self._lists()):
            if len(values) == 0:
                raise ValueError(f"the grid gives no value for {name}; give at least one "
                                 f"(for example {name}={_example(name)}).")
            if len(set(values)) != len(values):
                raise ValueError(f"the grid repeats a value of {name}: {list(values)}.")
        for scale in self.gamma_scales:
            if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
                raise ValueError(f"gamma multiples must be positive numbers, got {scale!r}.")
        if kernel_name == "linear" and tuple(self.gamma_scales) != (1.0,):
            raise ValueError("the linear kernel has no γ: leave gamma out of the grid.")
        for lam, theta, v in itertools.product(self.lams, self.thetas, self.vs):
            check_odm_params(lam, theta, v)

    def _lists(self):
        return (self.gamma_scales, self.lams, self.thetas, self.vs)

    def points(self) -> list[GridPoint]:
        """Every grid point in solve order: γ multiples ascending, then θ, v, and λ ascending
        innermost (the warm-start path)."""
        return [GridPoint(float(s), float(lam), float(theta), float(v))
                for s in sorted(self.gamma_scales) for theta in self.thetas for v in self.vs
                for lam in sorted(self.lams)]

    def __len__(self) -> int:
        return math.prod(len(values) for values in self._lists())

    def to_dict(self) -> dict:
        return {name: [float(x) for x in values] for name, values in
                zip(GRID_KEYS, self._lists())}

    @classmethod
    def from_dict(cls, data: dict) -> "ParamGrid":
        unknown = sorted(set(data) - set(GRID_KEYS))
        if unknown:
            raise ValueError(f"unknown grid keys {unknown}; known: {', '.join(GRID_KEYS)}.")
        defaults = cls()
        return cls(*(tuple(float(x) for x in data[name]) if name in data else default
                     for name, default in zip(GRID_KEYS, defaults._lists())))

    @classmethod
    def parse(cls, text: str) -> "ParamGrid":
        """``"gamma=0.5,1,2 lam=1e3,1e4 theta=0.1 v=0.2,0.8"`` (keys left out keep their
        defaults; spaces or semicolons between keys)."""
        data = {}
        for item in text.replace(";", " ").split():
            name, sep, values = item.partition("=")
            if not sep:
                raise ValueError(f"grid item {item!r} is not key=v1,v2,...; for example "
                                 "'lam=1e3,1e4 theta=0.1,0.3'.")
            try:
                data[name.strip()] = [float(x) for x in values.split(",") if x.strip()]
            except ValueError:
                raise ValueError(f"grid item {item!r}: the values must be numbers.") from None
        return cls.from_dict(data)


def _example(name: str) -> str:
    return {"gamma": "0.5,1,2", "lam": "1e3,1e4,1e5", "theta": "0.1,0.3", "v": "0.2,0.8"}[name]


def _scaled_kernels(kernel: Kernel, scales, X: np.ndarray, X_val: np.ndarray):
    """(scale, kernel at scale·γ, m×m float32 kernel matrix, n_val×m validation block) for
    each γ multiple, computing the matrices once when the kernel allows (module docstring)."""
    base = replace(kernel, offset=0.0)  # the offset is added after the power
    first_K: np.ndarray | None = None
    first_val: np.ndarray | None = None
    for scale in sorted(scales):
        scaled = replace(kernel, gamma=kernel.gamma * scale)
        if first_K is None or not kernel.gamma_scales_as_power:
            first_scale = scale
            plain = replace(base, gamma=kernel.gamma * scale)
            first_K = full_q_matrix(plain, X, None)  # the m×m kernel matrix, float32
            first_val = plain.block(as_float_rows(X_val, np.float32),
                                    operand_rows(X, np.float32, scipy.sparse.issparse(X_val)),
                                    out=np.empty((X_val.shape[0], X.shape[0]), np.float32))
            K, K_val = first_K.copy(), first_val.copy()
        else:
            assert first_val is not None  # computed with first_K
            ratio = scale / first_scale
            K = np.power(first_K, np.float32(ratio))
            K_val = np.power(first_val, np.float32(ratio))
        if kernel.offset:
            K += np.float32(kernel.offset)
            K_val += np.float32(kernel.offset)
        yield scale, scaled, K, K_val


class GridPoints(Protocol):
    """What :func:`search_partition` reads of a grid: a :class:`ParamGrid`, or the points of
    the search's second round (``spark.tune.PointList``)."""

    @property
    def gamma_scales(self) -> Sequence[float]: ...

    def points(self) -> list[GridPoint]: ...


@dataclass(frozen=True)
class PointSolve:
    """How :func:`search_partition` solves each grid point's local ODM (as
    :class:`~sodm_spark.solvers.local_solve.LocalSolve` does): until its largest
    projected-gradient violation is at most ``violation_tol`` (or ``max_iter`` sweeps), on
    ``device`` (``gpu_index``: the GPU of a task)."""

    violation_tol: float = 1e-3
    max_iter: int = 1000
    device: str = "auto"
    gpu_index: int | None = None


def search_partition(X, y, X_val, kernel: Kernel, grid: GridPoints, *, n_classes: int = 0,
                     seed=0, class_weights=None, row_weights=None,
                     solving: PointSolve = PointSolve()):
    """Solve one partition's local ODM for every grid point and return its share of the
    validation decision values.

    ``y`` is ±1 (binary) or class numbers in [0, n_classes) (one-vs-rest duals of every class,
    solved together); ``X_val`` the validation rows; every point is solved as ``solving``
    says (:class:`PointSolve`), its rows weighted by ``class_weights`` (one per class, coded
    order) times ``row_weights`` (a weight column's, one per row of ``X``; None: unweighted).
    Returns (points, scores, stats): scores (n_points, n_val) or (n_points, n_val, C) in
    float64 — summed over partitions they are the top level's f — and per point a dict of
    sweeps, objective, convergence, seconds and visits of a row
    (:attr:`~sodm_spark.solvers.local_solve.LocalSolution.visits_per_row`).
    """
    X = as_float_rows(X, np.float64)  # dense, or CSR (sparse_rows)
    X_val = as_float_rows(X_val, np.float64)
    y = np.asarray(y, dtype=np.float64)
    # the rows in one seeded random order for every point (the solver's tiles are groups of
    # neighbours), so that each γ multiple's Q = diag(y) K diag(y) is built once and every
    # binary solve reads it as it is
    order = np.random.default_rng([*np.atleast_1d(seed).tolist(), 71]).permutation(X.shape[0])
    X, y = X[order], y[order]
    weights = combined_weights(None if row_weights is None else np.asarray(row_weights)[order],
                               class_weights, y)
    points = grid.points()
    n_val, m = X_val.shape[0], X.shape[0]
    scores = np.zeros((len(points), n_val) + ((n_classes,) if n_classes else ()))
    stats = []
    index = 0
    for scale, scaled, K, K_val in _scaled_kernels(kernel, grid.gamma_scales, X, X_val):
        signed_q = None if n_classes else signed_kernel(K, y)
        # (θ, v) -> (λ, γ) of the last λ solved
        warm: dict[tuple[float, float], tuple[float, np.ndarray]] = {}
        first, coefficients = index, []
        for point in [p for p in points if p.gamma_scale == scale]:
            start = time.perf_counter()
            previous = None
            if (point.theta, point.v) in warm:
                # |γ| grows with λ (linearly while the m·c diagonal dominates, then slower):
                # scaled by sqrt of the λ ratio, λ = 1e5 from 1e4 took 15-20% fewer sweeps
                # than the unscaled γ on 2,200 Fashion-MNIST rows
                last_lam, last_gamma = warm[(point.theta, point.v)]
                previous = last_gamma * math.sqrt(point.lam / last_lam)
            solve = LocalSolve(point.lam, point.theta, point.v,
                               violation_tol=solving.violation_tol, max_iter=solving.max_iter,
                               device=solving.device)
            result = solve.solve(X, y, scaled, n_classes, warm_start=previous,
                                 seed=[*np.atleast_1d(seed).tolist(), index],
                                 given=GivenKernel(kernel_values=K if n_classes else None,
                                                   signed_q=signed_q),
                                 weights=weights, gpu_index=solving.gpu_index)
            warm[(point.theta, point.v)] = (point.lam, result.gamma)
            coefficients.append(expansion_coefficients(y, result.gamma))
            stats.append({"sweeps": int(result.n_sweeps), "objective": float(result.objective),
                          "converged": bool(result.converged),
                          "seconds": time.perf_counter() - start,
                          "visits": result.visits_per_row})
            index += 1
        if m and coefficients:  # every point's share of f in one float32 GEMM
            shares = np.tensordot(K_val, np.stack(coefficients, axis=1).astype(np.float32),
                                  axes=([1], [0]))  # (n_val, points[, C])
            scores[first:index] = np.moveaxis(shares, 1, 0)
    return points, scores, stats


def search_sample(n_partitions: int, rows_per_partition: int, cores: int, seed: int) -> list:
    """A seeded sample of top-level partition keys holding about :data:`SEARCH_SAMPLE_ROWS`
    rows once each is cut to :data:`SEARCH_PARTITION_ROWS` (at least one partition per core, at
    most all of them)."""
    searched = min(max(1, rows_per_partition), SEARCH_PARTITION_ROWS)
    wanted = max(cores, -(-SEARCH_SAMPLE_ROWS // searched))
    if wanted >= n_partitions:
        return list(range(n_partitions))
    keys = np.random.default_rng([seed, 23]).choice(n_partitions, wanted, replace=False)
    return sorted(int(key) for key in keys)


def search_pieces(n_keys: int, rows_per_partition: int) -> int:
    """Disjoint pieces of :data:`SEARCH_PARTITION_ROWS` rows searched in each of ``n_keys``
    sampled partitions, so that the sample holds about :data:`SEARCH_SAMPLE_ROWS` rows even
    when the partitions are few and large (one partition of 60,000 rows: 8 pieces)."""
    most = max(1, rows_per_partition // SEARCH_PARTITION_ROWS)
    return min(most, max(1, -(-SEARCH_SAMPLE_ROWS // (max(1, n_keys) * SEARCH_PARTITION_ROWS))))


def search_subsets(n_rows: int, max_rows: int | None, pieces: int, seed, key: int) -> list:
    """The rows (sorted positions) a partition of ``n_rows`` is searched on: all of them when it
    is not larger than ``max_rows``, else ``pieces`` disjoint seeded uniform subsets of
    ``max_rows`` (at most as many as it holds), the same in a retried task. Each is searched as
    a partition of its own (its f summed with the others')."""
    if not max_rows or n_rows <= max_rows:
        return [np.arange(n_rows)]
    rng = np.random.default_rng([*np.atleast_1d(seed).tolist(), 89, key])
    order = rng.permutation(n_rows)
    return [np.sort(order[i * max_rows:(i + 1) * max_rows])
            for i in range(max(1, min(pieces, n_rows // max_rows)))]


def significantly_better(candidate, reference) -> bool:
    """Whether the model right on rows ``candidate`` beats the one right on ``reference`` by
    more than chance on the same rows: McNemar's test at about two standard errors. Only the
    rows the two disagree on tell them apart (b: candidate right, c: reference right), and
    b − c has a standard deviation of √(b + c) when both are equally good: a gain of 5 rows
    is noise when 25 rows disagree (2√25 = 10), and real when 5 do. Two
    :class:`~.metrics.Evaluation` of another metric: its paired gain above two of its
    standard errors (:func:`~.metrics.paired_difference`)."""
    if isinstance(candidate, Evaluation) or isinstance(reference, Evaluation):
        gain, stderr = paired_difference(reference, candidate)
        return gain > 2.0 * stderr
    b = int(np.sum(candidate & ~reference))
    c = int(np.sum(~candidate & reference))
    return b - c > 2.0 * math.sqrt(b + c)


def best_point(accuracies, sweeps=None) -> int:
    """Index of the highest validation accuracy. Ties (common: 1,000 validation rows score in
    steps of 0.1 points) go to the fewest sweeps — the point whose levels will solve fastest —
    then to the earliest point in grid order."""
    accuracies = np.asarray(accuracies, dtype=np.float64)
    tied = np.flatnonzero(accuracies == accuracies.max())
    if sweeps is None:
        return int(tied[0])
    sweeps = np.asarray(sweeps)
    return int(tied[np.argmin(sweeps[tied])])  # argmin keeps the earliest among equal sweeps


def choose_point(judged: list, sweeps=None, default: int | None = None,
                 values=None) -> int:
    """Index of the point a search takes, from how the validation rows judge each point
    (``judged``: per-row correctness, accuracy, or an :class:`~.metrics.Evaluation` by the
    fit's metric): the highest by the metric (``values``, oriented: higher is better; by
    default from ``judged``), ties as :func:`best_point` breaks them; the ``default`` point
    (an index) unless that one is :func:`significantly_better` than it."""
    if values is None:
        values = [score_of(entry) for entry in judged]
    best = best_point(values, sweeps)
    if default is not None and not significantly_better(judged[best], judged[default]):
        return default
    return best
