"""Seeded k-means (k-means++ init + Lloyd) on a sample, pure numpy.

Used by the comparator partitioners of the SODM paper's Table 2: ``kmeans`` (DC-ODM, each
cluster is one partition) and ``dip`` (DiP-ODM, clusters dealt evenly to the partitions).
Clustering is Euclidean in the input space, unlike SODM's RKHS strata (Eqns 7-8).
"""
from __future__ import annotations

import numpy as np

from ._checks import as_count, as_rows
from .strata import nearest_center


def _sq_distances(X: np.ndarray, x_sq: np.ndarray, C: np.ndarray) -> np.ndarray:
    """Squared Euclidean distances (n × len(C)) by one GEMM, clipped at 0."""
    d2 = X @ C.T
    d2 *= -2.0
    d2 += x_sq[:, None]
    d2 += np.einsum("ij,ij->i", C, C)[None, :]
    return np.maximum(d2, 0.0, out=d2)


def _kmeans_plus_plus(X: np.ndarray, n_clusters: int, rng: np.random.Generator) -> np.ndarray:
    """Greedy k-means++ seeding: D²-sampling, best of ``2 + ln k`` candidates per center."""
    n = X.shape[0]
    x_sq = np.einsum("ij,ij->i", X, X)
    n_trials = 2 + int(np.log(n_clusters))
    centers = np.empty((n_clusters, X.shape[1]))
    first = int(rng.integers(n))
    centers[0] = X[first]
    closest = _sq_distances(X, x_sq, X[first:first + 1])[:, 0]
    for c in range(1, n_clusters):
        potential = closest.sum()
        if potential > 0.0:
            draws = rng.random(n_trials) * potential
            candidates = np.minimum(np.searchsorted(np.cumsum(closest), draws), n - 1)
        else:  # every row already sits on a center (duplicates): any row will do
            candidates = rng.integers(n, size=1)
        trial = np.minimum(closest[:, None], _sq_distances(X, x_sq, X[candidates]))
        best = int(np.argmin(trial.sum(axis=0)))
        closest = trial[:, best]
        centers[c] = X[candidates[best]]
    return centers


def _lloyd(X: np.ndarray, centers: np.ndarray, max_iter: int, shift_tol: float) -> np.ndarray:
    """Lloyd iterations; an empty cluster is re-seeded with the row farthest from its center."""
    centers = centers.copy()
    k = centers.shape[0]
    for _ in range(max_iter):
        labels, sq_dist = nearest_center(X, centers, return_distances=True)
        counts = np.bincount(labels, minlength=k)
        empty = np.flatnonzero(counts == 0)
        if empty.size:  # deterministic: farthest rows first (first index on ties)
            farthest = np.argsort(-sq_dist, kind="stable")[:empty.size]
            labels[farthest] = empty
            counts = np.bincount(labels, minlength=k)
        sums = np.zeros_like(centers)
        np.add.at(sums, labels, X)
        filled = counts > 0
        new_centers = centers.copy()
        new_centers[filled] = sums[filled] / counts[filled, None]
        shift = float(((new_centers - centers) ** 2).sum())
        centers = new_centers
        if shift <= shift_tol:
            break
    return centers


def kmeans(X: np.ndarray, n_clusters: int, seed, max_iter: int = 100,
           tol: float = 1e-6) -> np.ndarray:
    """Cluster centers (n_clusters × d, float64) of ``X`` by k-means++ and Lloyd iterations.

    Seeding draws from ``np.random.default_rng(seed)``, so the same seed gives the same centers.
    Iterations stop after ``max_iter`` or when the squared center shift is at most
    ``tol · mean feature variance`` (scikit-learn's convention). A cluster that loses all its
    rows is re-seeded with the row farthest from its current center.
    """
    X = np.asarray(as_rows(X, "X"), dtype=np.float64)
    n_clusters = as_count(n_clusters, "n_clusters")
    if n_clusters > X.shape[0]:
        raise ValueError(f"n_clusters={n_clusters} exceeds the number of rows ({X.shape[0]}).")
    max_iter = as_count(max_iter, "max_iter")
    if not (np.isfinite(tol) and tol >= 0):
        raise ValueError(f"tol must be a non-negative finite number, got {tol!r}.")
    rng = np.random.default_rng(seed)
    centers = _kmeans_plus_plus(X, n_clusters, rng)
    return _lloyd(X, centers, max_iter, float(tol) * float(np.var(X, axis=0).mean()))
