"""The headline command as a user runs it, side by side with scikit-learn's SVC and the
single-process exact ODM, on real data in LIBSVM format. A benchmark, not a test.

    python benchmarks/bench_headline.py --repeats 3 [--train F --test F] \\
        [--methods svc,exact-odm,job,job-no-auto-stop] [--lam 1e5 --theta 0.1 --v 0.2]

"job" is ``spark-submit --master local[2] jobs/train_sodm.py --levels 3 --data F
--test-data F`` with the job's defaults (automatic stopping on) and the ODM hyperparameters
given; "job-no-auto-stop" adds ``--no-auto-stop`` (every level down to level 0); "job-tune"
gives no hyperparameters but ``--tune`` (the default grid searched on the top level, then
the fit of its best point; its train seconds include the search). Each run is a
fresh process; the table gives medians over --repeats runs of the job's ``train_seconds``,
the whole command's wall time, and the ratio of train seconds to SVC's fit seconds. Without
--train/--test it writes the binary Fashion-MNIST task (Debian's dataset-fashion-mnist) into
--work-dir. ``--record PATH`` (or ``--json-out PATH``) writes the run's result record: every
run's figures and the medians, the files' identity and a stage a method
(sodm_spark.benchmarking.records).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_exact_odm import default_files  # noqa: E402
from job_runs import medians, submit  # noqa: E402

from sodm_spark.benchmarking.records import add_record_flag, start_record  # noqa: E402

METHODS = ("svc", "exact-odm", "job", "job-no-auto-stop", "job-tune")


def fit_in_process(method: str, train: Path, test: Path, args) -> dict:
    """SVC or exact ODM fitted here: fit seconds and test accuracy."""
    from sklearn.datasets import load_svmlight_file
    from sklearn.svm import SVC

    from sodm_spark import ODMClassifier

    X, y = load_svmlight_file(str(train))
    X_test, y_test = load_svmlight_file(str(test), n_features=X.shape[1])
    X, X_test = X.toarray(), X_test.toarray()
    if method == "svc":
        model = SVC(C=args.svc_C, gamma="scale", cache_size=2000)
    else:  # the kernel is cached when it fits this machine's memory (cache_mb="auto")
        model = ODMClassifier(gamma="scale", lam=args.lam, theta=args.theta, v=args.v,
                              tol=args.tol)
    start = time.perf_counter()
    model.fit(X, y)
    seconds = time.perf_counter() - start
    return {"train_seconds": seconds, "wall_seconds": seconds,
            "test_accuracy": float(model.score(X_test, y_test))}


def run_job(train: Path, test: Path, args, extra: list[str], tune: bool = False) -> dict:
    """The job through spark-submit: its metrics JSON plus the command's wall time. With
    ``tune`` no hyperparameters are given: ``--tune`` chooses them (default grid)."""
    given = ["--tune"] if tune else ["--lam", repr(args.lam), "--theta", repr(args.theta),
                                     "--v", repr(args.v)]
    metrics, wall, output = submit(
        "train_sodm.py", ["--levels", str(args.levels), "--data", str(train), "--test-data",
                          str(test)] + given + extra, args.master)
    tuning = metrics.get("tuning")
    return {"train_seconds": metrics["train_seconds"], "wall_seconds": wall,
            "tuning_seconds": metrics.get("tuning_seconds"),
            "tuned": None if tuning is None else tuning["best"],
            "test_accuracy": metrics["test_accuracy"], "stopped_at": metrics.get("stopped_at"),
            "stop_reason": metrics.get("stop_reason"), "levels": metrics["levels"],
            "output": output}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", type=Path)
    parser.add_argument("--test", type=Path)
    parser.add_argument("--work-dir", type=Path, default=Path.home() / ".cache" / "sodm_spark")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--levels", type=int, default=3)
    parser.add_argument("--lam", type=float, default=1e5)
    parser.add_argument("--theta", type=float, default=0.1)
    parser.add_argument("--v", type=float, default=0.2)
    parser.add_argument("--tol", type=float, default=1e-3)
    parser.add_argument("--svc-C", type=float, default=10.0)
    parser.add_argument("--job-args", default="", help="more flags for both job runs")
    add_record_flag(parser, "--json-out")
    return parser


def main(argv=None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    methods = args.methods.split(",")
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        raise SystemExit(f"unknown methods {unknown}; known: {', '.join(METHODS)}")
    record = start_record(parser, args, __file__, argv)
    train, test = (args.train, args.test) if args.train else default_files(args.work_dir)
    record.add_data(train.name, train, test)
    record.lap("data")
    results = {}
    for method in methods:
        for repeat in range(args.repeats):
            if method.startswith("job"):
                extra = args.job_args.split() + (["--no-auto-stop"] if "no-auto" in method else [])
                run = run_job(train, test, args, extra, tune=method == "job-tune")
                print("\n".join(run.pop("output")), flush=True)
            else:
                run = fit_in_process(method, train, test, args)
            print(f"{method} run {repeat + 1}: {json.dumps({k: v for k, v in run.items() if k != 'levels'})}",
                  flush=True)
            results.setdefault(method, []).append(run)
        record.lap(method)
    reference = results.get("svc")
    svc_seconds = statistics.median(r["train_seconds"] for r in reference) if reference else None
    print(f"\n{train.name}: medians of {args.repeats} runs")
    print(f"{'method':<18}{'train s':>9}{'wall s':>9}{'test acc':>10}{'vs SVC time':>13}"
          f"{'stopped at':>12}  runs (train s)")
    table = {}
    for method, runs in results.items():
        train_s, wall_s, accuracy, each = medians(runs)
        ratio = f"{train_s / svc_seconds:.3f}" if svc_seconds else ""
        stopped = ",".join(str(r.get("stopped_at", "")) for r in runs)
        print(f"{method:<18}{train_s:>9.1f}{wall_s:>9.1f}{accuracy:>10.4f}{ratio:>13}"
              f"{stopped:>12}  {each}")
        table[method] = {"train_seconds": train_s, "wall_seconds": wall_s,
                         "test_accuracy": accuracy,
                         "train_over_svc_fit": train_s / svc_seconds if svc_seconds else None}
    record.write(train=str(train), test=str(test), results=results, medians=table)


if __name__ == "__main__":
    main()
