"""Class probabilities for DSVRG's linear model: a slice held out of the epochs, the model
calibrated on it (docs/design.md §3, §7).

The primal solve has no validation slice of its own (SODM's levels hold one out to stop by,
docs/design.md §2.7), and a calibration fitted on training rows would be fitted on optimistic
decision values. So :func:`fit_calibrated` holds out the rows SODM's levels would hold out —
a seeded hash of the row id below ``validation_fraction``, at most ``validation_max_rows``
rows (exactly that many from ten times as many rows on), the same rows whatever the block
layout — runs :func:`.fit.fit_dsvrg` on the others and fits ``params.calibration`` (Platt's
sigmoid or an isotonic map, :mod:`sodm_spark.models.calibration`) on the held-out rows'
decision values. Rows the caller holds out itself (``validation``) are used instead, and
``calibration="none"`` trains on every row, as before probabilities existed.
"""
from __future__ import annotations

import numpy as np

from ...core.errors import SettingsError
from ...core.sparse_rows import stack_rows
from ...selection.stopping import (exact_share, holdout_mask, holdout_values,
                                   oversampled_share, validation_share)
from ..engine import PERSIST
from .fit import DSVRGFit, DSVRGParams, fit_dsvrg


def _rows(block) -> int:
    return int(block.X.shape[0])


def _held_out(block, seed: int, share: float):
    """(X, raw y, hash values) of a Block's rows whose hash value is below ``share``."""
    values = holdout_values(block.row_ids, seed)
    rows = values < share
    return block.X[rows], block.y[rows], values[rows]


def _kept(block, seed: int, share: float):
    """The Block without its held-out rows."""
    rows = ~holdout_mask(block.row_ids, seed, share)
    return block._replace(X=block.X[rows], y=block.y[rows], row_ids=block.row_ids[rows])


def hold_out(sc, blocks, params: DSVRGParams):
    """(the Blocks without the slice, (X, raw y) of the slice or None when it would be empty or
    every row). Two passes over ``blocks``: the row count, then the slice."""
    sc.setJobDescription("DSVRG: count the rows to hold out a calibration slice")
    n_rows = sum(blocks.map(_rows).collect())
    if params.n_partitions is not None and params.n_partitions > n_rows:  # in the user's rows
        raise SettingsError(f"DSVRG asks for {params.n_partitions} partitions but the data have "
                            f"only {n_rows} rows; pass at most {n_rows} (--partitions / "
                            "n_partitions).")
    if n_rows < 2:
        return blocks, None
    share = validation_share(params.validation_fraction, params.validation_max_rows, n_rows)
    drawn = oversampled_share(share, params.validation_max_rows, n_rows)
    seed = params.seed
    sc.setJobDescription("DSVRG: hold out the calibration slice")
    pieces = [piece for piece in blocks.map(lambda b: _held_out(b, seed, drawn)).collect()
              if piece[1].size]
    if not pieces:
        return blocks, None
    X = stack_rows([piece[0] for piece in pieces])
    y = np.concatenate([piece[1] for piece in pieces])
    values = np.concatenate([piece[2] for piece in pieces])
    if drawn > share:  # trimmed to exactly validation_max_rows rows
        share = exact_share(values, params.validation_max_rows, drawn)
        X, y = X[values < share], y[values < share]
    if not 0 < y.size < n_rows:
        return blocks, None
    return blocks.map(lambda b: _kept(b, seed, share)), (X, y)


def fit_calibrated(sc, blocks, params: DSVRGParams, classes, n_features: int, validation=None,
                   **fit_options) -> DSVRGFit:
    """:func:`.fit.fit_dsvrg` (``fit_options``: its ``test``, ``on_epoch``, ``w0``) with the
    model calibrated by ``params.calibration`` on ``validation`` (X, raw y) if given, else on
    rows held out of ``blocks`` (:func:`hold_out`); ``calibration="none"``: every row trains
    and the model has no calibration."""
    if params.calibration == "none":
        return fit_dsvrg(sc, blocks, params, classes, n_features, **fit_options)
    persisted = None
    try:
        if validation is None:
            if not blocks.is_cached:  # counted, sliced, then read by the fit: parse it once
                blocks = persisted = blocks.persist(PERSIST)
            blocks, validation = hold_out(sc, blocks, params)
        fit = fit_dsvrg(sc, blocks, params, classes, n_features, **fit_options)
    finally:
        if persisted is not None:
            persisted.unpersist()
        sc.setJobDescription(None)
    if validation is not None:
        fit.model = fit.model.calibrated(validation[0], validation[1], params.calibration)
        fit.validation_rows = int(len(validation[1]))
    return fit
