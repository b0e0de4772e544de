"""SODMClassifier / SODMClassificationModel: SODM as a pyspark.ml Estimator and Model.

Modelled on pyspark.ml's LinearSVC: Params with setters and getters, ``featuresCol`` (ML
vectors or arrays of numbers), ``labelCol``, ``predictionCol`` and ``rawPredictionCol``
(``[-f(x), f(x)]``, so ``BinaryClassificationEvaluator`` ranks by f). The model predicts with a
pandas UDF over the kernel expansion (in its closure) and saves as Spark ML metadata (JSON) plus
``data/arrays.npz`` — no pickles — in a version folder of the model directory
(:mod:`sodm_spark.estimators.ml_persistence`). Fitting and tuning go through
:func:`sodm_spark.spark.train.train`, as the job's do. With ``kernel="linear"`` the fit is
DSVRG (SODM Algorithm 2, as ``jobs/train_sodm.py --kernel linear``: ``maxIter`` epochs at most,
stopped when the objective changes by at most ``tol`` relative; unset, 30 and 1e-6) with an
unpenalized intercept unless ``fitIntercept`` is false.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd
from pyspark import keyword_only
from pyspark.ml import Estimator, Model
from pyspark.ml.functions import array_to_vector, vector_to_array
from pyspark.ml.linalg import VectorUDT
from pyspark.ml.param import Param, Params, TypeConverters
from pyspark.ml.param.shared import (HasFeaturesCol, HasLabelCol, HasMaxIter, HasPredictionCol,
                                     HasProbabilityCol, HasRawPredictionCol, HasSeed, HasTol)
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DoubleType

from ..core.validation import shown_classes
from ..data.storage import join
from ..models.expansion import KernelExpansion
from ..selection.tuning import ParamGrid
from ..spark.dsvrg.fit import DSVRGFit
from ..spark.io import dataframe_to_blocks
from ..spark.frames import context_of
from ..spark.sodm.params import SODMParams
from ..spark.train import Search, fit_params, sodm_params, train
from .ml_persistence import ModelWriter, VersionedReadWrite


def _gamma_converter(value):
    if isinstance(value, str) and value in ("scale", "auto"):
        return value
    return TypeConverters.toFloat(value)


def _param(name, converter, doc):
    return Param(Params._dummy(), name, doc, typeConverter=converter)


_CONVERTERS = {"text": TypeConverters.toString, "int": TypeConverters.toInt,
               "float": TypeConverters.toFloat, "bool": TypeConverters.toBoolean,
               "gamma": _gamma_converter}

# Every ODM/SODM param: its name, its type (a key of _CONVERTERS) and its doc, continued on
# indented lines; the shared mixins add the columns, tol, maxIter and seed.
_PARAM_TABLE = """\
kernel             text   rbf, linear, poly or laplacian
gamma              gamma  'scale' (1/(d·Var X)), 'auto' (1/d) or a number
degree             int    polynomial degree
coef0              float  polynomial offset
fitIntercept       bool   linear kernel: fit an unpenalized intercept (as MLlib's LinearSVC)
kernelOffset       float  other kernels: solve with k + c, a penalized bias (default 0)
inputMap           text   auto (dense rows of 256+ features, rbf kernel: fitted on the
                          principal components that keep 95% of the variance when they are at
                          most a third of the features; stored in the model) or none
scale              text   minmax (every column onto [0, 1] before the kernel, stored in the
                          model) or none
lam                float  λ > 0, weight of the margin loss
theta              float  θ in [0, 1), margin band half-width
v                  float  v in (0, 1], weight of margins above 1+θ
p                  int    partitions merged per level (>= 2)
levels             int    L: start from p^L partitions (unset: chosen from the rows, as the
                          job's --levels auto)
strata             int    S landmark strata (Eqns 7-8)
stopLevel          int    last level solved (0 = all data)
partitioner        text   stratified, random, kmeans, dip or cascade
warmStart          text   scaled (γ/p) or concat
cacheMb            float  cap on the kernel cache per task in MB (unset: the memory budget
                          decides)
kernelStorage      text   auto (cached kernels in int16 fixed point, half float32's memory,
                          where the kernel's diagonal bounds its values), float32 or int16
autoStop           bool   stop merging when a level no longer improves the validation accuracy
                          by minImprovement (a held-out validationFraction of the rows); the
                          model is the best level's
validationFraction float  share of the rows held out for autoStop (at most 10,000 rows:
                          exactly that many from 100,000 rows on)
minImprovement     float  autoStop: least validation accuracy gain a merge must bring
timeBudget         float  autoStop: no level whose predicted seconds would end the fit later
globalStep         text   auto (after the levels, one Nyström ODM of every row when the chosen
                          level is near the majority class or the last merge gained nothing;
                          kept where the validation slice ranks it higher), always or none
globalCentres      int    centres of the global step (default 1000)
"""


def _read_param_table(table: str) -> dict:
    """name: (converter, doc) of each entry of ``table``."""
    params, name = {}, None
    for line in table.splitlines():
        if line.startswith(" "):  # the doc goes on
            converter, doc = params[name]
            params[name] = (converter, f"{doc} {line.strip()}")
        else:
            name, kind, doc = line.split(None, 2)
            params[name] = (_CONVERTERS[kind], doc)
    return params


_PARAMS = _read_param_table(_PARAM_TABLE)


class _SODMParams(HasFeaturesCol, HasLabelCol, HasPredictionCol, HasRawPredictionCol,
                  HasProbabilityCol, HasTol, HasMaxIter, HasSeed):
    """The params of :data:`_PARAMS` (set on the class below) and their SODMParams defaults."""

    def __init__(self):
        super().__init__()
        defaults = SODMParams()
        self._setDefault(fitIntercept=True, **{name: getattr(defaults, _field(name))
                                               for name in _SODM_PARAM_NAMES})

    def _settings(self) -> dict:
        """The Params as :func:`~sodm_spark.spark.train.fit_params` reads them."""
        settings = {_field(name): self.getOrDefault(name) for name in _SODM_PARAM_NAMES}
        settings["fit_intercept"] = self.getOrDefault("fitIntercept")
        # kernel='linear': maxIter and tol, when set, bound DSVRG's epochs and its relative
        # objective change (as LinearSVC's bound its iterations); unset, the job's 30 epochs
        # and 1e-6, since their defaults (1000, 1e-2) are the kernel solves' sweeps and tol
        for param, setting in ((self.maxIter, "epochs"), (self.tol, "epoch_tol")):
            if self.isSet(param):
                settings[setting] = self.getOrDefault(param)
        return settings

    def _sodm_params(self) -> SODMParams:
        return sodm_params(self._settings())


# pyspark.ml finds Params as class attributes (Params._copy_params reads dir(cls))
for _name, (_converter, _doc) in _PARAMS.items():
    setattr(_SODMParams, _name, _param(_name, _converter, _doc))
del _name, _converter, _doc

# The Params that map one to one onto SODMParams fields (camelCase -> snake_case);
# fitIntercept belongs to the linear path (DSVRGParams) and is added by _settings.
_SODM_PARAM_NAMES = tuple(name for name in _PARAMS if name != "fitIntercept") + (
    "tol", "maxIter", "seed")


def _field(param_name: str) -> str:
    return re.sub("([A-Z])", r"_\1", param_name).lower()


def _make_setters_and_getters(cls):
    """setX/getX for every param (the shared column, tol, maxIter and seed params included), as
    pyspark.ml classes spell them out by hand; the shared mixins' own getters are kept."""
    for name in _SODM_PARAM_NAMES + ("fitIntercept", "featuresCol", "labelCol", "predictionCol",
                                     "rawPredictionCol"):
        title = name[0].upper() + name[1:]

        def setter(self, value, _name=name):
            return self._set(**{_name: value})

        def getter(self, _name=name):
            return self.getOrDefault(_name)

        setter.__name__, getter.__name__ = f"set{title}", f"get{title}"
        setter.__doc__ = f"Sets the value of :py:attr:`{name}`."
        getter.__doc__ = f"Gets the value of :py:attr:`{name}` or its default."
        setattr(cls, f"set{title}", setter)
        if not hasattr(cls, f"get{title}"):
            setattr(cls, f"get{title}", getter)
    return cls


@_make_setters_and_getters
class SODMClassifier(Estimator, _SODMParams, VersionedReadWrite):
    """Scalable ODM (SODM paper, Algorithm 1) as a pyspark.ml Estimator: two classes, or more
    (one-vs-rest ODMs fitted together: ``rawPrediction`` holds one score per class and
    ``prediction`` the label of the largest, as MLlib's multi-class classifiers).

    The fit takes the path of ``jobs/train_sodm.py`` (docs/design.md §6): landmark strata, p^L
    partitions solved in parallel and merged level by level, automatic stopping on held-out
    rows, the model of the level it keeps; ``kernel="linear"`` fits DSVRG (Algorithm 2)
    instead. Unlike the job it runs no search of its own: the ODM hyperparameters are the
    Params' (defaults λ = 1e5, θ = 0.1, v = 0.2), and :meth:`tune` searches a grid. Every
    keyword of the constructor is a Param with ``setX`` / ``getX``; the defaults are
    :class:`~sodm_spark.spark.sodm.params.SODMParams`'.

    Attributes
    ----------
    featuresCol, labelCol : Param
        Input columns: features as an ML vector or an array of numbers, labels as numbers
        (any two values, or more classes).
    predictionCol, rawPredictionCol : Param
        Output columns of ``transform``: the label, and ``[-f(x), f(x)]`` for two classes or
        one score per class.
    kernel, gamma, degree, coef0, kernelOffset, scale : Param
        The kernel (``rbf``, ``linear``, ``poly``, ``laplacian``), its width (``"scale"``,
        ``"auto"`` or a number), a penalized bias k + c, and the per-column scaling the model
        stores (``minmax``: dense rows onto [0, 1], sparse rows by their largest magnitude).
    lam, theta, v, tol, maxIter : Param
        The ODM problem (λ, θ, v of docs/design.md §1) and each local solve's tolerance and
        most sweeps; with ``kernel="linear"``, DSVRG's relative objective change and most
        epochs (unset: 1e-6 and 30, as the job's).
    p, levels, strata, stopLevel, partitioner, warmStart, cacheMb, kernelStorage, seed : Param
        SODM: partitions merged per level, L (unset: from the rows), the S strata, the last
        level solved, how rows are dealt, the merged level's start, the kernel cache per task
        and the dtype of its values (docs/design.md §1.3), every random choice.
    autoStop, validationFraction, minImprovement, timeBudget : Param
        Automatic stopping between levels (docs/design.md §2.7).
    globalStep, globalCentres : Param
        The global step after the levels (docs/design.md §2.9).
    fitIntercept : Param
        Linear kernel: fit an unpenalized intercept.

    The fitted :class:`SODMClassificationModel` has ``expansion`` (the
    :class:`~sodm_spark.models.expansion.KernelExpansion`), ``levelStats`` (one dict per solved
    level or DSVRG epoch, as in the job's metrics JSON), ``stopReason``, ``bestLevel``,
    ``globalStepReport``, ``numFeatures`` and ``classes``.

    Examples
    --------
    >>> from pyspark.sql import SparkSession
    >>> from sklearn.datasets import load_digits
    >>> from sodm_spark import SODMClassificationModel, SODMClassifier
    >>> spark = SparkSession.builder.master("local[2]").getOrCreate()
    >>> X, y = load_digits(return_X_y=True)
    >>> df = spark.createDataFrame([(row.tolist(), float(label % 2)) for row, label in zip(X, y)],
    ...                            ["features", "label"])
    >>> model = SODMClassifier(levels=2, lam=1e5, theta=0.1, v=0.2).fit(df)
    >>> [entry["partitions"] for entry in model.levelStats][0]  # the top level: 3^2
    9
    >>> scored = model.transform(df).select("label", "rawPrediction", "prediction")
    >>> model.write().overwrite().save("sodm-model")
    >>> SODMClassificationModel.load("sodm-model").numFeatures
    64
    >>> tuned, search = SODMClassifier(levels=2).tune(df, {"lam": [1e4, 1e5]})  # no fit
    """

    @keyword_only
    def __init__(self, *, featuresCol="features", labelCol="label", predictionCol="prediction",
                 rawPredictionCol="rawPrediction", probabilityCol="probability", kernel="rbf",
                 gamma="scale", degree=3, coef0=0.0, fitIntercept=True, kernelOffset=0.0,
                 scale="minmax", lam=1e5, theta=0.1, v=0.2, tol=1e-2, maxIter=1000, p=3,
                 levels=None, strata=20, stopLevel=0, partitioner="stratified", warmStart="scaled",
                 cacheMb=None, kernelStorage="auto", seed=0, autoStop=True, validationFraction=0.1,
                 minImprovement=0.002, timeBudget=None, globalStep="auto",
                 globalCentres=1000):
        super().__init__()
        self._set(**self._input_kwargs)

    @keyword_only
    def setParams(self, **kwargs):
        return self._set(**self._input_kwargs)

    def tune(self, dataset, grid=None):
        """Score a grid of (γ multiple, λ, θ, v) on a seeded sample of the top level's partitions
        of ``dataset`` (about 20,000 rows) against held-out validation rows
        (:mod:`sodm_spark.spark.tune`), without fitting.

        ``grid``: a :class:`~sodm_spark.selection.tuning.ParamGrid`, a dict such as
        ``{"gamma": [0.5, 1, 2], "lam": [1e3, 1e4]}`` (γ values multiply this estimator's
        gamma; keys left out keep the default grid's values) or None (the default grid).
        Returns (a copy of this estimator with the best point's gamma, lam, theta and v set,
        the :class:`~sodm_spark.spark.tune.TuneResult`).
        """
        params = fit_params(self._settings())
        grid = grid if isinstance(grid, ParamGrid) else \
            ParamGrid() if grid is None else ParamGrid.from_dict(grid)
        trained = self._train(dataset, params, search=Search(grid, then_fit=False))
        best = trained.params
        return self.copy({self.gamma: best.gamma, self.lam: best.lam, self.theta: best.theta,
                          self.v: best.v}), trained.search

    def _train(self, dataset, params, search=None):
        """:func:`sodm_spark.spark.train.train` on ``dataset``'s feature and label columns."""
        blocks, n_features = dataframe_to_blocks(dataset, self.getFeaturesCol(),
                                                 self.getLabelCol())
        return train(context_of(dataset.sparkSession), blocks, n_features, params,
                     search=search, refuse_classes=self._refuse_classes)

    def _refuse_classes(self, classes):
        """Label values the fit cannot take, refused in the estimator's words."""
        if classes.size < 2:
            raise ValueError(f"SODMClassifier needs at least two classes in column "
                             f"{self.getLabelCol()!r}; it holds only one class "
                             f"({classes[0]:g}). Check labelCol.")
        raise ValueError(f"kernel='linear' fits DSVRG, a binary classifier, but column "
                         f"{self.getLabelCol()!r} holds {classes.size} classes "
                         f"({shown_classes(classes)}); use a nonlinear kernel (its levels "
                         "fit every class at once), or filter the DataFrame to two label "
                         "values.")

    def _fit(self, dataset):
        fit = self._train(dataset, fit_params(self._settings())).fit
        model = SODMClassificationModel(fit.model)
        if isinstance(fit, DSVRGFit):  # the linear kernel: one entry per epoch
            model.levelStats = [entry.to_dict() for entry in fit.epochs]
        else:
            model.levelStats = [entry.to_dict() for entry in fit.levels]
            model.stopReason, model.bestLevel = fit.stop_reason, fit.best_level
            model.globalStepReport = fit.global_step
        return self._copyValues(model)


@_make_setters_and_getters
class SODMClassificationModel(Model, _SODMParams, VersionedReadWrite):
    """The fitted kernel expansion; ``transform`` adds rawPrediction and prediction columns,
    and ``probabilityCol`` (class probabilities, Platt's sigmoids fitted on the fit's
    validation slice: :mod:`sodm_spark.models.calibration`) when the model is calibrated.

    Attributes
    ----------
    expansion : KernelExpansion
        The decision function (:class:`sodm_spark.models.expansion.KernelExpansion`), with the
        feature scaling (and a compressed model's projection) it applies to raw rows.
    levelStats : list of dict
        One entry per solved level (or DSVRG epoch), as in the job's metrics JSON.
    stopReason : str
        Why the levels stopped; ``bestLevel`` is the level whose model this is.
    globalStepReport : dict or None
        The global step after the levels (docs/design.md §2.9), as in the job's metrics JSON:
        its plan, passes and validation accuracy against the level's, and ``kept``, whether
        this model is its Nyström ODM rather than level ``bestLevel``'s; or why it did not run.
        None when it was not tried.
    numFeatures : int
        Features of a raw row.
    classes : ndarray
        The label values the scores stand for.
    """

    def __init__(self, expansion: KernelExpansion | None = None):
        super().__init__()
        self.expansion = expansion
        self.levelStats = []  # one dict per solved level, as in the job's metrics JSON
        self.stopReason, self.bestLevel = "", None  # why the fit stopped, whose model this is
        self.globalStepReport = None  # the global step's report (fit_sodm), None when not tried

    @property
    def numFeatures(self) -> int:
        return self.expansion.n_features_in

    @property
    def classes(self) -> np.ndarray:
        return self.expansion.classes

    def predictRaw(self, features):
        """f(x): a float for two classes, one score per class (array) for more."""
        scores = self.expansion.decision_function(np.asarray(features, float)[None, :])[0]
        return float(scores) if np.ndim(scores) == 0 else np.asarray(scores)

    def _transform(self, dataset):
        expansion = self.expansion
        binary = expansion.coef.shape[1] == 1
        # the model travels in the function's closure (PySpark broadcasts a large one itself;
        # a Spark Connect session has no broadcast variables)
        payload = (expansion.support_vectors, expansion.coef, expansion.kernel,
                   expansion.intercept, expansion.input_map)
        n_features, features_col = self.numFeatures, self.getFeaturesCol()
        classes = [float(c) for c in expansion.classes]

        @F.pandas_udf(ArrayType(DoubleType()))
        def raw_scores_udf(features: pd.Series) -> pd.Series:
            from sodm_spark.models.scoring import raw_scores
            support_vectors, coef, kernel, intercept, input_map = payload
            X = np.stack(features.to_numpy()).astype(np.float64) if len(features) else \
                np.zeros((0, n_features))
            if X.shape[1] != n_features:
                raise ValueError(f"column {features_col!r} has {X.shape[1]} features; the "
                                 f"model was trained on {n_features}. Transform data with the "
                                 "training data's feature columns, in the same order.")
            X = input_map(X)  # the model's scaling and projection, as KernelExpansion's
            # jobs/predict.py's scoring: float32 kernel blocks, boundary rows in float64
            scores, _ = raw_scores(X, support_vectors, coef, kernel, intercept)
            return pd.Series(list(np.concatenate([-scores, scores], axis=1) if binary
                                  else scores))

        column = F.col(self.getFeaturesCol())
        if isinstance(dataset.schema[self.getFeaturesCol()].dataType, VectorUDT):
            column = vector_to_array(column)
        raw = raw_scores_udf(column)
        out = dataset.withColumn(self.getRawPredictionCol(), array_to_vector(raw))
        if binary:
            prediction = F.when(raw[1] > 0, F.lit(classes[1])).otherwise(F.lit(classes[0]))
        else:  # the first largest score, as numpy's argmax
            prediction = F.element_at(F.array(*[F.lit(c) for c in classes]),
                                      F.array_position(raw, F.array_max(raw)).cast("int"))
        out = out.withColumn(self.getPredictionCol(), prediction)
        calibration = expansion.calibration  # Platt's sigmoids, as KernelExpansion.predict_proba
        if calibration is None or not self.getProbabilityCol():
            return out
        sigmoids = [F.lit(1.0) / (F.lit(1.0) + F.exp(F.lit(float(a)) * raw[1 if binary else c]
                                                      + F.lit(float(b))))
                    for c, (a, b) in enumerate(zip(calibration.slopes, calibration.intercepts))]
        total = sum(sigmoids[1:], sigmoids[0])  # one-vs-rest sigmoids normalized (0: uniform)
        probabilities = [F.lit(1.0) - sigmoids[0], sigmoids[0]] if binary else [
            F.when(total > 0, p / total).otherwise(F.lit(1.0 / len(sigmoids))) for p in sigmoids]
        return out.withColumn(self.getProbabilityCol(),
                              array_to_vector(F.array(*probabilities)))

    def compress(self, max_sv: int, method: str = "kmeans") -> "SODMClassificationModel":
        """A copy over at most ``max_sv`` points
        (:func:`sodm_spark.models.compression.compress`)."""
        return self._copyValues(SODMClassificationModel(
            self.expansion.compress(max_sv, method=method, seed=self.getOrDefault("seed"))))

    def toLocal(self):
        """An ODMClassifier-style local predictor (scikit-learn API) for the same model."""
        from .sklearn import ODMClassifier

        return ODMClassifier.from_expansion(self.expansion)

    _writer = ModelWriter

    @classmethod
    def _from_saved(cls, store, folder):
        return cls(KernelExpansion.load(join(folder, "data"), store=store))
