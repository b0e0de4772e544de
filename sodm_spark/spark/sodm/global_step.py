"""The global step of a SODM fit: one Nyström ODM on every training row, where the levels'
local models learn little (docs/design.md §2.9; the numerics are
:mod:`sodm_spark.models.nystroem_odm`).

The levels solve local problems of a few thousand rows each; on a table where such a model
stays near the majority class, or where merging stopped paying, one kernel model that sees
every row can still learn. After the levels, :func:`global_step_reason` decides whether to
try it; :func:`fit_global` draws the centres among the chosen level's rows, states the plan
(rows × centres × inputs a pass, the passes expected, the predicted seconds), runs the Newton
steps with each step's sums added over the level's partitions, and the fit keeps the result
only where the validation slice ranks it above the level's model by the fit's metric
(:func:`keeps_global`; :mod:`sodm_spark.selection.metrics`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ...core.errors import SettingsError
from ...core.kernels import kernel_matrix
from ...core.labels import coded_classes, correct_rows
from ...core.weights import combined_weights
from ...models import nystroem_odm
from ...models.expansion import KernelExpansion
from ...selection.metrics import Evaluation, correct_of, metric_of, paired_difference
from ...selection.stopping import holdout_values, oversampled_share
from ..frames import ordered_sum
from .params import GLOBAL_STEPS
from .plan import gemm_flops_per_second
from .tasks import chunk_order

#: "auto" tries the global step when the chosen level's validation accuracy is less than this
#: far above the majority class's share of the slice (the levels learned almost nothing).
NEAR_MAJORITY = 0.005
#: Passes a fit is expected to need (the plan's prediction): 4 passes measured on 290,000
#: flights rows and 6 on 1,990,000 rows of the 12-column table, 1,000 centres each.
EXPECTED_PASSES = 5
#: Seconds a kernel entry costs a pass on one core besides the GEMMs (the exponential, the
#: pieces, the weighted copy of the block): fitted to the same two runs (6.2 s a pass at
#: 290,000 × 1,000 × 36, 41 s at 1,990,000 × 1,000 × 12 on two cores; the GEMMs alone at half
#: the float32 speed predicted 4.9 s and 31 s).
PASS_SECONDS_PER_ENTRY = 1e-8


@dataclass(frozen=True)
class GlobalPlan:
    """The global step before it runs: its shape, its work a pass and its predicted seconds."""

    rows: int
    centres: int
    inputs: int
    reason: str
    work_per_pass: float  # multiply-adds (nystroem_odm.pass_work)
    predicted_seconds: float

    def describe(self) -> str:
        return (f"global step ({self.reason}): Nyström ODM on {self.rows:,} rows x "
                f"{self.centres:,} centres x {self.inputs:,} inputs, "
                f"{self.work_per_pass:.2g} multiply-adds a pass, about {EXPECTED_PASSES} "
                f"passes, predicted {self.predicted_seconds:,.0f} s")


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


def plan_global(n_rows: int, centres: int, inputs: int, cores: int, reason: str) -> GlobalPlan:
    """The plan of :func:`fit_global`: a pass is its work (:func:`~sodm_spark.models.
    nystroem_odm.pass_work`) at this machine's GEMM speed on ``cores`` cores in float64 (half
    the float32 speed) plus :data:`PASS_SECONDS_PER_ENTRY` a kernel entry; the plan predicts
    :data:`EXPECTED_PASSES` of them."""
    work = nystroem_odm.pass_work(n_rows, centres, inputs)
    cores = max(1, cores)
    seconds = EXPECTED_PASSES * (2.0 * work / (0.5 * gemm_flops_per_second() * cores)
                                 + PASS_SECONDS_PER_ENTRY * n_rows * centres / cores)
    return GlobalPlan(n_rows, centres, inputs, reason, work, seconds)


def _sample_rows(item, share, seed):
    """(rows, their hash values) of a chunk's rows whose seeded row-id hash is below
    ``share``: the same rows whatever task, attempt or block layout reads them."""
    chunk = item[1]
    values = holdout_values(chunk.ids, seed + 23)
    drawn = values < share
    return np.asarray(chunk.X[drawn], dtype=np.float64), values[drawn]


def _level_values(item, centres, kernel):
    """A chunk's share of the level's f at the centres: Σ_i γ_i y_i k(x_i, z_j) (binary)."""
    chunk = item[1]
    return kernel_matrix(kernel, centres, np.asarray(chunk.X)) @ (chunk.gamma * chunk.y)


def _chunk_sums(item, shared, steps, theta, v, kernel, class_weights=None):
    chunk = item[1]
    centres, coef, direction = shared
    return nystroem_odm.pass_sums(kernel, centres, np.asarray(chunk.X), chunk.y,
                                  nystroem_odm.PassLine(coef, direction, steps), theta, v,
                                  weights=combined_weights(chunk.weights, class_weights, chunk.y))


def _chunk_weight(item, class_weights):
    """Σ s_i of a chunk's rows (their weight column's times their class's)."""
    chunk = item[1]
    weights = combined_weights(chunk.weights, class_weights, chunk.y)
    return float(chunk.y.size if weights is None else np.sum(weights))


