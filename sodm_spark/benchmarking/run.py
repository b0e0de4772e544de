"""The benchmark job's steps, in order: load the split (a named set of
:mod:`sodm_spark.data.datasets`, or the user's files read through Spark by :func:`load_files`), run
the methods side by side, the rows scaling, the cores scaling (fresh sessions), then write
JSON, Markdown, PNGs and the results region of docs/benchmarks.md. Outputs are rewritten after
every part, so a long run leaves usable results."""
from __future__ import annotations

import datetime
import json
import os
import shlex
import sys
import time
from pathlib import Path

from ..core.errors import SettingsError
from ..core.kernels import resolve_gamma
from ..data.datasets import BenchData, as_bench_data, load_dataset, seeded_split, subsample
from . import plots, report
from .methods import run_methods
from .results import BenchContext
from .scaling import ScalingSetup, run_cores_scaling, run_rows_scaling

OUTPUTS = {"json": "benchmark.json", "markdown": "benchmark.md",
           "accuracy": "accuracy_vs_seconds.png", "rows": "seconds_vs_rows.png",
           "cores": "speedup_vs_cores.png"}


def settings_of(args) -> dict:
    """The hyperparameters every runner reads (plain values: they travel to child processes)."""
    keys = ("gamma", "lam", "theta", "v", "tol", "max_iter", "epochs", "svc_C", "linear_C",
            "max_core", "coreset_size", "levels", "p", "strata", "stop_level", "warm_start",
            "cache_mb", "seed", "partitioners", "xgb_trees", "xgb_depth",
            "nystroem_components", "nystroem_C")
    settings = {key: getattr(args, key) for key in keys}
    settings["threads"] = os.cpu_count() or 1  # XGBoost in one process uses every core
    settings["linear_lam"] = args.linear_lam if args.linear_lam is not None else args.lam
    return settings


def command_line(argv) -> str:
    """How this run was started, as a command to paste (the interpreter relative to here)."""
    python = Path(sys.executable)
    try:
        python = python.relative_to(Path.cwd())
    except ValueError:
        python = Path("python")
    script = Path(sys.argv[0]) if sys.argv and sys.argv[0].endswith("benchmark.py") \
        else Path("jobs/benchmark.py")
    return f"{python} {script} {shlex.join(argv)}".strip()


def _session(args, cores=None):
    from ..spark.session import get_session, use_jobs_logging

    master, config = args.master, {"spark.driver.memory": args.driver_memory,
                                   "spark.ui.showConsoleProgress": "false"}
    if cores is not None:
        if master is None or master.startswith("local"):
            master = f"local[{cores}]"
        else:
            config["spark.cores.max"] = str(cores)
    spark, created = get_session("sodm-spark: benchmark", master, config)
    if created:
        use_jobs_logging(spark)
    return spark, created


def load_files(spark, data: str, test_data: str | None, fmt: str, test_fraction: float,
               seed: int = 0, train_rows: int | None = None) -> BenchData:
    """The user's files via :func:`sodm_spark.spark.io.read_blocks`, collected to the driver.

    Without ``test_data`` a seeded ``test_fraction`` of the rows is held out.
    """
    from ..spark.io import read_blocks, read_libsvm_local
    from ..spark.io import collect_blocks

    blocks, n_features = read_blocks(spark, data, fmt)
    X, y = collect_blocks(blocks)
    if test_data:
        if fmt == "libsvm":  # LIBSVM omits trailing zero columns: pad the test rows
            X_test, y_test = read_libsvm_local(test_data, n_features=n_features,
                                               check_values=True)
        else:
            X_test, y_test = collect_blocks(read_blocks(spark, test_data, fmt)[0])
    else:
        if not 0 < test_fraction < 1:
            raise SettingsError(f"--test-fraction must lie in (0, 1), got {test_fraction}.")
        X, y, X_test, y_test = seeded_split(X, y, max(1, round(test_fraction * len(y))), seed)
    X, y = subsample(X, y, train_rows, seed, 1)
    return as_bench_data(Path(data).name, X, y, X_test, y_test, f"file {data} ({fmt})")


def _load(spark, args):
    if args.data:
        return load_files(spark, args.data, args.test_data, args.format, args.test_fraction,
                          args.seed, args.train_rows)
    return load_dataset(args.dataset or "nonlinear", args.train_rows, args.test_rows,
                        args.seed, args.dataset_root)


def _write(document: dict, out_dir: Path, readme, region=report.DEFAULT_REGION) -> None:
    """JSON, Markdown and PNGs for what the document holds so far (and the results region of
    ``readme``)."""
    document["images"] = {}
    data = document.get("data") or {}
    if document.get("results"):
        plots.plot_accuracy_vs_seconds(
            document["results"], out_dir / OUTPUTS["accuracy"],
            f"Accuracy vs fit time: {data.get('name')}, {data.get('train_rows', 0):,} training "
            f"rows, {document['master']}")
        document["images"]["accuracy"] = OUTPUTS["accuracy"]
    if document.get("scaling_rows"):
        plots.plot_seconds_vs_rows(document["scaling_rows"], out_dir / OUTPUTS["rows"],
                                   "Seconds vs training rows M (generated "
                                   f"{document['scaling_dataset']} data)",
                                   document["scaling_budget"])
        document["images"]["rows"] = OUTPUTS["rows"]
    if document.get("scaling_cores"):
        plots.plot_speedup_vs_cores(document["scaling_cores"], out_dir / OUTPUTS["cores"],
                                    "SODM against executor cores "
                                    f"({document['cores_rows']:,} generated rows)")
        document["images"]["cores"] = OUTPUTS["cores"]
    report.write_json(out_dir / OUTPUTS["json"], document)
    (out_dir / OUTPUTS["markdown"]).write_text(report.markdown_report(document))
    if readme:
        prefix = os.path.relpath(out_dir, Path(readme).resolve().parent) + "/"
        report.rewrite_readme(readme, report.markdown_report(document, prefix, region), region)


