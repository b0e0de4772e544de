"""String (categorical) columns as numeric features: the encoding a model keeps and applies to
every row it scores. Pure numpy; no Spark.

A categorical column of a training table is encoded by its number of distinct values:

* **one-hot**, at most :data:`ONE_HOT_MAX_LEVELS` levels: one feature a level, 1 on rows of that
  level and 0 elsewhere. Two rows of different levels then differ by 1 in two features; the fit
  scales those features by ``1/√2`` (:meth:`CategoryEncoding.feature_weights`, applied after
  its min-max scaling, which maps a numeric column's range to [0, 1]), so that two different
  categories lie as far apart as the two ends of a numeric column's range.
* **target encoding**, more levels: one feature for a binary label (the smoothed share of the
  positive class among the level's rows), one a class for more classes, whatever the number of
  levels, where one-hot would widen every kernel entry's inner product by a feature a level (the
  kernel blocks are GEMMs over the features: 457 one-hot features for the US flights' 229 origins
  and 228 destinations against 2). A level's value is shrunk towards the class's share over all
  rows, ``(Σ_level y + m·ȳ) / (n_level + m)`` with ``m`` = :data:`SMOOTHING` (scikit-learn's
  ``TargetEncoder`` with ``smooth=m``), so a level seen on a handful of rows says little.
  The training rows are encoded out of fold (each row by the tables of the other
  :data:`FOLDS` folds, its fold drawn from its row id and the seed): a level's own label would
  otherwise leak into its feature and the fit would trust it more than new rows deserve.

A value not seen in training (a new airport) is encoded as no level (one-hot: every feature 0)
or as the prior (target: the class's share over all rows), and counted
(:attr:`Encoded.unseen`), so that scoring doors can say how many rows they met. A missing
value (None) is a level of its own, named ``None``.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

#: Most distinct values a column is one-hot encoded with; above, target encoding.
ONE_HOT_MAX_LEVELS = 16
#: The target encoding's shrinkage: the rows a level's own mean is weighed against the prior as.
SMOOTHING = 10.0
#: Folds of the training rows' out-of-fold target encoding.
FOLDS = 5
#: The factor of a one-hot feature after the fit's min-max scaling (see the module).
ONE_HOT_WEIGHT = 1.0 / np.sqrt(2.0)
ONE_HOT, TARGET = "one-hot", "target"


def _output_name(label: object) -> str:
    """A class as a target feature's name ends: ``1`` for the label 1.0 read as a double."""
    if isinstance(label, (float, np.floating)) and float(label).is_integer():
        return str(int(label))
    return str(label)


def level_texts(values: Any) -> np.ndarray:
    """``values`` as a NumPy text array, a missing value (None) as ``"None"`` (one C loop,
    not a Python step a row)."""
    return np.asarray(values, dtype=object).astype(str)


@dataclass(frozen=True)
class EncodedColumn:
    """How one categorical column ``name`` becomes features: its training ``levels`` (sorted
    text), ``kind`` (:data:`ONE_HOT` or :data:`TARGET`) and, for target encoding, ``table``
    (levels × outputs: each level's smoothed share of each output's class) and ``prior`` (each
    output's share over all training rows: an unseen level's value)."""

    name: str
    levels: tuple[str, ...]
    kind: str
    table: np.ndarray | None = None
    prior: np.ndarray | None = None
    outputs: tuple[str, ...] = ()

    @property
    def features(self) -> tuple[str, ...]:
        """The names of the features this column becomes."""
        if self.kind == ONE_HOT:
            return tuple(f"{self.name}={level}" for level in self.levels)
        return tuple(f"{self.name}:{output}" for output in self.outputs)

    def codes(self, values: Any) -> np.ndarray:
        """Each value's level number, -1 for a value not seen in training."""
        text = level_texts(values)
        if not self.levels:
            return np.full(text.size, -1, dtype=np.int64)
        levels = np.asarray(self.levels, dtype=str)
        found = np.minimum(np.searchsorted(levels, text), levels.size - 1)
        return np.where(levels[found] == text, found, -1).astype(np.int64)

    def encode(self, codes: np.ndarray) -> np.ndarray:
        """The (n, features) values of rows of level ``codes`` (-1: unseen)."""
        n = codes.size
        if self.kind == ONE_HOT:
            out = np.zeros((n, len(self.levels)), dtype=np.float64)
            rows = np.flatnonzero(codes >= 0)
            out[rows, codes[rows]] = 1.0
            return out
        values = self.table
        assert values is not None and self.prior is not None  # a target column has both
        out = np.repeat(self.prior[None, :], n, axis=0)
        seen = codes >= 0
        out[seen] = values[codes[seen]]
        return out


