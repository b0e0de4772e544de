"""Score a table with a saved model and write the predictions as Parquet.

    sodm-predict --model models/sodm --data table.parquet --out predictions/
    spark-submit jobs/predict.py --model models/sodm --data table.parquet --out predictions/
    spark-submit jobs/predict.py --model DIR --data rows.libsvm --format libsvm --out DIR

The model (a directory from --model-out, or a compressed one from --max-sv) is shipped to the
workers as files that every task maps a block of support vectors at a time, so memory per task
does not grow with the model; the rows are spread over at least one task per core, more when
the model is expensive per row (sodm_spark.spark.predict). Every task scores its rows through
Arrow batches, kernel blocks against the support set in float32 (rows near a decision boundary
again in float64, so predictions are float64's). The output has the key (--key-col, or a row
id), `prediction` (the label) and `rawPrediction` (the scores), written to a temporary
directory beside --out and renamed into place when complete (on an object store, which has no
rename, written in place after the old output is deleted: Spark's `_SUCCESS` marks it whole).
--out may be a URI: Spark's own writer reaches it, so a classic session needs the Hadoop
connector of its scheme, checked before anything is read or deleted. The last line, and
--metrics-out, give the rows scored, the seconds of the scoring job and rows/s. A bad row (found by a task, or
by the check of text input's lines) or setting ends the job with one `error: ...` line and its
kind's exit code, --out as it was (sodm_spark.core.errors; docs/operations.md, "When a job fails").
"""
from __future__ import annotations

import argparse
import sys
import threading
import time

from sodm_spark.core.errors import SETTINGS, SettingsError, reported, run_job
from sodm_spark.data.storage import is_uri, publish_directory, store_for, uri_scheme
from sodm_spark.models.expansion import KernelExpansion
from sodm_spark.models.scoring import PRECISIONS
from sodm_spark.ops.jobconf import (add_master_arguments, check_output_paths,
                                     check_store_outputs, parse_with_defaults,
                                     use_packaged_spark_conf, write_outputs)
from sodm_spark.core.feature_names import extra_columns_line
from sodm_spark.spark.io import (check_csv_cells, check_parquet_files_agree, input_slices,
                                 input_statuses,
                                 spark_read)
from sodm_spark.spark.io.libsvm_frames import read_libsvm_vectors
from sodm_spark.spark.predict import (ScoringCounters, feature_columns, python_workers_started,
                                      score_dataframe)
from sodm_spark.spark.engine import context_of, driver_hadoop, has_accumulators
from sodm_spark.spark.hadoop_store import HadoopStore
from sodm_spark.spark.session import job_session


def parse_args(argv=None, prog="predict.py") -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True,
                        help="model directory (arrays.npz + metadata.json)")
    parser.add_argument("--data", required=True, help="rows to score")
    parser.add_argument("--format", choices=("parquet", "csv", "libsvm"), default="parquet")
    parser.add_argument("--out", required=True, help="output directory (Parquet)")
    parser.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    parser.add_argument("--features-col", default="features",
                        help="vector or array column; without it every numeric column other "
                        "than --key-col and --label-col is a feature: taken by name when the "
                        "model keeps the training columns' names (any order; a column the "
                        "model was not trained on is left out and named, a missing one "
                        "refused), else by position. LIBSVM rows, a CSV without a header and "
                        "models trained on them are positional")
    parser.add_argument("--key-col", help="column copied to the output to join on (default: a "
                        "row id, (partition << 40) + row)")
    parser.add_argument("--label-col", default="label", help="column that is not a feature")
    parser.add_argument("--no-header", dest="header", action="store_false",
                        help="CSV: the first line is data")
    parser.add_argument("--precision", choices=PRECISIONS, default="float32",
                        help="kernel blocks in float32 (default; boundary rows again in float64) "
                        "or all in float64")
    parser.add_argument("--progress-seconds", type=float, default=5.0)
    parser.add_argument("--metrics-out", help="JSON file: rows, seconds, rows/s")
    add_master_arguments(parser)
    args, args.config = parse_with_defaults(parser, "predict", argv)
    return args


