"""What the preparation of a SODM fit runs in Spark's tasks, on the input's Blocks (SODM paper,
Algorithm 1; docs/design.md §6, step 3): labels coded, the validation rows held out and the
landmark candidates sampled in one pass, column statistics, the feature scaling, the input map,
CSR rows. The functions are module-level and take plain values, so closures never capture a
driver object (:mod:`.prepare` runs them).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse

from ...core.column_stats import ColumnStats, scale_rows
from ...core.labels import coded_labels
from ...selection.stopping import holdout_mask, holdout_values
from ..io import Block


def coded_block(block, classes):
    """A block's raw labels coded: ±1 with ``classes[1]`` as +1, or class numbers 0..C-1
    (float) in the order of ``classes`` (3+ classes)."""
    return Block(block.X, coded_labels(block.y, classes), block.row_ids, weights_of(block))


def weights_of(block):
    """A block's row weights (a weight column's), or None."""
    return block[3] if len(block) > 3 else None


def with_rows(block, X=None, rows=None):
    """The block with features ``X`` (same rows), or only the rows ``rows`` (a mask)."""
    weights = weights_of(block)
    if rows is None:
        return Block(X, block[1], block[2], weights)
    return Block(block[0][rows], block[1][rows], block[2][rows],
                 None if weights is None else weights[rows])


def class_counts(block, n_classes):
    """Rows per class of a coded block (±1 → [-1, +1], or class numbers), as floats."""
    y = block[1]
    index = (y > 0).astype(np.int64) if n_classes == 2 else y.astype(np.int64)
    return np.bincount(index, minlength=n_classes).astype(np.float64)


def held_out_rows(block, seed, fraction, candidate_fraction):
    """(X, ±1 y, hash values) of the rows of a (X, ±1 y, ids) block held out for validation,
    a seeded sample of its other rows as landmark candidates (one pass for both), and the
    held-out rows' weights (None without a weight column)."""
    X, y, ids = block[:3]
    weights = weights_of(block)
    values = holdout_values(ids, seed)
    rows = values < fraction
    held = X[rows]
    kept = X[~rows]
    candidates = kept[block_draws(ids, seed, 7, kept.shape[0]) < candidate_fraction]
    return held, y[rows], values[rows], candidates, None if weights is None else weights[rows]


def kept_rows(block, seed, fraction):
    """The block without its rows held out for validation (:func:`held_out_rows`)."""
    return with_rows(block, rows=~holdout_mask(block[2], seed, fraction))


def moments(block):
    """(rows, cells, Σx, Σx²) of a block, summed in float64 whatever the rows' dtype."""
    X = block[0]
    if scipy.sparse.issparse(X):
        return np.array([X.shape[0], X.shape[0] * X.shape[1], X.sum(dtype=np.float64),
                         X.multiply(X).sum(dtype=np.float64)])
    return np.array([X.shape[0], X.size, X.sum(dtype=np.float64),
                     np.einsum("ij,ij->", X, X, dtype=np.float64)])


def column_stats(block):
    """A block's :class:`~sodm_spark.core.column_stats.ColumnStats`."""
    return ColumnStats(block[0])


def scaled_block(block, scaling):
    """(X mapped by the feature scaling (offset, scale, columns) in its own float dtype, y,
    ids): :func:`sodm_spark.core.column_stats.scale_rows`."""
    return with_rows(block, scale_rows(block[0], *scaling))


def projected_block(block, projection):
    """(X mapped onto the fit's principal directions, in X's float dtype, y, ids)."""
    return with_rows(block, projection.projected(block[0]))


def block_draws(ids, seed, salt, n):
    """``n`` uniform draws seeded by (seed, salt, the block's first row id): stable per block,
    whatever the block layout."""
    key = int(ids[0]) if ids.size else 0
    return np.random.default_rng([seed, salt, key]).random(n)


def sampled_rows(block, seed, fraction):
    """A seeded sample of a (X, y, ids) block's rows, the same whatever the block layout."""
    X, _, ids = block[:3]
    return X[block_draws(ids, seed, 11, X.shape[0]) < fraction]


def as_csr(block):
    """The block with CSR rows (dense ones converted: a fit with any sparse block is sparse)."""
    X = block[0]
    return with_rows(block, X if scipy.sparse.issparse(X)
                      else scipy.sparse.csr_matrix(X, dtype=np.float64))
