"""Row and class weights of a fit (docs/design.md §1.4).

A weight s_i > 0 multiplies row i's margin loss in the ODM primal; the loss is averaged over
``S = Σ_i s_i`` instead of the row count, so an integer weight is that many copies of the row
and unit weights change nothing. Class weights give every row of class c the weight w_c;
``"balanced"`` is scikit-learn's ``n / (C · n_c)`` (King and Zeng, *Logistic Regression in
Rare Events Data*): each class then carries the same total weight, and the weighted accuracy
of a model on rows of the training rows' class shares is its balanced accuracy. A row's weight
is its sample weight times its class's weight, as scikit-learn's ``SVC`` combines
``sample_weight`` and ``class_weight``.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from .validation import shown_classes

BALANCED = "balanced"

#: A class weight as the estimators, Params and jobs take it: None, ``"balanced"`` (or its text
#: forms, :func:`parse_class_weight`), a dict of label: weight or (label, weight) pairs
ClassWeight = str | dict[Any, Any] | Iterable[tuple[Any, Any]] | None
#: ... and as :func:`canonical_class_weight` gives it back
CanonicalClassWeight = str | tuple[tuple[float, float], ...] | None


def parse_class_weight(text: str | None) -> str | dict[float, float] | None:
    """A class weight as a job's flag or a text Param gives it: ``"balanced"``, ``"none"`` /
    empty (None), or ``"label:weight,label:weight"`` (a dict of floats)."""
    if text is None or str(text).strip().lower() in ("", "none"):
        return None
    text = str(text).strip()
    if text == BALANCED:
        return BALANCED
    weights: dict[float, float] = {}
    for item in text.split(","):
        label, sep, weight = item.partition(":")
        try:
            weights[float(label)] = float(weight)
        except ValueError:
            raise ValueError(f"class weight {item.strip()!r} is not label:weight; give "
                             "'balanced' or pairs such as '0:1,1:5'.") from None
        if not sep:
            raise ValueError(f"class weight {item.strip()!r} is not label:weight; give "
                             "'balanced' or pairs such as '0:1,1:5'.")
    return weights


def canonical_class_weight(class_weight: ClassWeight) -> CanonicalClassWeight:
    """None, ``"balanced"`` or a tuple of (label, weight) pairs sorted by label: a form that a
    frozen settings record can hold and JSON can write (a dict's float keys would not survive
    JSON). Accepts what :func:`parse_class_weight` returns, a dict or such pairs."""
    if class_weight is None or isinstance(class_weight, str):
        if class_weight not in (None, BALANCED):
            return canonical_class_weight(parse_class_weight(class_weight))
        return class_weight
    given = class_weight.items() if isinstance(class_weight, dict) else class_weight
    try:
        pairs = tuple(sorted((float(label), float(weight)) for label, weight in given))
    except (TypeError, ValueError):
        raise ValueError(f"class_weight must be None, 'balanced' or a dict of label: weight; "
                         f"got {class_weight!r}.") from None
    for label, weight in pairs:
        if not (np.isfinite(weight) and weight > 0.0):
            raise ValueError(f"class_weight of class {label:g} must be positive and finite, "
                             f"got {weight!r}.")
    return pairs


def class_weights_for(class_weight: ClassWeight, classes: npt.ArrayLike,
                      counts: npt.ArrayLike | None = None) -> np.ndarray | None:
    """One weight per class of ``classes`` (sorted label values), or None for no weighting.

    ``counts``: rows per class (needed for ``"balanced"``). A dict names classes by label;
    a class it leaves out has weight 1, a label that is no class is refused.
    """
    canonical = canonical_class_weight(class_weight)
    if canonical is None:
        return None
    classes = np.asarray(classes, dtype=np.float64)
    if isinstance(canonical, str):  # BALANCED, the one text canonical_class_weight keeps
        counts = np.asarray(counts, dtype=np.float64)
        if counts.shape != classes.shape or np.any(counts <= 0):
            raise ValueError("class_weight='balanced' needs a positive row count per class.")
        balanced: np.ndarray = counts.sum() / (classes.size * counts)
        return balanced
    weights = np.ones(classes.size)
    for label, weight in canonical:
        where = np.flatnonzero(classes == label)
        if where.size == 0:
            raise ValueError(f"class_weight names class {label:g}, which is not among the "
                             f"labels ({', '.join(f'{c:g}' for c in classes)}).")
        weights[where[0]] = weight
    return weights


def row_weights(y_coded: npt.ArrayLike,
                class_weights: np.ndarray | Sequence[float] | None) -> np.ndarray | None:
    """Each row's class weight: ``y_coded`` ±1 (two classes: -1 is ``classes[0]``) or class
    numbers; None when there are no class weights."""
    if class_weights is None:
        return None
    y_coded = np.asarray(y_coded)
    index = (y_coded > 0).astype(np.int64) if len(class_weights) == 2 else \
        y_coded.astype(np.int64)
    by_row: np.ndarray = np.asarray(class_weights, dtype=np.float64)[index]
    return by_row


def combined_weights(sample_weight: npt.ArrayLike | None,
                     class_weights: np.ndarray | Sequence[float] | None,
                     y_coded: npt.ArrayLike) -> np.ndarray | None:
    """Sample weights times class weights per row (either may be None; None when both are)."""
    by_class = row_weights(y_coded, class_weights)
    if sample_weight is None:
        return by_class
    sample_weight = np.asarray(sample_weight, dtype=np.float64)
    return sample_weight if by_class is None else sample_weight * by_class


def weightless_classes_message(weightless: Sequence[str], weighted: Sequence[str],
                               weighted_rows: int, where: str) -> str:
    """The refusal of weights under which some classes have no row of positive weight:
    ``weightless`` those classes, ``weighted`` the others (as shown), ``weighted_rows`` the
    rows of positive weight, ``where`` the weights' name (``sample_weight``, a column)."""
    rows = "only 1 row weighs" if weighted_rows == 1 else f"{weighted_rows} rows weigh"
    one = len(weightless) == 1
    return (f"{where}: every row of class{'' if one else 'es'} {', '.join(weightless)} weighs 0 "
            f"({rows} more than 0, of class{'' if len(weighted) == 1 else 'es'} "
            f"{', '.join(weighted)}), so the fit would never predict {'it' if one else 'them'}; "
            f"give some of {'its' if one else 'their'} rows a positive weight, or leave "
            f"{'that class' if one else 'those classes'} out of the data (scikit-learn's SVC "
            "refuses such weights too).")


