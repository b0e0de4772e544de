"""How a model is judged on the validation slice, and two models compared on the same rows
(pure numpy; docs/design.md §2.7).

Accuracy ranks a model that predicts the majority class of an imbalanced table (0.80 on a
table of 80% negatives) as if it had learned something; the fit's decisions (the stop rule,
the level kept, the search's point, the global step) can judge by another metric of
:data:`METRICS` instead. Each is computed from a model's decision values on the slice —
``scores`` (n,) for two classes (f > 0 predicts the second) or (n, C) one-vs-rest scores for
C ≥ 3 — its labels (class numbers 0 … C-1; for two classes ±1 as well) and optional per-row
weights w_i ≥ 0 (None: all ones; a weight of 2 counts a row twice):

* ``accuracy``: Σ w·[right] / Σ w.
* ``balanced_accuracy``: the mean over the classes present of each class's weighted recall
  (Brodersen, Ong, Stephan and Buhmann, *The Balanced Accuracy and Its Posterior
  Distribution*): a majority-class model scores 1/C.
* ``f1``: two classes, the F1 of the second, 2TP / (2TP + FP + FN) with weighted counts;
  three or more, the unweighted mean of every class's F1 over the classes in the labels or
  the predictions (macro F1); a class with 2TP + FP + FN = 0 scores 0 (scikit-learn's rules).
* ``auc``: the weighted Mann-Whitney statistic Σ_{i pos} Σ_{j neg} w_i w_j ψ(f_i, f_j) /
  (W_pos W_neg), ψ = 1 when f_i > f_j and ½ on a tie; three or more classes: the mean over
  the classes with positive and negative rows of each class's AUC of its own score column
  against the rest (one-vs-rest, macro average).
* ``logloss``: −Σ w·log p_i(y_i) / Σ w with probabilities from the decision values by Platt's
  sigmoids (Platt, *Probabilistic Outputs for Support Vector Machines and Comparisons to
  Regularized Likelihood Methods*; :class:`~sodm_spark.models.calibration.SigmoidCalibration`,
  one-vs-rest sigmoids normalized for 3+ classes) **cross-fitted**: the slice is cut into two
  seeded halves and each half's probabilities come from sigmoids fitted on the other half
  only, so no row is scored by a calibration fitted on itself (fitted on the same rows, the
  loss would reward the calibration, not the model). The sigmoids are fitted unweighted (a
  probability of the rows as they occur); probabilities are clipped to [1e-15, 1 − 1e-15].

Higher is better for all but the logloss: decisions compare :func:`oriented` values (the
logloss with its sign flipped), and reports give the logloss itself. The stop rule's
look-ahead shrinks an **error**, :func:`error_of`: 1 − value for the bounded metrics, the
logloss itself.

:func:`paired_difference` compares two models on the same rows: (gain of the second over the
first in oriented units, its standard error).

* ``accuracy``: McNemar's counts (McNemar, *Note on the Sampling Error of the Difference
  Between Correlated Proportions or Percentages*): gain (b − c)/n, standard error
  √(b + c + 1)/n, b and c the rows only the second or only the first gets right (one row more
  keeps it honest when none changed); weighted, b and c are weight sums, the error
  √(Σ_changed w² + w̄²)/W.
* ``balanced_accuracy``, ``logloss``, ``auc``: each value is, to first order, a sum of
  per-row terms L_i (exactly, for balanced accuracy and the logloss: a weighted mean of the
  rows' contributions); the difference of two models is the sum of the per-row differences
  of their terms, whose variance is estimated within strata: Σ_s n_s/(n_s − 1)·Σ_{i∈s}
  (ΔL_i − mean_s ΔL)². Balanced accuracy: L_i = w_i(right_i − recall_y)/(C·W_y), strata the
  classes (their weights fixed, as the metric takes them). Logloss: L_i = w_i(ℓ_i − value)/W
  plus the row's pull, through the calibration fitted on its half, on the other half's loss
  (the M-estimator's sandwich; left out, the 3-class error came out a quarter low), one
  stratum. AUC: DeLong's paired variance (DeLong, DeLong and Clarke-Pearson, *Comparing
  the Areas under Two or More Correlated Receiver Operating Characteristic Curves: A
  Nonparametric Approach*): a positive row's term is w_i/W_pos times its structural component
  (the weighted share of negatives it outranks) less the AUC, a negative row's the same with
  the positives that outrank it, strata the classes; unweighted, this is DeLong's
  S10/m + S01/n exactly; for 3+ classes the terms are averaged over the classes as the AUCs.
* ``f1``: a seeded paired bootstrap (Efron and Tibshirani, *An Introduction to the
  Bootstrap*): :data:`BOOTSTRAP_RESAMPLES` resamples of the rows, the same for both models,
  the standard error the resampled differences' standard deviation (F1 is a ratio of sums
  over rows whose linearization differs per class; 200 resamples give the error within about
  5% of itself).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from .cross_fit import class_numbers, cross_fitted_probabilities, logloss_terms

METRICS = ("accuracy", "auc", "logloss", "f1", "balanced_accuracy")
#: Resamples of the paired bootstrap of the F1 difference; the standard error of a standard
#: deviation from B draws is about 1/√(2B) of it, 5% here.
BOOTSTRAP_RESAMPLES = 200
# the stream of the bootstrap's seeded resamples (the calibration halves have their own)
_BOOTSTRAP_STREAM = 139


def check_metric(name) -> str:
    """``name`` if it is a metric of :data:`METRICS`, else a ValueError listing them."""
    if name not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}, got {name!r}.")
    return name


def oriented(metric: str, value: float) -> float:
    """``value`` of ``metric`` with higher better: the logloss negated, the others as they are."""
    return -value if metric == "logloss" else value


def _predicted(scores: np.ndarray) -> np.ndarray:
    return (scores > 0).astype(np.int64) if scores.ndim == 1 else np.argmax(scores, axis=1)


@dataclass(frozen=True, eq=False)
class Evaluation:
    """One model's decision values on the validation rows, judged by ``metric``: ``scores``
    (n,) or (n, C), ``labels`` class numbers (two classes: ±1 or 0/1), ``weights`` per row or
    None, ``seed`` for the logloss's calibration halves and the F1 bootstrap. Its values are
    computed once (cached)."""

    scores: np.ndarray
    labels: np.ndarray
    weights: np.ndarray | None = None
    metric: str = "accuracy"
    seed: int = 0

    def __post_init__(self):
        check_metric(self.metric)
        scores = np.asarray(self.scores, dtype=np.float64)
        if scores.ndim == 2 and scores.shape[1] == 1:
            scores = scores[:, 0]
        labels = class_numbers(self.labels, scores.ndim == 1)
        if scores.ndim not in (1, 2) or labels.shape != scores.shape[:1] or labels.size == 0:
            raise ValueError(f"an evaluation needs one label per row of scores; got scores of "
                             f"shape {scores.shape} and {labels.size} labels.")
        if not np.all(np.isfinite(scores)):
            raise ValueError("an evaluation needs finite decision values; some are NaN or inf.")
        if scores.ndim == 2 and (labels.min() < 0 or labels.max() >= scores.shape[1]):
            raise ValueError(f"labels of {scores.shape[1]} score columns must be class numbers "
                             f"0 … {scores.shape[1] - 1}.")
        weights = self.weights
        if weights is not None:
            weights = np.asarray(weights, dtype=np.float64).ravel()
            if weights.shape != labels.shape or not np.all(np.isfinite(weights)) \
                    or np.any(weights < 0) or not weights.sum() > 0:
                raise ValueError(f"weights must be {labels.size} finite numbers >= 0 with a "
                                 "positive sum, one per row.")
        for name, value in (("scores", scores), ("labels", labels), ("weights", weights)):
            object.__setattr__(self, name, value)

    def with_scores(self, scores) -> "Evaluation":
        """Another model's evaluation on the same rows, weights, metric and seed."""
        return replace(self, scores=scores)

    @property
    def n_classes(self) -> int:
        return 2 if self.scores.ndim == 1 else self.scores.shape[1]

    @cached_property
    def row_weights(self) -> np.ndarray:
        return np.ones(self.labels.size) if self.weights is None else self.weights

    @cached_property
    def predicted(self) -> np.ndarray:
        return _predicted(self.scores)

    @cached_property
    def correct(self) -> np.ndarray:
        return self.predicted == self.labels

    @cached_property
    def probabilities(self) -> np.ndarray:
        return cross_fitted_probabilities(self.scores, self.labels, self.seed)

    @cached_property
    def value(self) -> float:
        """The metric's value (the logloss as it is)."""
        if self.metric == "accuracy":
            return _accuracy(self.correct, self.weights)
        if self.metric == "f1":
            return _f1(self.predicted, self.labels, self.row_weights, self.n_classes)
        return self._terms[0]

    @cached_property
    def _terms(self):
        """(value, per-row terms L, strata) of the linearized metrics (module docstring)."""
        metric, w = self.metric, self.row_weights
        if metric == "balanced_accuracy":
            return _balanced_terms(self.correct, self.labels, w, self.n_classes)
        if metric == "logloss":
            return logloss_terms(self.scores, self.labels, w, self.seed)
        if metric == "auc":
            return _auc_terms(self.scores, self.labels, w)
        raise ValueError(f"{metric} has no per-row terms")