def run_benchmark(args, argv, log=print) -> dict:
    """Run what ``args`` (jobs/benchmark.py's flags) ask for; returns the JSON document."""
    started = time.perf_counter()
    out_dir = Path(args.out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    region = getattr(args, "readme_region", report.DEFAULT_REGION)
    if args.readme:  # refuse a file without markers before hours of work
        report.check_readme(args.readme, region)
    settings = settings_of(args)
    scaling_budget = args.scaling_budget_seconds or args.budget_seconds
    preloaded = None if args.data or not args.methods else _load(None, args)
    spark, created = _session(args)
    if "cores" in args.scaling and not created:
        raise SettingsError("--scaling cores starts one Spark session per core count, so it needs "
                            "the job's own session; run the job with python or spark-submit, not "
                            "inside a live session (a notebook or a test).")
    document = {"command": command_line(argv), "machine": report.machine(),
                "date": datetime.date.today().isoformat(), "master": spark.sparkContext.master,
                "settings": settings, "budget_seconds": args.budget_seconds,
                "scaling_budget": scaling_budget, "scaling_dataset": args.scaling_dataset,
                "cores_rows": args.cores_rows, "total_seconds": 0.0}
    try:
        if args.methods:
            data = preloaded or _load(spark, args)
            log(f"[benchmark] data {data.name}: {data.X_train.shape[0]:,} x {data.n_features} "
                f"train, {data.X_test.shape[0]:,} test ({data.source}); Spark "
                f"{spark.sparkContext.master}")
            ctx = _table_context(spark, data, settings, args.budget_seconds, log)
            document.update(data=data.describe(), gamma=ctx.gamma)
            try:
                document["results"] = run_methods(ctx, args.methods)
            finally:
                ctx.blocks.unpersist()
                ctx.close()
            _finish(document, started, out_dir, args.readme, region)
        if "rows" in args.scaling:
            document["scaling_rows"] = run_rows_scaling(
                spark, args.rows, settings, args.scaling_methods, scaling_budget, log,
                ScalingSetup(args.scaling_dataset, args.scaling_test_rows, args.partition_rows,
                             args.solved_levels), args.scaling_sodm_budget_seconds)
            document["scaling_rows_note"] = _rows_note(args, scaling_budget)
            _finish(document, started, out_dir, args.readme, region)
        if "cores" in args.scaling:
            spark.stop()
            created = False  # run_cores_scaling stops each session it is given
            document["scaling_cores"] = run_cores_scaling(
                lambda count: _session(args, count)[0], args.cores, settings,
                args.scaling_sodm_budget_seconds, log,
                ScalingSetup(args.scaling_dataset, args.scaling_test_rows, args.partition_rows,
                             args.solved_levels), args.cores_rows)
            document["scaling_cores_note"] = (
                f"The same SODM fit (stratified, {args.cores_rows:,} generated "
                f"{args.scaling_dataset} rows, the rows scaling's level rule) in a fresh Spark "
                f"session per core count; speed-up = seconds at {min(args.cores)} core(s) / "
                "seconds at k cores.")
            _finish(document, started, out_dir, args.readme, region)
    finally:
        if created:
            spark.stop()
    log(f"[benchmark] done in {document['total_seconds']:.0f} s; outputs in {out_dir}"
        + (f"; results region of {args.readme} rewritten" if args.readme else ""))
    return document


def rewrite_reports(out_dir, readme=None, region=report.DEFAULT_REGION) -> dict:
    """Markdown, PNGs and the results region again from ``out_dir``'s benchmark.json (the
    command shown stays the one that measured)."""
    path = Path(out_dir) / OUTPUTS["json"]
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: --report-only rewrites the reports of an "
                                "earlier run; point --out-dir at its folder.")
    document = json.loads(path.read_text())
    if readme:
        report.check_readme(readme, region)
    _write(document, Path(out_dir).resolve(), readme, region)
    return document


def _table_context(spark, data, settings, budget, log):
    from ..spark.io import numpy_to_blocks

    blocks = numpy_to_blocks(spark.sparkContext, data.X_train, data.y_train).persist()
    blocks.count()  # the rows are in Spark before any clock starts
    return BenchContext(spark, data, blocks, resolve_gamma(settings["gamma"], data.X_train),
                        settings, budget, log)


def _rows_note(args, budget) -> str:
    return (f"Generated {args.scaling_dataset} data (10 features), the table's "
            f"hyperparameters. SODM (stratified) starts from the fewest levels that keep "
            f"partitions at most {args.partition_rows:,} rows (more levels for larger M) and "
            f"solves {args.solved_levels} levels, so every M solves partitions of the same "
            f"sizes ({args.scaling_test_rows:,} test rows; SODM budget "
            f"{args.scaling_sodm_budget_seconds:g} s). Other methods: budget {budget:g} s each; "
            "one that did not finish is not started again at a larger M (N/A).")


def _finish(document, started, out_dir, readme, region) -> None:
    document["total_seconds"] = time.perf_counter() - started
    _write(document, out_dir, readme, region)