def check_weighted_classes(weights: np.ndarray, y_index: npt.ArrayLike, classes: npt.ArrayLike,
                           where: str = "sample_weight") -> None:
    """Refuse row weights under which a class has no row of positive weight (every weight of
    that class 0, or all the weight on rows of other classes: one row carrying all of it),
    naming the class: its rows would be left out and the model could never predict it.
    ``y_index``: each row's position in ``classes``."""
    classes = np.asarray(classes)
    weighted = np.bincount(np.asarray(y_index, dtype=np.int64)[weights > 0],
                           minlength=classes.size)
    if weighted.all():
        return
    shown = [shown_classes(classes[[c]]) for c in range(classes.size)]
    raise ValueError(weightless_classes_message(
        [shown[c] for c in np.flatnonzero(weighted == 0)],
        [shown[c] for c in np.flatnonzero(weighted)], int(np.count_nonzero(weights > 0)), where))


def estimator_weights(class_weight: object, classes: npt.ArrayLike, y_index: npt.ArrayLike,
                      sample_weight: npt.ArrayLike | None = None) -> np.ndarray | None:
    """Each row's weight in a scikit-learn estimator's fit: ``sample_weight`` (checked: one
    finite number ≥ 0 per row, some of every class above 0, :func:`check_weighted_classes`)
    times the class weight of ``classes[y_index]``, ``class_weight`` as
    :class:`sklearn.svm.SVC` takes it (None, ``"balanced"``, or a dict keyed by the labels
    themselves, of any type); None when neither is given."""
    y_index = np.asarray(y_index, dtype=np.int64)
    weights: np.ndarray | None = None
    if sample_weight is not None:
        weights = np.asarray(sample_weight, dtype=np.float64).reshape(-1)
        if weights.shape != y_index.shape:
            raise ValueError(f"sample_weight must hold one weight per row ({y_index.size}), "
                             f"got {weights.size}.")
        bad = ~(np.isfinite(weights) & (weights >= 0.0))
        if bad.any():
            raise ValueError(f"sample_weight must be finite and >= 0; row "
                             f"{int(np.argmax(bad))} has {weights[bad][0]!r}.")
        if not weights.any():
            raise ValueError("every sample_weight is zero: no row weighs anything, so there is "
                             "nothing to fit.")
        check_weighted_classes(weights, y_index, classes)
    if class_weight is None:
        return weights
    classes = np.asarray(classes)
    if isinstance(class_weight, str):
        if class_weight != BALANCED:
            raise ValueError(f"class_weight must be None, 'balanced' or a dict of label: "
                             f"weight; got {class_weight!r}.")
        per_class = y_index.size / (classes.size * np.bincount(y_index, minlength=classes.size))
    elif isinstance(class_weight, dict):
        per_class = np.ones(classes.size)
        for label, weight in class_weight.items():
            where = np.flatnonzero(classes == label)
            if where.size == 0:
                raise ValueError(f"class_weight names class {label!r}, which is not among the "
                                 f"labels {classes.tolist()}.")
            weight = float(weight)
            if not (np.isfinite(weight) and weight > 0.0):
                raise ValueError(f"class_weight of class {label!r} must be positive and "
                                 f"finite, got {weight!r}.")
            per_class[where[0]] = weight
    else:
        raise ValueError(f"class_weight must be None, 'balanced' or a dict of label: weight; "
                         f"got {class_weight!r}.")
    by_class: np.ndarray = per_class[y_index]
    return by_class if weights is None else weights * by_class