def _accuracy(correct, weights) -> float:
    if weights is None:
        return float(np.mean(correct))
    return float(weights @ correct / weights.sum())


def _balanced_terms(correct, labels, w, n_classes):
    totals = np.bincount(labels, weights=w, minlength=n_classes)
    present = totals > 0
    recall = np.bincount(labels, weights=w * correct, minlength=n_classes) / np.where(
        present, totals, 1.0)
    count = int(present.sum())
    value = float(np.mean(recall[present]))
    terms = w * (correct - recall[labels]) / (count * totals[labels])
    return value, terms, labels


def _structural(scores, positive, w):
    """(AUC, per-row terms) of one score column against ``positive`` rows, or (None, None)
    without positive or negative weight. A positive row's structural component is the
    weighted share of negatives it outranks (ties half), a negative row's the share of
    positives that outrank it (DeLong's V10 and V01); both average to the AUC."""
    w_pos, w_neg = w[positive], w[~positive]
    if not (w_pos.sum() > 0 and w_neg.sum() > 0):
        return None, None
    s_pos, s_neg = scores[positive], scores[~positive]
    shares = []
    for mine, theirs, weights in ((s_pos, s_neg, w_neg), (s_neg, s_pos, w_pos)):
        order = np.argsort(theirs, kind="stable")
        sorted_scores = theirs[order]
        cumulative = np.concatenate([[0.0], np.cumsum(weights[order])])
        below = cumulative[np.searchsorted(sorted_scores, mine, "left")]
        up_to = cumulative[np.searchsorted(sorted_scores, mine, "right")]
        shares.append((below, up_to, cumulative[-1]))
    (below, up_to, total_neg), (below_p, up_to_p, total_pos) = shares
    v10 = (below + 0.5 * (up_to - below)) / total_neg
    v01 = (total_pos - up_to_p + 0.5 * (up_to_p - below_p)) / total_pos
    value = float(w_pos @ v10 / total_pos)
    terms = np.empty(scores.size)
    terms[positive] = w_pos * (v10 - value) / total_pos
    terms[~positive] = w_neg * (v01 - value) / total_neg
    return value, terms


