"""Methods that run on Spark in the benchmark's session, each under a time budget
(:func:`.budget.run_spark_with_budget`): SODM per partitioner (a row per level), DSVRG, MLlib's
LinearSVC and the single-task comparators (CSVRG, coreset SVM, CVM via
:func:`sodm_spark.spark.single.fit_in_one_task`). The numerics are the existing solvers'."""
from __future__ import annotations

import time
from importlib import import_module

import numpy as np
import pandas as pd  # module level: pandas_udf resolves the UDF's string annotations here

from .budget import OK, SKIPPED, run_spark_with_budget
from .results import PARTITIONER_NAMES, WHERE, Measured, make_row


def sodm_params(settings: dict, gamma: float, partitioner: str, **overrides):
    from ..spark.train import sodm_params

    keys = ("lam", "theta", "v", "tol", "max_iter", "p", "levels", "strata", "stop_level",
            "warm_start", "seed", "cache_mb")
    # every level is a row of the comparison: no automatic stopping here; and every method
    # sees the same rows with the same gamma, so no feature scaling of SODM's own
    return sodm_params({**{key: settings[key] for key in keys}, **overrides, "kernel": "rbf",
                        "gamma": gamma, "partitioner": partitioner, "auto_stop": False,
                        "scale": "none"})


def run_sodm(ctx, partitioner: str, params=None, label: str | None = None) -> list[dict]:
    """One SODM fit (Algorithm 1) with ``partitioner``: a row per solved level, whose fit
    seconds are the time from the start of the fit to that level's model (partitioning
    included, test scoring excluded)."""
    from ..spark.train import Progress, ScoredRows, train

    params = params or sodm_params(ctx.settings, ctx.gamma, partitioner)
    name = label or PARTITIONER_NAMES.get(partitioner, f"SODM {partitioner}")
    floats_per_sv = ctx.data.n_features + (len(ctx.classes) if ctx.data.multiclass else 1)
    rows = []

    def on_level(entry):
        rows.append(make_row("sodm", name=name, runs_on=WHERE["spark"], partitioner=partitioner,
                             level=entry.level, partitions=entry.partitions,
                             measured=Measured(accuracy=entry.test_accuracy,
                                               fit_seconds=entry.elapsed, n_sv=entry.n_sv,
                                               model_floats=entry.n_sv * floats_per_sv),
                             level_seconds=entry.seconds, sweeps=entry.sweeps_max,
                             rows_per_partition=int(np.ceil(entry.rows / entry.partitions))))
        ctx.log(f"    {name} level {entry.level}: {entry.partitions} partitions, "
                f"{entry.seconds:.1f} s (cumulative {entry.elapsed:.1f} s), "
                f"accuracy {entry.test_accuracy:.4f}")

    outcome = run_spark_with_budget(ctx.sc, f"sodm-{partitioner}", ctx.budget_seconds,
                                    lambda: train(ctx.sc, ctx.blocks, ctx.data.n_features,
                                                  params, ctx.classes,
                                                  rows=ScoredRows(test=ctx.test),
                                                  progress=Progress(on_level=on_level)).fit)
    if outcome.status == OK:
        fit = outcome.value
        start = time.perf_counter()
        predictions = fit.model.predict(ctx.data.X_test)
        rows[-1]["predict_seconds"] = time.perf_counter() - start
        rows[-1]["fit_seconds"] = fit.train_seconds  # the model collected to the driver
        rows[-1]["accuracy"] = ctx.accuracy(predictions)
        rows[-1]["final"] = True
        return rows
    done = f" (levels {params.levels}..{rows[-1]['level']} finished)" if rows else ""
    return rows + [make_row("sodm", outcome.status, name=name, runs_on=WHERE["spark"],
                            partitioner=partitioner,
                            measured=Measured(fit_seconds=outcome.seconds),
                            note=outcome.note + done, final=True)]


def run_dsvrg(ctx) -> list[dict]:
    """DSVRG (Algorithm 2) on the linear-kernel ODM primal."""
    from ..spark.train import fit_params, train

    s = ctx.settings
    params = fit_params({"kernel": "linear", "lam": s["linear_lam"], "theta": s["theta"],
                         "v": s["v"], "epochs": s["epochs"], "seed": s["seed"]})
    outcome = run_spark_with_budget(ctx.sc, "dsvrg", ctx.budget_seconds, lambda: train(
        ctx.sc, ctx.blocks, ctx.data.n_features, params, ctx.classes).fit)
    if outcome.status != OK:
        return [make_row("dsvrg", outcome.status, runs_on=WHERE["spark"],
                         measured=Measured(fit_seconds=outcome.seconds), note=outcome.note)]
    fit = outcome.value
    start = time.perf_counter()
    predictions = np.where(ctx.data.X_test @ fit.w + fit.intercept > 0, 1.0, -1.0)
    predict_seconds = time.perf_counter() - start
    return [make_row("dsvrg", runs_on=WHERE["spark"],
                     measured=Measured(accuracy=ctx.accuracy(predictions),
                                       fit_seconds=fit.train_seconds,
                                       predict_seconds=predict_seconds,
                                       model_floats=ctx.data.n_features),
                     note=f"{len(fit.epochs)} epochs")]


