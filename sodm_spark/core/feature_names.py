"""The names (and types) of a model's feature columns, and the one rule every door that scores
named rows follows: the model's columns are taken **by name**, in the model's order.

* any order of the same columns gives the same predictions (the columns are reordered);
* a column the model was not trained on is left out, and named in one line
  (:func:`extra_columns_line`);
* a column the model needs and the input lacks is refused with one line naming it
  (:func:`columns_by_name` raises an :class:`~sodm_spark.core.errors.InputError`);
* rows without names (LIBSVM lines, a CSV without a header, NumPy arrays, a vector or array
  column without ML attributes) keep the positional contract: the i-th value is the model's
  i-th feature, and only their count is checked.

A model without names (saved before names were kept, or trained on rows without them) scores
every input positionally, as before. Pure Python: the Spark readers, the estimators, the MLflow
flavor and the ONNX export all call it.
"""
from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from .errors import InputError

#: How many names a message shows before it says how many more there are.
SHOWN_NAMES = 8


def shown_names(names: Sequence[str], limit: int = SHOWN_NAMES) -> str:
    """``names`` quoted and joined, the first ``limit`` of them and a count of the rest."""
    quoted = ", ".join(repr(str(name)) for name in list(names)[:limit])
    more = len(names) - limit
    return quoted + (f" and {more:,} more" if more > 0 else "")


def checked_names(names: Iterable[object] | None,
                  where: str = "the features") -> tuple[str, ...] | None:
    """``names`` as a tuple of strings (None stays None), refused when one repeats: a repeated
    name could not say which column is meant."""
    if names is None:
        return None
    checked: tuple[str, ...] = tuple(str(name) for name in names)
    repeated = sorted(name for name, count in Counter(checked).items() if count > 1)
    if repeated:
        raise InputError(f"{where}: the column name(s) {shown_names(repeated)} occur more "
                         "than once; give every feature column its own name.")
    return checked


def columns_by_name(model_names: Sequence[str], given: Sequence[str], where: str,
                    not_features: Sequence[str] = ()) -> tuple[list[int], list[str]]:
    """(the position in ``given`` of each of ``model_names``, in the model's order; the names of
    ``given`` that are not the model's and not in ``not_features``, left out).

    Refused with one line, naming them, when ``given`` lacks some of the model's columns."""
    position = {name: index for index, name in enumerate(given)}
    missing = [name for name in model_names if name not in position]
    if missing:
        raise InputError(
            f"{where} has no column{'s' if len(missing) > 1 else ''} {shown_names(missing)}, "
            f"which the model was trained on ({len(model_names):,} feature columns: "
            f"{shown_names(model_names)}); add {'them' if len(missing) > 1 else 'it'} (the "
            "columns are taken by name, in any order).")
    wanted = set(model_names) | set(not_features)
    extra = [name for name in given if name not in wanted]
    return [position[name] for name in model_names], extra


def extra_columns_line(extra: Sequence[str], where: str) -> str:
    """The one line that names the columns a scoring door left out (not the model's)."""
    return (f"{where}: left out {len(extra):,} column{'s' if len(extra) != 1 else ''} the model "
            f"was not trained on ({shown_names(extra)})")


def positional_problem(n_given: int, n_model: int, where: str) -> str | None:
    """The refusal of unnamed rows whose width is not the model's, or None when it is."""
    if n_given == n_model:
        return None
    return (f"{where} has {n_given:,} features; the model was trained on {n_model:,}. Rows "
            "without column names are taken by position: give the training data's feature "
            "columns, in the same order.")


def named_columns(X: Any) -> list[str] | None:
    """The column names of a DataFrame ``X`` (pandas, or anything with ``columns`` and
    ``iloc``) when every one is a string, else None: arrays, CSR rows and frames of unnamed
    (integer) columns have no names."""
    columns = getattr(X, "columns", None)
    if columns is None or not hasattr(X, "iloc"):
        return None
    names = list(columns)
    return names if names and all(isinstance(name, str) for name in names) else None


def frame_in_order(X: Any, model_names: Sequence[str] | None, where: str = "X",
                   stacklevel: int = 3) -> Any:
    """``X`` with ``model_names``' columns in that order when ``X`` is a DataFrame with named
    columns and the model has names (a column the model was not trained on left out with one
    ``UserWarning`` line, a missing one refused naming it, a repeated name refused); anything
    else as it is, for the positional contract. ``stacklevel``: the warning's, as
    :func:`warnings.warn` takes it, from this function's caller."""
    given = named_columns(X)
    if model_names is None or given is None:
        return X
    given = list(checked_names(given, where) or ())
    positions, extra = columns_by_name([str(name) for name in model_names], given, where)
    if extra:
        warnings.warn(extra_columns_line(extra, where), UserWarning, stacklevel=stacklevel)
    if positions == list(range(len(given))):
        return X
    return X.iloc[:, positions]
