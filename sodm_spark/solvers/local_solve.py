"""What one local ODM solve reads: :class:`LocalSolve` (docs/design.md §1.3, §2.4).

A local problem is the dual of Eqn 1 on m rows with the rows' own m·c: a partition's at a
level of SODM (the block-diagonal problem of Eqn 4), one partition's during a search, or the
whole data's in :class:`~sodm_spark.estimators.sklearn.ODMClassifier`. Its settings are one
frozen record of plain values, built where the user's settings are read
(``SODMParams.local_solve``, the estimator's ``fit``) and sent to Spark tasks as it is, so that
``lam`` can be followed from a job's flag to the solver call by name.
"""
from __future__ import annotations

from dataclasses import dataclass


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
    dtype: str = "float32"  # of the cached kernel values (γ and u are always float64)
