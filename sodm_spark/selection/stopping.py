"""When SODM stops merging, and which rows it validates on (no Spark).

Algorithm 1 of the SODM paper merges until one partition is left or every partition is
already optimal at its warm start (line 5). A user rarely wants the last merges: each one
costs about p times the level before it (the kernel work of a level with k partitions of m rows
is k·m²·d) and buys less accuracy. :class:`StopRule` decides between levels from the rows of
the validation slice that every level predicts:

* **paired gains**: consecutive levels are compared on the same rows, so only the rows whose
  prediction changed carry information (:func:`paired_gain`: the difference of accuracies and
  its standard error √(b + c + 1)/n from the b rows one level gets right and the other wrong
  and the c the other way round, McNemar's counts; one row more keeps it honest when none
  changed). A difference of 0.2 points on 1,000 independent rows has a standard error of
  about 0.6 points; paired, only the few changed rows count. With another ``metric``
  (:mod:`.metrics`: auc, logloss, f1, balanced_accuracy) the levels are compared by that
  metric's paired difference (:func:`~.metrics.paired_difference`), the gains, the errors and
  ``min_improvement`` in its units (the logloss's with the sign flipped: a gain is a drop).
* **look-ahead**: the next merge is predicted to gain what the last one gained times the ratio
  of the last two merges' gains (:func:`predicted_gain`): on a learning curve
  e(m) = e∞ + b·m^-β each p-fold larger partition gains p^-β times what the merge before it
  gained, whatever the irreducible error e∞, so the gains shrink geometrically; with one merge
  measured, the ratio of its two levels' validation errors stands in (it takes e∞ = 0 and so
  errs towards running the level). The prediction is never more than the error left. The fit
  stops when even the prediction's upper bound (the last gain ``confidence`` standard errors
  higher, times the ratio) is below ``min_improvement``. Replayed on every level of six data
  sets × three seeds (docs/benchmarks.md, "How automatic stopping decides"), this stopped
  where the gains had shrunk (binary Fashion-MNIST after level 1 on two seeds of three;
  records of 2026-11-26: 0.69 of every level's time, against 0.85 for the mean of the last
  two gains times the error ratio).
* **cheap levels run**: a level predicted to cost less than :data:`CHEAP_LEVEL_SHARE` of the
  whole command so far is never skipped for a small expected gain: a merge that costs little
  next to what the user has already waited for is worth its chance of a gain that the slice's
  few changed rows cannot promise. The whole command is what a user waits for: a job's
  start-up (Python's imports, the JVM) and reading count with the fit's seconds
  (:func:`seconds_before_fit`); a fit outside a command (SODMClassifier, a notebook) counts
  its own. A 3,680-row set (``--levels 3``) stopped after level 1 (5.2 s of levels) before
  level 0, predicted 2.1 s, which took 0.54 s when run and was 0.98 test points better:
  cheap against the whole command, not against the fit alone (a command on satellite's 4,435
  rows spent 15-18 s here before its fit, start-up 9-12 s and reading 6-7 s).
  The prediction is a time, so which levels run may differ between two runs of a fit near
  that share; the model returned is then the best of the levels that did run
  (:func:`choose_level`), so running one more never returns a level the slice ranks below
  another.
* ``time_budget``: the next level's predicted seconds (:func:`predict_seconds`, from the cost
  of the levels solved so far) would end the fit after this many seconds.

The model kept (:func:`choose_level`) is the most merged of the validated levels that no other
validated level beats by more than ``confidence`` standard errors of their paired difference. The validation rows are held out of the training rows by :func:`holdout_mask`.

A level is judged by its per-row correctness (bool, accuracy: what every fit records, as
``validation_wrong``) or by an :class:`~.metrics.Evaluation` of its recorded decision values
(``validation_decisions``, recorded where the metric is not accuracy or the rows are
weighted); :func:`level_evaluations` builds either from a fit's records.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .metrics import (Evaluation, check_metric, error_of, mcnemar_gain, metric_of,
                      paired_difference)

# reasons written to the metrics JSON (``stop_reason``)
REACHED_STOP_LEVEL = "reached stop level"
WARM_START_OPTIMAL = "every partition optimal at its warm start"
SMALL_IMPROVEMENT = "next merge not expected to add min_improvement"
TIME_BUDGET = "next level would exceed time_budget"
NEXT_LEVEL_BLOCKED = "next level's kernels would not be cached with every core solving"
#: A level predicted to cost less than this share of the whole command so far (its start-up and
#: reading, then the fit) is run whatever gain the look-ahead expects (StopRule.reason_to_stop).
CHEAP_LEVEL_SHARE = 0.25
#: A command's start more than this many seconds before its fit's is not counted
#: (:func:`seconds_before_fit`): the process ran other work first. The commands of
#: docs/benchmarks.md, "How automatic stopping decides", spent 15-39 s before their fit
#: (start-up, reading), and a whole command on 600,000 rows took 178 s ("Results at scale"):
#: an hour bounds the lead of a job at the sizes it is meant for without counting the hours a
#: notebook's process may have run.
LONGEST_LEAD_SECONDS = 3600.0


def seconds_before_fit(command_started: float | None, fit_started: float) -> float:
    """Seconds a command ran before its fit's clock started (perf_counter values; the start-up
    of Python and the JVM, the reading), which :meth:`StopRule.reason_to_stop` adds to the
    fit's own seconds when it weighs a level's cost: 0 outside a command (``command_started``
    None: SODMClassifier, a notebook, a test), for a start after the fit's (a resumed fit's
    clock counts its checkpointed levels) or more than :data:`LONGEST_LEAD_SECONDS` before
    it."""
    if command_started is None:
        return 0.0
    lead = fit_started - command_started
    return lead if 0.0 < lead <= LONGEST_LEAD_SECONDS else 0.0


#: The weight of the last level's measured over modelled seconds in the next level's prediction
#: (:func:`predict_seconds`, on a log scale). On the 17 merges of the first run of
#: benchmarks/bench_level_costs.py: 0 (the model alone) 2.71 times off at worst, 0.5 2.35, 1
#: (the whole ratio) 2.54; 0.5 within 1.5 of 12 of them.
MEASURED_WEIGHT = 0.5


def validation_share(fraction: float, max_rows: int, n_rows: int) -> float:
    """The share of ``n_rows`` rows held out: ``fraction``, at most ``max_rows`` rows (10% and
    10,000 by default: the full 10,000 from 100,000 rows on). Scoring them costs each level
    validation rows × training rows kernel entries (10,000 rows at 600,000 × 175 inputs, about
    38 core-seconds a level), which buys a slice where a gain of 0.2 points is 20 rows, not
    the 2 of a 1,000-row slice."""
    return min(fraction, max_rows / n_rows)


@dataclass(frozen=True)
class LevelCost:
    """What :func:`predict_seconds` needs of one measured level: its measured seconds and the
    seconds the cost model gives a level of its shape with the sweeps it needed
    (``spark/sodm/plan.py: modelled_seconds``)."""

    seconds: float
    modelled: float


def predict_seconds(done: list[LevelCost], modelled_next: float) -> float | None:
    """Seconds the next level should take, from the levels measured so far (None before any):
    the cost model's seconds for it (``modelled_next``: its shape, with the sweeps the last
    level needed, shrunk as a warm start shrinks them), times the square root of the last
    level's measured over modelled seconds. That ratio is what the model does not know of this
    machine now (its load) and of these rows; its square root, half-way on a log scale between
    the model and the last level, because one level's seconds also carry the noise of a shared
    machine (:data:`MEASURED_WEIGHT`; docs/results/level_costs.json)."""
    if not done:
        return None
    last = done[-1]
    ratio = last.seconds / last.modelled if last.modelled > 0.0 else 1.0
    return modelled_next * ratio ** MEASURED_WEIGHT


def best_level(accuracies: list[tuple[int, float]]) -> int:
    """The level with the highest validation accuracy; on a tie the later (more merged) one."""
    if not accuracies:
        raise ValueError("no level has a validation accuracy yet")
    best_level_, best = accuracies[0]
    for level, accuracy in accuracies[1:]:
        if accuracy >= best:
            best_level_, best = level, accuracy
    return best_level_


def paired_gain(before: np.ndarray, after: np.ndarray, weights=None) -> tuple[float, float]:
    """(gain, standard error) of the accuracy of ``after`` over ``before``, both the per-row
    correctness (bool) of two models on the same rows: gain (b − c)/n and standard error
    √(b + c + 1)/n, with b the rows only ``after`` gets right and c the rows only ``before``
    does (McNemar's discordant counts; weighted rows: :func:`~.metrics.mcnemar_gain`)."""
    return mcnemar_gain(before, after, weights)


def predicted_gain(correct: list, confidence: float = 0.0) -> float | None:
    """The gain the next merge is predicted to bring (module docstring), ``confidence``
    standard errors above the estimate; None before two levels. ``correct``: the levels'
    per-row correctness, or their :class:`~.metrics.Evaluation` by one metric."""
    if len(correct) < 2:
        return None
    gain, stderr = paired_difference(correct[-2], correct[-1])
    error_left = error_of(correct[-1])
    if len(correct) >= 3:
        # e(m) = e∞ + b·m^-β: each p-fold larger partition gains p^-β times what the merge
        # before it gained, whatever the irreducible error e∞ (no ratio after a merge that
        # gained nothing)
        before, _ = paired_difference(correct[-3], correct[-2])
        ratio = 1.0 if before <= 0.0 else min(1.0, max(0.0, gain / before))
    else:  # one merge measured: its levels' error ratio, which takes e∞ = 0 (an overestimate)
        error_before = error_of(correct[-2])
        ratio = 1.0 if error_before <= 0.0 else min(1.0, max(0.0, error_left / error_before))
    # on these rows no merge can gain more than the error that is left (the logloss: itself)
    return min(error_left, ratio * (gain + confidence * stderr))


def choose_level(levels: list[int], correct: list, confidence: float = 1.0) -> int:
    """The level whose model a fit returns, of the validated ``levels`` (in the order solved,
    with their per-row validation correctness, or their :class:`~.metrics.Evaluation` by the
    fit's metric): the last (most merged) level that no other level beats by more than
    ``confidence`` standard errors of their paired difference
    (:func:`~.metrics.paired_difference`). One always qualifies: no level beats the best one
    by a positive gain. Weighing every level, not only the last two, keeps a level that a
    later, worse one would otherwise hide (levels 2, 1, 0 at 0.8616, 0.8408, 0.8393 on the slice:
    level 2, where the last two alone would give level 1)."""
    if not levels:
        raise ValueError("no level has been validated yet")
    return unbeaten_levels(levels, correct, confidence)[-1]


def unbeaten_levels(levels: list[int], correct: list,
                    confidence: float = 1.0) -> list[int]:
    """The ``levels`` (in the order solved) that no other level beats by more than
    ``confidence`` standard errors of their paired difference; never empty when ``levels``
    is not. A level once beaten stays beaten as levels are added, so a fit needs to keep only
    these levels' models (and the last level's, to merge) for :func:`choose_level`."""
    if len(levels) != len(correct):
        raise ValueError(f"one correctness vector per level is needed, got {len(levels)} "
                         f"levels and {len(correct)} vectors.")
    def beats(other, candidate):
        gain, stderr = paired_difference(correct[candidate], correct[other])
        return gain > confidence * stderr

    return [level for candidate, level in enumerate(levels)
            if not any(beats(other, candidate) for other in range(len(levels))
                       if other != candidate)]


@dataclass(frozen=True)
class StopRule:
    """Automatic stopping between levels (see the module docstring); ``None`` disables a test.

    ``min_improvement``: accuracy (0.002 = 0.2 points), or with another ``metric`` that
    metric's difference (the logloss's drop), the next merge must be expected to add, at
    ``confidence`` standard errors (one-sided; 1.0 is 84%)."""

    min_improvement: float | None = 0.002
    time_budget: float | None = None
    confidence: float = 1.0
    metric: str = "accuracy"  # what the levels are judged by (sodm_spark.selection.metrics)

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        check_metric(self.metric)
        if self.min_improvement is not None and not self.min_improvement >= 0.0:
            raise ValueError(f"min_improvement must be >= 0 (a difference of the metric, e.g. "
                             f"0.002 for 0.2 points of accuracy), got {self.min_improvement!r}.")
        if self.time_budget is not None and not self.time_budget > 0.0:
            raise ValueError(f"time_budget must be a positive number of seconds, got "
                             f"{self.time_budget!r}.")
        if not (np.isfinite(self.confidence) and self.confidence >= 0.0):
            raise ValueError(f"confidence must be a number of standard errors >= 0, got "
                             f"{self.confidence!r}.")

    def reason_to_stop(self, correct: list[np.ndarray], elapsed: float,
                       next_seconds: float | None, before_fit: float = 0.0) -> str | None:
        """Why the fit should stop before the next level, or None to go on.

        ``correct`` is the per-row validation correctness of the levels solved so far, in
        order (or their :class:`~.metrics.Evaluation` by :attr:`metric`); ``elapsed`` the
        seconds the fit spent (what ``time_budget`` bounds); ``next_seconds`` the next level's
        prediction; ``before_fit`` the seconds of the command before the fit started
        (:func:`seconds_before_fit`): a level is cheap against the whole command so far,
        ``before_fit + elapsed``.
        """
        if correct and metric_of(correct[-1]) != self.metric:
            raise ValueError(f"the stop rule judges by {self.metric}; the levels were judged by "
                             f"{metric_of(correct[-1])}.")
        cheap = (next_seconds is not None
                 and next_seconds < CHEAP_LEVEL_SHARE * (before_fit + elapsed))
        if self.min_improvement is not None and not cheap:
            upper = predicted_gain(correct, self.confidence)
            if upper is not None and upper < self.min_improvement:
                return SMALL_IMPROVEMENT
        if (self.time_budget is not None and next_seconds is not None
                and elapsed + next_seconds > self.time_budget):
            return TIME_BUDGET
        return None


def next_level_blocked(kernel: str, tasks: int, partitions: int, cores: int) -> bool:
    """Whether a level's kernels are not cached with every core solving: computed on demand
    in every sweep (``kernel`` names "blocked"), or fewer tasks than cores at once."""
    return "blocked" in kernel or tasks < min(partitions, cores)


def rows_right(wrong, n_rows: int) -> np.ndarray:
    """Per-row correctness (bool, ``n_rows``) from the positions of the rows a level got
    wrong, as a level records them."""
    right = np.ones(n_rows, dtype=bool)
    right[np.asarray(wrong, dtype=np.int64)] = False
    return right


def records_decisions(metric: str, weights=None) -> bool:
    """Whether a level records its decision values on the slice (``validation_decisions``):
    where correctness alone cannot judge it, another metric than accuracy or weighted rows."""
    return check_metric(metric) != "accuracy" or weights is not None


def validation_fields(scores, labels, metric: str, seed: int = 0, weights=None) -> dict:
    """What a level records of its decision values ``scores`` on the slice besides its
    accuracy: nothing for unweighted accuracy, else the values themselves
    (``validation_decisions``) and the value the levels are judged by
    (``validation_<judged_key>``: the metric's, weighted by ``weights``; the logloss as it
    is)."""
    if not records_decisions(metric, weights):
        return {}
    scores = np.asarray(scores, dtype=np.float64)
    fields = {"validation_decisions": scores.tolist()}
    fields[f"validation_{judged_key(metric, weights is not None)}"] = Evaluation(
        scores, labels, weights, metric, seed).value
    return fields


def judged_key(metric: str, weighted: bool) -> str:
    """The name of the value a level is judged by: ``metric``, or ``weighted_accuracy`` for
    accuracy over weighted rows (with balanced class weights, nearly the balanced accuracy: the
    weights are the training rows' n / (C·n_c), the slice's class shares nearly theirs)."""
    return "weighted_accuracy" if metric == "accuracy" and weighted else metric


def level_evaluations(entries, n_validation: int, metric: str = "accuracy", labels=None,
                      weights=None, seed: int = 0):
    """(levels, how each is judged) of the validated ``entries`` (a fit's level records or a
    metrics JSON's "levels", in the order solved): the per-row correctness from
    ``validation_wrong`` for unweighted accuracy, as fits always judged, else an
    :class:`~.metrics.Evaluation` by ``metric`` of the recorded ``validation_decisions``
    against the slice's ``labels`` (coded: ±1 or class numbers) and ``weights``."""
    def read(entry, name):
        return entry.get(name) if isinstance(entry, dict) else getattr(entry, name, None)

    kept = [e for e in entries if n_validation and read(e, "validation_wrong") is not None]
    if not records_decisions(metric, weights):
        return ([read(e, "level") for e in kept],
                [rows_right(read(e, "validation_wrong"), n_validation) for e in kept])
    judged = []
    for entry in kept:
        decisions = read(entry, "validation_decisions")
        if decisions is None:
            raise ValueError(f"level {read(entry, 'level')} recorded no validation decision "
                             f"values; judging it by {metric} needs them.")
        judged.append(Evaluation(np.asarray(decisions), labels, weights, metric, seed))
    return [read(e, "level") for e in kept], judged


def replay(levels: list[dict], n_validation: int, rule: StopRule, cores: int, labels=None,
           weights=None, seed: int = 0):
    """What automatic stopping would have done in a fit that ran every level instead: (the
    levels it would have solved, the level whose model it would return, why it stopped).

    ``levels`` are the fit's records in the order solved (a metrics JSON's "levels", with
    each level's ``validation_wrong``, ``elapsed``, ``predicted_seconds``, ``kernel``,
    ``partitions`` and ``tasks``, ``before_fit_seconds`` where recorded (a record made before
    the rule counted the command's seconds has none, and is judged by the fit's seconds alone,
    as it was), and ``validation_decisions`` to judge by another metric than accuracy: then
    the slice's coded ``labels``, ``weights`` and the fit's ``seed`` too);
    the decisions are :class:`StopRule`'s and :func:`choose_level`'s, with the level after
    stopped before when its kernels were not cached with every core solving, as ``fit_sodm``
    decides between levels.
    """
    _, judged = level_evaluations(levels, n_validation, rule.metric, labels, weights, seed)
    if len(judged) != len(levels):
        raise ValueError("replay needs every level's validation record.")
    correct = []
    reason: str | None  # why the replay stopped: the rule's reason, None while it goes on
    for index, entry in enumerate(levels):
        correct.append(judged[index])
        if index + 1 == len(levels):
            reason = "every level recorded"
            break
        following = levels[index + 1]
        reason = rule.reason_to_stop(correct, entry["elapsed"], following["predicted_seconds"],
                                     entry.get("before_fit_seconds") or 0.0)
        if reason is None and next_level_blocked(following["kernel"], following["tasks"],
                                                  following["partitions"], cores):
            reason = NEXT_LEVEL_BLOCKED
        if reason is not None:
            break
    solved = [entry["level"] for entry in levels[:len(correct)]]
    return solved, choose_level(solved, correct, rule.confidence), reason


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """A bijective 64-bit mix (splitmix64's finalizer): nearby ids give unrelated outputs."""
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def holdout_values(row_ids, seed: int) -> np.ndarray:
    """A seeded hash of each row id, uniform in [0, 1) and distinct for distinct ids (53 bits
    of a bijective mix): a row is held out when its value is below the share."""
    ids = np.asarray(row_ids, dtype=np.int64).astype(np.uint64)
    mixed = _splitmix64(ids ^ _splitmix64(np.array([seed], dtype=np.int64).astype(np.uint64)))
    return (mixed >> np.uint64(11)).astype(np.float64) * 2.0 ** -53


def holdout_mask(row_ids, seed: int, fraction: float) -> np.ndarray:
    """True for the rows held out for validation: :func:`holdout_values` below ``fraction``.
    It depends on the row id and the seed only, so any block layout, a retried task and a
    resumed fit hold out the same rows."""
    return holdout_values(row_ids, seed) < fraction


def oversampled_share(share: float, max_rows: int, n_rows: int) -> float:
    """The share to draw so that a slice capped at ``max_rows`` (``share · n_rows ≥ max_rows``)
    gets at least that many rows but for a 5-standard-error miss: the draw is Bernoulli, its
    count ``n·q ± √(n·q)``; :func:`exact_share` then trims it to ``max_rows``."""
    if share * n_rows < max_rows:
        return share
    return min(1.0, (max_rows + 5.0 * np.sqrt(max_rows) + 10.0) / n_rows)


def exact_share(values: np.ndarray, max_rows: int, share: float) -> float:
    """The share below which exactly ``max_rows`` of the drawn rows' :func:`holdout_values`
    lie (all of them when fewer were drawn): held out by :func:`holdout_mask` at this share,
    the slice has ``min(max_rows, drawn)`` rows whatever the block layout."""
    values = np.sort(np.asarray(values, dtype=np.float64))
    return float(values[max_rows]) if values.size > max_rows else share
