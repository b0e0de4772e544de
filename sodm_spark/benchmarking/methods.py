"""The registry of benchmark methods (the names ``--methods`` takes) and the loop that runs
them one after another, each under the time budget, printing a progress line as each starts
and ends."""
from __future__ import annotations

from .budget import FAILED, OK, SKIPPED, run_in_child
from .driver_fit import DRIVER_METHODS
from .results import (DISPLAY_NAMES, PARTITIONER_NAMES, WHERE, Measured, make_row,
                      tag_budget)
from . import spark_methods

# name -> (where it runs, kernel, what it is)
METHODS = {
    "sodm": ("spark", "rbf", "SODM Algorithm 1, one run per --partitioners entry, a row per level"),
    "exact-odm": ("driver", "rbf", "ODMClassifier: exact dual coordinate descent"),
    "csvrg": ("task", "rbf", "CSVRGClassifier (coreset SVRG) as one Spark task"),
    "coreset-svm": ("task", "rbf", "CoresetSVMClassifier (sensitivity coreset) as one Spark task"),
    "cvm": ("task", "rbf", "CVMClassifier (core vector machine) as one Spark task"),
    "dsvrg": ("spark", "linear", "DSVRG, SODM Algorithm 2 (linear ODM)"),
    "svrg": ("driver", "linear", "ODMClassifier(kernel='linear', solver='svrg')"),
    "svc": ("driver", "rbf", "scikit-learn SVC (LIBSVM)"),
    "linearsvc": ("driver", "linear", "scikit-learn LinearSVC (LIBLINEAR)"),
    "mllib-linearsvc": ("spark", "linear", "pyspark.ml LinearSVC"),
    "xgboost": ("driver", "trees", "XGBoost (hist) in one process, all cores (.[bench] extra)"),
    "xgboost-spark": ("spark", "trees", "xgboost.spark.SparkXGBClassifier, one worker per core "
                      "(.[bench] extra)"),
    "nystroem-linear": ("driver", "rbf", "scikit-learn Nystroem features + LinearSVC"),
    "nystroem-spark": ("spark", "rbf", "Nystroem features in Arrow batches + MLlib LinearSVC"),
}
PARTITIONERS = tuple(PARTITIONER_NAMES)
# methods that fit more than two classes (MLlib's LinearSVC through OneVsRest); the others are
# reported as skipped on multi-class data
MULTICLASS_METHODS = ("sodm", "exact-odm", "svc", "linearsvc", "mllib-linearsvc", "xgboost",
                      "xgboost-spark", "nystroem-linear", "nystroem-spark")


def parse_names(text: str, known, what: str) -> list[str]:
    """Comma-separated names, in order, without repeats; an unknown one is a ValueError."""
    names = [name.strip() for name in str(text).split(",") if name.strip()]
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(f"unknown {what} {', '.join(map(repr, unknown))}; known: "
                         f"{', '.join(known)}.")
    if not names:
        raise ValueError(f"no {what} given; choose from {', '.join(known)}.")
    return list(dict.fromkeys(names))


def describe_methods() -> str:
    return "; ".join(f"{name}: {text}" for name, (_, _, text) in METHODS.items())


def run_driver_method(ctx, method: str) -> list[dict]:
    missing = spark_methods.missing_package(method)
    if missing:
        return [make_row(method, SKIPPED, runs_on=WHERE["driver"], note=missing)]
    outcome = run_in_child("sodm_spark.benchmarking.driver_fit:fit_and_score",
                           (method, ctx.settings, ctx.gamma, ctx.arrays_dir()),
                           ctx.budget_seconds)
    if outcome.status == OK:
        measured, columns = Measured.split(outcome.value)
        return [make_row(method, runs_on=WHERE["driver"], measured=measured, **columns)]
    return [make_row(method, outcome.status, runs_on=WHERE["driver"],
                     measured=Measured(fit_seconds=outcome.seconds), note=outcome.note)]


def _run_one(ctx, method: str, partitioner: str | None = None) -> list[dict]:
    if ctx.data.multiclass and method not in MULTICLASS_METHODS:
        return [make_row(method, SKIPPED, runs_on=WHERE[METHODS[method][0]],
                         note=f"two classes only; the data hold {len(ctx.classes)}")]
    if method == "sodm":
        assert partitioner is not None, "run_methods runs SODM once per partitioner"
        return spark_methods.run_sodm(ctx, partitioner)
    if method in DRIVER_METHODS:
        return run_driver_method(ctx, method)
    if method == "dsvrg":
        return spark_methods.run_dsvrg(ctx)
    if method == "mllib-linearsvc":
        return spark_methods.run_mllib_linearsvc(ctx)
    if method == "xgboost-spark":
        return spark_methods.run_xgboost_spark(ctx)
    if method == "nystroem-spark":
        return spark_methods.run_nystroem_spark(ctx)
    return spark_methods.run_one_task(ctx, method)


def _finished_line(row: dict) -> str:
    if row["status"] != OK:
        return f"{row['status'].upper()}: {row['note']}"
    parts = [f"fit {row['fit_seconds']:.1f} s", f"accuracy {row['accuracy']:.4f}"]
    if row.get("predict_seconds") is not None:
        parts.append(f"predict {row['predict_seconds']:.2f} s")
    if row.get("n_sv") is not None:
        parts.append(f"{row['n_sv']} SVs")
    return "finished: " + ", ".join(parts) + (f" ({row['note']})" if row.get("note") else "")


def run_methods(ctx, methods: list[str]) -> list[dict]:
    """Every method in order (SODM once per partitioner); the rows of all of them."""
    runs = [(m, p) for m in methods for p in (ctx.settings["partitioners"] if m == "sodm"
                                                  else [None])]
    rows = []
    for number, (method, partitioner) in enumerate(runs, start=1):
        name = PARTITIONER_NAMES[partitioner] if partitioner else DISPLAY_NAMES[method]
        where = WHERE[METHODS[method][0]]
        ctx.log(f"[benchmark {number}/{len(runs)}] {name}: started ({where}, "
                f"budget {ctx.budget_seconds:g} s)")
        try:
            new = _run_one(ctx, method, partitioner)
        except Exception as error:  # noqa: BLE001 - one broken method must not end the run
            new = [make_row(method, FAILED, name=name, runs_on=where,
                            note=f"{type(error).__name__}: {error}"[:300])]
        ctx.log(f"[benchmark {number}/{len(runs)}] {name}: {_finished_line(new[-1])}")
        rows.extend(tag_budget(new, ctx.budget_seconds))
    return rows
