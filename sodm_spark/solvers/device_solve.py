"""A local ODM solve on the device path (docs/design.md §2.10): the m×m kernel matrix
computed on the device by GEMMs (:mod:`~sodm_spark.core.kernel_blocks`) and kept there, then
one finite Newton solve per output (:func:`~.odm_newton.solve_odm_newton`): the binary dual,
or each class against the rest on the same matrix. What it returns is
:class:`~.local_solve.LocalSolution`, as the numba path's, so a level, a search or
:class:`~sodm_spark.estimators.sklearn.ODMClassifier` does not see which path ran."""
from __future__ import annotations

import numpy as np
import scipy.sparse

from ..core.array_namespace import ArrayDevice
from ..core.errors import ResourceError
from ..core.kernel_blocks import kernel_matrix
from ..core.labels import plus_minus
from .dcd_settings import NO_GIVEN_KERNEL, GivenKernel
from .odm_newton import NewtonSettings, solve_odm_newton

#: Share of the device's free memory the kernel matrix may take: the solver's vectors, the
#: preconditioner's m × 1,000 factors and the GEMM blocks need the rest.
KERNEL_SHARE = 0.85


def device_kernel(device: ArrayDevice, X, kernel, dtype: str, kernel_values=None):
    """The m×m kernel matrix on ``device`` in ``dtype`` ("int16" is kept as float32 there)."""
    xp = device.xp
    dtype = xp.float64 if dtype == "float64" else xp.float32
    m = X.shape[0] if kernel_values is None else kernel_values.shape[0]
    free = device.free_bytes()
    needed = m * m * (8 if dtype == xp.float64 else 4)
    if free is not None and needed > KERNEL_SHARE * free:
        raise ResourceError(
            f"a local problem of {m:,} rows needs its {needed / 2**30:.1f} GiB kernel matrix "
            f"on the GPU, which has {free / 2**30:.1f} GiB free; use more, smaller partitions (a "
            f"higher --levels, or a --stop-level above this level), or --device cpu")
    if kernel_values is not None:
        return device.asarray(np.asarray(kernel_values), dtype=dtype)
    rows = X.toarray() if scipy.sparse.issparse(X) else np.asarray(X)
    return kernel_matrix(device, kernel, rows, dtype=dtype)


def solve_on_device(settings, device: ArrayDevice, X, y, kernel, n_classes: int = 0, *,
                    warm_start=None, seed=0, given: GivenKernel = NO_GIVEN_KERNEL, weights=None):
    """:meth:`~.local_solve.LocalSolve.solve` on ``device`` (same arguments and result)."""
    from .local_solve import LocalSolution

    seeds = np.atleast_1d(seed).tolist()
    if given.signed_q is not None:  # diag(y) K diag(y) given: solve with it and labels of +1
        K = device_kernel(device, None, kernel, settings.dtype, kernel_values=given.signed_q)
        outputs = [np.ones(K.shape[0])]
    else:
        K = device_kernel(device, X, kernel, settings.dtype, kernel_values=given.kernel_values)
        y = np.asarray(y)
        outputs = ([y.astype(np.float64)] if not n_classes else
                   [plus_minus(y.astype(np.int64), c).astype(np.float64)
                    for c in range(n_classes)])
    runs = []
    for c, signs in enumerate(outputs):
        start = warm_start if warm_start is None or not n_classes else warm_start[:, c]
        runs.append(solve_odm_newton(device, K, signs, settings.lam, settings.theta, settings.v,
                                     weights=weights, gamma0=start,
                                     seed=seeds + [c] if n_classes else seeds,
                                     settings=NewtonSettings(settings.violation_tol,
                                                             settings.max_iter)))
    del K  # the matrix leaves the device before the caller's next step
    storage = runs[0].storage
    if not n_classes:
        run = runs[0]
        return LocalSolution(run.gamma, run.u, run.objective, np.array([run.objective]),
                             np.array([run.n_sweeps]), run.kernel_mode, runs, storage)
    objectives = np.array([run.objective for run in runs])
    return LocalSolution(np.stack([run.gamma for run in runs], axis=1),
                         np.stack([run.u for run in runs], axis=1), float(objectives.sum()),
                         objectives, np.array([run.n_sweeps for run in runs]),
                         runs[0].kernel_mode, runs, storage)
