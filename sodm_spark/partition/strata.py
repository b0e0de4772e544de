"""Strata (SODM paper, Eqn 7) and the even dealing of strata to partitions.

``nearest_landmark`` assigns each row to the landmark nearest in the RKHS (Eqn 7);
``stratum_offsets`` + ``deal_positions`` then give every row a global position such that each
stratum occupies a run of consecutive positions, shuffled within the stratum. With
``target = position % K`` every partition receives ``⌊n_s/K⌋`` or ``⌈n_s/K⌉`` rows of each
stratum s and ``⌊n/K⌋`` or ``⌈n/K⌉`` rows in total — the "equal piece of every stratum" step
that follows Eqn (7). All functions work on one numpy block (a Spark partition) at a time;
:func:`nearest_landmark` takes dense or CSR rows and landmarks alike.
"""
from __future__ import annotations

import numpy as np

from ..core.kernels import Kernel, iter_kernel_blocks, rows_per_block
from ..core.sparse_rows import as_float_rows
from ._checks import as_rows, check_same_features


def nearest_landmark(X, landmarks, kernel: Kernel, block_mb: float = 64.0) -> np.ndarray:
    """Stratum of every row of ``X`` (int64): Eqn (7), the nearest landmark in the RKHS.

    ``‖φ(x) - φ(z_s)‖² = k(x,x) + k(z_s,z_s) - 2k(x,z_s)``; the ``k(x,x)`` term is the same for
    every s, so the argmin only needs ``k(z_s,z_s) - 2k(x,z_s)``, computed from kernel blocks of
    at most ``block_mb`` MB (one GEMM each). Ties go to the first landmark. ``X`` may have 0
    rows (an empty Spark partition); ``landmarks`` (the landmark rows, not indices) may not.
    Either may be CSR (sparse products, :mod:`sodm_spark.core.sparse_rows`).
    """
    X = as_rows(X, "X", allow_empty=True, sparse=True)
    landmarks = as_rows(landmarks, "landmarks", sparse=True)
    check_same_features(X, landmarks, "X", "landmarks")
    landmark_diag = np.asarray(kernel.diagonal(as_float_rows(landmarks, np.float64)),
                               dtype=np.float64)
    strata = np.empty(X.shape[0], dtype=np.int64)
    for rows, block in iter_kernel_blocks(kernel, X, landmarks, np.float64, block_mb):
        block *= -2.0
        block += landmark_diag[None, :]
        strata[rows] = np.argmin(block, axis=1)
    return strata


def nearest_center(X: np.ndarray, centers: np.ndarray, block_mb: float = 64.0, *,
                   return_distances: bool = False):
    """Index (int64) of the Euclidean-nearest center of every row, by GEMM in row blocks.

    Uses ``‖x‖² + ‖c‖² - 2 x cᵀ`` (ties go to the first center). With ``return_distances``
    also returns each row's squared distance to its center (clipped at 0), as
    ``(labels, sq_distances)``. ``X`` may have 0 rows; ``centers`` may not.
    """
    X = as_rows(X, "X", allow_empty=True)
    centers = np.asarray(as_rows(centers, "centers"), dtype=np.float64)
    check_same_features(X, centers, "X", "centers")
    center_sq = np.einsum("ij,ij->i", centers, centers)
    labels = np.empty(X.shape[0], dtype=np.int64)
    sq_dist = np.empty(X.shape[0], dtype=np.float64) if return_distances else None
    step = rows_per_block(centers.shape[0], 8, block_mb)
    for start in range(0, X.shape[0], step):
        rows = slice(start, min(start + step, X.shape[0]))
        block_x = np.asarray(X[rows], dtype=np.float64)
        scores = block_x @ centers.T
        scores *= -2.0
        scores += center_sq[None, :]
        labels[rows] = np.argmin(scores, axis=1)
        if sq_dist is not None:  # return_distances
            best = np.take_along_axis(scores, labels[rows, None], axis=1)[:, 0]
            best += np.einsum("ij,ij->i", block_x, block_x)
            sq_dist[rows] = np.maximum(best, 0.0)
    return (labels, sq_dist) if return_distances else labels


