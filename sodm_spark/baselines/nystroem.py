"""Nyström features and Falkon's Nyström kernel ridge (the benchmark peers' numerics); pure
numpy and scipy, no Spark.

With m landmarks Z, ``φ(x) = k(x, Z) · K_ZZ^{-1/2}`` gives φ(x)ᵀφ(x') = k(x, Z) K_ZZ⁻¹ k(Z, x'),
the Nyström approximation of k; a linear model on φ is then a kernel model over the landmarks.
K_ZZ^{-1/2} is taken from its SVD with singular values floored (as scikit-learn's Nystroem),
so the features equal ``sklearn.kernel_approximation.Nystroem``'s for the same landmarks.

Falkon (Rudi, Carratino & Rosasco, "FALKON: An Optimal Large Scale Kernel Method", NeurIPS
2017, Algorithm 1) fits the Nyström kernel ridge ``f(x) = k(x, Z) α`` of n rows and m centres,

    (K_nmᵀ K_nm + λ n K_mm) α = K_nmᵀ y,

by conjugate gradients on the system preconditioned with ``B = T⁻¹ A⁻¹ / √n``, where
``T = chol(K_mm)`` and ``A = chol(T Tᵀ / m + λ I)`` (both upper triangular, ``chol(M)ᵀ chol(M)
= M``): as in the FalkonML library (``falkon/preconditioner/flk_preconditioner.py`` and
``falkon/optim/conjgrad.py``), K_mm gets ``ε·m`` on its diagonal before the first Cholesky
(ε = 1e-5 in float32, 1e-13 in float64, its ``pc_epsilon``), so the system solved has
``K_mm + ε m I`` in the penalty. Each CG iteration is one pass over the rows that computes
``k(X_b, Z)`` a block of rows at a time and sums ``k(X_b, Z)ᵀ (k(X_b, Z) w)``: never the n × m
matrix, never the m × m normal matrix, O(n m) a pass. Several penalties share each pass (one
CG per penalty, their vectors side by side), so choosing λ costs no extra kernel blocks.
"""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np
import scipy.linalg

from ..core.kernels import Kernel, decision_values, kernel_matrix
from ..core.sparse_rows import squared_norms

#: Falkon's jitter (``pc_epsilon``), times m on K_mm's diagonal, and its guard against a zero
#: denominator in CG (``cg_epsilon``), by dtype
FALKON_JITTER = {np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-13}
CG_EPSILON = {np.dtype(np.float32): 1e-7, np.dtype(np.float64): 1e-15}
#: A kernel block of the passes: small enough to stay in the caches between its GEMM, its
#: exponentials and its two products (measured on 2 cores: blocks of 10-20 MB ran 1.6× faster
#: than blocks of 160 MB)
BLOCK_BYTES = 12 << 20


def sample_landmarks(X: np.ndarray, n_components: int, seed: int = 0) -> np.ndarray:
    """A seeded uniform sample of min(n_components, len(X)) rows."""
    n = min(int(n_components), X.shape[0])
    return X[np.sort(np.random.default_rng([seed, 17]).choice(X.shape[0], n, replace=False))]


def normalization(kernel: Kernel, landmarks: np.ndarray) -> np.ndarray:
    """K_ZZ^{-1/2} (m × m) by SVD, singular values floored at 1e-12."""
    U, S, V = np.linalg.svd(kernel_matrix(kernel, landmarks))
    return (U / np.sqrt(np.maximum(S, 1e-12))) @ V


def features(kernel: Kernel, X: np.ndarray, landmarks: np.ndarray, norm: np.ndarray,
             dtype=np.float64) -> np.ndarray:
    """φ(X) = k(X, Z) K_ZZ^{-1/2} (n × m); the kernel block by GEMM in ``dtype``."""
    block = kernel.block(np.asarray(X, dtype=dtype), np.asarray(landmarks, dtype=dtype),
                         out=np.empty((X.shape[0], landmarks.shape[0]), dtype=dtype))
    return block @ norm.T.astype(dtype)


# --- Falkon --------------------------------------------------------------------------------