def draw_centres(sc, solved, n_rows: int, n_centres: int, seed: int) -> np.ndarray:
    """``n_centres`` rows drawn uniformly among the level's rows (all of them when it has no
    more): those of least seeded row-id hash, as Falkon draws its centres uniformly; every
    row a level holds is a support vector or near one (ODM duals are dense)."""
    share = oversampled_share(1.0, n_centres, n_rows)
    sc.setJobDescription("SODM global step: draw the centres")
    pieces = [piece for _, piece in sorted(  # in chunk order, whatever order they came in
        solved.map(lambda item: (chunk_order(item), _sample_rows(item, share, seed))).collect(),
        key=lambda pair: pair[0])]
    rows = np.concatenate([piece[0] for piece in pieces])
    order = np.argsort(np.concatenate([piece[1] for piece in pieces]), kind="stable")
    return rows[np.sort(order[:n_centres])]


def fit_global(sc, solved, kernel, classes, params, plan: GlobalPlan, on_step=None,
               partitions: int = 1, class_weights=None):
    """The Nyström ODM of every row of the level ``solved`` (one pass a Newton step, each
    partition's :func:`~sodm_spark.models.nystroem_odm.pass_sums` added in a tree), started
    from the level's model (the mean of its ``partitions`` local models, as a merge starts
    from γ/p: each is a model of the whole data): (its model, the report for the metrics)."""
    started = time.perf_counter()
    centres = draw_centres(sc, solved, plan.rows, plan.centres, params.seed)
    basis = nystroem_odm.centre_basis(kernel, centres)
    theta, v = params.theta, params.v
    # M of the loss's C is the rows' total weight (docs/design.md §1.4; their count without
    # weights): a pass without kernels, beside the Newton passes' n·m·d
    total = ordered_sum(solved, lambda item: _chunk_weight(item, class_weights),
                        lambda a, b: a + b, chunk_order)

    def run_pass(coef, direction, steps):
        sc.setJobDescription("SODM global step: a Newton pass over the rows")
        shared = sc.broadcast((centres, coef, direction))
        try:
            return ordered_sum(solved, lambda item: _chunk_sums(
                item, shared.value, steps, theta, v, kernel, class_weights), lambda a, b: a + b,
                chunk_order)
        finally:
            shared.unpersist()

    # started from the level's model: its values at the centres (a pass of n·m·d kernel
    # entries, the kernel part of one Newton pass without its n·m² normal matrix)
    sc.setJobDescription("SODM global step: the level's model at the centres")
    level_values = ordered_sum(solved, lambda item: _level_values(item, centres, kernel),
                               lambda a, b: a + b, chunk_order)
    start = nystroem_odm.span_start(
        basis, level_values / max(1, partitions),
        nystroem_odm.loss_weight(params.lam, theta, total) * total / len(centres))
    coef, newton = nystroem_odm.fit(basis, run_pass, params.lam, theta, v, total,
                                    on_step=on_step, start=start)
    sc.setJobDescription(None)
    model = KernelExpansion(centres.astype(np.float32), coef[:, None], kernel, classes)
    report = {"reason": plan.reason, "rows": plan.rows, "centres": int(centres.shape[0]),
              "rank": int(basis.transform.shape[1]), "inputs": plan.inputs,
              "work_per_pass": plan.work_per_pass,
              "predicted_seconds": plan.predicted_seconds, "passes": newton.passes,
              "newton_steps": len(newton.steps), "stopped": newton.reason,
              "start": ("the level's model in the centres' span" if newton.start == "given"
                        else "α = 0 (F is lower there than at the level's model)"),
              "objective": newton.objectives[-1],
              "seconds": time.perf_counter() - started}
    return model, report


