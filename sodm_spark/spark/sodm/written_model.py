"""Which model of a fit's chosen level is written, and the report of its compression
(docs/design.md §6, step 8).

The level's model is collected whole (:func:`~.level_model.collect_level`) or compressed before
it reaches the driver (:func:`~.level_model.compress_level`). ``max_sv`` says which: "none"
keeps every support vector, N compresses to N points (judged on the validation slice and
written whatever it lost: the user asked for N), and "auto" — above
:data:`~sodm_spark.models.compression.AUTO_ABOVE` support vectors, with a validation slice —
tries compressions to :data:`~sodm_spark.models.compression.AUTO_POINTS` points, then doubling,
each scored on the slice on the driver, and writes the smallest the slice cannot tell from the
whole level (:mod:`sodm_spark.selection.compression_choice`), else the whole level. A doubled
compression fits on the rows the level's tasks returned for the first, fewer a point (7, 10
and 15 rows a point were within about 0.1 point of held-out accuracy of each other on the
model measured beside ``LOCAL_FIT_ROWS_PER_POINT``; fewer were not measured, and the slice
judges every result), so no candidate costs more passes over the level than the first: asking
the tasks for 15 rows a point of a second candidate would send twice the 126,000 rows they
return for 8,000 points to the driver in every fit, also in those that stop at 8,000. :class:`CompressionReport` records every candidate (its accuracy and metric
on the slice, the difference from the whole level and its standard error, the validation rows
it scores a second, its seconds) and the choice.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ...core.resources import available_memory_mb
from ...models.compression import (LOCAL_FIT_ROWS_PER_POINT, ScoreComparison, fit_rows_wanted,
                                   resolve_max_sv)
from ...models.expansion import KernelExpansion
from ...selection.compression_choice import (Choice, Schedule, Tried, candidate_record,
                                             choose_compression, compression_work, judged_like,
                                             most_points_in_memory)
from .level_model import LocalFit, collect_level, compress_level, training_row_bytes

if TYPE_CHECKING:
    from .prepare import PreparedData


@dataclass
class CompressionReport:
    """What the compression of a fit's model did (docs/design.md §6, step 8): the candidates
    tried and the model written (``compressed`` False: the whole level, which no compression
    came within one standard error of); the fit adds how the written compression compares with
    the level's own on the test and validation rows as it scores them. The job prints it and
    writes :meth:`to_dict` to the metrics JSON."""

    max_sv: object  # as given: "auto" or N
    method: str  # how the points were chosen (sodm_spark.models.compression.METHODS)
    support_vectors_before: int
    support_vectors_after: int  # of the model written
    fit_rows: int  # rows the coefficients of the last compression were fitted on
    fit_targets: str  # "partitions" (the tasks' own f, §2.6) or "model" (the level's f summed)
    passes_over_level: int  # passes over the level's rows the compressions ran
    seconds: float  # every candidate's compression and scoring, and a collection
    compressed: bool = True  # the model written is a compression
    # one entry per candidate, the whole model last (compression_choice.candidate_record)
    candidates: list = field(default_factory=list)
    chosen: dict = field(default_factory=dict)  # points, compressed, reason
    test: ScoreComparison | None = None
    validation: ScoreComparison | None = None
    # the written compression's f on the validation rows (scored to judge it): not reported
    validation_scores: np.ndarray | None = field(default=None, repr=False)

    def to_dict(self) -> dict:
        """The report for the metrics JSON: the comparisons only where the rows were scored,
        the test rows' first."""
        report = {name: getattr(self, name) for name in self.__dataclass_fields__
                  if name not in ("test", "validation", "validation_scores")}
        for name in ("test", "validation"):
            if getattr(self, name) is not None:
                report[name] = getattr(self, name).to_dict()
        return report


@dataclass(frozen=True)
class ModelRequest:
    """What the fit asks of its chosen level's model (docs/design.md §6, step 8)."""

    max_sv: object  # "auto", "none"/None or N (models.compression.resolve_max_sv)
    method: str = "random"  # how a compression chooses its points
    seed: int = 0
    budget_seconds: float | None = None  # max_sv="auto": every compression's seconds together


@dataclass(frozen=True)
class SliceJudge:
    """The validation slice a compression is judged on as the level was: its rows as the
    kernel takes them, coded labels and classes, and the level's judgement (per-row
    correctness or an Evaluation by the fit's metric)."""

    rows: Any  # float64 rows, dense or CSR
    labels: np.ndarray
    coded: np.ndarray
    level: object

    def judged(self, model: KernelExpansion) -> tuple:
        """(how the slice judges ``model``, its scores there, the seconds the driver took)."""
        started = time.perf_counter()
        scores = model.input_scores(self.rows)
        seconds = time.perf_counter() - started
        return judged_like(self.level, scores, self.labels, self.coded), scores, seconds


#: Validation rows the whole model, once collected, is timed on for its rows per second (the
#: slice's scores came from the level's tasks; a share of it gives the rate).
RATE_ROWS = 1000


