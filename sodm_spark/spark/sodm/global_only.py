"""A fit without levels: the global step on every training row, where the search found only the
majority class (docs/design.md §2.9, "No levels for the majority class").

On a table whose local models of the search's piece size predict nothing the majority class
does not (2,400,000 US flights of 8 columns: 0.8025 on the validation slice against the
majority's 0.8008, and levels 6 and 5 then spent 252 s to validate at 0.8021 and 0.8023),
solving hundreds of partitions and merging them buys nothing. :func:`fit_without_levels`
spends their predicted time on the global step instead (:func:`~.global_step.run_global_only`)
and returns its model, scaled, scored and calibrated as a level's would be, when the slice
ranks it above the majority class; otherwise None, and the levels run after all.
"""
from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from ...core.labels import accuracy_of_scores, raw_labels
from ...core.timeline import add_stage, timed
from ...models.calibration import fit_calibration
from ...selection.tuning import DEFAULT_SEARCH_POINT
from ..memory import executor_memory
from .global_plan import instead_of_levels_budget
from .global_step import public_report, run_global_only, search_found_only_majority
from .params import SODMFit, SODMParams
from .plan import plan_level
from .scored_model import taking_projected_rows


def default_point(params: SODMParams, search) -> SODMParams:
    """``params`` at the search's default point (γ × 2 of the base, λ = 1e6, θ = 0.1, v = 0.2;
    :data:`~sodm_spark.selection.tuning.DEFAULT_SEARCH_POINT`) for a global step that runs
    instead of the levels: every searched point predicted the majority class, so the search
    ranks none above another, and its tie-break (the fewest sweeps: the smallest λ) is the
    most regularized point, whose model of every row stays at the majority class too (2,400,000
    flights rows: λ = 1e3 chosen, the step's model not above the majority on the slice)."""
    point = search.default or DEFAULT_SEARCH_POINT
    return replace(params, gamma=search.base_gamma * point.gamma_scale, lam=point.lam,
                   theta=point.theta, v=point.v)


def levels_skipped(prepared, params: SODMParams, search) -> tuple | None:
    """(why no level runs, how the slice judged a searched point) when the search ``search``
    (a :class:`~sodm_spark.spark.tune.TuneResult`) found only the majority class
    (:func:`~.global_step.search_found_only_majority`, both rounds' points); else None. Only
    for two classes of dense rows with a validation slice, and a global step not turned off."""
    if (params.global_step == "none" or prepared.multi or prepared.sparse
            or prepared.validation_pair is None or search is None):
        return None
    judged = [point.judged for point in [*search.points, *search.final_points]]
    reason = search_found_only_majority(judged, prepared.validation_pair[1], params.confidence,
                                        params.min_improvement)
    if reason is None:
        return None
    point = search.default or DEFAULT_SEARCH_POINT
    return (f"{reason}; the global step fits at the search's default point (gamma "
            f"{point.gamma_scale:g} x scale, lam {point.lam:g})", judged[0])


def predicted_levels_seconds(sc, prepared, params: SODMParams) -> float:
    """The seconds the levels a global step replaces were predicted to take: the top level's
    plan and the merge below it (the least the stop rule runs), from this machine's priors."""
    memory = executor_memory(sc, params.memory_mb, params.device)
    cores = max(1, sc.defaultParallelism)
    width = prepared.row_width or prepared.n_features
    sizes = prepared.sizes
    plans = [plan_level(params.levels, sizes, width, params, memory, [], cores)]
    if params.levels:
        merged = np.bincount(np.arange(sizes.size) // params.p, weights=sizes).astype(np.int64)
        plans.append(plan_level(params.levels - 1, merged, width, params, memory, [], cores))
    return float(sum(plan.predicted_seconds or 0.0 for plan in plans))


def fit_without_levels(sc, prepared, params: SODMParams, options, skipped: tuple):
    """(the fit of the global step alone, or None when the slice does not rank its model above
    the majority class; the step's report). ``skipped``: :func:`levels_skipped`'s."""
    started = time.perf_counter()
    # the command's clock when the fit is a job's (its timeline), else the fit's own
    command = prepared.started if options.timeline is None else options.timeline.origin
    budget = instead_of_levels_budget(predicted_levels_seconds(sc, prepared, params),
                                      started - command, params.time_budget,
                                      started - prepared.started)
    model, report = run_global_only(sc, prepared, params, skipped, max(1, sc.defaultParallelism),
                                    options.on_plan, budget)
    add_stage(options.timeline, "global step", time.perf_counter() - started, started)
    if not report["kept"]:
        return None, report
    if prepared.scaling is not None:  # the model takes raw rows
        offset, feature_scale, columns = prepared.scaling
        model = replace(model, feature_offset=offset, feature_scale=feature_scale,
                        feature_columns=columns)
    train_seconds = time.perf_counter() - prepared.started
    classes = prepared.classes
    test_accuracy = None
    if prepared.test_pair is not None:
        with timed(options.timeline, "test scoring"):
            X_test, y_test = prepared.test_pair
            scores = model.input_scores(X_test)
            test_accuracy = report["test_accuracy"] = accuracy_of_scores(
                scores, raw_labels(y_test, classes), classes)
    X_val, y_val = prepared.validation_pair
    with timed(options.timeline, "calibration"):
        model = replace(model, calibration=fit_calibration(
            params.calibration, model.input_scores(X_val),
            np.searchsorted(classes, raw_labels(y_val, classes)), len(classes)))
    model = taking_projected_rows(model, prepared.projection)
    return SODMFit(model=model, levels=[], train_seconds=train_seconds,
                   partition_seconds=prepared.partition_seconds, n_rows=prepared.n_rows,
                   stop_reason=f"no level solved: {skipped[0]}",
                   validation_rows=len(y_val), test_accuracy=test_accuracy,
                   input_map=prepared.input_map_report, global_step=public_report(report),
                   class_weights=prepared.class_weights), report
