"""Compressed models and batch scoring (``--max-sv``, ``jobs/predict.py``). A benchmark, not a test.

    python benchmarks/bench_predict.py [--max-sv 500,1000,2000,4000] [--score-rows 200000]

1. Trains the model once (``spark-submit jobs/train_sodm.py --levels 3`` on the binary
   Fashion-MNIST task, λ = 1e5 θ = 0.1 v = 0.2, automatic stopping), then compresses it to every
   --max-sv with every point choice (landmarks, largest, kmeans) and both fits (data: least
   squares on the support vectors; rkhs: the RKHS projection): seconds, test accuracy and the
   decision function's relative RMS error on the test rows.
2. Writes --score-rows rows × 784 features (Fashion-MNIST rows repeated) as Parquet and times
   ``spark-submit jobs/predict.py`` end to end (read, score, write) with the full model and the
   compressed ones: the command's wall seconds and rows/s, the job's own rows/s, medians of
   --repeats runs.

``--record PATH`` (or ``--json-out PATH``) writes the run's result record: every figure, the
files' identity and a stage a part (sodm_spark.benchmarking.records).
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bench_exact_odm import default_files  # noqa: E402
from job_runs import submit  # noqa: E402

from sodm_spark.benchmarking.records import add_record_flag, start_record  # noqa: E402


def train_model(train, test, model_dir: Path, master: str) -> dict:
    metrics, wall, _ = submit("train_sodm.py", ["--levels", "3", "--data", str(train),
                                                "--test-data", str(test), "--lam", "1e5",
                                                "--theta", "0.1", "--v", "0.2", "--model-out",
                                                str(model_dir)], master)
    return {"train_seconds": metrics["train_seconds"], "wall_seconds": wall,
            "test_accuracy": metrics["test_accuracy"], "n_sv": metrics["n_sv"]}


def write_parquet(X: np.ndarray, rows: int, path: Path, files: int = 8) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.mkdir(parents=True)
    order = np.arange(rows) % X.shape[0]
    for part, chunk in enumerate(np.array_split(order, files)):
        values = pa.array(X[chunk].ravel())
        offsets = pa.array(np.arange(0, chunk.size * X.shape[1] + 1, X.shape[1], dtype=np.int32))
        table = pa.table({"id": pa.array(chunk.astype(np.int64) + part * rows),
                          "features": pa.ListArray.from_arrays(offsets, values)})
        pq.write_table(table, path / f"part-{part:05d}.parquet", row_group_size=10_000)


def build_parser() -> argparse.ArgumentParser:
    from sodm_spark.models.compression import METHODS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work-dir", type=Path, default=Path.home() / ".cache" / "sodm_spark")
    parser.add_argument("--max-sv", default="1000,2000")
    parser.add_argument("--fits", default="data,rkhs")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--score-rows", type=int, default=200_000)
    parser.add_argument("--score-sizes", default="1000,2000,full",
                        help="models timed by predict.py: compressed sizes (kmeans, data fit) "
                        "or full")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    add_record_flag(parser, "--json-out")
    return parser


def main(argv=None) -> None:
    from sklearn.datasets import load_svmlight_file

    from sodm_spark.models.compression import compare
    from sodm_spark.models.expansion import KernelExpansion

    parser = build_parser()
    args = parser.parse_args(argv)
    run_record = start_record(parser, args, __file__, argv)
    train, test = default_files(args.work_dir)
    run_record.add_data(train.name, train, test)
    work = args.work_dir / "bench_predict"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    record = {"trained": train_model(train, test, work / "full", args.master)}
    print(f"trained: {record['trained']}", flush=True)
    run_record.lap("the full model (train_sodm.py)")
    full = KernelExpansion.load(work / "full")
    X_test, y_test = load_svmlight_file(str(test), n_features=full.support_vectors.shape[1])
    X_test = X_test.toarray()
    record["compression"] = []
    print(f"\n{'method':<10}{'fit':>5}{'max sv':>8}{'seconds':>9}{'test acc':>10}"
          f"{'full acc':>10}{'rel RMS':>9}{'changed %':>10}")
    for fit in args.fits.split(","):
        for method in args.methods.split(","):
            for n in (int(x) for x in args.max_sv.split(",")):
                start = time.perf_counter()
                small = full.compress(n, method=method, fit=fit)
                seconds = time.perf_counter() - start
                report = compare(full, small, X_test, y_test)
                record["compression"].append({"method": method, "fit": fit, "max_sv": n,
                                              "seconds": seconds, **report})
                print(f"{method:<10}{fit:>5}{n:>8}{seconds:>9.2f}{report['accuracy_after']:>10.4f}"
                      f"{report['accuracy_before']:>10.4f}{report['relative_rms_error']:>9.3g}"
                      f"{100 * report['predictions_changed']:>10.2f}", flush=True)
                if method == "kmeans" and fit == "data":  # the defaults: the models scored
                    small.save(work / f"sv{n}")
    run_record.lap("compression")
    X_train, _ = load_svmlight_file(str(train), n_features=X_test.shape[1])
    data = work / "score.parquet"
    write_parquet(np.concatenate([X_train.toarray(), X_test]), args.score_rows, data)
    run_record.lap("the rows scored, as Parquet")
    record["scoring"] = []
    print(f"\n{'model':<8}{'SVs':>8}{'wall s':>9}{'rows/s (wall)':>15}{'rows/s (job)':>14}  runs")
    for size in args.score_sizes.split(","):
        model_dir = work / ("full" if size == "full" else f"sv{size}")
        runs = []
        for _ in range(args.repeats):
            metrics, wall, _ = submit("predict.py", ["--model", str(model_dir), "--data", str(data),
                                                     "--out", str(work / "out"), "--overwrite"],
                                      args.master)
            runs.append({"wall_seconds": wall, **metrics})
        wall = statistics.median(r["wall_seconds"] for r in runs)
        job_rate = statistics.median(r["rows_per_second"] for r in runs)
        n_sv = runs[0]["support_vectors"]
        record["scoring"].append({"model": size, "support_vectors": n_sv, "runs": runs})
        each = ", ".join(f"{r['wall_seconds']:.1f}" for r in runs)
        print(f"{size:<8}{n_sv:>8}{wall:>9.1f}{args.score_rows / wall:>15,.0f}{job_rate:>14,.0f}"
              f"  {each}", flush=True)
        run_record.lap(f"predict.py, model {size}")
    run_record.write(**record)


if __name__ == "__main__":
    main()
