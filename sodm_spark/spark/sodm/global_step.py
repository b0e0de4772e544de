"""The global step of a SODM fit: one Nyström ODM on every training row, where the levels'
local models learn little (docs/design.md §2.9; the numerics are
:mod:`sodm_spark.models.nystroem_odm`).

The levels solve local problems of a few thousand rows each; on a table where such a model
stays near the majority class, or where merging stopped paying, one kernel model that sees
every row can still learn. After the levels, :func:`global_step_reason` decides whether to
try it; :mod:`.global_plan` chooses the centres and the form (the normal matrix, or conjugate
gradients on kernel products) within the step's time budget, :func:`fit_global` draws the
centres among the chosen level's rows and runs the Newton steps with each pass's sums added over
the level's partitions, and the fit keeps the result only where the validation slice ranks it
above the level's model by the fit's metric (:func:`keeps_global`;
:mod:`sodm_spark.selection.metrics`).
"""
from __future__ import annotations

import time

import numpy as np

from ...core.errors import SettingsError
from ...core.kernels import kernel_matrix
from ...core.labels import coded_classes, correct_rows
from ...models import nystroem_cg, nystroem_odm
from ...models.expansion import KernelExpansion
from ...models.nystroem_passes import RowPasses
from ...selection.metrics import Evaluation, correct_of, metric_of, paired_difference
from ...selection.stopping import holdout_values, oversampled_share
from ..engine import ordered_sum
from .global_rows import on_the_driver, pass_blocks, pass_rows
from .global_plan import GlobalPlan, plan_global
from .params import GLOBAL_STEPS
from .tasks import chunk_order

#: "auto" tries the global step when the chosen level's validation accuracy is less than this
#: far above the majority class's share of the slice (the levels learned almost nothing).
NEAR_MAJORITY = 0.005


def global_step_reason(mode: str, levels: list[int], correct: list,
                       chosen: int, majority_share: float) -> str | None:
    """Why the global step runs after the levels, or None: always with ``mode="always"``,
    never with "none"; with "auto" when the ``chosen`` level (its per-row validation
    correctness, or its Evaluation by the fit's metric, in ``correct``, in the order
    solved) is within :data:`NEAR_MAJORITY` of the
    majority class's share of the slice, or when the last merge gained nothing on the slice.
    Never after level 0, whose one partition is already the exact ODM of every row."""
    if mode not in GLOBAL_STEPS:
        raise SettingsError(f"global_step must be one of {', '.join(GLOBAL_STEPS)}, got {mode!r}.")
    if mode == "none" or chosen == 0 or not levels:
        return None
    if mode == "always":
        return "global_step='always'"
    accuracy = float(np.mean(correct_of(correct[levels.index(chosen)])))
    if accuracy < majority_share + NEAR_MAJORITY:
        return (f"level {chosen}'s validation accuracy {accuracy:.4f} is within "
                f"{NEAR_MAJORITY:g} of the majority class's {majority_share:.4f}")
    if len(levels) >= 2 and paired_difference(correct[-2], correct[-1])[0] <= 0.0:
        return f"the merge into level {levels[-1]} gained nothing on the validation slice"
    return None


def _sample_rows(block, share, seed):
    """(rows, their hash values, their ids) of a block's rows whose seeded row-id hash is below
    ``share``: the same rows whatever task, attempt or block layout reads them."""
    X, _, _, ids = block
    values = holdout_values(ids, seed + 23)
    drawn = values < share
    return np.asarray(X[drawn], dtype=np.float64), values[drawn], ids[drawn]


def _level_values(item, centres, kernel):
    """A chunk's share of the level's f at the centres: Σ_i γ_i y_i k(x_i, z_j) (binary)."""
    chunk = item[1]
    return kernel_matrix(kernel, centres, np.asarray(chunk.X)) @ (chunk.gamma * chunk.y)