def read_table(spark, args, model: KernelExpansion | None = None):
    """The rows to score as a DataFrame. Text input is checked line by line first, as the
    training job reads it: a line that does not parse, a NaN or infinite value, an empty or
    non-numeric CSV cell are refused naming the file and line (Parquet rows are checked by the
    scoring tasks, by partition and row). LIBSVM vectors are as long as the file's largest
    index: rows with indices beyond the model's features (words no training row had) are
    scored without them. The files of one table must describe the same columns (a Parquet
    file's names and types, a CSV file's header: :mod:`sodm_spark.spark.io.file_schemas`);
    of a CSV whose ``model`` keeps feature names only the model's columns are checked (the
    others are left out)."""
    where = f"{args.data} (format {args.format!r})"
    if args.format == "parquet":
        check_parquet_files_agree(spark, input_statuses(spark, args.data, "parquet"),
                                  args.data, "--data")
        return spark_read(where, lambda: spark.read.parquet(args.data))
    if args.format == "csv":
        frame = spark_read(where, lambda: spark.read.csv(args.data, header=args.header,
                                                         inferSchema=True))
        not_features = {args.key_col, args.label_col}
        named = None if model is None or not args.header else model.feature_names \
            if model.categories is None else model.categories.numeric  # strings: not numbers
        check_csv_cells(spark, args.data, input_statuses(spark, args.data, "csv"),
                        frame.columns, {j: "feature" for j, name in enumerate(frame.columns)
                                        if name not in not_features
                                        and (named is None or name in named)},
                        header=args.header)
        return frame
    # the package's own parse, on classic and Connect sessions alike: Spark's libsvm source
    # refuses SVMlight's qid:N and # comments, and names no line
    statuses = input_statuses(spark, args.data, "libsvm")
    return read_libsvm_vectors(spark, args.data, statuses, input_slices(spark, statuses))


def named_table(spark, args, model: KernelExpansion):
    """:func:`read_table`'s DataFrame, after the line that names the columns the model
    leaves out (a model with feature names takes its columns by name:
    :func:`~sodm_spark.spark.predict.feature_columns`)."""
    frame = read_table(spark, args, model)
    _, _, extra = feature_columns(frame, args.features_col,
                                  {c for c in (args.key_col, args.label_col) if c}, model)
    if extra:
        print(extra_columns_line(extra, f"--data {args.data}"), flush=True)
    return frame


def report_progress(accumulator, started, every, stop):
    """Print rows scored and rows/s every ``every`` seconds until ``stop`` is set (none
    without an accumulator: a Spark Connect session has none)."""
    while accumulator is not None and not stop.wait(every):
        rows = accumulator.value
        print(f"  scored {rows:,} rows ({rows / (time.perf_counter() - started):,.0f} rows/s)",
              flush=True)


def score_and_write(frame, out: str, args, rows, store) -> float:
    """Run the scoring job (writing ``out`` on ``store``) with a progress line every
    --progress-seconds; its seconds. A row the tasks refuse fails the job with the tasks' own
    message (sodm_spark.core.errors)."""
    started = time.perf_counter()
    stop = threading.Event()
    ticker = threading.Thread(target=report_progress,
                              args=(rows, started, args.progress_seconds, stop), daemon=True)
    ticker.start()
    try:  # in a hidden sibling renamed into place, or in place on an object store
        publish_directory(out, lambda target: frame.write.parquet(target),
                          overwrite=args.overwrite, store=store)
    finally:  # no progress line after the result or the error line, nor once Spark is gone
        stop.set()
        ticker.join()
    return time.perf_counter() - started


def check_new_output(out: str, overwrite: bool, store=None) -> None:
    """--out must not exist unless --overwrite (on ``store``, by default its own: a local
    path, or a URI)."""
    if not overwrite and (store or store_for(out)).exists(out):
        raise SettingsError(f"--out {out} exists; pass --overwrite to replace it, or choose "
                            "another directory.")