def _auc_terms(scores, labels, w):
    if scores.ndim == 1:
        parts = [_structural(scores, labels == 1, w)]
    else:
        parts = [_structural(scores[:, c], labels == c, w) for c in range(scores.shape[1])]
    parts = [part for part in parts if part[0] is not None]
    if not parts:
        raise ValueError("auc needs rows of more than one class on the validation slice.")
    value = float(np.mean([part[0] for part in parts]))
    return value, np.mean([part[1] for part in parts], axis=0), labels


def _f1_of_counts(tp, fp, fn, classes):
    """F1 from weighted counts (..., C): the second class's for two classes, else the mean
    over ``classes`` (a mask) of each class's."""
    denominator = 2.0 * tp + fp + fn
    scores = np.where(denominator > 0, 2.0 * tp / np.where(denominator > 0, denominator, 1.0),
                      0.0)
    if scores.shape[-1] == 2:
        return scores[..., 1]
    return scores[..., classes].mean(axis=-1)


def _f1_indicators(predicted, labels, w, n_classes):
    """(n, 3C) per-row weighted indicators of TP, FP and FN of each class, and the classes a
    macro F1 averages (those in the labels or the predictions)."""
    hit = np.arange(n_classes)[None, :]
    p, y = predicted[:, None] == hit, labels[:, None] == hit
    indicators = np.concatenate([p & y, p & ~y, ~p & y], axis=1) * w[:, None]
    return indicators, (p | y).any(axis=0)


def _f1(predicted, labels, w, n_classes) -> float:
    indicators, classes = _f1_indicators(predicted, labels, w, n_classes)
    tp, fp, fn = np.split(indicators.sum(axis=0), 3)
    return float(_f1_of_counts(tp, fp, fn, classes))


def metric_value(metric: str, scores, labels, weights=None, seed: int = 0) -> float:
    """The value of ``metric`` (the logloss as it is) of decision values ``scores``."""
    return Evaluation(scores, labels, weights, metric, seed).value


def accuracy(scores, labels, weights=None) -> float:
    return metric_value("accuracy", scores, labels, weights)


def balanced_accuracy(scores, labels, weights=None) -> float:
    return metric_value("balanced_accuracy", scores, labels, weights)


def f1(scores, labels, weights=None) -> float:
    return metric_value("f1", scores, labels, weights)


def auc(scores, labels, weights=None) -> float:
    return metric_value("auc", scores, labels, weights)


def logloss(scores, labels, weights=None, seed: int = 0) -> float:
    return metric_value("logloss", scores, labels, weights, seed)


def metric_of(judged) -> str:
    """The metric a model is judged by: per-row correctness (bool) is accuracy's form."""
    return judged.metric if isinstance(judged, Evaluation) else "accuracy"


