"""The decision metrics and their paired comparisons (sodm_spark.selection.metrics) against
independent references: scikit-learn's scores with ``sample_weight``, DeLong's variance
computed from its definition, duplicated rows for integer weights, and the spread of each
paired difference over simulated validation slices for the standard errors."""
import numpy as np
import pytest
from sklearn.metrics import (accuracy_score, balanced_accuracy_score, f1_score, log_loss,
                             roc_auc_score)

from sodm_spark.models.calibration import SigmoidCalibration
from sodm_spark.selection import metrics
from sodm_spark.selection.metrics import (BOOTSTRAP_RESAMPLES, METRICS, Evaluation, check_metric,
                                          correct_of, cross_fitted_probabilities, error_of,
                                          mcnemar_gain, oriented, paired_difference, score_of)

pytestmark = pytest.mark.numerics  # rerun under other BLAS kernels: tests/test_blas_kernels.py


def binary_slice(n=300, seed=0, ties=True):
    """Decision values of a model on an imbalanced slice (30% positives), with tied values."""
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.3).astype(int)
    scores = rng.normal(size=n) + 1.0 * y - 0.3
    if ties:
        scores[:40] = np.round(scores[:40])
    return scores, y, rng.uniform(0.1, 3.0, n)


def multi_slice(n=300, classes=4, seed=1):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    scores = rng.normal(size=(n, classes))
    scores[np.arange(n), y] += 1.0
    return scores, y, rng.uniform(0.1, 3.0, n)


@pytest.mark.parametrize("weighted", [False, True])
def test_binary_metrics_equal_scikit_learns(weighted):
    scores, y, w = binary_slice()
    w = w if weighted else None
    predicted = (scores > 0).astype(int)
    assert metrics.accuracy(scores, y, w) == pytest.approx(
        accuracy_score(y, predicted, sample_weight=w), abs=1e-12)
    assert metrics.auc(scores, y, w) == pytest.approx(
        roc_auc_score(y, scores, sample_weight=w), abs=1e-12)
    assert metrics.f1(scores, y, w) == pytest.approx(
        f1_score(y, predicted, sample_weight=w), abs=1e-12)
    assert metrics.balanced_accuracy(scores, y, w) == pytest.approx(
        balanced_accuracy_score(y, predicted, sample_weight=w), abs=1e-12)
    probabilities = cross_fitted_probabilities(scores, y, seed=5)
    assert metrics.logloss(scores, y, w, seed=5) == pytest.approx(
        log_loss(y, probabilities, sample_weight=w, labels=[0, 1]), abs=1e-12)
    # ±1 labels, as the fit codes two classes, are the same rows
    assert metrics.auc(scores, 2 * y - 1, w) == metrics.auc(scores, y, w)


@pytest.mark.parametrize("weighted", [False, True])
def test_multi_class_metrics_equal_scikit_learns(weighted):
    scores, y, w = multi_slice()
    w = w if weighted else None
    predicted = np.argmax(scores, axis=1)
    # AUC: the mean of every class's one-vs-rest AUC of its own score column
    one_vs_rest = [roc_auc_score(y == c, scores[:, c], sample_weight=w) for c in range(4)]
    assert metrics.auc(scores, y, w) == pytest.approx(np.mean(one_vs_rest), abs=1e-12)
    assert metrics.f1(scores, y, w) == pytest.approx(
        f1_score(y, predicted, sample_weight=w, average="macro"), abs=1e-12)
    assert metrics.balanced_accuracy(scores, y, w) == pytest.approx(
        balanced_accuracy_score(y, predicted, sample_weight=w), abs=1e-12)
    probabilities = cross_fitted_probabilities(scores, y, seed=2)
    assert metrics.logloss(scores, y, w, seed=2) == pytest.approx(
        log_loss(y, probabilities, sample_weight=w, labels=list(range(4))), abs=1e-12)


def test_a_class_never_predicted_nor_present_is_left_out_of_the_macro_f1():
    scores, y, _ = multi_slice(classes=4)
    scores[:, 3] = -50.0  # class 3 never predicted
    keep = y != 3  # nor present
    predicted = np.argmax(scores[keep], axis=1)
    assert metrics.f1(scores[keep], y[keep]) == pytest.approx(
        f1_score(y[keep], predicted, average="macro"), abs=1e-12)


def test_integer_weights_are_copies_of_the_rows():
    scores, y, _ = binary_slice(n=120, seed=3)
    counts = np.random.default_rng(4).integers(1, 4, size=y.size)
    copies = np.repeat(np.arange(y.size), counts)
    for metric in ("accuracy", "auc", "f1", "balanced_accuracy"):
        assert metrics.metric_value(metric, scores, y, counts.astype(float)) == pytest.approx(
            metrics.metric_value(metric, scores[copies], y[copies]), abs=1e-12)


