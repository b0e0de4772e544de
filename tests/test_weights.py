"""Row and class weights in the ODM dual (docs/design.md §1.4): against a brute-force weighted
primal, against duplicated rows (an integer weight is that many copies of the row), and unit
weights against the unweighted solve bit for bit."""
import numpy as np
import pytest

from sodm_spark.core.kernels import Kernel
from sodm_spark.solvers import solve_odm_dual
from sodm_spark.solvers.dcd_settings import DCDSettings, ODMHyperparameters
from sodm_spark.solvers.local_solve import LocalSolve

from conftest import contents, make_problem
from reference import odm_weighted_primal_reference

pytestmark = pytest.mark.numerics


@pytest.mark.parametrize("mode", ["cached", "blocked"])
@pytest.mark.parametrize("lam,theta,v", [(10.0, 0.1, 0.2), (300.0, 0.3, 0.7)])
def test_weighted_dual_matches_the_weighted_primal(mode, lam, theta, v):
    X, y = make_problem(m=90, d=4, seed=11)
    weights = np.random.default_rng(5).uniform(0.2, 4.0, size=y.size)
    result = solve_odm_dual(X, y, Kernel.create("linear"), ODMHyperparameters(lam, theta, v),
                            settings=DCDSettings(violation_tol=1e-10, dtype=np.float64, mode=mode,
                                                 block_size=16, max_iter=20000), weights=weights)
    w_primal, primal = odm_weighted_primal_reference(X, y, weights, lam, theta, v)
    w_dual = X.T @ (result.gamma * y)
    assert result.converged
    np.testing.assert_allclose(w_dual, w_primal, rtol=1e-6, atol=1e-8)
    assert -result.objective == pytest.approx(primal, rel=1e-7)  # strong duality


def test_integer_weights_equal_copies_of_the_rows():
    X, y = make_problem(m=50, d=3, seed=2)
    counts = np.random.default_rng(1).integers(1, 4, size=y.size)
    kernel = Kernel.create("rbf", 0.5)
    weighted = solve_odm_dual(X, y, kernel, ODMHyperparameters(50.0, 0.2, 0.4),
                              settings=DCDSettings(violation_tol=1e-11, dtype=np.float64),
                              weights=counts.astype(float))
    copies = np.repeat(np.arange(y.size), counts)
    repeated = solve_odm_dual(X[copies], y[copies], kernel, ODMHyperparameters(50.0, 0.2, 0.4),
                              settings=DCDSettings(violation_tol=1e-11, dtype=np.float64))
    # the copies of a row share its γ·s_i among them (the dual's optimum in their sum is unique)
    summed = np.bincount(copies, weights=repeated.gamma, minlength=y.size)
    np.testing.assert_allclose(weighted.gamma, summed, rtol=1e-7, atol=1e-10)
    assert weighted.objective == pytest.approx(repeated.objective, rel=1e-9)


def test_unit_weights_are_the_unweighted_solve_bit_for_bit():
    X, y = make_problem(m=70, d=5, seed=4)
    kernel = Kernel.create("rbf", 0.3)
    plain = solve_odm_dual(X, y, kernel, ODMHyperparameters(100.0, 0.1, 0.5), seed=9)
    unit = solve_odm_dual(X, y, kernel, ODMHyperparameters(100.0, 0.1, 0.5), seed=9,
                          weights=np.ones(y.size))
    assert np.array_equal(plain.gamma, unit.gamma) and plain.objective == unit.objective


def test_multiclass_weighted_equals_binary_weighted_solves():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(80, 4))
    y_index = (X[:, 0] > 0).astype(int) + (X[:, 1] > 0.5).astype(int)
    weights = rng.uniform(0.5, 3.0, size=80)
    kernel = Kernel.create("rbf", 0.4)
    solve = LocalSolve(30.0, 0.1, 0.3, violation_tol=1e-10, dtype="float64")
    joint = solve.solve(X, y_index, kernel, 3, weights=weights)
    assert joint.kernel_mode == "cached" and joint.gamma.shape == (80, 3)
    for c in range(3):
        binary = solve_odm_dual(X, np.where(y_index == c, 1.0, -1.0), kernel,
                                ODMHyperparameters(30.0, 0.1, 0.3),
                                settings=DCDSettings(violation_tol=1e-10, dtype=np.float64),
                                weights=weights)
        np.testing.assert_allclose(joint.gamma[:, c], binary.gamma, atol=1e-8)


