"""ODMClassifier's class probabilities: a calibration fitted on out-of-fold decision values, as
scikit-learn's ``SVC(probability=True)`` fits Platt's sigmoid (docs/design.md §7).

A calibration fitted on the decision values of the rows a model was trained on would be fitted
on optimistic values (most training rows sit at or beyond the margin band), so, as libsvm
does (Lin, Lin and Weng, *A Note on Platt's Probabilistic Outputs for Support Vector
Machines*): the rows are cut into k = 5 stratified folds (shuffled, seeded by the estimator's
``random_state``; fewer folds when a class has fewer than 5 rows), a model with the same
settings is fitted on the other k − 1 folds of each fold and scores that fold, and the
calibration of :mod:`sodm_spark.models.calibration` (Platt's sigmoid or an isotonic map) is
fitted on those out-of-fold decision values of every row. The model that predicts is the one
fitted on all rows, so its decisions are those of ``probability=False``; its probabilities
may disagree with them on rows near the boundary, as SVC's may.

Every fold model takes the γ the full fit resolved (``gamma="scale"`` or ``"auto"`` from all
rows), so the folds' decision values are on the scale of the model they calibrate. Three or
more classes: the folds' one-vs-rest scores, one map per class, normalized to sum to one. Rows
of ``sample_weight`` 0 are left out of the calibration as they are left out of the fit; other
weights weigh the fold models' losses, not the calibration.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
from sklearn.base import clone
from sklearn.model_selection import StratifiedKFold
from sklearn.utils import check_array, column_or_1d

from ..core.errors import SettingsError
from ..core.validation import seed_from
from ..models.calibration import METHODS, fit_calibration

#: Folds of the out-of-fold decision values (libsvm's and SVC's 5).
FOLDS = 5


def check_calibration(estimator) -> None:
    """Refuse a bad ``probability`` or ``calibration`` before any work on the rows."""
    if not isinstance(estimator.probability, (bool, np.bool_)):
        raise SettingsError(f"probability must be True or False, got {estimator.probability!r}.")
    if estimator.calibration not in METHODS:
        raise SettingsError(f"calibration must be one of {', '.join(map(repr, METHODS))}, got "
                            f"{estimator.calibration!r}.")


def fold_splits(y, random_state):
    """The (training rows, scored rows) of each fold: stratified, shuffled, seeded by
    ``random_state``; min(5, rows of the smallest class) folds."""
    _, counts = np.unique(y, return_counts=True)
    folds = min(FOLDS, int(counts.min()))
    if folds < 2:
        raise SettingsError("probability=True fits its calibration on out-of-fold decision "
                            "values, which needs at least 2 rows of every class; a class of y "
                            "has 1.")
    splitter = StratifiedKFold(folds, shuffle=True, random_state=seed_from(random_state))
    return list(splitter.split(np.zeros((y.size, 1)), y))


def out_of_fold_scores(estimator, X, y, sample_weight=None) -> np.ndarray:
    """Every row's decision value from a model fitted without its fold (:func:`fold_splits`):
    (n,) for two classes, (n, C) for more. ``estimator`` is fitted (its ``kernel_`` holds the
    γ the folds take)."""
    X = check_array(X, accept_sparse="csr", dtype=None, ensure_all_finite=False)
    y = column_or_1d(y)
    settings = {"probability": False}
    if isinstance(estimator.gamma, str):  # the full fit's γ, not each fold's own
        settings["gamma"] = estimator.kernel_.gamma
    scores = np.zeros(y.size if estimator.classes_.size == 2 else (y.size,
                                                                    estimator.classes_.size))
    for train, scored in fold_splits(y, estimator.random_state):
        fold = clone(estimator).set_params(**settings)
        weights = None if sample_weight is None else np.asarray(sample_weight)[train]
        fold.fit(X[train], y[train], sample_weight=weights)
        scores[scored] = fold.decision_function(X[scored])
    return scores


def calibrated_model(estimator, X, y, sample_weight=None):
    """``estimator.model_`` (fitted on all rows) with ``estimator.calibration``'s map fitted on
    the out-of-fold decision values (:func:`out_of_fold_scores`)."""
    scores = out_of_fold_scores(estimator, X, y, sample_weight)
    labels = np.searchsorted(estimator.classes_, column_or_1d(y))
    if sample_weight is not None:  # rows the fit left out are left out here too
        used = np.asarray(sample_weight, dtype=np.float64) > 0
        scores, labels = scores[used], labels[used]
    return replace(estimator.model_, calibration=fit_calibration(
        estimator.calibration, scores, labels, estimator.classes_.size))
