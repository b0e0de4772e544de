"""What the exact ODM solvers read besides the rows (docs/design.md §1.3): the hyperparameters
of Eqn 1 (:class:`ODMHyperparameters`), how the dual coordinate descent runs
(:class:`DCDSettings`) and a kernel matrix the caller already has (:class:`GivenKernel`).

:class:`~.local_solve.LocalSolve` builds the first two from its own fields, so a local solve
spells λ, θ, v and the violation bound once; a test or a benchmark builds them where it calls
:func:`~.odm_dcd.solve_odm_dual` or :func:`~.odm_multiclass.solve_odm_multiclass`.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from ..core.validation import check_odm_params


@dataclass(frozen=True)
class ODMHyperparameters:
    """The hyperparameters of Eqn 1 (docs/design.md §1.1): ``lam`` = λ > 0 weighs the squared
    deviations against the norm, ``theta`` = θ ∈ [0, 1) is the half-width of the free band,
    ``v`` ∈ (0, 1] weighs the margins above the band relative to those below it."""

    lam: float
    theta: float
    v: float

    def __post_init__(self):
        check_odm_params(self.lam, self.theta, self.v)


@dataclass(frozen=True)
class DCDSettings:
    """How the dual coordinate descent of :func:`~.odm_dcd.solve_odm_dual` (and of the joint
    one-vs-rest solve, which reads the first six) runs on the dual of Eqn 1.

    It stops when the largest projected-gradient violation over all rows
    (:meth:`~.odm_dcd.ODMProblem.violation`) is at most ``violation_tol``, or after
    ``max_iter`` sweeps. ``dtype`` is the one the kernel values are kept in (int16,
    :data:`~.kernel_rows.FIXED_POINT`: a cached Q in fixed point, half the memory of float32,
    where the kernel bounds its values by its diagonal, :func:`~.kernel_rows.fixed_point_scale`;
    rows on demand, a given matrix and other kernels stay float32). ``shrinking`` leaves out
    the points that sit at γ_i = 0 with room to spare (LIBLINEAR's rule). ``block_mb`` bounds
    the scratch of each GEMM computing the kernel matrix. ``callback(sweep, violation,
    n_active)`` sees every sweep (progress on long solves).

    The binary solve alone reads the rest: ``cache_mb`` bounds the kernel cache (None: what
    this machine has available, :func:`~.kernel_rows.auto_cache_mb`); ``mode`` is 'auto'
    (cached when m²·itemsize ≤ cache_mb), 'cached' or 'blocked'; with kernel rows on demand,
    ``block_size`` points are solved together by ``inner_sweeps`` sweeps over their
    sub-matrix (a cached Q has its own block size, ``odm_dcd.CACHED_BLOCK_ROWS``).
    """

    violation_tol: float = 1e-3
    max_iter: int = 1000
    dtype: npt.DTypeLike = np.float32
    shrinking: bool = True
    block_mb: float = 256.0
    callback: Callable[[int, float, int], None] | None = None
    cache_mb: float | None = None
    mode: str = "auto"
    block_size: int = 1024
    inner_sweeps: int = 8

    def __post_init__(self):
        if self.violation_tol <= 0 or not np.isfinite(self.violation_tol):
            raise ValueError(f"violation_tol must be a positive number, got "
                             f"{self.violation_tol!r}.")
        if int(self.max_iter) < 1:
            raise ValueError(f"max_iter must be at least 1, got {self.max_iter!r}.")


class GivenKernel(NamedTuple):
    """A kernel matrix the caller already has, for a caller solving many problems on one
    matrix (a hyperparameter search); with either, the solve is cached.

    ``kernel_values`` is the m×m kernel matrix of the rows. ``signed_q`` (binary solves only)
    is Q = diag(y) K diag(y) in the solve's dtype of the rows in their given order: the solve
    reads it as it is (no copy) and keeps the rows' order, so the caller shuffles them once
    instead (gathering a shuffled copy of a 2,000-row matrix took longer than many of a
    search's solves).
    """

    kernel_values: np.ndarray | None = None
    signed_q: np.ndarray | None = None


#: Argument defaults of the solvers (records built once, at import): the default settings, and
#: no kernel matrix given (the solver computes what it needs).
DCD_DEFAULTS = DCDSettings()
NO_GIVEN_KERNEL = GivenKernel()