@pytest.mark.parametrize("bad", [0.0, -1.0, np.nan, np.inf])
def test_a_weight_that_is_not_positive_and_finite_is_refused_with_its_row(bad):
    X, y = make_problem(m=10, seed=0)
    weights = np.ones(10)
    weights[7] = bad
    with pytest.raises(ValueError, match="row 7"):
        solve_odm_dual(X, y, Kernel.create("linear"), ODMHyperparameters(1.0, 0.1, 0.5),
                       weights=weights)


@pytest.mark.parametrize("fit_intercept", [False, True])
def test_weighted_newton_primal_matches_the_weighted_dual(fit_intercept):
    from sodm_spark.solvers.odm_primal import newton_primal

    X, y = make_problem(m=120, d=5, seed=8)
    weights = np.random.default_rng(2).uniform(0.1, 5.0, size=y.size)
    if fit_intercept:  # the reference: a weighted primal with an unpenalized bias, by copies
        counts = np.random.default_rng(3).integers(1, 4, size=y.size)
        weighted = newton_primal(X, y, 20.0, 0.2, 0.5, weights=counts.astype(float),
                                 fit_intercept=True)
        copies = np.repeat(np.arange(y.size), counts)
        repeated = newton_primal(X[copies], y[copies], 20.0, 0.2, 0.5, fit_intercept=True)
        np.testing.assert_allclose(weighted.w, repeated.w, rtol=1e-8, atol=1e-10)
        assert weighted.intercept == pytest.approx(repeated.intercept, rel=1e-8, abs=1e-10)
        return
    result = newton_primal(X, y, 20.0, 0.2, 0.5, weights=weights, fit_intercept=False)
    w_primal, primal = odm_weighted_primal_reference(X, y, weights, 20.0, 0.2, 0.5)
    np.testing.assert_allclose(result.w, w_primal, rtol=1e-6, atol=1e-8)
    assert result.objective == pytest.approx(primal, rel=1e-9)


def test_weighted_svrg_reaches_the_weighted_optimum():
    from sodm_spark.solvers.odm_primal import newton_primal
    from sodm_spark.solvers.svrg import SVRGSchedule, svrg

    X, y = make_problem(m=300, d=6, seed=12)
    weights = np.where(y > 0, 4.0, 1.0)
    exact = newton_primal(X, y, 5.0, 0.1, 0.5, weights=weights, fit_intercept=True)
    result = svrg(X, y, ODMHyperparameters(5.0, 0.1, 0.5),
                  SVRGSchedule(epochs=200, relative_change_tol=1e-13, seed=0),
                  weights=weights, fit_intercept=True)
    assert result.objective == pytest.approx(exact.objective, rel=1e-6)
    np.testing.assert_allclose(result.w, exact.w, rtol=1e-3, atol=1e-4)