def correct_of(judged) -> np.ndarray:
    """Per-row correctness of a judged model (an :class:`Evaluation` or correctness)."""
    return judged.correct if isinstance(judged, Evaluation) else np.asarray(judged, dtype=bool)


def score_of(judged) -> float:
    """The oriented value (higher is better) of a judged model."""
    if isinstance(judged, Evaluation):
        return oriented(judged.metric, judged.value)
    return float(np.mean(judged))


def error_of(judged) -> float:
    """What is left to gain (the look-ahead's error): 1 − value, or the logloss itself."""
    if not isinstance(judged, Evaluation):
        return 1.0 - float(np.mean(judged))
    return judged.value if judged.metric == "logloss" else 1.0 - judged.value


def mcnemar_gain(before, after, weights=None) -> tuple[float, float]:
    """(gain, standard error) of the accuracy of ``after`` over ``before``, both the per-row
    correctness (bool) of two models on the same rows: McNemar's counts (module docstring)."""
    before, after = np.asarray(before, dtype=bool), np.asarray(after, dtype=bool)
    if before.shape != after.shape or before.size == 0:
        raise ValueError("paired_gain needs the correctness of both models on the same rows.")
    gained_rows, lost_rows = after & ~before, before & ~after
    n = before.size
    if weights is None:
        gained, lost = int(np.count_nonzero(gained_rows)), int(np.count_nonzero(lost_rows))
        return (gained - lost) / n, float(np.sqrt(gained + lost + 1.0)) / n
    weights = np.asarray(weights, dtype=np.float64)
    total = weights.sum()
    changed = weights[gained_rows | lost_rows]
    gain = (weights[gained_rows].sum() - weights[lost_rows].sum()) / total
    return float(gain), float(np.sqrt(changed @ changed + (total / n) ** 2) / total)


def _stratified_error(terms, strata) -> float:
    """Standard error of the sum of ``terms`` over rows drawn independently within strata."""
    counts = np.bincount(strata)
    means = np.bincount(strata, weights=terms) / np.maximum(counts, 1)
    spread = np.bincount(strata, weights=(terms - means[strata]) ** 2, minlength=counts.size)
    factors = np.where(counts > 1, counts / np.maximum(counts - 1, 1), 0.0)
    return float(np.sqrt(factors @ spread))


def _bootstrap_f1(before: Evaluation, after: Evaluation) -> float:
    """The paired bootstrap's standard error of the F1 difference (module docstring)."""
    n, n_classes, w = before.labels.size, before.n_classes, before.row_weights
    rng = np.random.default_rng([before.seed, _BOOTSTRAP_STREAM])
    draws = rng.integers(0, n, size=(BOOTSTRAP_RESAMPLES, n))
    offsets = n * np.arange(BOOTSTRAP_RESAMPLES)[:, None]
    counts = np.bincount((draws + offsets).ravel(), minlength=BOOTSTRAP_RESAMPLES * n)
    counts = counts.reshape(BOOTSTRAP_RESAMPLES, n).astype(np.float64)
    values = []
    for judged in (before, after):
        indicators, classes = _f1_indicators(judged.predicted, judged.labels, w, n_classes)
        tp, fp, fn = np.split(counts @ indicators, 3, axis=1)
        values.append(_f1_of_counts(tp, fp, fn, classes))
    return float(np.std(values[1] - values[0], ddof=1))


def paired_difference(before, after) -> tuple[float, float]:
    """(gain, standard error) of ``after`` over ``before`` on the same rows, in the oriented
    units of their metric (module docstring): two :class:`Evaluation` of one metric, or two
    per-row correctness vectors (accuracy, unweighted: McNemar's counts as they always were)."""
    metric = metric_of(before)
    if metric_of(after) != metric:
        raise ValueError(f"two models judged by different metrics ({metric}, "
                         f"{metric_of(after)}) cannot be compared.")
    if not isinstance(before, Evaluation) or not isinstance(after, Evaluation):
        if isinstance(before, Evaluation) or isinstance(after, Evaluation):
            raise ValueError("compare two Evaluations or two correctness vectors, not one each.")
        return mcnemar_gain(before, after)
    if before.labels.shape != after.labels.shape or not np.array_equal(before.labels,
                                                                       after.labels):
        raise ValueError("paired_difference needs both models' scores on the same rows.")
    if metric == "accuracy":
        return mcnemar_gain(before.correct, after.correct, before.weights)
    gain = oriented(metric, after.value) - oriented(metric, before.value)
    if metric == "f1":
        return gain, _bootstrap_f1(before, after)
    return gain, _stratified_error(after._terms[1] - before._terms[1], before._terms[2])
