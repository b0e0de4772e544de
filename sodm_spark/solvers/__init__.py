"""The product's solvers, pure numpy/numba (no Spark import anywhere below this package).

- ``odm_dcd.py`` (+ the numba loops of ``_dcd_kernels.py``): the ODM dual (SODM Eqn 1) by
  dual coordinate descent, with kernel caching, shrinking and warm starts.
- ``odm_multiclass.py``: the one-vs-rest duals of three or more classes solved jointly
  against one kernel matrix.
- ``local_solve.py``: ``LocalSolve``, what one local ODM dual reads (one frozen record, sent
  to Spark tasks as it is), and ``LocalSolve.solve``, the one choice among the two solvers
  above that the estimator, the levels and the search share.
- ``odm_primal.py``: the exact linear ODM primal by generalized Newton.
- ``svrg.py``: the linear ODM primal by SVRG (the paper's ODM_svrg), also used by DSVRG.

The comparators' numerics live beside their estimators in :mod:`sodm_spark.baselines`.
"""
from .odm_dcd import DCDResult, ODMProblem, solve_odm_dual

__all__ = ["DCDResult", "ODMProblem", "solve_odm_dual"]
