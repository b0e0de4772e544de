"""What the training job prints as a fit goes, and the metrics JSON it writes at the end.

Its own module because the lines are the job's interface to the person running it: the search's
points and its choice, each level's plan before it runs and its row of the levels table after,
the DSVRG epochs, the compression and global step lines, the closing summary and the command's
timeline. The fit itself (sodm_spark.spark.train) prints nothing; it calls these through a
``Progress``.
"""
from __future__ import annotations

import json
from pathlib import Path

from sodm_spark.data.storage import replace_file

from sodm_spark.selection.stopping import judged_key
from sodm_spark.selection.tuning import DEFAULT_SEARCH_GRID_TEXT, SEARCH_PARTITION_ROWS
from sodm_spark.selection.tuning_report import COLUMNS, point_line, table, write_report
from sodm_spark.spark.sodm.global_step import GlobalPlan
from sodm_spark.spark.sodm.plan import kernel_mb, storage_itemsize
from sodm_spark.spark.train import Progress

def _accuracy_text(value):
    return "" if value is None else f"{value:.4f}"


def printed_progress(args) -> Progress:
    """The job's lines as the fit goes: the search's points, table and choice (and its report
    files), then the levels table with each level's plan, or one line per DSVRG epoch."""
    base = {}  # the resolved gamma the search's multiples apply to

    def search_started(prepared, grid, keys, pieces):
        if not args.tune:  # no hyperparameters given: a small search on a sample of partitions
            print("no ODM hyperparameters given (--gamma, --lam, --theta, --v): searching "
                  f"{DEFAULT_SEARCH_GRID_TEXT} first", flush=True)
        n_parts = prepared.parts.getNumPartitions()
        rows = -(-prepared.n_rows // n_parts)
        where = (f"{n_parts:,} partitions" if keys is None else
                 f"{len(keys)} of the {n_parts:,} partitions") + (
            f" ({pieces} × {SEARCH_PARTITION_ROWS:,} of their ~{rows:,} rows each)"
            if rows > SEARCH_PARTITION_ROWS else "")
        base["gamma"] = prepared.kernel.gamma
        print(f"tuning {len(grid)} grid points on {where} of the top level, scored on "
              f"{len(prepared.validation_pair[1])} validation rows (base gamma "
              f"{prepared.kernel.gamma:.4g})", flush=True)

    def point_scored(entry, index, total):
        print(point_line(entry.to_dict(), index, total, base["gamma"]), flush=True)

    def levels_started(params):
        # the metric the levels are judged by, beside the accuracy (SODMParams.metric; the
        # weighted accuracy when rows are weighted)
        key = judged_key(params.metric, weighted(args))
        judged = "" if key == "accuracy" else f" {COLUMNS[key]:>11}"
        print(f"{'level':>5} {'partitions':>10} {'seconds':>9} {'predicted':>9} {'kernel':>8} "
              f"{'objective':>14} {'SVs':>8} {'sweeps':>7} {'scoring':>8} {'val acc':>8}"
              f"{judged} {'test acc':>9}", flush=True)
        checkpoint_dir = args.checkpoint_dir  # a search before is seeded: it chose the same point
        if args.resume and (Path(checkpoint_dir) / "state.json").exists():
            print(f"resuming from {checkpoint_dir}: the levels it holds are not solved again",
                  flush=True)

    def dsvrg_started(params):
        print(f"{'epoch':>5} {'seconds':>9} {'objective':>14} {'test acc':>9}", flush=True)

    return Progress(on_search=search_started, on_point=point_scored,
                    on_searched=lambda result: show_search(result, args.tune_report),
                    on_fit=dsvrg_started if args.kernel == "linear" else levels_started,
                    on_plan=show_plan, on_epoch=show_epoch,
                    on_level=lambda entry: show_level(
                        entry, judged_key(args.metric, weighted(args))))


def show_search(result, report_dir=None):
    """The search's table best first, the point chosen, the report files."""
    report = result.to_dict()
    print(table(report), flush=True)
    final = report["final_round"]
    if final:
        print(f"second round: the {len(final['points'])} finalists on {final['pieces']} "
              f"pieces of {final['piece_rows']:,} rows of the same sample", flush=True)
        for index, point in enumerate(final["points"], 1):
            print(point_line(point, index, len(final["points"]), report["base_gamma"]),
                  flush=True)
    best = report["best"]
    default = result.default
    kept = default is not None and result.best.point == default
    accuracy = f"{best['validation_accuracy']:.4f}" + (
        "" if best["final_validation_accuracy"] is None else
        f" on pieces of {SEARCH_PARTITION_ROWS:,} rows, {best['final_validation_accuracy']:.4f} "
        f"on pieces of {final['piece_rows']:,}")
    metric = report.get("metric", "accuracy")
    if metric != "accuracy":  # the value it was chosen by first
        accuracy = f"{best[f'validation_{metric}']:.4f}, accuracy {accuracy}"
    print(f"{'chosen' if default is not None else 'best'}: --gamma {best['gamma']:.6g} --lam "
          f"{best['lam']:g} --theta {best['theta']:g} --v {best['v']:g} (validation "
          f"{metric.replace('_', ' ')} {accuracy}"
          + ("; the default point, no other beats it significantly" if kept else "")
          + f"; tuning took {result.seconds:.2f} s)", flush=True)
    if report_dir:
        paths = write_report(report, report_dir)
        print(f"tuning report: {', '.join(paths.values())}"
              + ("" if "heatmap" in paths else " (no heat map: matplotlib is not installed; "
                 'pip install "sodm-spark[plots]")'), flush=True)


def show_plan(plan):
    """A level's plan, before it runs (SODM Algorithm 1), or the global step's."""
    if isinstance(plan, GlobalPlan):
        print(f"  -> {plan.describe()}", flush=True)
        return
    searched = ("" if plan.searched_visits is None else
                f" and the search's {plan.searched_visits:.1f} visits of a row")
    predicted = (f"estimated {plan.predicted_seconds:,.1f} s from this machine's GEMM speed"
                 f"{searched}" if plan.estimated else f"predicted {plan.predicted_seconds:,.1f} s")
    stored = f" in {plan.storage}" if plan.storage != "float32" else ""
    print(f"  -> level {plan.level}: {plan.partitions:,} partitions of up to {plan.rows:,} "
          f"rows, kernel {plan.kernel}{stored} "
          f"({kernel_mb(plan.rows, storage_itemsize(plan.storage)):,.1f} MB of the "
          f"{plan.memory_mb:,.0f} MB a task may use), {predicted}"
          + (f"; {plan.advice}" if plan.advice else ""), flush=True)


def weighted(args) -> bool:
    """Whether the job's rows are weighted (--class-weight, --weight-col)."""
    return getattr(args, "class_weight", None) is not None or \
        getattr(args, "weight_col", None) is not None


def show_level(entry, metric: str = "accuracy"):
    """A solved level's row of the levels table (with a column of ``metric``, a
    :func:`~sodm_spark.selection.stopping.judged_key`, beside the accuracy's when the levels
    are judged by another value)."""
    predicted = "" if entry.predicted_seconds is None else f"{entry.predicted_seconds:.2f}"
    scoring = entry.scoring_seconds / max(1, entry.tasks or 1)  # of the level's seconds
    print(f"{entry.level:>5} {entry.partitions:>10} {entry.seconds:>9.2f} {predicted:>9} "
          f"{entry.kernel:>8} {entry.objective:>14.6g} {entry.n_sv:>8} "
          f"{entry.sweeps_max:>7} {scoring:>8.2f} "
          f"{_accuracy_text(entry.validation_accuracy):>8} "
          + ("" if metric == "accuracy" else
             f"{_accuracy_text(getattr(entry, f'validation_{metric}')):>11} ")
          + f"{_accuracy_text(entry.test_accuracy):>9}", flush=True)


def show_epoch(entry):
    """A DSVRG epoch's line (SODM Algorithm 2)."""
    accuracy = "" if entry.test_accuracy is None else f"{entry.test_accuracy:.4f}"
    print(f"{entry.epoch:>5} {entry.seconds:>9.2f} {entry.objective:>14.8g} {accuracy:>9}",
          flush=True)


def levels_summary(fit, params):
    """The metrics of a levels fit, and its closing lines."""
    if not fit.levels:  # the search found only the majority class: the global step alone
        return _global_only_summary(fit, params)
    best = next(entry for entry in fit.levels if entry.level == fit.best_level)
    summary = {"levels": [entry.to_dict() for entry in fit.levels],
               "train_seconds": fit.train_seconds, "partition_seconds": fit.partition_seconds,
               "n_sv": int(fit.model.support_vectors.shape[0]), "rows": fit.n_rows,
               "validation_rows": fit.validation_rows, "stopped_at": fit.stopped_at,
               "stop_reason": fit.stop_reason, "best_level": fit.best_level,
               "metric": params.metric, "validation_accuracy": best.validation_accuracy,
               "test_accuracy": fit.test_accuracy, "params": vars(params)}
    judged = ""  # the best level's value of the metric the levels were judged by
    metric = judged_key(params.metric,  # weighted rows record their weighted accuracy
                        getattr(best, "validation_weighted_accuracy", None) is not None)
    if metric != "accuracy":
        value = summary[f"validation_{metric}"] = getattr(best, f"validation_{metric}")
        judged = "" if value is None else f", {metric.replace('_', ' ')} {value:.4f}"
    if fit.class_weights is not None:  # coded order: the classes' own order
        summary["class_weights"] = list(fit.class_weights)
    if fit.input_map is not None:
        summary["input_map"] = fit.input_map
        show_input_map(fit.input_map)
    if fit.compression is not None:
        summary["compression"] = fit.compression
        summary["test_accuracy_uncompressed"] = best.test_accuracy
        show_compression(fit.compression)
    if fit.global_step is not None:
        summary["global_step"] = fit.global_step
        show_global_step(fit.global_step)
    kept_global = bool(fit.global_step and fit.global_step.get("kept"))
    print(f"stopped after level {fit.stopped_at}: {fit.stop_reason}; the model is "
          + ("the global step's, not " if kept_global else "")
          + f"level {fit.best_level}'s" + ("" if best.validation_accuracy is None else
                                   f" (validation accuracy {best.validation_accuracy:.4f}"
                                   f"{judged} on {fit.validation_rows:,} rows"
                                   f"{_slice_reason(fit, params)})"),
          flush=True)
    print(f"trained on {fit.n_rows:,} rows in {fit.train_seconds:.2f} s "
          f"(partitioning {fit.partition_seconds:.2f} s); {summary['n_sv']:,} support vectors"
          + ("" if fit.test_accuracy is None else f"; test accuracy {fit.test_accuracy:.4f}"))
    return summary


def _global_only_summary(fit, params):
    """The metrics and closing lines of a fit whose model is the global step's, no level run
    (docs/design.md §2.9, "No levels for the majority class")."""
    report = fit.global_step
    summary = {"levels": [], "train_seconds": fit.train_seconds,
               "partition_seconds": fit.partition_seconds,
               "n_sv": int(fit.model.support_vectors.shape[0]), "rows": fit.n_rows,
               "validation_rows": fit.validation_rows, "stopped_at": None,
               "stop_reason": fit.stop_reason, "best_level": None, "metric": params.metric,
               "validation_accuracy": report["validation_accuracy"],
               "test_accuracy": fit.test_accuracy, "global_step": report,
               "params": vars(params)}
    if fit.class_weights is not None:
        summary["class_weights"] = list(fit.class_weights)
    if fit.input_map is not None:
        summary["input_map"] = fit.input_map
        show_input_map(fit.input_map)
    print(f"{fit.stop_reason}; the model is the global step's: {report['centres']:,} centres, "
          f"{_steps_text(report)}, {report['seconds']:.1f} s ({report['stopped']})"
          f"{_path_text(report)}; "
          "validation accuracy "
          f"{report['validation_accuracy']:.4f} against the majority class's "
          f"{report['majority_validation_accuracy']:.4f} on {fit.validation_rows:,} rows",
          flush=True)
    print(f"trained on {fit.n_rows:,} rows in {fit.train_seconds:.2f} s "
          f"(partitioning {fit.partition_seconds:.2f} s); {summary['n_sv']:,} centres"
          + ("" if fit.test_accuracy is None else f"; test accuracy {fit.test_accuracy:.4f}"))
    return summary


def _slice_reason(fit, params) -> str:
    """Why the held-out slice has fewer than --validation-max-rows rows, if it has."""
    most = getattr(params, "validation_max_rows", None)
    if most is None or fit.validation_rows >= most or getattr(params, "validation_data", None):
        return ""
    return (f": --validation-fraction {params.validation_fraction:g} of the rows; "
            f"{most:,} from {most / params.validation_fraction:,.0f} rows on")


def show_global_step(report):
    """The global step's line: its fit, and whether the validation slice kept it."""
    if not report.get("ran"):
        print(f"global step {report['reason']}", flush=True)
        return
    test = "" if "test_accuracy" not in report else f", test {report['test_accuracy']:.4f}"
    # after the levels it is judged against the level's model; run instead of the levels (and
    # not kept: the levels ran after it), against the majority class's
    against = ("level's", report["level_validation_accuracy"]) \
        if "level_validation_accuracy" in report else \
        ("majority class's", report["majority_validation_accuracy"])
    print(f"global step: {report['centres']:,} centres, {report.get('form', 'normal')}, from "
          f"{report['start']}, {_steps_text(report)}, {report['seconds']:.1f} s "
          f"({report['stopped']}){_path_text(report)}; "
          f"validation {report['validation_accuracy']:.4f} against the {against[0]} "
          f"{against[1]:.4f}{_judged_by(report)}{test}: "
          + ("kept" if report["kept"] else "not kept"), flush=True)


def _steps_text(report) -> str:
    """The Newton steps and passes of a global step (at the λ kept, of the whole path)."""
    if len(report.get("path") or []) < 2:
        return f"{report['newton_steps']} Newton steps in {report['passes']} passes"
    return (f"{report['newton_steps']} Newton steps at the λ kept, {report['passes']} passes "
            "in all")


def _path_text(report) -> str:
    """The λ path of a matrix-free global step: each λ's validation accuracy and passes, the
    λ kept and why the path ended; "" for a step at one λ."""
    path = report.get("path") or []
    if len(path) < 2 and not any(step.get("validation_accuracy") is not None for step in path):
        return ""
    steps = ", ".join(f"{step['lam']:g} ({step['validation_accuracy']:.4f}, "
                      f"{step['passes']} passes)" for step in path)
    return f"; λ path {steps}: λ = {report['lam']:g} kept ({report['path_stopped']})"


def _judged_by(report) -> str:
    """The global step's and the level's values of the metric that decided, if not accuracy."""
    metric = report.get("metric")
    if metric is None:
        return ""
    return (f" ({metric.replace('_', ' ')} {report[f'validation_{metric}']:.4f} against "
            f"{report[f'level_validation_{metric}']:.4f})")


def show_input_map(report):
    """The input map's line: the components the kernel took, or why it took the features."""
    if "reason" in report:
        print(f"input map: the {report['features']:,} features themselves ({report['reason']})",
              flush=True)
        return
    print(f"input map: {report['features']:,} features -> {report['components']:,} principal "
          f"components ({report['variance_kept']:.1%} of the variance; on pairs of the sample "
          f"the projected kernel is {report['mean_relative_difference']:.1%} from the raw one "
          "on average)", flush=True)


TARGETS_SHOWN = {"partitions": "their own partitions' models", "model": "the whole model"}
PASSES_SHOWN = {0: "no pass over the level, ", 2: "two passes over the level, "}


def show_compression(report):
    """The candidates judged on the validation slice and the model written (docs/design.md
    §6, step 8), then one line per row set a written compression was checked on (validation,
    test)."""
    show_candidates(report.get("candidates") or [])
    chosen = report.get("chosen")
    if chosen:
        kind = f"{chosen['points']:,} points" if chosen["compressed"] else \
            f"the whole level, {chosen['points']:,} support vectors"
        print(f"the model written: {kind} ({chosen['reason']})", flush=True)
    if not report.get("compressed", True):
        return
    print(f"compressed {report['support_vectors_before']:,} -> "
          f"{report['support_vectors_after']:,} points ({report['method']}, fitted on "
          f"{report['fit_rows']:,} rows scored by {TARGETS_SHOWN[report['fit_targets']]}, "
          f"{PASSES_SHOWN.get(report.get('passes_over_level'), '')}"
          f"{report['seconds']:.2f} s)", flush=True)
    for name in ("validation", "test"):
        r = report.get(name)
        if r is None:
            continue
        if "accuracy_before" not in r:
            print(f"  {name}: accuracy {r['accuracy_after']:.4f} compressed (the whole model "
                  "was not scored on these rows: --test-every-level does)", flush=True)
            continue
        print(f"  {name}: accuracy {r['accuracy_before']:.4f} -> {r['accuracy_after']:.4f}, "
              f"decision function relative RMS error {r['relative_rms_error']:.3g}, "
              f"{100 * r['predictions_changed']:.2f}% of predictions changed", flush=True)


def show_candidates(candidates):
    """One line per compression candidate judged on the validation slice, the whole model
    last: its points, accuracy (and the fit's metric), how far the whole model is above it and
    the standard error of that, validation rows scored a second on the driver ("est.":
    estimated from a compression's rate), its seconds, and whether it was accepted."""
    judged = [c for c in candidates if "difference" in c]
    if not judged:
        return
    metric = judged[0]["metric"]
    other = "value" in judged[0]  # judged by another metric, or by a weighted accuracy
    column = COLUMNS["weighted_accuracy" if metric == "accuracy" else metric]
    print("compression candidates on the validation slice (accepted when the whole model is "
          f"at most one standard error of the paired {metric.replace('_', ' ')} difference "
          "above it):", flush=True)
    print(f"  {'points':>9} {'val acc':>8}" + (f" {column:>11}" if other else "")
          + f" {'difference':>11} {'std err':>8} {'rows/s':>13} {'seconds':>8}  accepted",
          flush=True)
    for c in candidates:
        rate = "" if c.get("rows_per_second") is None else \
            f"{c['rows_per_second']:,.0f}" + (" est." if c.get("estimated") else "")
        seconds = "" if "seconds" not in c else f"{c['seconds']:.2f}"
        accepted = ("yes" if c["accepted"] else "no") if c["compressed"] else "whole model"
        print(f"  {c['points']:>9,} {_accuracy_text(c.get('accuracy')):>8}"
              + (f" {_accuracy_text(c.get('value')):>11}" if other else "")
              + f" {c.get('difference', 0.0):>11.4f} {c.get('standard_error', 0.0):>8.4f}"
              f" {rate:>13} {seconds:>8}  {accepted}", flush=True)


def show_timeline(timeline):
    """End the command's timeline, print it and return it for the metrics JSON."""
    timeline.end()
    print("timeline of the command (seconds from its start):", flush=True)
    for line in timeline.lines():
        print(line, flush=True)
    return timeline.to_dict()


def rewrite_metrics(summary, metrics_out):
    """The metrics JSON written again (atomically, as ``write_outputs`` writes it), now with
    what only the end of the command knows."""
    replace_file(metrics_out,
                 lambda staging: staging.write_text(json.dumps(summary, indent=2, default=str)))


def dsvrg_summary(fit, params):
    """The metrics of a DSVRG fit, and its closing line."""
    last = fit.epochs[-1]
    summary = {"epochs": [entry.to_dict() for entry in fit.epochs],
               "train_seconds": fit.train_seconds, "partition_seconds": fit.partition_seconds,
               "n_sv": 1, "rows": fit.n_rows, "step": fit.step, "intercept": fit.intercept,
               "test_accuracy": last.test_accuracy, "objective": last.objective,
               "layout": fit.layout, "resident_hits": fit.resident_hits,
               "resident_misses": fit.resident_misses, "validation_rows": fit.validation_rows,
               "params": vars(params)}
    print(f"trained on {fit.n_rows} rows in {fit.train_seconds:.2f} s with DSVRG "
          f"({len(fit.epochs)} epochs, step {fit.step:.3g})"
          + ("" if last.test_accuracy is None else f"; test accuracy {last.test_accuracy:.4f}")
          + ("" if not fit.validation_rows else
             f"; {params.calibration} calibration on {fit.validation_rows:,} held-out rows"))
    return summary