def keeps_global(level_correct, global_correct) -> bool:
    """Whether the slice ranks the global model above the level's: the paired gain of its
    metric positive (accuracy, from the per-row correctness: more rows right)."""
    return paired_difference(level_correct, global_correct)[0] > 0.0


def validation_correct(model: KernelExpansion, X, y, coded) -> np.ndarray:
    """Per-row correctness of a model on the kernel's input rows ``X`` (labels ``y`` coded
    as :func:`~sodm_spark.core.labels.coded_classes` ``coded``)."""
    return correct_rows(model.input_scores(X), y, coded)


def run_global_step(sc, solved, prepared, params, chosen, validated_levels, validated_correct,
                    cores, on_plan, partitions: int = 1):
    """After the levels of a fit (``prepared``, the ``chosen`` level's RDD ``solved`` of
    ``partitions`` partitions, the validated levels and how the slice judged each: per-row
    correctness, or an Evaluation by the fit's metric): (the
    global step's model when the validation slice keeps it, else None; its report, or None
    when it did not run). Two classes of dense rows with a validation slice only."""
    if params.global_step == "none" or not validated_levels:
        return None, None
    if prepared.multi or prepared.sparse:
        return None, {"reason": "not run: " + ("more than two classes" if prepared.multi
                                              else "sparse rows"), "ran": False}
    X_val, y_val = prepared.validation_pair
    majority = float(max(np.mean(y_val > 0), np.mean(y_val < 0)))
    reason = global_step_reason(params.global_step, validated_levels, validated_correct,
                                chosen, majority)
    if reason is None:
        return None, None
    plan = plan_global(prepared.n_rows, min(params.global_centres, prepared.n_rows),
                       prepared.kernel_features, cores, reason)
    if on_plan is not None:
        on_plan(plan)
    model, report = fit_global(sc, solved, prepared.kernel, prepared.classes, params, plan,
                               partitions=partitions, class_weights=prepared.class_weights)
    coded = coded_classes(prepared.classes.size)
    level_right = validated_correct[validated_levels.index(chosen)]
    global_right: Evaluation | np.ndarray  # judged as the level was: see correct_of
    if isinstance(level_right, Evaluation):  # judged by the fit's metric, as the level was
        global_right = level_right.with_scores(model.input_scores(X_val))
        metric = metric_of(level_right)
        if metric != "accuracy":  # beside the accuracies, which the report always gives
            report.update({"metric": metric, f"validation_{metric}": global_right.value,
                           f"level_validation_{metric}": level_right.value})
    else:
        global_right = validation_correct(model, X_val, y_val, coded)
    report.update(ran=True, validation_accuracy=float(np.mean(correct_of(global_right))),
                  level_validation_accuracy=float(np.mean(correct_of(level_right))),
                  kept=keeps_global(level_right, global_right), model=model)
    return (model if report["kept"] else None), report


def public_report(report):
    """The global step's report without its model (for the metrics)."""
    return None if report is None else {k: v for k, v in report.items() if k != "model"}