def _block_sums(block, shared, steps, theta, v, kernel):
    """A block's :func:`~sodm_spark.models.nystroem_odm.pass_sums` (the normal-matrix form)."""
    X, y, weights, _ = block
    centres, coef, direction = shared
    return nystroem_odm.pass_sums(kernel, centres, X, y,
                                  nystroem_odm.PassLine(coef, direction, steps), theta, v,
                                  weights=weights)


def _block_weight(block):
    """Σ s_i of a block's rows (their weight column's times their class's)."""
    _, y, weights, _ = block
    return float(y.size if weights is None else np.sum(weights))


def draw_centres(sc, rows, n_rows: int, n_centres: int, seed: int) -> np.ndarray:
    """``n_centres`` rows drawn uniformly among ``rows`` (:func:`~.global_rows.pass_rows`'
    blocks; all of them when there are no more): those of least seeded row-id hash, as Falkon
    draws its centres uniformly, in row-id order (the same centres in the same order whatever
    the partitions); every row a level holds is a support vector or near one (ODM duals are
    dense)."""
    share = oversampled_share(1.0, n_centres, n_rows)
    sc.setJobDescription("SODM global step: draw the centres")
    pieces = rows.map(lambda block: _sample_rows(block, share, seed)).collect()
    X = np.concatenate([piece[0] for piece in pieces])
    ids = np.concatenate([piece[2] for piece in pieces])
    least = np.argsort(np.concatenate([piece[1] for piece in pieces]), kind="stable")[:n_centres]
    return X[least[np.argsort(ids[least], kind="stable")]]


def fit_global(sc, solved, kernel, classes, params, plan: GlobalPlan, on_step=None,
               partitions: int = 1, class_weights=None, judge=None):
    """The Nyström ODM of every row of ``solved`` (a level's partitions, or the top level's
    before any is solved) in the plan's form, each pass a job over the rows as one block a
    task (:func:`~.global_rows.pass_rows`), or where the plan says so the same passes on the
    driver (:func:`~.global_rows.on_the_driver`): (its model, the report for the metrics).
    With ``partitions`` (the level's count; 0: no level, start from α = 0) it starts from
    the level's model (the mean of its partitions' local models, as a merge starts from γ/p:
    each is a model of the whole data) brought into the centres' span, where F is lower there
    than at α = 0. ``judge``
    (a model → how the validation slice judges it): the matrix-free form walks λ's path
    (:func:`~sodm_spark.models.nystroem_cg.fit_path`) and keeps the λ it ranks first; None:
    λ alone."""
    started = time.perf_counter()
    # the rows as a few blocks (PASS_BLOCKS), one a task, read by every job of the step: a
    # level's hundreds of partitions would cost each job a task apiece (2,390,000 flights
    # rows in 729 partitions: drawing the centres and summing the weights took 65 s and 69 s)
    job_sc, tasks = sc, pass_blocks(sc.defaultParallelism)
    if plan.place == "driver":
        sc, solved, rows = on_the_driver(sc, solved, tasks, class_weights)
    else:
        rows = pass_rows(solved, tasks, class_weights)
    try:
        centres = draw_centres(sc, rows, plan.rows, plan.centres, params.seed)
        # M of the loss's C is the rows' total weight (docs/design.md §1.4; their count without
        # weights)
        total = ordered_sum(rows, _block_weight, lambda a, b: a + b)
        values = None
        if partitions:  # the level's model at the centres: a pass of n·m·d kernel entries
            sc.setJobDescription("SODM global step: the level's model at the centres")
            values = ordered_sum(solved, lambda item: _level_values(item, centres, kernel),
                                 lambda a, b: a + b, chunk_order) / partitions
        fitted = _matrix_free if plan.form == "matrix-free" else _normal_matrix
        judge_coef = None if judge is None else (lambda coef: judge(KernelExpansion(
            centres.astype(np.float32), coef[:, None], kernel, classes)))
        coef, report = fitted(sc, rows, kernel, params, plan, centres, total, values, on_step,
                              judge_coef)
    finally:
        rows.unpersist()
    job_sc.setJobDescription(None)
    model = KernelExpansion(centres.astype(np.float32), coef[:, None], kernel, classes)
    report.update({"reason": plan.reason, "rows": plan.rows, "centres": int(centres.shape[0]),
                   "inputs": plan.inputs, "form": plan.form, "place": plan.place,
                   "other_place_seconds": plan.other_place_seconds,
                   "work_per_pass": plan.work_per_pass, "planned_passes": plan.passes,
                   "budget_seconds": plan.budget_seconds,
                   "entry_nanoseconds": None if plan.entry_seconds is None
                   else plan.entry_seconds * 1e9,
                   "predicted_seconds": plan.predicted_seconds,
                   "seconds": time.perf_counter() - started})
    return model, report


