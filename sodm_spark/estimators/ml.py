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

import warnings
from dataclasses import replace

import numpy as np
import pandas as pd
from pyspark import keyword_only
from pyspark.ml import Estimator, Model
from pyspark.ml.functions import array_to_vector, vector_to_array
from pyspark.ml.linalg import VectorUDT
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DoubleType

from ..core.defaults import COMPRESS_METHOD, FIT_INTERCEPT, MAX_SV
from ..core.errors import InputError, SettingsError, executors_checked
from ..core.validation import shown_classes
from ..data.storage import join
from ..models.expansion import KernelExpansion
from ..selection.tuning import ParamGrid
from ..spark.dsvrg.fit import DSVRGFit
from ..core.feature_names import columns_by_name, extra_columns_line
from ..spark.io import dataframe_to_blocks
from ..spark.io.arrow import table_features, vector_order
from ..spark.io.string_columns import StringEncoding, encoded_columns, encoded_features
from ..spark.engine import context_of, workers_python
from ..spark.connect import check_connect_session
from ..spark.sodm.params import SODMParams as _D  # its fields' defaults: the keywords'
from ..spark.train import Search, fit_params, train
from .ml_params import _make_setters_and_getters, _SODMParams
from .ml_persistence import ModelWriter, VersionedReadWrite


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
        The kernel (``rbf``, ``linear``, ``poly``, ``laplacian``, ``matern``: the names of
        :func:`sodm_spark.core.kernels.kernel_names`), its width (``"scale"``, ``"auto"`` or a
        number), a penalized bias k + c, and the per-column scaling the model stores
        (``minmax``: dense rows onto [0, 1], sparse rows by their largest magnitude).
    lam, theta, v, tol, maxIter : Param
        The ODM problem (λ, θ, v of docs/design.md §1) and each local solve's tolerance and
        most sweeps; with ``kernel="linear"``, DSVRG's relative objective change and most
        epochs (unset: 1e-6 and 30, as the job's).
    p, levels, strata, stopLevel, partitioner, warmStart, cacheMb, kernelStorage, seed : Param
        SODM: partitions merged per level, L (unset: from the rows), the S strata, the last
        level solved, how rows are dealt, the merged level's start, the kernel cache per task
        and the dtype of its values (docs/design.md §1.3), every random choice.
    device : Param
        Where each partition's solve runs: ``auto`` (a GPU a task sees, else the CPU's numba
        solvers), ``cpu`` or ``gpu`` (docs/design.md §2.10).
    autoStop, validationFraction, minImprovement, timeBudget, metric : Param
        Automatic stopping between levels, and what it, the level kept, ``tune`` and the global
        step judge by: accuracy, auc, logloss, f1 or balanced_accuracy (docs/design.md §2.7).
    globalStep, globalCentres : Param
        The global step after the levels (docs/design.md §2.9).
    calibration : Param
        ``probabilityCol``'s map from decision values to class probabilities, fitted on the
        validation slice: ``sigmoid`` (Platt's, the default), ``isotonic`` or ``none``
        (docs/design.md §7; the linear kernel holds its slice out of the rows too).
    fitIntercept : Param
        Linear kernel: fit an unpenalized intercept.
    maxSV, compressMethod : Param
        The compression of the levels' model, as the job's ``--max-sv`` and
        ``--compress-method``: ``auto`` (the default) compresses a model of more than 100,000
        support vectors where the validation slice keeps its accuracy, ``none`` never, N to at
        most N points; the points a random sample of the support vectors (``random``), or
        ``kmeans``, ``landmarks``, ``largest`` (docs/design.md §2.6).
    classWeight, weightCol : Param
        ``balanced`` or ``label:weight`` pairs: each class's rows weighted in every solve
        (levels, search, global step, DSVRG) and in the validation scores (docs/design.md
        §1.4); a numeric column of each row's weight (finite, >= 0; rows of weight 0 are left
        out), times its class's. Unset, every row weighs 1.

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

    # keyword_only sets only the keywords given; the Params' defaults (ml_params) are what an
    # unset one means, and these read the same SODMParams fields, so help() shows them
    @keyword_only
    def __init__(self, *, featuresCol="features", labelCol="label", predictionCol="prediction",
                 rawPredictionCol="rawPrediction", probabilityCol="probability",
                 kernel=_D.kernel, gamma=_D.gamma, degree=_D.degree, coef0=_D.coef0,
                 fitIntercept=FIT_INTERCEPT, kernelOffset=_D.kernel_offset, scale=_D.scale,
                 inputMap=_D.input_map, lam=_D.lam, theta=_D.theta, v=_D.v, tol=_D.tol,
                 maxIter=_D.max_iter, p=_D.p, levels=_D.levels, strata=_D.strata,
                 stopLevel=_D.stop_level, partitioner=_D.partitioner, warmStart=_D.warm_start,
                 cacheMb=_D.cache_mb, kernelStorage=_D.kernel_storage, device=_D.device,
                 seed=_D.seed, autoStop=_D.auto_stop, validationFraction=_D.validation_fraction,
                 minImprovement=_D.min_improvement, timeBudget=_D.time_budget,
                 globalStep=_D.global_step, globalCentres=_D.global_centres,
                 calibration=_D.calibration, classWeight=_D.class_weight, metric=_D.metric,
                 weightCol=None, maxSV=MAX_SV, compressMethod=COMPRESS_METHOD):
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
        """:func:`sodm_spark.spark.train.train` on ``dataset``'s feature and label columns (and
        its weight column, when ``weightCol`` is set: each row's weight, docs/design.md
        §1.4)."""
        weight_col = self.getOrDefault("weightCol") if self.isDefined("weightCol") else None
        # the linear path has no levels to compress: their options reach it only when set,
        # to be refused in one line
        options = self._level_options() if isinstance(params, _D) or any(
            self.isSet(name) for name in ("maxSV", "compressMethod")) else None
        check_connect_session(dataset.sparkSession)  # a server too old: before the data
        # executors whose Python lacks the package fail the first task: one line, not the
        # workers' traces
        with executors_checked(workers_python(dataset.sparkSession)):
            # string columns encoded by the tasks (sodm_spark.core.categories)
            blocks, n_features, encoding = dataframe_to_blocks(
                dataset, self.getFeaturesCol(), self.getLabelCol(),
                weight_col=weight_col or None, strings=StringEncoding(seed=params.seed))
            if encoding is not None and isinstance(params, _D):  # one-hot a range apart
                params = replace(params, feature_weights=tuple(
                    encoding.feature_weights().tolist()))
            trained = train(context_of(dataset.sparkSession), blocks, n_features, params,
                            search=search, refuse_classes=self._refuse_classes,
                            level_options=options)
        if trained.fit is not None:  # named columns (or a vector's ML attributes): kept
            names, types = table_features(dataset, self.getFeaturesCol(),
                                          [self.getLabelCol(), weight_col])
            if encoding is not None:  # the numeric columns' types, then the encoded features
                names, types = encoded_features(encoding, names, types)
            trained.fit.model = trained.fit.model.with_features(names, types, encoding)
        return trained

    def _refuse_classes(self, classes):
        """Label values the fit cannot take, refused in the estimator's words."""
        if classes.size < 2:
            raise InputError(f"SODMClassifier needs at least two classes in column "
                             f"{self.getLabelCol()!r}; it holds only one class "
                             f"({classes[0]:g}). Check labelCol.")
        raise SettingsError(f"kernel='linear' fits DSVRG, a binary classifier, but column "
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


# The model's expansion may be None only in the signature: a fit, a load and compress() each
# build the model with one
_BUILT_WITH_EXPANSION = "a fitted or loaded model has its kernel expansion"


@_make_setters_and_getters
class SODMClassificationModel(Model, _SODMParams, VersionedReadWrite):
    """The fitted kernel expansion; ``transform`` adds rawPrediction and prediction columns,
    and ``probabilityCol`` (class probabilities: the ``calibration`` Param's map, Platt's
    sigmoid or an isotonic one, fitted on the fit's validation slice,
    :mod:`sodm_spark.models.calibration`) when the model is calibrated.

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
        self.levelStats: list[dict] = []  # one dict per solved level, as in the job's metrics JSON
        self.stopReason, self.bestLevel = "", None  # why the fit stopped, whose model this is
        self.globalStepReport = None  # the global step's report (fit_sodm), None when not tried

    @property
    def numFeatures(self) -> int:
        assert self.expansion is not None, _BUILT_WITH_EXPANSION
        return self.expansion.n_features_in

    @property
    def classes(self) -> np.ndarray:
        assert self.expansion is not None, _BUILT_WITH_EXPANSION
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
        # a sigmoid or an isotonic map (.calibration), applied in the scoring UDF itself: a
        # second UDF over its output would be chained to it, and Spark would score every row
        # twice
        calibration = expansion.calibration if self.getProbabilityCol() else None

        @F.pandas_udf(ArrayType(DoubleType()))
        def raw_scores_udf(features: pd.Series) -> pd.Series:
            from sodm_spark.models.scoring import raw_scores
            support_vectors, coef, kernel, intercept, input_map = payload
            X = np.stack(features.to_numpy()).astype(np.float64) if len(features) else \
                np.zeros((0, n_features))
            if X.shape[1] != n_features:
                raise InputError(f"column {features_col!r} has {X.shape[1]} features; the "
                                 f"model was trained on {n_features}. Transform data with the "
                                 "training data's feature columns (a vector's elements are "
                                 "taken by position unless its ML attributes name them).")
            X = input_map(X)  # the model's scaling and projection, as KernelExpansion's
            # jobs/predict.py's scoring: float32 kernel blocks, boundary rows in float64
            scores, _ = raw_scores(X, support_vectors, coef, kernel, intercept)
            out = [-scores, scores] if binary else [scores]
            if calibration is not None:  # then the class probabilities, as predict_proba's
                out.append(calibration.probabilities(scores[:, 0] if binary else scores))
            return pd.Series(list(np.concatenate(out, axis=1)))

        scored = raw_scores_udf(self._feature_array(dataset))
        raw = scored if calibration is None else F.slice(scored, 1, len(classes))
        out = dataset.withColumn(self.getRawPredictionCol(), array_to_vector(raw))
        if binary:
            prediction = F.when(raw[1] > 0, F.lit(classes[1])).otherwise(F.lit(classes[0]))
        else:  # the first largest score, as numpy's argmax
            prediction = F.element_at(F.array(*[F.lit(c) for c in classes]),
                                      F.array_position(raw, F.array_max(raw)).cast("int"))
        out = out.withColumn(self.getPredictionCol(), prediction)
        if calibration is None:
            return out
        probability = F.slice(scored, len(classes) + 1, len(classes))
        return out.withColumn(self.getProbabilityCol(), array_to_vector(probability))

    def _feature_array(self, dataset):
        """The features of ``dataset`` as one array Column in the model's order: the
        ``featuresCol`` vector or array (its elements by name when both its ML attributes and
        the model name them, else by position), or, where the DataFrame has no such column and
        the model keeps its feature names, the named columns (any order; the columns the model
        was not trained on are left out with one warning, a missing one is refused naming it:
        :mod:`sodm_spark.core.feature_names`)."""
        assert self.expansion is not None, _BUILT_WITH_EXPANSION
        names, features_col = self.expansion.feature_names, self.getFeaturesCol()
        categories = self.expansion.categories
        if features_col not in dataset.columns and categories is not None:
            # the input columns by name, string columns encoded in Spark SQL as in training
            columns = [c for c in dataset.columns if c != self.getLabelCol()]
            features, extra = encoded_columns(categories, columns, "the DataFrame")
            if extra:
                warnings.warn(extra_columns_line(extra, "the DataFrame"), UserWarning,
                              stacklevel=3)
            return F.array(*features)
        if features_col not in dataset.columns and names is not None:
            _, extra = columns_by_name(names, dataset.columns, "the DataFrame",
                                       not_features=[self.getLabelCol()])
            if extra:
                warnings.warn(extra_columns_line(extra, "the DataFrame"), UserWarning,
                              stacklevel=3)
            return F.array(*[F.col(name).cast("double") for name in names])
        field = dataset.schema[features_col]
        column = F.col(features_col)
        if isinstance(field.dataType, VectorUDT):
            column = vector_to_array(column)
        placed = vector_order(field, names)
        if placed is None:
            return column
        order, extra = placed
        if extra:
            warnings.warn(extra_columns_line(extra, f"the features column {features_col!r}"),
                          UserWarning, stacklevel=3)
        return F.array(*[column[j] for j in order])

    def compress(self, max_sv: int, method: str = "kmeans") -> "SODMClassificationModel":
        """A copy over at most ``max_sv`` points
        (:func:`sodm_spark.models.compression.compress`)."""
        assert self.expansion is not None, _BUILT_WITH_EXPANSION
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