def test_no_row_is_scored_by_a_calibration_fitted_on_itself():
    """A row's label moves the sigmoids of its own half only, so its own probability does not
    move with it; each half's probabilities are a calibration fitted on the other half."""
    scores, y, _ = binary_slice(n=200, seed=6, ties=False)
    probabilities = cross_fitted_probabilities(scores, y, seed=9)
    for row in (0, 17, 151):
        flipped = y.copy()
        flipped[row] = 1 - flipped[row]
        moved = cross_fitted_probabilities(scores, flipped, seed=9)
        assert np.array_equal(moved[row], probabilities[row])
        changed = np.flatnonzero(np.any(moved != probabilities, axis=1))
        assert changed.size == 100  # every row of the other half
        others = np.setdiff1d(np.arange(200), changed)
        # the rows unchanged are the flipped row's half: a calibration fitted on them alone
        # scores the other half (to Newton's tolerance: its sums run in another order)
        refit = SigmoidCalibration.fit(scores[others], y[others], 2)
        np.testing.assert_allclose(refit.probabilities(scores[changed]),
                                   probabilities[changed], rtol=1e-6, atol=0)
    assert not np.array_equal(cross_fitted_probabilities(scores, y, seed=10), probabilities)


def test_orientation_and_the_error_left():
    scores, y, _ = binary_slice()
    for metric in METRICS:
        judged = Evaluation(scores, y, metric=metric, seed=1)
        assert score_of(judged) == oriented(metric, judged.value)
        if metric == "logloss":
            assert judged.value > 0 and score_of(judged) == -judged.value
            assert error_of(judged) == judged.value
        else:
            assert error_of(judged) == pytest.approx(1.0 - judged.value)
    correct = (scores > 0) == y
    assert error_of(correct) == 1.0 - np.mean(correct)
    assert np.array_equal(correct_of(Evaluation(scores, y, metric="auc")), correct)


def test_an_unknown_metric_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match="^metric must be one of accuracy, auc, logloss, f1, "
                                         "balanced_accuracy, got 'precision'.$"):
        check_metric("precision")
    with pytest.raises(ValueError, match="metric must be one of"):
        Evaluation(np.zeros(3), np.array([0, 1, 1]), metric="AUC")


def test_bad_scores_and_weights_are_refused():
    with pytest.raises(ValueError, match="one label per row"):
        Evaluation(np.zeros(3), np.zeros(4))
    with pytest.raises(ValueError, match="finite decision values"):
        Evaluation(np.array([0.0, np.nan]), np.array([0, 1]))
    with pytest.raises(ValueError, match="weights must be 2 finite numbers >= 0"):
        Evaluation(np.zeros(2), np.array([0, 1]), weights=[1.0, -1.0])
    with pytest.raises(ValueError, match="different metrics"):
        paired_difference(Evaluation(np.zeros(2), np.array([0, 1]), metric="auc"),
                          np.array([True, False]))
    with pytest.raises(ValueError, match="same rows"):
        paired_difference(Evaluation(np.zeros(2), np.array([0, 1]), metric="auc"),
                          Evaluation(np.zeros(2), np.array([1, 0]), metric="auc"))
    with pytest.raises(ValueError, match="more than one class"):
        metrics.auc(np.zeros(3), np.ones(3))


# --- paired comparisons --------------------------------------------------------------------------


def test_accuracy_keeps_mcnemars_counts_bit_for_bit():
    rng = np.random.default_rng(2)
    before, after = rng.random(1000) < 0.9, rng.random(1000) < 0.92
    b, c = int(np.sum(after & ~before)), int(np.sum(before & ~after))
    expected = ((b - c) / 1000, float(np.sqrt(b + c + 1.0)) / 1000)
    assert paired_difference(before, after) == expected == mcnemar_gain(before, after)
    # the same two models as Evaluations of unweighted accuracy: the same numbers
    y = rng.integers(0, 2, 1000)
    scores_before = np.where(before == (y == 1), 1.0, -1.0)
    scores_after = np.where(after == (y == 1), 1.0, -1.0)
    judged = Evaluation(scores_before, y)
    assert paired_difference(judged, judged.with_scores(scores_after)) == expected
    # weighted: weight sums of the changed rows, one row of mean weight more; unit weights
    # change nothing
    assert mcnemar_gain(before, after, np.ones(1000)) == pytest.approx(expected, abs=1e-15)
    w = rng.uniform(0.5, 2.0, 1000)
    gained, lost = after & ~before, before & ~after
    gain, stderr = mcnemar_gain(before, after, w)
    assert gain == pytest.approx((w[gained].sum() - w[lost].sum()) / w.sum())
    changed = w[gained | lost]
    assert stderr == pytest.approx(np.sqrt(changed @ changed + w.mean() ** 2) / w.sum())