@dataclass(frozen=True)
class Encoded:
    """Rows encoded: ``X`` (n, features) float64 in the encoding's feature order, and how many
    values of each categorical column were not seen in training (``unseen``)."""

    X: np.ndarray
    unseen: dict = field(default_factory=dict)


@dataclass(frozen=True)
class CategoryEncoding:
    """The categorical columns of a model's input (``columns``, in the order their features
    follow the numeric ones) and the numeric input columns kept as they are
    (``numeric``): the model's features are ``numeric`` then each column's
    :attr:`EncodedColumn.features`."""

    numeric: tuple[str, ...]
    columns: tuple[EncodedColumn, ...]

    @property
    def input_columns(self) -> tuple[str, ...]:
        """The columns a table to score must hold."""
        return self.numeric + tuple(column.name for column in self.columns)

    @property
    def feature_names(self) -> tuple[str, ...]:
        return self.numeric + tuple(name for column in self.columns
                                    for name in column.features)

    def feature_weights(self) -> np.ndarray:
        """Each feature's factor after the fit's min-max scaling: :data:`ONE_HOT_WEIGHT` for
        one-hot features, 1 for the others."""
        return np.concatenate([np.ones(len(self.numeric))] + [
            np.full(len(column.features), ONE_HOT_WEIGHT if column.kind == ONE_HOT else 1.0)
            for column in self.columns])

    def renamed(self, names: dict[str, str]) -> "CategoryEncoding":
        """The same encoding of input columns renamed by ``names`` (old → new; others
        kept): a reader that aliases the columns it reads gives the model their own names."""
        return CategoryEncoding(tuple(names.get(name, name) for name in self.numeric),
                                tuple(replace(column, name=names.get(column.name, column.name))
                                      for column in self.columns))

    def encode(self, numeric: np.ndarray, categorical: dict[str, Any]) -> Encoded:
        """Rows to score: the (n, len(numeric)) numeric columns, and each categorical column's
        values (``categorical[name]``), as the model's features."""
        parts, unseen = [np.asarray(numeric, dtype=np.float64).reshape(-1, len(self.numeric))], {}
        for column in self.columns:
            codes = column.codes(categorical[column.name])
            unseen[column.name] = int((codes < 0).sum())
            parts.append(column.encode(codes))
        return Encoded(np.hstack(parts), unseen)


def training_folds(row_ids: Any, seed: int, folds: int = FOLDS) -> np.ndarray:
    """Each training row's fold (0 .. folds-1), from its row id and the seed alone: the same
    whatever the partitions and retries (a 64-bit mix, SplitMix64's finalizer)."""
    x = np.asarray(row_ids, dtype=np.int64).astype(np.uint64) + np.uint64(seed & (2**63 - 1))
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return (x % np.uint64(folds)).astype(np.int64)


def _outputs(classes: Any) -> list:
    """The classes a target encoding gives a feature: the second of two, else each."""
    listed: list = list(classes)
    return listed[1:] if len(listed) == 2 else listed


@dataclass(frozen=True)
class LevelCounts:
    """What a column's encoding is made of: its ``levels`` (sorted text), the label values met
    (``labels``, sorted) and ``counts`` (levels × folds × labels: the rows of each level in
    each fold with each label). Counts of disjoint rows add (:meth:`merged`): each Spark task
    counts its own rows."""

    levels: tuple[str, ...]
    labels: tuple[float, ...]
    counts: np.ndarray

    def merged(self, other: "LevelCounts") -> "LevelCounts":
        levels = tuple(sorted(set(self.levels) | set(other.levels)))
        labels = tuple(sorted(set(self.labels) | set(other.labels)))
        counts = np.zeros((len(levels), self.counts.shape[1], len(labels)))
        for part in (self, other):
            rows = np.searchsorted(levels, part.levels)
            columns = np.searchsorted(labels, part.labels)
            counts[np.ix_(rows, np.arange(counts.shape[1]), columns)] += part.counts
        return LevelCounts(levels, labels, counts)

    def by_output(self, classes: Any) -> np.ndarray:
        """levels × folds × (1 + outputs): each level's rows, then those of each output's
        class (:func:`_outputs`)."""
        positions = {float(label): k for k, label in enumerate(self.labels)}
        columns = [self.counts.sum(axis=2)]
        for c in _outputs(classes):
            k = positions.get(float(c))
            columns.append(self.counts[:, :, k] if k is not None
                           else np.zeros(self.counts.shape[:2]))
        return np.stack(columns, axis=-1)


