"""Which model of a level is written with ``max_sv="auto"``: the smallest compression the
validation slice cannot tell from the whole model, else the whole model (pure numpy; docs/design.md
§6, step 8).

The candidates are compressions to :data:`~sodm_spark.models.compression.AUTO_POINTS` points,
then twice as many, and twice again, while the next stays below half the support vectors
(beyond, the compression saves too little of the scoring to pay for its loss), while its
N × N matrices fit the driver's memory and while the seconds it is predicted to take keep every
compression within :data:`BUDGET_SHARE` of the fit's seconds so far; and last the whole model.
They are judged on the validation slice the levels were judged on, against the whole level,
by the fit's metric's paired difference (:func:`~.metrics.paired_difference`: for accuracy
McNemar's counts, gain (b − c)/n with standard error √(b + c + 1)/n, b and c the rows only the
compression or only the whole model gets right), the stop rule's and the global step's
judgement (docs/design.md §2.7, §2.9). A compression is accepted when the whole model beats
it by at most :data:`WITHIN_STANDARD_ERRORS` standard error; the first accepted is the
smallest, and is written. None accepted: the whole model is.

Why: on 600,000 deformed Fashion-MNIST rows level 2 validated 0.9832 and its compression to
8,000 points 0.9798 (a net 34 of the 10,000 rows lost; test 0.9783 against 0.9755), and the
compression was written all the same: the job had measured the loss and not used it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..core.labels import correct_rows
from ..models.compression import DIRECT_FIT_WORK, FIT_ITERATIONS
from .metrics import Evaluation, correct_of, metric_of, paired_difference

#: How many standard errors of the paired difference the whole model may beat a compression by
#: and the compression still be written: one, as "within one standard error" of the stop rule's
#: default confidence (a difference smaller than its error is one the slice cannot tell).
WITHIN_STANDARD_ERRORS = 1.0
#: The compressions after the first may run while every compression together is predicted to
#: take at most this share of the fit's seconds before them: a quarter, as a level predicted
#: to cost less than a quarter of the training so far is run whatever it is predicted to gain
#: (selection.stopping's CHEAP_LEVEL_SHARE). By compression_work, 16,000 points on the
#: 126,000 fit rows the tasks return for 8,000 (100 inputs) are predicted 6.4 times 8,000's
#: seconds (46.4 s at 600,000 rows): they run after a fit of about 1,400 s or more.
BUDGET_SHARE = 0.25
#: N × N float64 matrices a fit of N points holds at once (K_ZZ, its Cholesky factor, the
#: preconditioner's second factor or the normal matrix, the copy each factorization makes).
GRAM_COPIES = 4


def compression_work(fit_rows: int, points: int, inputs: float) -> float:
    """Multiply-adds of a compression's fit (:func:`~sodm_spark.models.compression.
    fit_coefficients`): the kernel between the fit rows and the points (rows · N · inputs),
    then the normal equations (rows · N²) while they are at most ``DIRECT_FIT_WORK``, else the
    conjugate gradients' steps (2 · ``FIT_ITERATIONS`` · rows · N) and the Cholesky factors
    (N³)."""
    rows, n = float(fit_rows), float(points)
    solve = rows * n * n if rows * n * n <= DIRECT_FIT_WORK else \
        2.0 * FIT_ITERATIONS * rows * n + n ** 3
    return rows * n * float(inputs) + solve


def most_points_in_memory(available_mb: float) -> int:
    """The most points whose N × N matrices (:data:`GRAM_COPIES` of float64) take at most half
    of ``available_mb``."""
    return int(np.sqrt(0.5 * max(available_mb, 0.0) * 2**20 / (GRAM_COPIES * 8.0)))


def judged_like(level_judged, scores, labels, coded):
    """How the slice judges ``scores`` as it judged the level: an :class:`~.metrics.Evaluation`
    on the same rows, weights and metric, or per-row correctness against the coded
    ``labels`` (``coded``: :func:`~sodm_spark.core.labels.coded_classes`)."""
    if isinstance(level_judged, Evaluation):
        return level_judged.with_scores(scores)
    return correct_rows(scores, labels, coded)


@dataclass(frozen=True, eq=False)
class Tried:
    """One compression tried: its points, how the slice judged it, what it cost."""

    points: int
    judged: object  # per-row correctness or an Evaluation, as the level's; None: no slice
    seconds: float  # the compression (sampling, the fit)
    scoring_seconds: float  # its scoring of the validation rows on the driver
    work: float  # multiply-adds of the compression (compression_work)
    fit_rows: int = 0
    model: Any = field(default=None, repr=False, compare=False)  # the caller's, unrecorded
    scores: Any = field(default=None, repr=False, compare=False)  # on the validation rows

    @property
    def rows_per_second(self) -> float | None:
        """Validation rows scored per second on the driver; None: nothing scored."""
        rows = 0 if self.judged is None else correct_of(self.judged).size
        return rows / self.scoring_seconds if rows and self.scoring_seconds > 0 else None


@dataclass(frozen=True)
class Schedule:
    """Which compressions are tried: ``first`` points, then doubling (module docstring)."""

    first: int
    n_support: int
    budget_seconds: float | None = None  # every compression's seconds together; None: no limit
    most_points: int | None = None  # the driver's memory (most_points_in_memory); None: any

    def stop_before(self, points: int, tried: list[Tried], next_work: float) -> str:
        """Why the compression to ``points`` is not tried after ``tried`` (the last one's
        seconds scaled by ``next_work`` over its work predict its seconds), or ""."""
        if points >= self.n_support / 2:
            return (f"{points:,} points would reach half the {self.n_support:,} support "
                    "vectors")
        if self.most_points is not None and points > self.most_points:
            return f"{points:,} points' N x N matrices would not fit the driver's memory"
        last = tried[-1]
        predicted = (last.seconds + last.scoring_seconds) * next_work / max(last.work, 1.0)
        spent = sum(t.seconds + t.scoring_seconds for t in tried)
        if self.budget_seconds is not None and spent + predicted > self.budget_seconds:
            return (f"{points:,} points, predicted {predicted:,.1f} s, would take the "
                    f"compressions past their budget of {self.budget_seconds:,.1f} s")
        return ""


def difference(level_judged, judged) -> tuple[float, float, bool]:
    """(how far the whole level is above the compression by the slice's metric, oriented
    (positive: the compression is worse), its standard error, whether it is accepted: the
    difference at most :data:`WITHIN_STANDARD_ERRORS` standard errors)."""
    gain, error = paired_difference(level_judged, judged)
    return -gain, error, -gain <= WITHIN_STANDARD_ERRORS * error


@dataclass(frozen=True)
class Choice:
    """The compressions tried in order, the one written (the last tried; None: the whole
    model), and why the doubling stopped where no compression was accepted ("" otherwise)."""

    tried: list
    chosen: Tried | None
    stopped: str = ""


def choose_compression(level_judged, schedule: Schedule, compress: Callable[[int], Tried],
                       work_of: Callable[[int], float]) -> Choice:
    """Try compressions to ``schedule.first`` points, then doubling (``compress(points)``
    makes and judges one; ``work_of(points)`` its work, for the prediction of the next) until
    one is accepted against ``level_judged`` (:func:`difference`): the smallest accepted is
    chosen; none accepted, the whole model (``chosen`` None)."""
    tried: list[Tried] = []
    points = schedule.first
    while True:
        candidate = compress(points)
        tried.append(candidate)
        if difference(level_judged, candidate.judged)[2]:
            return Choice(tried, candidate)
        points *= 2
        stopped = schedule.stop_before(points, tried, work_of(points))
        if stopped:
            return Choice(tried, None, stopped)


def candidate_record(level_judged, tried: Tried | None, points: int = 0,
                     rate: tuple[float | None, bool] | None = None) -> dict:
    """A candidate's entry of the metrics' ``compression.candidates``: its points, whether it
    is a compression, the metric and the accuracy on the slice, the difference from the whole
    model and its standard error, accepted or not, validation rows scored per second (and
    whether that is ``estimated``), its seconds and fit rows. ``tried`` None: the whole model
    of ``points`` support vectors, ``rate`` its (rows per second, estimated)."""
    judged = level_judged if tried is None else tried.judged
    record: dict = {"points": int(points if tried is None else tried.points),
                    "compressed": tried is not None}
    if judged is not None:
        metric = metric_of(judged)
        record.update(metric=metric, accuracy=float(np.mean(correct_of(judged))))
        if isinstance(judged, Evaluation):  # the metric's value (weighted, if rows are)
            record["value"] = float(judged.value)
        gap, error, accepted = (0.0, 0.0, True) if tried is None else \
            difference(level_judged, judged)
        record.update(difference=float(gap), standard_error=float(error), accepted=accepted)
    per_second, estimated = (tried.rows_per_second, False) if tried is not None else \
        (rate or (None, False))
    record.update(rows_per_second=per_second, estimated=estimated)
    if tried is not None:
        record.update(seconds=tried.seconds, scoring_seconds=tried.scoring_seconds,
                      fit_rows=tried.fit_rows)
    return record
