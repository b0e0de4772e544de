"""Landmark selection for SODM strata (SODM paper, Eqn 8) as greedy pivoted incomplete Cholesky.

Eqn (8) picks landmarks one at a time so that the Gram matrix of the chosen landmarks keeps the
largest possible determinant. By the Schur complement,

    det K_{S∪{z}} = det K_S · (k(z,z) - K_{S,z}ᵀ K_{S,S}⁻¹ K_{S,z}) = det K_S · residual(z),

so the determinant-maximizing next landmark is the candidate with the largest residual. When
``k(x,x)`` is the same for every x (rbf, laplacian, matern) this is exactly the argmin of the
quadratic form in Eqn (8); for linear/poly kernels the residual also accounts for ``k(z,z)``
and stays the determinant-maximizing rule. The residuals are the diagonal of ``K - L Lᵀ`` for the partial
Cholesky factor ``L`` of the kernel matrix, so each step costs one kernel block (the pivot
against all candidates) plus an O(n·s) update — never the n×n matrix. Candidates may be CSR
rows: the kernel column of a pivot is then a sparse product (:mod:`sodm_spark.core.sparse_rows`)
and nothing is ever as wide as the features.
"""
from __future__ import annotations

import numpy as np

from ..core.kernels import Kernel
from ._checks import as_count, as_rows

#: a residual at or below this fraction of the largest k(x,x) counts as "already spanned"
SPANNED_TOL = 1e-12


def select_landmarks(X, kernel: Kernel, n_landmarks: int) -> np.ndarray:
    """Indices (int64) into ``X`` (dense or CSR rows) of up to ``n_landmarks`` landmarks chosen
    by Eqn (8).

    ``X`` is a sample of candidate rows (docs/design.md §2.1: ``min(M, 50·S)`` of them by default,
    never all M rows): the run keeps an ``n × n_landmarks`` float64 factor. The first landmark
    is the row with the largest ``k(x,x)`` (row 0 for a stationary kernel, like the paper's ``z_1 = x_1``);
    each next one is the row with the largest residual ``k(z,z) - K_{S,z}ᵀ K_{S,S}⁻¹ K_{S,z}``
    (first index on ties), i.e. the choice that maximizes ``det K_{S∪{z}}`` — see the module
    docstring. Selection stops early once the largest residual is ``<= 1e-12 · max k(x,x)``:
    the remaining rows are spanned by the landmarks in the RKHS (so a duplicate row is never
    chosen twice and a rank-r kernel yields at most r landmarks). At least one landmark is
    always returned.
    """
    X = as_rows(X, "X", sparse=True)
    n_landmarks = as_count(n_landmarks, "n_landmarks")
    n = X.shape[0]
    n_steps = min(n_landmarks, n)
    residual = np.asarray(kernel.diagonal(X), dtype=np.float64).copy()
    threshold = SPANNED_TOL * max(float(residual.max()), 0.0)
    factor = np.empty((n, n_steps), dtype=np.float64, order="F")  # partial Cholesky L
    chosen: list[int] = []
    for step in range(n_steps):
        pivot = int(np.argmax(residual))  # first index on ties
        pivot_residual = float(residual[pivot])
        if step > 0 and pivot_residual <= threshold:
            break
        chosen.append(pivot)
        if pivot_residual <= threshold or step == n_steps - 1:
            break  # nothing left to factor (degenerate first pivot) or last landmark taken
        column = kernel.block(X, X[pivot:pivot + 1])[:, 0]
        if step:
            column -= factor[:, :step] @ factor[pivot, :step]
        column /= np.sqrt(pivot_residual)
        factor[:, step] = column
        residual -= column * column
        residual[pivot] = 0.0  # exact: a chosen row is fully spanned
        np.maximum(residual, 0.0, out=residual)
    return np.asarray(chosen, dtype=np.int64)
