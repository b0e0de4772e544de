"""What a benchmark run shares between methods (:class:`BenchContext`) and the result row every
method produces (:func:`make_row`), one row per fitted model (SODM: one per level)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from .budget import OK, ArrayStore

if TYPE_CHECKING:  # annotations only: the benchmark loads Spark when it starts a session
    from pyspark import RDD
    from pyspark.sql import SparkSession

    from ..data.datasets import BenchData

# What the Markdown table calls each --methods name (SODM rows add the partitioner and level)
DISPLAY_NAMES = {
    "sodm": "SODM", "exact-odm": "exact ODM", "csvrg": "CSVRG", "coreset-svm": "coreset SVM",
    "cvm": "CVM", "dsvrg": "DSVRG (linear)", "svrg": "SVRG (linear)", "svc": "SVC (LIBSVM)",
    "linearsvc": "LinearSVC (LIBLINEAR)", "mllib-linearsvc": "MLlib LinearSVC",
    "xgboost": "XGBoost", "xgboost-spark": "XGBoost on Spark", "nystroem-linear":
    "Nyström + LinearSVC", "nystroem-spark": "Nyström + MLlib LinearSVC",
}
PARTITIONER_NAMES = {"stratified": "SODM", "random": "SODM random", "kmeans": "DC-ODM kmeans",
                     "dip": "DiP-ODM", "cascade": "Ca-ODM cascade"}
WHERE = {"spark": "Spark", "task": "1 Spark task", "driver": "1 process"}


class Measured(NamedTuple):
    """What a fit measured, the numeric columns every result row has (None: not measured):
    the test ``accuracy``, ``fit_seconds``, ``predict_seconds`` (of the test rows), the
    support vectors ``n_sv`` and the floats the model holds, ``model_floats``. A fit that did
    not finish records its ``fit_seconds`` only."""

    accuracy: float | None = None
    fit_seconds: float | None = None
    predict_seconds: float | None = None
    n_sv: int | None = None
    model_floats: int | None = None

    @classmethod
    def split(cls, columns: dict) -> tuple["Measured", dict]:
        """(the measured columns among ``columns``, the other columns)."""
        return cls(**{name: columns[name] for name in cls._fields if name in columns}), \
            {name: value for name, value in columns.items() if name not in cls._fields}


def make_row(method: str, status: str = OK, *, name: str | None = None, runs_on: str = "",
             measured: Measured | None = None, note: str = "", **extra) -> dict:
    """One result: the JSON record and a line of the Markdown table; ``extra``: the columns
    of some methods only (an SODM level's ``level``, ``partitions``, ...)."""
    row = {"method": method, "name": name or DISPLAY_NAMES.get(method, method), "status": status,
           "runs_on": runs_on, **(measured or Measured())._asdict(), "note": note}
    row.update(extra)
    return {key: (value.item() if isinstance(value, np.generic) else value)
            for key, value in row.items()}


def tag_budget(rows: list[dict], budget_seconds: float) -> list[dict]:
    """Record the budget on rows that did not finish (tables print "N/A (> budget)")."""
    for row in rows:
        if row["status"] != OK:
            row.setdefault("budget_seconds", budget_seconds)
    return rows


@dataclass
class BenchContext:
    """One run's shared state: the Spark session, the split, the block RDD of the training
    rows (persisted once, before any clock starts), the shared numeric gamma and settings."""

    spark: SparkSession
    data: BenchData
    blocks: RDD  # RDD[Block] of the training rows, labels as in ``data``
    gamma: float
    settings: dict
    budget_seconds: float
    log: object = print
    _arrays: ArrayStore | None = None
    _frames: dict = field(default_factory=dict)

    @property
    def sc(self):
        return self.spark.sparkContext

    @property
    def classes(self) -> np.ndarray:
        return np.asarray(self.data.classes, dtype=np.float64)

    @property
    def test(self) -> tuple:
        return self.data.X_test, self.data.y_test

    def accuracy(self, predictions) -> float:
        return float(np.mean(np.asarray(predictions) == self.data.y_test))

    def arrays_dir(self) -> str:
        """The split as .npy files for the child processes (written on first use)."""
        if self._arrays is None:
            data = self.data
            self._arrays = ArrayStore({"X_train": data.X_train, "y_train": data.y_train,
                                       "X_test": data.X_test, "y_test": data.y_test})
        return str(self._arrays.path)

    def frame(self, which: str):
        """The split as a cached DataFrame for MLlib: ``label`` the class number 0..K-1 in
        the order of ``classes`` (0/1 for two), ``features`` an ML vector."""
        if which not in self._frames:
            from pyspark.ml.linalg import VectorUDT, Vectors
            from pyspark.sql.types import DoubleType, StructField, StructType

            schema = StructType([StructField("label", DoubleType()),
                                 StructField("features", VectorUDT())])
            classes = self.classes  # a local: the closure must not carry the context
            if which == "train":
                rows = self.blocks.flatMap(lambda block: [
                    (float(number), Vectors.dense(x))
                    for x, number in zip(block.X, np.searchsorted(classes, block.y))])
            else:
                X, y = self.test
                rows = self.sc.parallelize(
                    [(float(number), Vectors.dense(x))
                     for x, number in zip(X, np.searchsorted(classes, y))],
                    max(2, self.sc.defaultParallelism))
            frame = self.spark.createDataFrame(rows, schema).cache()
            frame.count()
            self._frames[which] = frame
        return self._frames[which]

    def close(self) -> None:
        for frame in self._frames.values():
            frame.unpersist()
        self._frames.clear()
        if self._arrays is not None:
            self._arrays.close()
            self._arrays = None
