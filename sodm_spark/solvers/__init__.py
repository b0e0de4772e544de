"""Pure numpy/numba solvers (no Spark import anywhere below this package)."""
from .odm_dcd import DCDResult, ODMProblem, solve_odm_dual

__all__ = ["DCDResult", "ODMProblem", "solve_odm_dual"]