def level_counts(values: Any, y: Any, folds: Any, n_folds: int = FOLDS) -> LevelCounts:
    """The :class:`LevelCounts` of rows of ``values`` with labels ``y`` in ``folds``."""
    levels, codes = np.unique(level_texts(values), return_inverse=True)
    labels, label_codes = np.unique(np.asarray(y, dtype=np.float64), return_inverse=True)
    cells = (codes * n_folds + np.asarray(folds, dtype=np.int64)) * labels.size + label_codes
    counts = np.bincount(cells, minlength=levels.size * n_folds * labels.size)
    return LevelCounts(tuple(str(v) for v in levels), tuple(float(v) for v in labels),
                       counts.reshape(levels.size, n_folds, labels.size).astype(np.float64))


def _smoothed(counts: np.ndarray, smoothing: float) -> tuple[np.ndarray, np.ndarray]:
    """(table, prior) of level counts (levels × (1 + outputs)): each level's
    ``(Σ_level y + m·ȳ) / (n_level + m)`` and ``ȳ``, the outputs' share over all the rows."""
    total = counts.sum(axis=0)
    prior = total[1:] / total[0] if total[0] else np.zeros(total.size - 1)
    table = (counts[:, 1:] + smoothing * prior[None, :]) / (counts[:, :1] + smoothing)
    return table, prior


def column_from_counts(name: str, counts: LevelCounts, classes: Any,
                       smoothing: float = SMOOTHING,
                       max_one_hot: int = ONE_HOT_MAX_LEVELS) -> EncodedColumn:
    """The encoding of a column from its training rows' :class:`LevelCounts`."""
    if len(counts.levels) <= max_one_hot:
        return EncodedColumn(name, counts.levels, ONE_HOT)
    table, prior = _smoothed(counts.by_output(classes).sum(axis=1), smoothing)
    return EncodedColumn(name, counts.levels, TARGET, table, prior,
                         tuple(_output_name(c) for c in _outputs(classes)))


def training_features(column: EncodedColumn, counts: LevelCounts, values: Any, folds: Any,
                      classes: Any,
                      smoothing: float = SMOOTHING) -> np.ndarray:
    """The training rows' features of ``column``: one-hot as any row, target-encoded out of
    fold (each row by the counts of the other folds: the module's reason)."""
    codes = column.codes(values)
    if column.kind == ONE_HOT:
        return column.encode(codes)
    folds = np.asarray(folds, dtype=np.int64)
    out = np.empty((codes.size, len(column.outputs)), dtype=np.float64)
    by_fold = counts.by_output(classes)
    for fold in np.unique(folds):
        table, prior = _smoothed(by_fold.sum(axis=1) - by_fold[:, fold], smoothing)
        inside = folds == fold
        held = EncodedColumn(column.name, column.levels, TARGET, table, prior, column.outputs)
        out[inside] = held.encode(codes[inside])
    return out


def fit_column(name: str, values: Any, y: Any, classes: Any, folds: Any = None,
               smoothing: float = SMOOTHING,
               max_one_hot: int = ONE_HOT_MAX_LEVELS) -> tuple[EncodedColumn, np.ndarray]:
    """The encoding of one categorical training column (``values``, labels ``y`` among
    ``classes``), and its training rows' features, out of fold (``folds``: each row's fold,
    from :func:`training_folds`; None: every row by the whole table)."""
    in_folds = np.zeros(len(y), dtype=np.int64) if folds is None else np.asarray(folds)
    counts = level_counts(values, y, in_folds)
    column = column_from_counts(name, counts, classes, smoothing, max_one_hot)
    if folds is None:
        return column, column.encode(column.codes(values))
    return column, training_features(column, counts, values, in_folds, classes, smoothing)