def _start_text(start: str, partitions_given: bool) -> str:
    if not partitions_given:
        return "α = 0 (no level ran)"
    return ("the level's model in the centres' span" if start == "given"
            else "α = 0 (F is lower there than at the level's model)")


def _normal_matrix(sc, rows, kernel, params, plan, centres, total, values, on_step,
                   judge=None):
    """(α, report) of the normal-matrix form (:func:`~sodm_spark.models.nystroem_odm.fit`)
    over :func:`~.global_rows.pass_rows`' blocks."""
    basis = nystroem_odm.centre_basis(kernel, centres)
    theta, v = params.theta, params.v

    def run_pass(coef, direction, steps):
        sc.setJobDescription("SODM global step: a Newton pass over the rows")
        shared = sc.broadcast((centres, coef, direction))
        try:
            return ordered_sum(rows, lambda block: _block_sums(
                block, shared.value, steps, theta, v, kernel), lambda a, b: a + b)
        finally:
            shared.unpersist()

    start = None if values is None else nystroem_odm.span_start(
        basis, values, nystroem_odm.loss_weight(params.lam, theta, total) * total / len(centres))
    coef, newton = nystroem_odm.fit(basis, run_pass, params.lam, theta, v, total,
                                    on_step=on_step, start=start)
    return coef, {"lam": params.lam, "rank": int(basis.transform.shape[1]),
                  "passes": newton.passes,
                  "newton_steps": len(newton.steps), "stopped": newton.reason,
                  "start": _start_text(newton.start, values is not None),
                  "objective": newton.objectives[-1]}