def linear_svc(ctx, reg_param: float):
    """MLlib's LinearSVC, wrapped in OneVsRest (one binary SVM per class) for 3+ classes."""
    from pyspark.ml.classification import LinearSVC, OneVsRest

    svc = LinearSVC(regParam=reg_param, standardization=False, maxIter=100)
    return OneVsRest(classifier=svc) if ctx.data.multiclass else svc


def run_mllib_linearsvc(ctx) -> list[dict]:
    """Spark MLlib's LinearSVC on the same rows: ``regParam = 1/(C·M)`` makes its objective
    (mean hinge + regParam/2 ‖w‖²) the LIBLINEAR problem with ``C = --linear-C``."""
    train, test = ctx.frame("train"), ctx.frame("test")  # built before the clock
    reg_param = 1.0 / (ctx.settings["linear_C"] * ctx.data.X_train.shape[0])
    estimator = linear_svc(ctx, reg_param)
    outcome = run_spark_with_budget(ctx.sc, "mllib-linearsvc", ctx.budget_seconds,
                                    lambda: _timed(lambda: estimator.fit(train)))
    if outcome.status != OK:
        return [make_row("mllib-linearsvc", outcome.status, runs_on=WHERE["spark"],
                         measured=Measured(fit_seconds=outcome.seconds), note=outcome.note)]
    model, fit_seconds = outcome.value
    start = time.perf_counter()
    scored = model.transform(test).select("label", "prediction").toPandas()
    predict_seconds = time.perf_counter() - start
    accuracy = float(np.mean(scored["label"].to_numpy() == scored["prediction"].to_numpy()))
    if ctx.data.multiclass:
        note = f"regParam={reg_param:.3g}, OneVsRest over {len(model.models)} classes"
    else:
        summary = model.summary() if callable(model.summary) else model.summary
        note = f"regParam={reg_param:.3g}, {summary.totalIterations} iterations"
    return [make_row("mllib-linearsvc", runs_on=WHERE["spark"],
                     measured=Measured(accuracy, fit_seconds, predict_seconds,
                                       model_floats=(ctx.data.n_features + 1) * _models(ctx)),
                     note=note)]


def _models(ctx) -> int:
    """Linear models one MLlib fit holds: one, or one per class (OneVsRest)."""
    return len(ctx.classes) if ctx.data.multiclass else 1


def _timed(function):
    start = time.perf_counter()
    value = function()
    return value, time.perf_counter() - start


def one_task_params(method: str, settings: dict, gamma: float) -> dict:
    common = {"kernel": "rbf", "gamma": gamma, "random_state": settings["seed"]}
    if method == "csvrg":
        return {**common, "lam": settings["lam"], "theta": settings["theta"], "v": settings["v"],
                "max_core": settings["max_core"], "epochs": settings["epochs"]}
    if method == "coreset-svm":
        return {**common, "C": settings["svc_C"], "coreset_size": settings["coreset_size"]}
    return {**common, "C": settings["svc_C"], "max_core": settings["max_core"]}


def run_one_task(ctx, method: str) -> list[dict]:
    """A comparator of docs/design.md §4 fitted inside one Spark task (all rows in one partition)."""
    from ..spark.single import fit_in_one_task

    params = one_task_params(method, ctx.settings, ctx.gamma)
    outcome = run_spark_with_budget(ctx.sc, method, ctx.budget_seconds,
                                    lambda: fit_in_one_task(ctx.blocks, method, params))
    if outcome.status != OK:
        return [make_row(method, outcome.status, runs_on=WHERE["task"],
                         measured=Measured(fit_seconds=outcome.seconds), note=outcome.note)]
    estimator, task_seconds, _ = outcome.value
    start = time.perf_counter()
    predictions = estimator.predict(ctx.data.X_test)
    predict_seconds = time.perf_counter() - start
    n_sv = int(estimator.support_vectors_.shape[0])
    size = {"csvrg": "n_core_", "coreset-svm": "n_coreset_", "cvm": "n_core_"}[method]
    note = f"{size.strip('_').replace('n_', '')} {getattr(estimator, size)}" \
        if hasattr(estimator, size) else ""
    return [make_row(method, runs_on=WHERE["task"],
                     measured=Measured(ctx.accuracy(predictions), task_seconds, predict_seconds,
                                       n_sv, n_sv * (ctx.data.n_features + 1)),
                     note=note)]


def missing_package(method: str) -> str:
    """Why ``method`` cannot run here ('' when it can): its optional package is absent."""
    from .driver_fit import OPTIONAL_PACKAGES

    package = OPTIONAL_PACKAGES.get(method)
    if package is None:
        return ""
    try:
        import_module(package)
    except ImportError:
        return f"{package} is not installed (pip install -e '.[bench]')"
    return ""