def chosen_model(sc, solved, n_support: int, prepared: PreparedData, request: ModelRequest,
                 local_fit: LocalFit | None = None, judge: SliceJudge | None = None):
    """(the model of the chosen level ``solved``, with ``n_support`` support vectors, a
    :class:`CompressionReport` or None): collected whole when ``request.max_sv`` resolves to
    no compression (:func:`~sodm_spark.models.compression.resolve_max_sv`); compressed to
    the N points asked for (judged on the slice when there is one); with ``max_sv="auto"``
    and a slice (``judge``), the smallest compression within one standard error of the whole
    level there, else the whole level (:func:`~sodm_spark.selection.compression_choice.
    choose_compression`)."""
    n_points = resolve_max_sv(request.max_sv, n_support)
    if n_points is None:
        return _collected(sc, solved, n_support, prepared), None
    started = time.perf_counter()
    passes: list = []  # each candidate's (fit targets, passes over the level), in order
    inputs = [float(prepared.row_width or prepared.kernel_features)]  # the last one's

    def compress(points: int) -> Tried:
        begun = time.perf_counter()
        model, fit_rows, targets, runs = compress_level(
            sc, solved, prepared.kernel, prepared.classes, n_support, points, request.method,
            request.seed, local_fit=local_fit)
        seconds = time.perf_counter() - begun
        judged, scores, scoring = (None, None, 0.0) if judge is None else judge.judged(model)
        passes.append((targets, runs))
        inputs[0] = _kernel_inputs(model, prepared)
        size = int(model.support_vectors.shape[0])
        return Tried(size, judged, seconds, scoring,
                     compression_work(fit_rows, size, inputs[0]), fit_rows, model, scores)

    if request.max_sv != "auto" or judge is None:  # N asked for, or nothing to judge by
        tried = compress(n_points)
        choice = Choice([tried], tried)
    else:
        schedule = Schedule(n_points, n_support, request.budget_seconds,
                            most_points_in_memory(available_memory_mb()))
        choice = choose_compression(judge.level, schedule, compress, lambda points: (
            compression_work(_fit_rows(local_fit, points, n_support), points, inputs[0])))
    chosen = choice.chosen
    model = chosen.model if chosen is not None else \
        _collected(sc, solved, n_support, prepared)
    report = CompressionReport(  # the chosen compression is the last one tried
        max_sv=request.max_sv, method=request.method, support_vectors_before=n_support,
        support_vectors_after=int(model.support_vectors.shape[0]),
        fit_rows=choice.tried[-1].fit_rows, fit_targets=passes[-1][0],
        passes_over_level=sum(runs for _, runs in passes), seconds=0.0,
        compressed=chosen is not None,
        candidates=_records(choice, n_support, prepared, judge, None if chosen else model),
        chosen=_chosen_record(request, choice, model), validation_scores=(
            None if chosen is None else chosen.scores))
    report.seconds = time.perf_counter() - started
    return model, report


def _records(choice: Choice, n_support: int, prepared: PreparedData, judge: SliceJudge | None,
             whole: KernelExpansion | None) -> list:
    """The candidates' records, the whole model last: its validation rows per second timed on
    :data:`RATE_ROWS` of them where it was collected (``whole``), else estimated from the
    last compression's rate scaled by points × kernel inputs."""
    level = None if judge is None else judge.level
    records = [candidate_record(level, tried) for tried in choice.tried]
    rate: tuple = (None, False)
    if whole is not None and judge is not None:
        rows = judge.rows[:RATE_ROWS]
        begun = time.perf_counter()
        whole.input_scores(rows)
        rate = (rows.shape[0] / max(time.perf_counter() - begun, 1e-9), False)
    else:
        measured = [tried for tried in choice.tried if tried.rows_per_second]
        if measured:
            last = measured[-1]
            width = float(prepared.row_width or prepared.kernel_features)
            rate = (last.rows_per_second * last.points * _kernel_inputs(last.model, prepared)
                    / (n_support * width), True)
    records.append(candidate_record(level, None, n_support, rate))
    return records


def _chosen_record(request: ModelRequest, choice: Choice, model: KernelExpansion) -> dict:
    """The model written and why (the metrics' ``compression.chosen``)."""
    points = int(model.support_vectors.shape[0])
    if choice.chosen is None:
        reason = ("no compression came within one standard error of the whole model on the "
                  f"validation slice; the next would not run: {choice.stopped}")
    elif request.max_sv != "auto":
        reason = f"max_sv={request.max_sv} as asked"
    elif choice.chosen.judged is None:
        reason = (f"max_sv='auto' compresses to {choice.chosen.points:,} points; no "
                  "validation slice to judge the compression by")
    else:
        reason = ("the smallest compression within one standard error of the whole model on "
                  "the validation slice")
    return {"points": points, "compressed": choice.chosen is not None, "reason": reason}


def _kernel_inputs(model: KernelExpansion, prepared: PreparedData) -> float:
    """What a kernel entry of ``model`` costs: its projection's components, else the level's
    row width (features, or a sparse row's memory width)."""
    components = model.projection_components
    return float(components.shape[1]) if components is not None else \
        float(prepared.row_width or prepared.kernel_features)


def _fit_rows(local_fit: LocalFit | None, points: int, n_support: int) -> int:
    """Rows a compression to ``points`` fits on: the tasks' fit rows (at most 15 a point; a
    larger compression takes those returned for the first, fewer a point), else a sample of the
    support vectors (:func:`~sodm_spark.models.compression.fit_rows_wanted`)."""
    if local_fit is None:
        return min(fit_rows_wanted(points), n_support)
    return min(LOCAL_FIT_ROWS_PER_POINT * points, int(local_fit.ids.size))


def _collected(sc, solved, n_support: int, prepared: PreparedData) -> KernelExpansion:
    """The level's whole model on the driver (:func:`collect_level`)."""
    return collect_level(sc, solved, prepared.kernel, prepared.classes, n_support,
                         prepared.kernel_features, training_row_bytes(prepared),
                         prepared.multi)