def _matrix_free(sc, rows, kernel, params, plan, centres, total, values, on_step, judge=None):
    """(α, report) of the matrix-free form: :func:`~sodm_spark.models.nystroem_cg.fit_path`
    over λ's path when ``judge`` (α → how the slice judges its model) is given, else
    :func:`~sodm_spark.models.nystroem_cg.fit` at λ; each pass a Spark job over
    :func:`~.global_rows.pass_rows`' blocks."""
    cores = max(1, sc.defaultParallelism)
    threads = max(1, cores // max(1, min(cores, rows.getNumPartitions())))
    theta, v = params.theta, params.v
    shared_centres = sc.broadcast(centres)

    def summed(method, *arguments):
        sc.setJobDescription(f"SODM global step: a {method} pass over the rows")
        shared = sc.broadcast(arguments)
        try:
            return ordered_sum(rows, lambda block: getattr(RowPasses(
                kernel, shared_centres.value, block[0], block[1], block[2], theta, v,
                threads=threads), method)(*shared.value), lambda a, b: a + b)
        finally:
            shared.unpersist()

    class ClusterPasses:
        def line(self, coef, direction, steps):
            return summed("line", coef, direction, tuple(steps))

        def hessian(self, coef, direction):
            return summed("hessian", coef, direction)

    problem = nystroem_cg.Problem(params.lam, theta, v, total)
    settings = nystroem_cg.NewtonCGSettings(max_passes=plan.passes)
    try:
        if judge is None:
            coef, single = nystroem_cg.fit(kernel, centres, ClusterPasses(), problem, settings,
                                           start_values=values, on_step=on_step)
            path = nystroem_cg.PathReport([params.lam], [single], [None], 0, "λ alone")
        else:
            coef, path = nystroem_cg.fit_path(kernel, centres, ClusterPasses(), problem, judge,
                                              keeps_global, settings, start_values=values,
                                              on_step=on_step)
    finally:
        shared_centres.unpersist()
    report = path.reports[path.chosen]
    first = path.reports[0]
    return coef, {"lam": path.lams[path.chosen], "passes": path.passes,
                  "newton_steps": len(report.steps),
                  "cg_iterations": [step["cg"] for step in report.steps],
                  "stopped": report.reason, "jitter": first.jitter,
                  "start": _start_text(first.start, values is not None),
                  "objective": report.objectives[-1],
                  "path": [{"lam": lam, "passes": fitted.passes,
                            "newton_steps": len(fitted.steps), "stopped": fitted.reason,
                            "validation_accuracy": None if judged is None
                            else float(np.mean(correct_of(judged)))}
                           for lam, fitted, judged in zip(path.lams, path.reports,
                                                          path.judged)],
                  "path_stopped": path.reason}


def keeps_global(level_correct, global_correct) -> bool:
    """Whether the slice ranks the global model above the level's: the paired gain of its
    metric positive (accuracy, from the per-row correctness: more rows right)."""
    return paired_difference(level_correct, global_correct)[0] > 0.0


def validation_correct(model: KernelExpansion, X, y, coded) -> np.ndarray:
    """Per-row correctness of a model on the kernel's input rows ``X`` (labels ``y`` coded
    as :func:`~sodm_spark.core.labels.coded_classes` ``coded``)."""
    return correct_rows(model.input_scores(X), y, coded)


def slice_judge(template, X_val, y_val, n_classes: int):
    """How the validation slice (``X_val``, ``y_val``) judges a model, as it judged
    ``template`` (an Evaluation by the fit's metric, or per-row correctness): a function of
    the model."""
    if isinstance(template, Evaluation):
        return lambda model: template.with_scores(model.input_scores(X_val))
    coded = coded_classes(n_classes)
    return lambda model: validation_correct(model, X_val, y_val, coded)


def run_global_step(sc, chosen, prepared, params, cores: int, on_plan=None,
                    budget_seconds: float | None = None):
    """After the levels of a fit (``prepared``; ``chosen``: the level kept, with its RDD
    ``solved``, its ``entry`` (LevelStats) and ``judged``, the validated levels and how the
    slice judged each: per-row correctness, or an Evaluation by the fit's metric): (the
    global step's model when the validation slice keeps it, else None; its report, or None
    when it did not run). Two classes of dense rows with a validation slice only.
    ``budget_seconds``: the step's time budget (:func:`~.global_plan.after_levels_budget`)."""
    validated_levels, validated_correct = chosen.judged
    if params.global_step == "none":
        return None, None
    if not validated_levels:  # nothing to judge the step against: it could never be kept
        if params.global_step != "always" or chosen.entry.level == 0:
            return None, None
        return None, {"reason": "not run: no validation slice to judge it (a fit that solves "
                                "one level holds none out: give validation rows, or a stop "
                                "level below the top)", "ran": False}
    if prepared.multi or prepared.sparse:
        return None, {"reason": "not run: " + ("more than two classes" if prepared.multi
                                              else "sparse rows"), "ran": False}
    X_val, y_val = prepared.validation_pair
    majority = float(max(np.mean(y_val > 0), np.mean(y_val < 0)))
    level = chosen.entry.level
    reason = global_step_reason(params.global_step, validated_levels, validated_correct,
                                level, majority)
    if reason is None:
        return None, None
    plan = plan_global(prepared.n_rows, prepared.kernel_features, cores, reason,
                       prepared.kernel, budget_seconds, params.global_centres)
    if on_plan is not None:
        on_plan(plan)
    level_right = validated_correct[validated_levels.index(level)]
    judge = slice_judge(level_right, X_val, y_val, prepared.classes.size)
    model, report = fit_global(sc, chosen.solved, prepared.kernel, prepared.classes, params,
                               plan, partitions=chosen.entry.partitions,
                               class_weights=prepared.class_weights, judge=judge)
    global_right = judge(model)  # judged as the level was: see correct_of
    if isinstance(level_right, Evaluation):  # judged by the fit's metric, as the level was
        metric = metric_of(level_right)
        if metric != "accuracy":  # beside the accuracies, which the report always gives
            report.update({"metric": metric, f"validation_{metric}": global_right.value,
                           f"level_validation_{metric}": level_right.value})
    report.update(ran=True, validation_accuracy=float(np.mean(correct_of(global_right))),
                  level_validation_accuracy=float(np.mean(correct_of(level_right))),
                  kept=keeps_global(level_right, global_right), model=model)
    return (model if report["kept"] else None), report


def majority_judged(judged, labels: np.ndarray):
    """How the slice judges the model that predicts the majority class of ``labels`` (±1)
    everywhere, as ``judged`` (a point's Evaluation, or its correctness) judges a model."""
    sign = 1.0 if np.mean(labels > 0) >= 0.5 else -1.0
    if isinstance(judged, Evaluation):
        if judged.weights is not None:  # the weighted majority
            sign = 1.0 if np.sum(judged.weights[labels > 0]) >= 0.5 * np.sum(judged.weights) \
                else -1.0
        return judged.with_scores(np.full(labels.size, sign))
    return labels == sign


def search_found_only_majority(judged: list, labels: np.ndarray, confidence: float,
                               min_improvement: float) -> str | None:
    """Why the levels are not run, or None: every searched point (how the validation slice
    judges each, ``judged``; labels ±1) gains at most ``confidence`` standard errors, and at
    most ``min_improvement``, over the majority class on the same rows (the paired difference
    of the fit's metric, :func:`~sodm_spark.selection.metrics.paired_difference`): local
    models of the search's piece size learn nothing the majority class does not, and merging
    them would not either (docs/design.md §2.9)."""
    if not judged:
        return None
    majority = majority_judged(judged[0], labels)
    gains = [paired_difference(majority, point) for point in judged]
    if any(gain > max(confidence * error, min_improvement) for gain, error in gains):
        return None
    gain, error = max(gains, key=lambda pair: pair[0])
    return (f"the search's {len(judged)} points gain at most {gain:+.4f} ± {error:.4f} over "
            f"the majority class on the validation slice")


def run_global_only(sc, prepared, params, why: tuple, cores: int, on_plan=None,
                    budget_seconds: float | None = None):
    """The global step on the top level's partitions before any level is solved, from α = 0
    (``why``: (why no level runs, :func:`search_found_only_majority`'s text; how the slice
    judged a searched point, the model judged alike)): (its model, its report with the
    validation slice's verdict against the majority class: ``kept`` when it ranks the model
    above it)."""
    reason, template = why
    X_val, y_val = prepared.validation_pair
    plan = plan_global(prepared.n_rows, prepared.kernel_features, cores,
                       f"no level: {reason}", prepared.kernel, budget_seconds,
                       params.global_centres)
    if on_plan is not None:
        on_plan(plan)
    judge = slice_judge(template, X_val, y_val, prepared.classes.size)
    model, report = fit_global(sc, prepared.parts, prepared.kernel, prepared.classes, params,
                               plan, partitions=0, class_weights=prepared.class_weights,
                               judge=judge)
    right = judge(model)  # judged as the search's points were: see correct_of
    majority = majority_judged(right, y_val)
    report.update(ran=True, validation_accuracy=float(np.mean(correct_of(right))),
                  majority_validation_accuracy=float(np.mean(correct_of(majority))),
                  kept=keeps_global(majority, right), model=model)
    return model, report


def public_report(report):
    """The global step's report without its model (for the metrics)."""
    return None if report is None else {k: v for k, v in report.items() if k != "model"}
