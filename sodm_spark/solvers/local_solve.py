"""One local ODM solve: its settings (:class:`LocalSolve`) and the one choice of solver
(:meth:`LocalSolve.solve`; docs/design.md §1.3, §2.4).

A local problem is the dual of Eqn 1 on m rows with the rows' own m·c: a partition's at a
level of SODM (the block-diagonal problem of Eqn 4), one partition's during a search, or the
whole data's in :class:`~sodm_spark.estimators.sklearn.ODMClassifier`. Its settings are one
frozen record of plain values, built where the user's settings are read
(``SODMParams.local_solve``, the estimator's ``fit``) and sent to Spark tasks as it is, so that
``lam`` can be followed from a job's flag to the solver call by name.

Which solver runs is decided here alone, for the estimator, the levels' tasks and the search:
two classes are one binary dual (:func:`~.odm_dcd.solve_odm_dual`); three or more are the
one-vs-rest duals of every class, solved together against one kernel matrix
(:func:`~.odm_multiclass.solve_odm_multiclass`) when that matrix is given or fits the kernel
cache, else one binary solve per class with kernel rows on demand.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..core.array_namespace import check_device, resolve_device
from ..core.labels import plus_minus
from ..core.validation import check_odm_params, check_positive_int
from ..core.sparse_rows import memory_width
from .dcd_settings import (NO_GIVEN_KERNEL, DCDSettings, GivenKernel,
                           ODMHyperparameters)
from .kernel_rows import FIXED_POINT, kernel_fits_cache
from .odm_dcd import DCDResult, solve_odm_dual
from .odm_multiclass import one_vs_rest_signs, solve_odm_multiclass


def expansion_coefficients(y, gamma):
    """The kernel expansion's coefficients: γ_i y_i (binary: γ (m,), y ±1) or γ_ic s_ic with
    s_ic = ±1 class c against the rest (γ (m, C), y the class numbers): (m,) or (m, C)."""
    if gamma.ndim == 1:
        return gamma * y
    return gamma * one_vs_rest_signs(np.asarray(y).astype(np.int64), gamma.shape[1])


@dataclass
class LocalSolution:
    """What :meth:`LocalSolve.solve` returns: one binary dual, or the C one-vs-rest duals."""

    gamma: np.ndarray  # γ = ζ - β: (m,) binary, (m, C) one column per class
    u: np.ndarray  # Qγ (per class Q_c γ_c), of γ's shape
    objective: float  # the dual objective of Eqn 1, summed over the classes
    objectives: np.ndarray  # each output's objective: one for binary, one per class
    sweeps: np.ndarray  # each output's sweeps (a joint solve's count for every class)
    kernel_mode: str  # 'cached', or 'blocked' when any solver call computed rows on demand
    runs: list  # the solver calls' own results, in order: DCDResult or MulticlassDCDResult
    storage: str = "float32"  # the dtype the kernel values were kept in ('int16': fixed point)

    @property
    def n_sweeps(self) -> int:
        """The most sweeps any solver call ran."""
        return max(run.n_sweeps for run in self.runs)

    @property
    def violation(self) -> float:
        """The largest projected-gradient violation left, over every output."""
        return max(run.violation for run in self.runs)

    @property
    def converged(self) -> bool:
        """Whether every solver call met ``violation_tol`` within ``max_iter`` sweeps."""
        return all(run.converged for run in self.runs)

    @property
    def visits_per_row(self) -> float | None:
        """The rows the coordinate descent visited over its sweeps, per row and solver call
        (shrinking visits only the active rows); None when a call counted none (the joint
        multi-class solve, the device path)."""
        counted = [run.visits for run in self.runs if isinstance(run, DCDResult)]
        if not counted or len(counted) < len(self.runs):
            return None
        return float(np.mean(counted)) / max(1, self.gamma.shape[0])

    @property
    def warm_start_violation(self) -> float:
        """The largest violation of the first sweep (at the warm start): at most
        ``violation_tol`` means the warm start was already optimal."""
        return max(run.history[0] if run.history else 0.0 for run in self.runs)


@dataclass(frozen=True)
class LocalSolve:
    """The problem (λ, θ, v of Eqn 1) and how the dual coordinate descent runs on it."""

    lam: float
    theta: float
    v: float
    # DCD stops when the largest projected-gradient violation over all rows is at most this
    # (ODMProblem.violation; the solvers' ``tol``)
    violation_tol: float = 1e-3
    max_iter: int = 1000  # most sweeps over the rows
    # kernel cache (MB): the whole matrix when it fits, else rows on demand behind an LRU
    # cache; None: what the machine has available when the solve starts
    cache_mb: float | None = None
    # of the cached kernel values (γ and u are always float64): "float32", "float64", or
    # "int16", fixed point at half float32's memory where the solver allows it (a binary or
    # per-class solve with the whole Q cached, kernel_rows.FIXED_POINT; float32 elsewhere)
    dtype: str = "float32"
    # where the solve runs (docs/design.md §2.10): "auto" the GPU Spark gave the task when
    # there is one, else the numba dual coordinate descent; "cpu" and "gpu" the device path
    # (the finite Newton solver of odm_newton, written once for numpy and a GPU library)
    device: str = "auto"

    def __post_init__(self):
        check_odm_params(self.lam, self.theta, self.v)
        object.__setattr__(self, "device", check_device(self.device))
        if not 0.0 < self.violation_tol < np.inf:
            raise ValueError(f"tol (the violation bound) must be a positive number, got "
                             f"{self.violation_tol!r}.")
        check_positive_int(self.max_iter, "max_iter")
        if self.cache_mb is not None and not 0.0 <= self.cache_mb < np.inf:
            raise ValueError(f"cache_mb must be a number of MB >= 0, got {self.cache_mb!r}.")
        try:
            dtype = np.dtype(self.dtype)
        except TypeError:
            dtype = None
        if dtype not in (np.float32, np.float64, FIXED_POINT):
            raise ValueError(f"dtype must be 'float32', 'float64' or 'int16', got "
                             f"{self.dtype!r}.")
        object.__setattr__(self, "dtype", dtype.name)  # a plain name, whatever was given

    @property
    def hyperparameters(self) -> ODMHyperparameters:
        """λ, θ, v of Eqn 1, as the solvers read them."""
        return ODMHyperparameters(self.lam, self.theta, self.v)

    @property
    def dcd_settings(self) -> DCDSettings:
        """How the dual coordinate descent runs: this record's violation bound, sweeps, kernel
        cache and dtype, and the solver's defaults for the rest."""
        return DCDSettings(violation_tol=self.violation_tol, max_iter=self.max_iter,
                           cache_mb=self.cache_mb, dtype=np.dtype(self.dtype))

    def solve(self, X, y, kernel, n_classes: int = 0, *, warm_start=None, seed=0,
              seed_each_class: bool = True, given: GivenKernel = NO_GIVEN_KERNEL, weights=None,
              gpu_index: int | None = None) -> LocalSolution:
        """Solve the local ODM dual(s) (Eqn 1) of ``X`` (m rows, dense or CSR) with ``kernel``.

        ``n_classes`` 0: ``y`` is ±1, one binary dual. C ≥ 3: ``y`` holds class numbers in
        [0, C), and the C one-vs-rest duals are solved together when ``given.kernel_values``
        (the m×m kernel matrix, already computed) is given or the matrix fits ``cache_mb`` in
        ``dtype``, else one binary solve after the other (the matrix did not fit: in practice
        kernel rows on demand), each seeded ``[*seed, c]``, or ``seed`` itself when not
        ``seed_each_class``. ``warm_start``: γ of the shape solved ((m,) or (m, C)) or None;
        ``seed`` fixes every shuffle. ``given.signed_q`` (binary only): diag(y) K diag(y) of
        the rows in their order, read as it is (:class:`~.dcd_settings.GivenKernel`).
        ``weights``: each row's s_i > 0 (:class:`~.odm_dcd.ODMProblem`), None for all 1.
        ``gpu_index``: the GPU Spark assigned the task (``device`` "auto" or "gpu").
        """
        array_device = resolve_device(self.device, gpu_index)
        if array_device is not None:
            from .device_solve import solve_on_device

            return solve_on_device(self, array_device, X, y, kernel, n_classes,
                                   warm_start=warm_start, seed=seed, given=given,
                                   weights=weights)
        hyper, settings = self.hyperparameters, self.dcd_settings
        if not n_classes:
            result = solve_odm_dual(X, y, kernel, hyper, settings=settings, gamma0=warm_start,
                                    seed=seed, weights=weights, given=given)
            return LocalSolution(result.gamma, result.u, result.objective,
                                 np.array([result.objective]), np.array([result.n_sweeps]),
                                 result.kernel_mode, [result], result.storage)
        if given.signed_q is not None:
            raise ValueError("signed_q is one binary problem's matrix; a multi-class solve "
                             "takes kernel_values.")
        y_index = np.asarray(y).astype(np.int64)
        # the joint solver keeps its one matrix K in float32 when fixed point is asked for
        dtype = np.dtype(self.dtype)
        joint_dtype = np.dtype(np.float32) if dtype == FIXED_POINT else dtype
        if given.kernel_values is not None or kernel_fits_cache(
                X.shape[0], memory_width(X), self.cache_mb, joint_dtype.itemsize):
            joint = solve_odm_multiclass(X, y_index, n_classes, kernel, hyper,
                                         settings=replace(settings, dtype=joint_dtype),
                                         gamma0=warm_start, seed=seed, weights=weights,
                                         kernel_values=given.kernel_values)
            return LocalSolution(joint.gamma, joint.u, float(joint.objectives.sum()),
                                 joint.objectives, np.full(n_classes, joint.n_sweeps),
                                 "cached", [joint], joint_dtype.name)
        results = [solve_odm_dual(X, plus_minus(y_index, c), kernel, hyper, settings=settings,
                                  gamma0=None if warm_start is None else warm_start[:, c],
                                  seed=[*np.atleast_1d(seed).tolist(), c] if seed_each_class
                                  else seed, weights=weights)
                   for c in range(n_classes)]
        return LocalSolution(np.stack([r.gamma for r in results], axis=1),
                             np.stack([r.u for r in results], axis=1),
                             float(sum(r.objective for r in results)),
                             np.array([r.objective for r in results]),
                             np.array([r.n_sweeps for r in results]),
                             "blocked" if any(r.kernel_mode == "blocked" for r in results)
                             else "cached", results,
                             "+".join(sorted({r.storage for r in results})))