class FalkonSettings(NamedTuple):
    """``penalties``: the λ of the system (Falkon's ``penalty``), one CG each; ``iterations``:
    CG iterations (Falkon's ``maxiter``, 20 by default there too); ``tol``: stop earlier once
    every residual norm is below it (Falkon's ``cg_tolerance``; 0: never); ``dtype``: of the
    kernel blocks and the preconditioner (float32: Falkon's usual precision); ``workers``:
    threads over the row blocks (None: every core; BLAS runs one thread in each)."""

    penalties: tuple[float, ...] = (1e-6,)
    iterations: int = 20
    tol: float = 0.0
    dtype: type = np.float32
    workers: int | None = None


DEFAULT_FALKON = FalkonSettings()


class FalkonFit(NamedTuple):
    """``alpha[:, l]``: the coefficients of ``penalties[l]`` over ``centres`` (float64), so
    that ``k(x, centres) @ alpha[:, l]`` is the decision value; ``iterations``: CG iterations
    run; ``jitter``: what K_mm's diagonal got (ε·m); ``seconds``: of the preconditioner
    (K_mm and the Cholesky factors) and of the passes over the rows."""

    alpha: np.ndarray
    centres: np.ndarray
    penalties: tuple[float, ...]
    iterations: int
    jitter: float
    seconds: dict

    def decision(self, kernel: Kernel, X: np.ndarray, dtype=np.float32) -> np.ndarray:
        """``k(X, centres) @ alpha``: (len(X), number of penalties), float64."""
        return decision_values(kernel, X, self.centres, self.alpha, dtype=dtype)


def falkon_preconditioner(gram: np.ndarray, penalties) -> tuple[np.ndarray, list, float]:
    """``(T, [A for each λ], jitter)``: ``T = chol(K_mm + ε m I)`` and ``A = chol(T Tᵀ/m + λ I)``,
    upper triangular and Fortran-ordered for LAPACK, in ``gram``'s dtype (which is overwritten
    by T). One m × m array a penalty, besides T."""
    m = gram.shape[0]
    T = gram.T  # Fortran order without a copy: K_mm is symmetric
    jitter = FALKON_JITTER[T.dtype] * m
    T[np.diag_indices(m)] += jitter
    potrf, lauum = scipy.linalg.lapack.get_lapack_funcs(("potrf", "lauum"), (T,))
    T, info = potrf(T, lower=0, clean=1, overwrite_a=1)
    if info:
        raise np.linalg.LinAlgError(f"K_mm + {jitter:g} I is not positive definite "
                                    f"(Cholesky stopped at column {info}); duplicate centres?")
    M, _ = lauum(np.array(T, order="F"), lower=0, overwrite_c=1)  # upper triangle: T Tᵀ
    M /= m
    factors = []
    for number, penalty in enumerate(penalties):
        A = M if number == len(penalties) - 1 else np.array(M, order="F")
        A[np.diag_indices(m)] += penalty
        A, info = potrf(A, lower=0, clean=1, overwrite_a=1)
        if info:
            raise np.linalg.LinAlgError(f"T Tᵀ/m + {penalty:g} I is not positive definite.")
        factors.append(A)
    return T, factors, jitter


def _solve(factor: np.ndarray, V: np.ndarray, transposed: bool) -> np.ndarray:
    """``factor⁻¹ V`` (or ``factor⁻ᵀ V``) for an upper triangular factor, in its dtype (a
    right-hand side of another dtype would make LAPACK copy the factor)."""
    return scipy.linalg.solve_triangular(factor, V.astype(factor.dtype), lower=False,
                                         trans=int(transposed), check_finite=False)