def fit_encoding(numeric_names: Any, numeric: np.ndarray, categorical: dict[str, Any],
                 y: Any, classes: Any, row_ids: Any = None, seed: int = 0,
                 smoothing: float = SMOOTHING, max_one_hot: int = ONE_HOT_MAX_LEVELS) -> tuple[CategoryEncoding, np.ndarray]:
    """The :class:`CategoryEncoding` of a training table (its numeric columns
    ``numeric_names`` / ``numeric``, each categorical column's values in ``categorical``) and
    its rows as the model's features, target-encoded columns out of fold (folds from
    ``row_ids`` and ``seed``; None: the rows' positions)."""
    ids = np.arange(len(y)) if row_ids is None else np.asarray(row_ids)
    folds = training_folds(ids, seed)
    columns, parts = [], [np.asarray(numeric, dtype=np.float64).reshape(len(y), -1)]
    for name, values in categorical.items():
        column, encoded = fit_column(name, values, y, classes, folds, smoothing, max_one_hot)
        columns.append(column)
        parts.append(encoded)
    return CategoryEncoding(tuple(numeric_names), tuple(columns)), np.hstack(parts)


def encoding_to_json(encoding: CategoryEncoding) -> dict[str, Any]:
    """The encoding as a model's metadata keeps it (plain JSON)."""
    return {"numeric": list(encoding.numeric), "columns": [
        {"name": c.name, "levels": list(c.levels), "kind": c.kind, "outputs": list(c.outputs),
         **({} if c.table is None else {"table": c.table.tolist(),
                                        "prior": np.asarray(c.prior).tolist()})}
        for c in encoding.columns]}


def encoding_from_json(document: dict[str, Any]) -> CategoryEncoding:
    """:func:`encoding_to_json`'s inverse; a ValueError naming what is malformed."""
    columns = []
    for entry in document.get("columns", []):
        levels = tuple(str(level) for level in entry["levels"])
        if list(levels) != sorted(levels) or len(set(levels)) != len(levels):
            raise ValueError(f"the levels of categorical column {entry['name']!r} are not "
                             "sorted and distinct")
        if entry["kind"] not in (ONE_HOT, TARGET):
            raise ValueError(f"categorical column {entry['name']!r} has encoding "
                             f"{entry['kind']!r}; expected {ONE_HOT!r} or {TARGET!r}")
        table = prior = None
        outputs = tuple(str(o) for o in entry.get("outputs", ()))
        if entry["kind"] == TARGET:
            table = np.asarray(entry["table"], dtype=np.float64)
            prior = np.asarray(entry["prior"], dtype=np.float64)
            if table.shape != (len(levels), len(outputs)) or prior.shape != (len(outputs),):
                raise ValueError(f"the target table of categorical column {entry['name']!r} "
                                 f"has shape {table.shape}; expected "
                                 f"{(len(levels), len(outputs))}")
        columns.append(EncodedColumn(str(entry["name"]), levels, entry["kind"], table, prior,
                                     outputs))
    return CategoryEncoding(tuple(str(n) for n in document.get("numeric", [])), tuple(columns))


def unseen_line(unseen: dict[str, int], where: str = "X") -> str:
    """One line saying how many values of each categorical column were not seen in training."""
    parts = ", ".join(f"{count:,} in {name!r}" for name, count in unseen.items())
    return (f"{where}: values not seen in training ({parts}) were encoded as no category "
            "(one-hot) or the training prior (target encoding).")


def encoded_frame(X: Any, encoding: CategoryEncoding, where: str = "X",
                  stacklevel: int = 3) -> Any:
    """A DataFrame's input columns, taken by name (:func:`~.feature_names.frame_in_order`),
    as the model's features, with one ``UserWarning`` line counting the values not seen in
    training; anything without column names as it is: rows of the model's features
    (already encoded), positional."""
    import warnings

    from .feature_names import frame_in_order, named_columns

    if named_columns(X) is None:
        return X
    ordered = frame_in_order(X, encoding.input_columns, where, stacklevel + 1)
    numeric = ordered.iloc[:, :len(encoding.numeric)].to_numpy(dtype=np.float64)
    values = {column.name: ordered[column.name].to_numpy(dtype=object)
              for column in encoding.columns}
    encoded = encoding.encode(numeric, values)
    unseen = {name: count for name, count in encoded.unseen.items() if count}
    if unseen:
        warnings.warn(unseen_line(unseen, where), UserWarning, stacklevel=stacklevel)
    return encoded.X