def output_store(spark, out: str):
    """The store the predictions are published on: for a URI on a classic session the Hadoop
    file system Spark's Parquet writer itself reaches it through (refused in one line when
    Spark has none for the scheme, before anything is read or deleted: a store pyarrow
    reaches is no use to Spark's writer); else :func:`store_for`'s (a local path or ``file:``;
    on Spark Connect the server writes and only it knows its connectors: the driver has no
    Hadoop of its own, :func:`~sodm_spark.spark.engine.driver_hadoop`)."""
    if uri_scheme(out) in (None, "file") or driver_hadoop(spark) is None:
        return store_for(out)
    try:
        return HadoopStore.for_path(out)
    except SettingsError as refused:
        raise SettingsError(f"--out {refused}") from None


def main(argv=None, prog="predict.py") -> int:
    """The job; a failure raises sodm_spark.core.errors.JobExit (its one line and exit code)."""
    args = parse_args(argv, prog)
    out = str(args.out)
    with reported(value_errors=SETTINGS):
        if not is_uri(out):  # a URI is checked on its store once Spark is up, before the data
            check_new_output(out, args.overwrite)
        check_output_paths({"--out": args.out}, {"--metrics-out": args.metrics_out})
    with reported(prefix="--model: "):
        model = KernelExpansion.load(args.model)
    with job_session("sodm-spark: predict", args.master,
                     connect_seconds=args.connect_timeout) as spark:
        with reported(value_errors=SETTINGS):
            store = output_store(spark, out)
            if is_uri(out):
                check_new_output(out, args.overwrite, store)
            check_store_outputs({"--out": out}, {"--metrics-out": args.metrics_out})
        sc = context_of(spark)  # progress and left-out values are counted by accumulators
        rows, ignored, unseen = (sc.accumulator(0), sc.accumulator(0), sc.accumulator(0)) \
            if has_accumulators(sc) else (None, None, None)
        preparing = time.perf_counter()
        # the warm-up runs while the driver reads and plans; a refusal there cancels it before
        # the session stops, so its thread prints nothing
        with python_workers_started(spark, model) as warming, \
                reported(prefix=f"--data {args.data}: "), \
                score_dataframe(named_table(spark, args, model),
                                model, args.features_col, args.key_col, args.label_col,
                                args.precision, ScoringCounters(rows, ignored, unseen),
                                any_vector_size=args.format == "libsvm") as (frame, partitions):
            prepare_seconds = time.perf_counter() - preparing
            print(f"scoring {args.data} with {model.support_vectors.shape[0]:,} support "
                  f"vectors ({args.precision} kernel blocks) in {partitions} tasks "
                  f"(prepared in {prepare_seconds:.1f} s)", flush=True)
            warming.wait()
            seconds = score_and_write(frame, out, args, rows, store)
        scored = rows.value if rows is not None else \
            spark.read.parquet(out).count()  # from the files' footers
        rate = scored / max(seconds, 1e-9)
        if ignored is not None and ignored.value:
            print(f"left out {ignored.value:,} value{'s' if ignored.value != 1 else ''} in "
                  f"columns beyond the model's {model.support_vectors.shape[1]:,} features "
                  "(features no training row had: no prediction depends on them)", flush=True)
        if unseen is not None and unseen.value and model.categories is not None:
            print(f"{unseen.value:,} value{'s' if unseen.value != 1 else ''} of the string "
                  f"column(s) {[c.name for c in model.categories.columns]} had not been seen "
                  "in training: encoded as no category (one-hot) or the training prior "
                  "(target encoding)", flush=True)
        print(f"scored {scored:,} rows in {seconds:.2f} s ({rate:,.0f} rows/s); "
              f"predictions written to {out}", flush=True)
        if args.metrics_out:
            write_outputs(None, {"rows": scored, "seconds": seconds,
                                 "rows_per_second": rate, "prepare_seconds": prepare_seconds,
                                 "partitions": partitions,
                                 "support_vectors": int(model.support_vectors.shape[0]),
                                 "precision": args.precision}, None, args.metrics_out)
    return 0


def command() -> int:
    """``sodm-predict``, the console command (pyproject.toml ``[project.scripts]``)."""
    use_packaged_spark_conf()
    return run_job(lambda argv=None: main(argv, prog="sodm-predict"))


if __name__ == "__main__":  # spark-submit of this file, python -m sodm_spark.jobs.predict
    use_packaged_spark_conf()
    sys.exit(run_job(main))