def run_xgboost_spark(ctx) -> list[dict]:
    """XGBoost's own Spark estimator (``xgboost.spark.SparkXGBClassifier``, hist) on the cached
    training DataFrame, one XGBoost worker per core."""
    missing = missing_package("xgboost-spark")
    if missing:
        return [make_row("xgboost-spark", SKIPPED, runs_on=WHERE["spark"], note=missing)]
    from xgboost.spark import SparkXGBClassifier

    s = ctx.settings
    train, test = ctx.frame("train"), ctx.frame("test")  # built before the clock
    estimator = SparkXGBClassifier(features_col="features", label_col="label",
                                   num_workers=max(1, ctx.sc.defaultParallelism),
                                   tree_method="hist", n_estimators=s["xgb_trees"],
                                   max_depth=s["xgb_depth"], random_state=s["seed"])
    return _fit_spark_model(ctx, "xgboost-spark", lambda: estimator.fit(train), test,
                            lambda model: 5 * len(model.get_booster().trees_to_dataframe()),
                            f"{s['xgb_trees']} trees, depth {s['xgb_depth']}")


def _fit_spark_model(ctx, method, fit, test, floats, note, transform=None) -> list[dict]:
    """Time ``fit()`` under the budget, score ``test`` (label 0/1) with the fitted model
    (``transform(model, test)`` when the model needs its input prepared)."""
    outcome = run_spark_with_budget(ctx.sc, method, ctx.budget_seconds, lambda: _timed(fit))
    if outcome.status != OK:
        return [make_row(method, outcome.status, runs_on=WHERE["spark"],
                         measured=Measured(fit_seconds=outcome.seconds), note=outcome.note)]
    model, fit_seconds = outcome.value
    start = time.perf_counter()
    scored = (transform(model, test) if transform else model.transform(test)) \
        .select("label", "prediction").toPandas()
    predict_seconds = time.perf_counter() - start
    accuracy = float(np.mean(scored["label"].to_numpy() == scored["prediction"].to_numpy()))
    from .driver_fit import SV_LABELS
    return [make_row(method, runs_on=WHERE["spark"],
                     measured=Measured(accuracy, fit_seconds, predict_seconds,
                                       model_floats=floats(model)),
                     note=note, sv_label=SV_LABELS[method])]


def nystroem_frame(frame, kernel, landmarks_b, norm_b):
    """``frame`` with ``features`` replaced by its Nyström features (pandas UDF over Arrow
    batches; the landmarks and K_ZZ^{-1/2} broadcast)."""
    from pyspark.ml.functions import array_to_vector, vector_to_array
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, DoubleType

    @F.pandas_udf(ArrayType(DoubleType()))
    def nystroem_udf(rows: pd.Series) -> pd.Series:
        from sodm_spark.baselines.nystroem import features
        X = np.stack(rows.to_numpy()) if len(rows) else np.zeros((0, landmarks_b.value.shape[1]))
        phi = features(kernel, X, landmarks_b.value, norm_b.value,
                       dtype=np.float32)
        return pd.Series(list(phi.astype(np.float64)))

    return frame.select("label", array_to_vector(
        nystroem_udf(vector_to_array(F.col("features")))).alias("features"))


def run_nystroem_spark(ctx) -> list[dict]:
    """Nyström features (a seeded sample of training rows as landmarks, broadcast) computed in
    Arrow batches, then MLlib's LinearSVC with ``regParam = 1/(C·M)``. The fit time includes
    choosing the landmarks, K_ZZ^{-1/2} and the training rows' features."""
    from ..baselines.nystroem import normalization, sample_landmarks
    from ..core.kernels import Kernel

    s = ctx.settings
    train, test = ctx.frame("train"), ctx.frame("test")
    kernel = Kernel.create("rbf", ctx.gamma)
    reg_param = 1.0 / (s["nystroem_C"] * ctx.data.X_train.shape[0])
    state = {}

    def fit():
        landmarks = sample_landmarks(ctx.data.X_train, s["nystroem_components"], s["seed"])
        state["landmarks"] = ctx.sc.broadcast(landmarks)
        state["norm"] = ctx.sc.broadcast(normalization(kernel, landmarks))
        mapped = nystroem_frame(train, kernel, state["landmarks"],
                                state["norm"]).cache()
        model = linear_svc(ctx, reg_param).fit(mapped)
        mapped.unpersist()
        return model

    m = s["nystroem_components"]
    try:
        return _fit_spark_model(
            ctx, "nystroem-spark", fit, test,
            lambda model: m * ctx.data.n_features + m * m + (m + 1) * _models(ctx),
            f"{m} landmarks, regParam={reg_param:.3g}",
            transform=lambda model, frame: model.transform(
                nystroem_frame(frame, kernel, state["landmarks"], state["norm"])))
    finally:
        for broadcast in (state.get("landmarks"), state.get("norm")):
            if broadcast is not None:
                broadcast.unpersist()