def delong_by_definition(scores_a, scores_b, y):
    """DeLong, DeLong and Clarke-Pearson's variance of AUC_b − AUC_a, from ψ pair by pair."""
    pos, neg = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
    m, n = pos.size, neg.size

    def psi(x, z):
        return 1.0 if x > z else 0.5 if x == z else 0.0

    v10 = np.array([[np.mean([psi(s[i], s[j]) for j in neg]) for i in pos]
                    for s in (scores_a, scores_b)])
    v01 = np.array([[np.mean([psi(s[i], s[j]) for i in pos]) for j in neg]
                    for s in (scores_a, scores_b)])
    s10, s01 = np.cov(v10), np.cov(v01)  # 2 × 2, divided by m − 1 and n − 1
    covariance = s10 / m + s01 / n
    contrast = np.array([-1.0, 1.0])
    aucs = v10.mean(axis=1)
    return aucs[1] - aucs[0], contrast @ covariance @ contrast


def test_the_auc_comparison_is_delongs_paired_variance():
    rng = np.random.default_rng(11)
    y = (rng.random(60) < 0.4).astype(int)
    scores_a = np.round(rng.normal(size=60) + y, 1)  # ties within and between classes
    scores_b = np.round(scores_a + rng.normal(size=60) * 0.7, 1)
    difference, variance = delong_by_definition(scores_a, scores_b, y)
    judged = Evaluation(scores_a, y, metric="auc")
    gain, stderr = paired_difference(judged, judged.with_scores(scores_b))
    assert gain == pytest.approx(difference, abs=1e-12)
    assert stderr ** 2 == pytest.approx(variance, rel=1e-10)
    # one model's own variance, the same formula with one score column
    _, own = delong_by_definition(np.zeros(60), scores_b, y)
    assert paired_difference(judged.with_scores(np.zeros(60)),
                             judged.with_scores(scores_b))[1] ** 2 == pytest.approx(own)


def test_the_f1_bootstrap_is_seeded_and_paired():
    scores, y, _ = binary_slice(n=400, seed=12)
    other = scores + np.random.default_rng(13).normal(size=400) * 0.5
    judged = Evaluation(scores, y, metric="f1", seed=4)
    first = paired_difference(judged, judged.with_scores(other))
    assert paired_difference(judged, judged.with_scores(other)) == first  # seeded
    reseeded = Evaluation(scores, y, metric="f1", seed=5)
    assert paired_difference(reseeded, reseeded.with_scores(other))[1] != first[1]
    assert first[0] == pytest.approx(metrics.f1(other, y) - metrics.f1(scores, y))
    # the same model against itself: no difference in any resample
    assert paired_difference(judged, judged.with_scores(scores)) == (0.0, 0.0)
    assert BOOTSTRAP_RESAMPLES == 200


def simulated_pairs(metric, classes, weighted, n=400, repeats=200):
    """(spread of the paired difference of two models over independent slices, root mean
    square of its standard error): two noisy copies of one score, the second less noisy."""
    rng = np.random.default_rng([classes, weighted, METRICS.index(metric)])
    differences, errors = [], []
    for repeat in range(repeats):
        if classes == 2:
            y = (rng.random(n) < 0.3).astype(int)
            base = rng.normal(size=n) + 1.2 * y
            first = base + 0.8 * rng.normal(size=n) - 0.3
            second = base + 0.6 * rng.normal(size=n) - 0.3
        else:
            y = rng.integers(0, classes, n)
            base = rng.normal(size=(n, classes))
            base[np.arange(n), y] += 1.2
            first = base + 0.8 * rng.normal(size=base.shape)
            second = base + 0.6 * rng.normal(size=base.shape)
        weights = rng.uniform(0.2, 3.0, n) if weighted else None
        judged = Evaluation(first, y, weights, metric, seed=repeat)
        gain, stderr = paired_difference(judged, judged.with_scores(second))
        differences.append(gain)
        errors.append(stderr)
    return np.std(differences, ddof=1), np.sqrt(np.mean(np.square(errors)))


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("classes", [2, 3])
@pytest.mark.parametrize("metric", METRICS)
def test_standard_errors_are_the_spread_of_the_difference_over_slices(metric, classes,
                                                                      weighted):
    """Over 200 independent slices of 400 rows, the standard error a comparison reports is
    the spread of the differences it measures: within 20% (the spread's own sampling error
    from 200 slices is about 5%; McNemar's one row more errs upwards)."""
    spread, reported = simulated_pairs(metric, classes, weighted)
    assert 0.8 < reported / spread < 1.2, (spread, reported)