def test_weighted_nystroem_passes_equal_copies_of_the_rows():
    from sodm_spark.models import nystroem_odm

    X, y = make_problem(m=80, d=3, seed=6)
    counts = np.random.default_rng(4).integers(1, 4, size=y.size)
    copies = np.repeat(np.arange(y.size), counts)
    kernel = Kernel.create("rbf", 0.7)
    basis = nystroem_odm.centre_basis(kernel, X[:20])

    def passes(rows, labels, weights):
        return lambda coef, direction, steps: nystroem_odm.pass_sums(
            kernel, basis.centres, rows, labels, nystroem_odm.PassLine(coef, direction, steps),
            0.1, 0.4, weights=weights)

    weighted, _ = nystroem_odm.fit(basis, passes(X, y, counts.astype(float)), 30.0, 0.1, 0.4,
                                   float(counts.sum()))
    repeated, _ = nystroem_odm.fit(basis, passes(X[copies], y[copies], None), 30.0, 0.1, 0.4,
                                   copies.size)
    np.testing.assert_allclose(weighted, repeated, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("kernel,solver", [("rbf", "dcd"), ("linear", "newton"),
                                           ("linear", "svrg")])
def test_odm_classifier_sample_weight_equals_copies_and_drops_zeros(kernel, solver):
    from sodm_spark.estimators.sklearn import ODMClassifier

    X, y = make_problem(m=90, d=4, seed=21)
    counts = np.random.default_rng(6).integers(0, 4, size=y.size)  # some rows weigh 0
    copies = np.repeat(np.arange(y.size), counts)
    options = dict(kernel=kernel, solver=solver, gamma=0.5, lam=30.0,  # gamma: not from X
                   tol=1e-10 if solver != "svrg"
                   else 1e-14, max_iter=3000, dtype="float64")
    weighted = ODMClassifier(**options).fit(X, y, sample_weight=counts)
    repeated = ODMClassifier(**options).fit(X[copies], y[copies])
    rows = np.random.default_rng(7).normal(size=(40, 4))
    rtol = 1e-3 if solver == "svrg" else 1e-6
    np.testing.assert_allclose(weighted.decision_function(rows),
                               repeated.decision_function(rows), rtol=rtol, atol=rtol)
    if solver == "dcd":  # support_ indexes the rows given, never a left-out one
        assert np.all(counts[weighted.support_] > 0)
        np.testing.assert_array_equal(X[weighted.support_], weighted.support_vectors_)


def test_class_weight_balanced_is_sample_weights_of_n_over_c_n_c():
    from sodm_spark.estimators.sklearn import ODMClassifier
    from sklearn.utils.class_weight import compute_class_weight

    rng = np.random.default_rng(9)
    X = rng.normal(size=(150, 3))
    y = np.where(X[:, 0] + 0.8 * rng.normal(size=150) > 1.0, "fraud", "ok")  # ~20% 'fraud'
    balanced = ODMClassifier(class_weight="balanced", lam=50.0, tol=1e-9).fit(X, y)
    per_class = compute_class_weight("balanced", classes=np.unique(y), y=y)  # scikit-learn's
    by_hand = ODMClassifier(lam=50.0, tol=1e-9).fit(
        X, y, sample_weight=per_class[np.searchsorted(np.unique(y), y)])
    np.testing.assert_allclose(balanced.decision_function(X), by_hand.decision_function(X),
                               rtol=1e-10)
    by_dict = ODMClassifier(class_weight={"fraud": 3.0}, lam=50.0, tol=1e-9).fit(X, y)
    by_hand = ODMClassifier(lam=50.0, tol=1e-9).fit(X, y,
                                                    sample_weight=np.where(y == "fraud", 3, 1))
    np.testing.assert_allclose(by_dict.decision_function(X), by_hand.decision_function(X),
                               rtol=1e-10)
    unweighted = ODMClassifier(lam=50.0, tol=1e-9).fit(X, y)
    recall = [np.mean(model.predict(X[y == "fraud"]) == "fraud")
              for model in (unweighted, balanced)]
    assert recall[1] > recall[0]  # the rare class weighs more: more of it is found
    with pytest.raises(ValueError, match="class 'spam'"):
        ODMClassifier(class_weight={"spam": 2.0}).fit(X, y)
    with pytest.raises(ValueError, match="row 3"):
        ODMClassifier().fit(X, y, sample_weight=np.r_[1, 1, 1, -1.0, np.ones(146)])


def test_sodm_levels_with_class_weights_merge_to_the_exact_weighted_objective(spark):
    """SODM on Spark with class weights: every partition solves its weighted dual, and the
    last level (one partition of every row) is the exact weighted ODM of the rows."""
    from sodm_spark.spark.io import numpy_to_blocks
    from sodm_spark.spark.sodm.fit import fit_sodm
    from sodm_spark.spark.sodm.params import SODMParams

    X, y = make_problem(m=450, d=5, seed=31)
    params = SODMParams(scale="none", auto_stop=False, gamma=0.2, lam=100.0, levels=1, p=3,
                        strata=5, tol=1e-9, seed=2, kernel_storage="float32",
                        class_weight={1.0: 3.0})
    fit = fit_sodm(spark.sparkContext, numpy_to_blocks(spark.sparkContext, X, y), params,
                   classes=[-1.0, 1.0])
    reference = solve_odm_dual(X, y, Kernel.create("rbf", 0.2),
                               ODMHyperparameters(100.0, 0.1, 0.2),
                               settings=DCDSettings(violation_tol=1e-9, dtype=np.float64),
                               weights=np.where(y > 0, 3.0, 1.0))
    unweighted = solve_odm_dual(X, y, Kernel.create("rbf", 0.2),
                                ODMHyperparameters(100.0, 0.1, 0.2),
                                settings=DCDSettings(violation_tol=1e-9, dtype=np.float64))
    assert [entry.level for entry in fit.levels] == [1, 0]
    assert fit.levels[-1].objective == pytest.approx(reference.objective, rel=1e-6)
    assert abs(unweighted.objective - reference.objective) > 1e-3 * abs(reference.objective)


def test_dsvrg_with_balanced_class_weights_reaches_the_weighted_newton_optimum(spark):
    from sodm_spark.solvers.odm_primal import newton_primal
    from sodm_spark.spark.dsvrg.fit import DSVRGParams, fit_dsvrg
    from sodm_spark.spark.io import numpy_to_blocks

    rng = np.random.default_rng(15)
    X = rng.normal(size=(600, 6))
    y = np.where(X[:, 0] + 0.5 * rng.normal(size=600) > 0.9, 1.0, -1.0)  # ~20% positives
    positives = np.sum(y > 0)
    weights = np.where(y > 0, 600 / (2 * positives), 600 / (2 * (600 - positives)))
    exact = newton_primal(X, y, 5.0, 0.2, 0.5, weights=weights)
    sc = spark.sparkContext
    fit = fit_dsvrg(sc, numpy_to_blocks(sc, X, y),
                    DSVRGParams(5.0, 0.2, 0.5, epochs=80, relative_change_tol=1e-12,
                                n_partitions=3, class_weight="balanced"),
                    classes=[-1.0, 1.0], n_features=6)
    assert fit.epochs[-1].objective == pytest.approx(exact.objective, rel=1e-4)
    np.testing.assert_allclose(fit.w, exact.w, rtol=2e-2, atol=2e-3)


def test_a_weight_column_through_the_levels_is_the_exact_weighted_odm(spark, tmp_path):
    """SODMClassifier(weightCol=...) on a DataFrame: rows of weight 0 are left out, and one
    partition of the rest solves the exact weighted dual."""
    from sodm_spark.estimators.ml import SODMClassifier

    X, y = make_problem(m=240, d=4, seed=41)
    weights = np.random.default_rng(3).integers(0, 4, size=y.size).astype(float)
    frame = spark.createDataFrame([(row.tolist(), float(label), float(weight))
                                   for row, label, weight in zip(X, y, weights)],
                                  ["features", "label", "w"])
    model = SODMClassifier(weightCol="w", levels=0, autoStop=False, scale="none", gamma=0.3,
                           lam=100.0, tol=1e-9, kernelStorage="float32",
                           calibration="none").fit(frame)
    kept = weights > 0
    reference = solve_odm_dual(X[kept], y[kept], Kernel.create("rbf", 0.3),
                               ODMHyperparameters(100.0, 0.1, 0.2),
                               settings=DCDSettings(violation_tol=1e-9, dtype=np.float64),
                               weights=weights[kept])
    assert model.levelStats[0]["rows"] == kept.sum()
    assert model.levelStats[0]["objective"] == pytest.approx(reference.objective, rel=1e-6)
    rows = np.random.default_rng(1).normal(size=(50, 4))
    expected = (np.exp(-0.3 * ((rows[:, None, :] - X[kept][None]) ** 2).sum(-1))
                @ (reference.gamma * y[kept]))
    np.testing.assert_allclose(model.expansion.decision_function(rows), expected, rtol=1e-4,
                               atol=1e-6)


def test_dsvrg_with_a_weight_column_reaches_the_weighted_newton_optimum(spark):
    from sodm_spark.solvers.odm_primal import newton_primal
    from sodm_spark.spark.dsvrg.fit import DSVRGParams, fit_dsvrg
    from sodm_spark.spark.io import numpy_to_blocks

    rng = np.random.default_rng(19)
    X = rng.normal(size=(500, 5))
    y = np.where(X[:, 0] - X[:, 1] + 0.4 * rng.normal(size=500) > 0.3, 1.0, -1.0)
    weights = rng.uniform(0.2, 3.0, size=500)
    exact = newton_primal(X, y, 3.0, 0.1, 0.5, weights=weights * np.where(y > 0, 2.0, 1.0))
    sc = spark.sparkContext
    fit = fit_dsvrg(sc, numpy_to_blocks(sc, X, y, weights=weights),
                    DSVRGParams(3.0, 0.1, 0.5, epochs=80, relative_change_tol=1e-12,
                                n_partitions=2, class_weight={1.0: 2.0}),
                    classes=[-1.0, 1.0], n_features=5)
    assert fit.epochs[-1].objective == pytest.approx(exact.objective, rel=1e-4)
    np.testing.assert_allclose(fit.w, exact.w, rtol=2e-2, atol=2e-3)


def test_the_job_weight_column_equals_repeated_rows_and_refuses_bad_weights(spark, tmp_path):
    """``--weight-col`` on Parquet and CSV: integer weights fit the model repeated rows fit
    (one partition, fixed gamma, a tight tol), weight 0 leaves a row out; a negative weight,
    LIBSVM and the built-in data are refused in one line."""
    import json
    import sys
    from pathlib import Path

    import pandas as pd

    from sodm_spark.models.expansion import KernelExpansion

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "jobs"))
    import train_sodm

    X, y = make_problem(m=200, d=3, seed=51)
    counts = np.random.default_rng(8).integers(0, 3, size=y.size)
    frame = pd.DataFrame(X, columns=["a", "b", "c"]).assign(label=(y > 0).astype(float),
                                                            w=counts.astype(float))
    frame.to_parquet(tmp_path / "weighted.parquet")
    frame.to_csv(tmp_path / "weighted.csv", index=False)
    copies = np.repeat(np.arange(y.size), counts)
    frame.drop(columns="w").iloc[copies].to_parquet(tmp_path / "repeated.parquet", index=False)
    common = ["--levels", "0", "--gamma", "0.4", "--lam", "50", "--theta", "0.1", "--v", "0.3",
              "--tol", "1e-9", "--scale", "none", "--global-step", "none",
              "--calibration", "none"]
    models = {}
    for name, data, extra in [("parquet", "weighted.parquet", ["--weight-col", "w"]),
                              ("csv", "weighted.csv", ["--weight-col", "w"]),
                              ("repeated", "repeated.parquet", [])]:
        out = tmp_path / f"model-{name}"
        assert train_sodm.main(["--data", str(tmp_path / data), "--format",
                                data.split(".")[1], "--model-out", str(out),
                                "--metrics-out", str(tmp_path / f"{name}.json"), *common,
                                *extra]) == 0
        models[name] = KernelExpansion.load(out)
    rows = np.random.default_rng(2).normal(size=(40, 3))
    reference = models["repeated"].decision_function(rows)
    for name in ("parquet", "csv"):
        np.testing.assert_allclose(models[name].decision_function(rows), reference,
                                   rtol=1e-5, atol=1e-7)
    assert json.loads((tmp_path / "parquet.json").read_text())["levels"][0]["rows"] == \
        int((counts > 0).sum())

    def refusal(argv):
        with pytest.raises(SystemExit) as raised:
            train_sodm.main(argv)
        return str(raised.value.code)

    frame.assign(w=np.where(np.arange(y.size) == 7, -2.0, 1.0)).to_parquet(tmp_path / "bad.parquet")
    message = refusal(["--data", str(tmp_path / "bad.parquet"), "--format", "parquet",
                       "--weight-col", "w", "--levels", "0"])
    assert "1 row(s) of the weight column 'w'" in message and "-2.0" in message
    assert "\n" not in message
    assert "no weight column" in refusal(["--data", str(tmp_path / "weighted.parquet"),
                                          "--format", "parquet", "--weight-col", "nope",
                                          "--levels", "0"])
    assert "LIBSVM rows have no weight column" in refusal(
        ["--data", str(tmp_path / "x.svm"), "--weight-col", "w"])
    assert "no --data was given" in refusal(["--weight-col", "w"])