def stratum_offsets(counts: np.ndarray) -> np.ndarray:
    """Start positions (int64, n_blocks × S) for dealing, from per-block stratum counts.

    ``counts[j, s]`` is how many rows of stratum s input block j holds. Stratum s occupies the
    global positions ``[Σ_{t<s} n_t, Σ_{t≤s} n_t)`` (``n_t`` = column sums); inside that run,
    block j starts right after the rows of blocks ``0..j-1``.
    """
    counts = np.asarray(counts)
    if counts.ndim != 2:
        raise ValueError(f"counts must be a 2-D (input blocks × strata) array, got shape "
                         f"{counts.shape}.")
    if counts.size and not (np.issubdtype(counts.dtype, np.number) and np.all(np.isfinite(counts))
                            and np.all(counts >= 0) and np.all(counts == np.floor(counts))):
        raise ValueError("counts must hold non-negative integers (rows per block and stratum).")
    counts = counts.astype(np.int64)
    totals = counts.sum(axis=0)
    stratum_start = np.cumsum(totals) - totals
    within = np.cumsum(counts, axis=0) - counts
    return stratum_start[None, :] + within


def deal_positions(strata: np.ndarray, start_offsets: np.ndarray, seed) -> np.ndarray:
    """Global position (int64) of every row of ONE input block, for ``target = position % K``.

    The rows of each stratum s present in the block are put in a random order drawn from
    ``np.random.default_rng(seed)`` (``seed`` may be a sequence such as
    ``[seed, input_partition]``) and receive the consecutive positions ``start_offsets[s]``,
    ``start_offsets[s] + 1``, ... ``start_offsets`` is this block's row of
    :func:`stratum_offsets`.
    """
    strata = np.asarray(strata)
    start_offsets = np.asarray(start_offsets)
    if strata.ndim != 1:
        raise ValueError(f"strata must be 1-D (one stratum per row), got shape {strata.shape}.")
    if start_offsets.ndim != 1:
        raise ValueError("start_offsets must be 1-D (one start per stratum), got shape "
                         f"{start_offsets.shape}.")
    if strata.size == 0:
        return np.empty(0, dtype=np.int64)
    if not np.issubdtype(strata.dtype, np.integer):
        raise ValueError(f"strata must hold integers, got dtype {strata.dtype}.")
    if strata.min() < 0 or strata.max() >= start_offsets.size:
        raise ValueError(f"strata must lie in [0, {start_offsets.size}) (one start offset per "
                         f"stratum), got values in [{strata.min()}, {strata.max()}].")
    rng = np.random.default_rng(seed)
    shuffled = rng.permutation(strata.size)
    # group by stratum, keeping the random order inside each stratum
    order = shuffled[np.argsort(strata[shuffled], kind="stable")]
    grouped = strata[order].astype(np.int64)
    group_start = np.flatnonzero(np.r_[True, grouped[1:] != grouped[:-1]])
    group_sizes = np.diff(np.r_[group_start, grouped.size])
    rank = np.arange(grouped.size) - np.repeat(group_start, group_sizes)
    positions = np.empty(strata.size, dtype=np.int64)
    positions[order] = start_offsets.astype(np.int64)[grouped] + rank
    return positions


def partitions_look_like_whole(counts: np.ndarray, z_max: float = 4.0) -> bool:
    """True when every partition already holds each stratum in its overall share.

    ``counts[j, s]`` = rows of stratum s in partition j. A partition of ``n_j`` rows drawn
    uniformly from the data would hold ``n_j·p_s ± sqrt(n_j·p_s·(1-p_s))`` rows of a stratum
    with overall share ``p_s``; the partitions pass when every cell lies within ``z_max`` such
    standard deviations (+1 row) of that expectation. Input split at random passes (a false
    alarm only costs the dealing it would have done anyway); input sorted or clustered by
    feature or label fails. This is the condition the stratified dealing after Eqn (7) exists
    to establish, so data that already meet it need not move.
    """
    counts = np.asarray(counts, dtype=np.float64)
    if counts.ndim != 2 or counts.shape[0] == 0:
        raise ValueError(f"counts must be a 2-D (partitions × strata) array, got shape "
                         f"{counts.shape}.")
    total = counts.sum()
    if total == 0:
        return False
    shares = counts.sum(axis=0) / total
    sizes = counts.sum(axis=1, keepdims=True)
    expected = sizes * shares[None, :]
    spread = np.sqrt(sizes * shares[None, :] * (1.0 - shares[None, :]))
    return bool(np.all(np.abs(counts - expected) <= z_max * spread + 1.0))
