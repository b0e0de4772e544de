"""Nyström features (the benchmark peers' kernel approximation); pure numpy, no Spark.

With m landmarks Z, ``φ(x) = k(x, Z) · K_ZZ^{-1/2}`` gives φ(x)ᵀφ(x') = k(x, Z) K_ZZ⁻¹ k(Z, x'),
the Nyström approximation of k; a linear model on φ is then a kernel model over the landmarks.
K_ZZ^{-1/2} is taken from its SVD with singular values floored (as scikit-learn's Nystroem),
so the features equal ``sklearn.kernel_approximation.Nystroem``'s for the same landmarks.
"""
from __future__ import annotations

import numpy as np

from ..core.kernels import Kernel, kernel_matrix


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