def test_the_job_with_balanced_class_weights_judges_levels_by_the_weighted_accuracy(
        spark, tmp_path, capsys):
    """The levels table shows the weighted accuracy the stop rule compares (with balanced
    weights, the balanced accuracy), recorded per level and equal to scikit-learn's
    balanced_accuracy_score of the level's validation decision values."""
    import json
    import sys
    from pathlib import Path

    from sklearn.metrics import accuracy_score, balanced_accuracy_score

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "jobs"))
    import train_sodm

    metrics = tmp_path / "metrics.json"
    assert train_sodm.main(["--rows", "1500", "--levels", "1", "--gamma", "1", "--lam", "1e4",
                            "--class-weight", "balanced", "--global-step", "none",
                            "--metrics-out", str(metrics)]) == 0
    assert "val w-acc" in capsys.readouterr().out
    report = json.loads(metrics.read_text())
    assert report["params"]["class_weight"] == "balanced"
    level = report["levels"][0]
    n_validation = report["validation_rows"]
    wrong = np.zeros(n_validation, dtype=bool)
    wrong[level["validation_wrong"]] = True
    decisions = np.asarray(level["validation_decisions"])
    labels = np.where(wrong, -np.sign(decisions), np.sign(decisions))  # the slice's ±1 labels
    weights = np.asarray(report["class_weights"])[(labels > 0).astype(int)]
    assert level["validation_weighted_accuracy"] == pytest.approx(
        accuracy_score(labels, np.sign(decisions), sample_weight=weights), abs=1e-12)
    # the training rows' class shares are the slice's, nearly: the balanced accuracy, nearly
    assert abs(level["validation_weighted_accuracy"]
               - balanced_accuracy_score(labels, np.sign(decisions))) < 0.02