def kernel_pass(kernel: Kernel, X: np.ndarray, centres: np.ndarray, product, workers=None):
    """``Σ_b product(k(X_b, Z), b)`` over blocks of rows ``b`` (a slice), in float64: the
    blocks in ``centres``' dtype, never more than one per thread, threads sharing the row
    blocks and BLAS kept to one thread in each, so every core computes exponentials."""
    from threadpoolctl import threadpool_limits

    m = centres.shape[0]
    step = max(64, BLOCK_BYTES // (m * centres.dtype.itemsize))
    z_sq = squared_norms(centres, centres.dtype)
    starts = list(range(0, X.shape[0], step))
    workers = max(1, min(workers or os.cpu_count() or 1, len(starts)))

    def work(worker):
        scratch, total = np.empty((step, m), dtype=centres.dtype), 0.0
        for start in starts[worker::workers]:
            rows = slice(start, min(start + step, X.shape[0]))
            block = kernel.block(X[rows], centres, out=scratch[:rows.stop - start],
                                 z_sq_norms=z_sq)
            total = total + product(block, rows)
        return total

    with threadpool_limits(1), ThreadPoolExecutor(workers) as pool:
        return sum(np.asarray(part, dtype=np.float64) for part in pool.map(work, range(workers)))


def falkon_fit(kernel: Kernel, X: np.ndarray, y: np.ndarray, centres: np.ndarray,
               settings: FalkonSettings = DEFAULT_FALKON) -> FalkonFit:
    """Falkon's preconditioned CG (module docstring) for every penalty of ``settings`` at
    once: one pass over the rows for the right-hand side, then one per iteration."""
    dtype = np.dtype(settings.dtype)
    X = np.ascontiguousarray(X, dtype=dtype)
    Z = np.ascontiguousarray(centres, dtype=dtype)
    n, penalties = X.shape[0], tuple(float(p) for p in settings.penalties)
    started = time.perf_counter()
    T, factors, jitter = falkon_preconditioner(kernel_matrix(kernel, Z, dtype=dtype), penalties)
    seconds = {"preconditioner": time.perf_counter() - started}
    eps = CG_EPSILON[dtype]
    target = np.asarray(y, dtype=dtype)[:, None]
    rhs = kernel_pass(kernel, X, Z, lambda block, rows: block.T @ target[rows],
                      settings.workers) / n
    rhs = _solve(T, rhs, transposed=True)
    B = np.column_stack([_solve(A, rhs[:, 0], transposed=True) for A in factors]).astype(float)

    def operator(P):
        """B̃ᵀ H B̃ P, column l with λ_l: A⁻ᵀ (T⁻ᵀ K_nmᵀ K_nm T⁻¹ A⁻¹ p / n + λ A⁻¹ p)."""
        V = np.column_stack([_solve(A, P[:, k], False) for k, A in enumerate(factors)])
        W = _solve(T, V, transposed=False).astype(dtype)
        products = kernel_pass(kernel, X, Z, lambda block, rows: block.T @ (block @ W),
                               settings.workers) / n
        inner = _solve(T, products, transposed=True).astype(float) + V * np.asarray(penalties)
        return np.column_stack([_solve(A, inner[:, k], True) for k, A in enumerate(factors)])

    beta, iterations = _conjugate_gradients(operator, B, settings.iterations, settings.tol, eps)
    alpha = np.column_stack([_solve(T, _solve(A, beta[:, k], False), False)
                             for k, A in enumerate(factors)]).astype(float)
    seconds["passes"] = time.perf_counter() - started - seconds["preconditioner"]
    return FalkonFit(alpha, Z, penalties, iterations, jitter, seconds)


def _conjugate_gradients(operator, B: np.ndarray, iterations: int, tol: float, eps: float):
    """CG from zero on every column of ``B`` at once (one operator call an iteration), as
    Falkon's ``ConjugateGradient.solve``; float64 vectors. ``(solution, iterations run)``."""
    X, R = np.zeros_like(B), B.copy()
    P, rs = R.copy(), np.sum(R * R, axis=0)
    for iteration in range(1, iterations + 1):
        AP = operator(P)
        step = rs / (np.sum(P * AP, axis=0) + eps)
        X += P * step
        R -= AP * step
        rs_new = np.sum(R * R, axis=0)
        if np.sqrt(rs_new.max()) < tol:
            return X, iteration
        P = R + P * (rs_new / (rs + eps))
        rs = rs_new
    return X, iterations


def falkon_select(kernel: Kernel, X: np.ndarray, y: np.ndarray, centres: np.ndarray,
                  held_out: np.ndarray, settings: FalkonSettings = DEFAULT_FALKON):
    """Falkon on the rows outside the boolean mask ``held_out``, every penalty in the same CG
    passes, judged by the accuracy of ``sign(f)`` on the held-out rows (labels ±1): ``(fit,
    the index of the best penalty, the held-out accuracy of each)``, ties to the first."""
    fit = falkon_fit(kernel, X[~held_out], y[~held_out], centres, settings)
    scores = fit.decision(kernel, X[held_out], dtype=settings.dtype)
    accuracies = [float(np.mean(np.sign(scores[:, k]) == y[held_out]))
                  for k in range(scores.shape[1])]
    return fit, int(np.argmax(accuracies)), accuracies