# ------------------------------------------------------------------------ weights at their edges
# The loss is averaged over S = Σ s_i (docs/design.md §1.4), so weights are relative: scaled by
# any c > 0 they give the unscaled fit (S and every s_i scale together; the dual's diagonal
# terms S·c·v/s_i do not change). A class whose every row weighs 0 is refused, as
# scikit-learn's SVC refuses it for two classes: its rows would be left out and the model could
# never predict it; one row carrying all the weight leaves every other class so.

EDGE_SCALES = [1e-30, 1e30]


def _edge_problem():
    X, y = make_problem(m=120, d=3, seed=61)
    return X, y, np.random.default_rng(62).uniform(0.5, 2.0, size=y.size)


def _weightless(y, weights_of, name):
    """The weight vectors of the two refused edges: every row of class +1 at 0, and all the
    weight on row 5 (a row of class ``y[5]``)."""
    return {"class": np.where(y > 0, 0.0, weights_of),
            "one row": np.eye(y.size)[5] * 3.0}[name]


@pytest.mark.parametrize("scale", EDGE_SCALES)
def test_weights_scaled_by_any_factor_fit_the_unscaled_model(scale):
    """ODMClassifier and the levels in process (fit_in_process): weights times 1e-30 or
    1e30 give the decision function of the unscaled weights, to rounding."""
    from sodm_spark.estimators.sklearn import ODMClassifier
    from sodm_spark.spark.train import fit_in_process

    X, y, weights = _edge_problem()
    options = dict(gamma=0.5, lam=50.0, tol=1e-10, dtype="float64")
    plain = ODMClassifier(**options).fit(X, y, sample_weight=weights)
    scaled = ODMClassifier(**options).fit(X, y, sample_weight=weights * scale)
    np.testing.assert_allclose(scaled.decision_function(X), plain.decision_function(X),
                               rtol=1e-9, atol=1e-12)
    settings = dict(levels=1, p=2, strata=2, gamma=0.5, lam=50.0, theta=0.1, v=0.2, tol=1e-9,
                    scale="none", auto_stop=False, global_step="none", calibration="none",
                    kernel_storage="float32", seed=1)
    levels = [fit_in_process(X, y, w, cores=2, **settings).fit.model for w in
              (weights, weights * scale)]
    np.testing.assert_allclose(levels[1].decision_function(X), levels[0].decision_function(X),
                               rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("edge", ["class", "one row"])
def test_weights_that_leave_a_class_without_weight_are_refused_naming_it(edge):
    """Every weight of class 1 zero, or one row (of class -1) carrying all the weight:
    ODMClassifier and fit_in_process refuse in one line naming class 1."""
    from sodm_spark.core.errors import InputError
    from sodm_spark.estimators.sklearn import ODMClassifier
    from sodm_spark.spark.train import fit_in_process

    X, y, weights = _edge_problem()
    assert y[5] < 0  # the row carrying all the weight is of class -1
    weights = _weightless(y, weights, edge)
    rows = "only 1 row weighs" if edge == "one row" else f"{np.sum(y < 0)} rows weigh"
    expected = (rf"sample_weight: every row of class 1 weighs 0 \({rows} more than 0, of "
                r"class -1\), so the fit would never predict it")
    with pytest.raises(ValueError, match=expected):
        ODMClassifier(gamma=0.5).fit(X, y, sample_weight=weights)
    with pytest.raises(InputError, match=expected):
        fit_in_process(X, y, weights, cores=2, levels=0, gamma=0.5, lam=50.0, theta=0.1,
                       v=0.2)


def test_the_job_weight_column_at_its_edges_fits_the_unscaled_model_or_refuses(
        spark, tmp_path):
    """``sodm-train --weight-col``: weights times 1e-30 and times 1e30 (60 orders of magnitude
    apart) write the same model; a class whose weights are all 0 and one row carrying all the
    weight end the job with one line naming the class, as the estimators refuse them."""
    import sys
    from pathlib import Path

    import pandas as pd

    from sodm_spark.core.errors import EXIT_CODES, INPUT, JobExit
    from sodm_spark.models.expansion import KernelExpansion

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "jobs"))
    import train_sodm

    X, y, weights = _edge_problem()
    frame = pd.DataFrame(X, columns=["a", "b", "c"]).assign(label=(y > 0).astype(float))
    common = ["--format", "parquet", "--weight-col", "w", "--levels", "0", "--gamma", "0.5",
              "--lam", "50", "--theta", "0.1", "--v", "0.2", "--tol", "1e-9", "--scale",
              "none", "--global-step", "none", "--calibration", "none", "--kernel-storage",
              "float32"]
    models = {}
    for scale in EDGE_SCALES:
        frame.assign(w=weights * scale).to_parquet(tmp_path / f"{scale:g}.parquet")
        assert train_sodm.main(["--data", str(tmp_path / f"{scale:g}.parquet"), *common,
                                "--model-out", str(tmp_path / f"model-{scale:g}")]) == 0
        models[scale] = KernelExpansion.load(tmp_path / f"model-{scale:g}")
    np.testing.assert_allclose(models[1e-30].decision_function(X),
                               models[1e30].decision_function(X), rtol=1e-9, atol=1e-12)
    earlier = contents(tmp_path / "model-1e+30")  # an earlier model, which no refusal touches
    for edge in ("class", "one row"):
        path = tmp_path / f"{edge}.parquet"
        frame.assign(w=_weightless(y, weights, edge)).to_parquet(path)
        with pytest.raises(JobExit) as refused:
            train_sodm.main(["--data", str(path), *common,
                             "--model-out", str(tmp_path / "model-1e+30")])
        message = str(refused.value.code)
        assert refused.value.status == EXIT_CODES[INPUT]
        assert message.startswith(f"error: {path} (format 'parquet'): the weight column 'w': "
                                  "every row of class 1 weighs 0 ("), message
        assert "\n" not in message and "of class 0)" in message
        assert contents(tmp_path / "model-1e+30") == earlier
