"""Hyperparameter search (``--tune``) against a brute-force grid search with ODMClassifier.

Reference: for every grid point, an independent cold ODMClassifier fit per top-level
partition (its own kernel, no warm start, no power trick), the partitions' decision values
summed on the validation rows and scored — the same winner and the same accuracy per point.
"""
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import dump_svmlight_file

from sodm_spark import ODMClassifier
from sodm_spark.core.kernels import Kernel
from sodm_spark.selection.tuning import (SEARCH_PARTITION_ROWS, SEARCH_SAMPLE_ROWS, ParamGrid,
                                         PointSolve, best_point, search_partition,
                                         search_pieces, search_sample, search_subsets)
from sodm_spark.spark.partitioning import whole_partitions
from sodm_spark.spark.io import numpy_to_blocks
from sodm_spark.spark.sodm.params import SODMParams
from sodm_spark.spark.sodm.prepare import prepare_sodm
from sodm_spark.spark.tune import tune_sodm

from conftest import make_problem

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "jobs"))
import train_sodm  # noqa: E402
import tune  # noqa: E402

TOL = 1e-8
SMALL_GRID = ParamGrid(gamma_scales=(0.5, 2.0), lams=(10.0, 1000.0), thetas=(0.1, 0.4),
                       vs=(0.3,))


def brute_force(parts, X_val, y_val, base_gamma, grid, multi=False):
    """Validation accuracy per grid point (grid order) from cold ODMClassifier fits."""
    accuracies = []
    for point in grid.points():
        total = 0.0
        for X, y in parts:
            model = ODMClassifier(gamma=base_gamma * point.gamma_scale, lam=point.lam,
                                  theta=point.theta, v=point.v, tol=TOL, max_iter=20000)
            model.fit(X, y)
            total = total + model.decision_function(X_val)
        predicted = np.argmax(total, axis=1) if multi else np.where(total > 0, 1.0, -1.0)
        accuracies.append(float(np.mean(predicted == y_val)))
    return accuracies


def test_one_partition_matches_cold_fits_point_by_point():
    X, y = make_problem(m=150, d=4, seed=3)
    X_val, y_val = make_problem(m=120, d=4, seed=4)
    kernel = Kernel.create("rbf", 0.4)
    points, scores, stats = search_partition(X, y, X_val, kernel, SMALL_GRID,
                                             solving=PointSolve(violation_tol=TOL,
                                                                max_iter=20000))
    assert points == SMALL_GRID.points() and len(points) == 8
    assert all(s["converged"] for s in stats)
    # a row is visited at most once a sweep that ran (the last only measures the violation)
    assert all(0.0 <= s["visits"] <= s["sweeps"] - 1 for s in stats)
    for point, share in zip(points, scores):
        model = ODMClassifier(gamma=0.4 * point.gamma_scale, lam=point.lam, theta=point.theta,
                              v=point.v, tol=TOL, max_iter=20000).fit(X, y)
        expected = model.decision_function(X_val)
        np.testing.assert_allclose(share, expected, rtol=0, atol=1e-4 * np.abs(expected).max())


@pytest.fixture(scope="module")
def binary_prepared(spark):
    X, y = make_problem(m=900, d=5, seed=21)
    sc = spark.sparkContext
    params = SODMParams(levels=1, p=3, strata=4, tol=TOL, max_iter=20000, seed=4,
                        validation_fraction=0.2, validation_max_rows=300)
    prepared = prepare_sodm(sc, numpy_to_blocks(sc, X, y), params, np.array([-1.0, 1.0]),
                            hold_out=True)
    return params, prepared


def collected_parts(prepared):
    return [(X, y) for _, (X, y, _, _) in
            sorted(prepared.parts.mapPartitions(whole_partitions).collect(), key=lambda r: r[0])]


def test_spark_search_equals_brute_force_on_the_top_level_partitions(spark, binary_prepared):
    params, prepared = binary_prepared
    result = tune_sodm(spark.sparkContext, prepared, params, SMALL_GRID)
    X_val, y_val = prepared.validation_pair
    parts = collected_parts(prepared)
    assert len(parts) == 3 and 150 <= len(y_val) <= 300
    expected = brute_force(parts, X_val, y_val, prepared.kernel.gamma, SMALL_GRID)
    found = [p.validation_accuracy for p in result.points]
    np.testing.assert_allclose(found, expected, rtol=0, atol=1e-6)
    assert result.best_index == best_point(expected, [p.sweeps_max for p in result.points])
    assert result.best.validation_accuracy == max(expected)
    assert max(expected) - min(expected) > 0.01  # the grid's points are told apart
    best = result.best_params(params)
    assert best.gamma == pytest.approx(prepared.kernel.gamma * result.best.point.gamma_scale)
    assert (best.lam, best.theta, best.v) == (result.best.point.lam, result.best.point.theta,
                                              result.best.point.v)
    # seeded: a second search gives the same numbers
    again = tune_sodm(spark.sparkContext, prepared, params, SMALL_GRID)
    assert [p.validation_accuracy for p in again.points] == found


def test_multi_class_search_equals_brute_force(engine):
    rng = np.random.default_rng(8)
    centres = rng.normal(scale=1.6, size=(3, 3))
    labels = np.array([2.0, 5.0, 8.0])
    y = np.repeat(labels, 200)
    X = centres[np.repeat(np.arange(3), 200)] + rng.normal(size=(600, 3))
    order = rng.permutation(600)
    X, y = X[order], y[order]
    sc = engine
    params = SODMParams(levels=1, p=2, strata=3, tol=TOL, max_iter=20000, seed=1,
                        validation_fraction=0.25, validation_max_rows=200)
    prepared = prepare_sodm(sc, numpy_to_blocks(sc, X, y), params, labels, hold_out=True)
    grid = ParamGrid(gamma_scales=(1.0, 4.0), lams=(1.0, 100.0), thetas=(0.2,), vs=(0.5,))
    result = tune_sodm(sc, prepared, params, grid)
    X_val, y_val = prepared.validation_pair  # class numbers 0..2
    parts = [(X_p, labels[y_p.astype(int)]) for X_p, y_p in collected_parts(prepared)]
    expected = brute_force(parts, X_val, y_val, prepared.kernel.gamma, grid, multi=True)
    np.testing.assert_allclose([p.validation_accuracy for p in result.points], expected,
                               rtol=0, atol=1e-6)


@pytest.mark.parametrize("text, message", [
    ("lam=", "gives no value for lam"),
    ("lam=1,1", "repeats a value of lam"),
    ("gamma=-1", "gamma multiples must be positive"),
    ("theta=1.5", "theta"),
    ("lam=0", "lam"),
    ("v=2", "v"),
    ("C=1", "unknown grid keys ['C']"),
    ("lam", "not key=v1,v2"),
    ("lam=abc", "must be numbers"),
])
def test_invalid_grids_are_refused_with_a_message(text, message):
    with pytest.raises(ValueError, match=None) as raised:
        grid = ParamGrid.parse(text)
        grid.validate()
    assert message in str(raised.value)


def test_ties_go_to_the_fewest_sweeps_then_the_grid_order():
    assert best_point([0.9, 0.95, 0.95, 0.95], [1, 300, 90, 90]) == 2
    assert best_point([0.9, 0.95, 0.95]) == 1
    assert best_point([0.97, 0.95], [500, 1]) == 0  # accuracy first


def test_the_default_grid_and_its_text_form():
    grid = ParamGrid()
    assert len(grid) == len(grid.points()) == 36
    parsed = ParamGrid.parse("gamma=0.5,1;lam=1e3 theta=0.1,0.3")
    assert parsed.gamma_scales == (0.5, 1.0) and parsed.lams == (1000.0,)
    assert parsed.vs == grid.vs  # left out: the default
    with pytest.raises(ValueError, match="linear kernel has no"):
        grid.validate("linear")


@pytest.fixture
def job_files(tmp_path):
    X, y = make_problem(m=600, d=5, seed=31)
    X_test, y_test = make_problem(m=200, d=5, seed=32)
    dump_svmlight_file(X, (y > 0).astype(int), str(tmp_path / "train.svm"), zero_based=False)
    dump_svmlight_file(X_test, (y_test > 0).astype(int), str(tmp_path / "test.svm"),
                       zero_based=False)
    return tmp_path


def test_train_job_tunes_then_fits_the_best_point(spark, job_files, capsys):
    metrics = job_files / "metrics.json"
    report = job_files / "report"
    grid = "gamma=0.5,2 lam=10,1000 theta=0.1 v=0.5"
    assert train_sodm.main(["--data", str(job_files / "train.svm"), "--test-data",
                            str(job_files / "test.svm"), "--levels", "1", "--tune", "--grid",
                            grid, "--tune-report", str(report), "--metrics-out",
                            str(metrics)]) == 0
    out = capsys.readouterr().out
    summary = json.loads(metrics.read_text())
    tuning = summary["tuning"]
    assert len(tuning["points"]) == 4 and tuning["partitions"] == 3
    assert [line for line in out.splitlines() if line.startswith("  [")][-1].startswith("  [  4/4]")
    best = tuning["best"]
    assert best["validation_accuracy"] == max(p["validation_accuracy"] for p in tuning["points"])
    # the fit used the best point, and its top level scores what the search scored for it
    assert summary["params"]["lam"] == best["lam"] and summary["params"]["theta"] == best["theta"]
    assert summary["params"]["gamma"] == pytest.approx(best["gamma"])
    top = summary["levels"][0]
    assert top["level"] == 1
    assert top["validation_accuracy"] == pytest.approx(best["validation_accuracy"], abs=0.02)
    assert summary["test_accuracy"] > 0.7
    assert {p.name for p in report.iterdir()} == {"tuning.json", "tuning.txt", "tuning.png"}
    assert (report / "tuning.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the first level's estimate takes the visits the chosen point's solves needed
    chosen = next(p for p in tuning["points"] if (p["lam"], p["gamma_scale"]) ==
                  (best["lam"], best["gamma_scale"]))
    final = tuning.get("final_round") or {"points": []}
    rounds = [chosen] + [p for p in final["points"] if (p["lam"], p["gamma_scale"]) ==
                         (best["lam"], best["gamma_scale"])]
    assert 0.0 < chosen["visits_per_row"] < chosen["sweeps_max"]
    plan_line = next(line for line in out.splitlines() if line.startswith("  -> level 1:"))
    assert any(f"the search's {r['visits_per_row']:.1f} visits of a row" in plan_line
               for r in rounds), plan_line


def test_tune_searches_a_seeded_sample_of_many_partitions(spark, job_files, capsys,
                                                          monkeypatch):
    # a sample of about SEARCH_SAMPLE_ROWS rows, as the default search: here 2 of 9 partitions
    monkeypatch.setattr("sodm_spark.selection.tuning.SEARCH_SAMPLE_ROWS", 100)
    metrics = job_files / "metrics.json"
    assert train_sodm.main(["--data", str(job_files / "train.svm"), "--levels", "2", "--tune",
                            "--grid", "gamma=0.5,2 lam=10 theta=0.1 v=0.5", "--metrics-out",
                            str(metrics), "--no-auto-stop", "--stop-level", "1"]) == 0
    out = capsys.readouterr().out
    tuning = json.loads(metrics.read_text())["tuning"]
    assert tuning["partitions"] == 2
    assert "tuning 2 grid points on 2 of the 9 partitions of the top level" in out


def test_tune_job_writes_the_report_and_no_model(spark, job_files, capsys, monkeypatch):
    monkeypatch.chdir(job_files)
    assert tune.main(["--data", str(job_files / "train.svm"), "--levels", "1", "--grid",
                      "gamma=1 lam=10,100 theta=0.1 v=0.5"]) == 0
    out = capsys.readouterr().out
    assert "best: --gamma" in out and "level partitions" not in out
    report = json.loads((job_files / "tuning-report" / "tuning.json").read_text())
    assert len(report["points"]) == 2
    with pytest.raises(SystemExit):
        tune.main(["--data", str(job_files / "train.svm"), "--model-out", "m"])
    assert "fits no model" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--tune", "--kernel", "linear"], "the linear kernel runs DSVRG"),
    (["--grid", "lam=1"], "--grid and --tune-report go with --tune"),
    (["--tune", "--grid", "lam=0"], "lam"),
    (["--tune", "--resume", "--checkpoint-dir", "x"], "without --tune"),
])
def test_the_job_refuses_tuning_flags_that_cannot_work(argv, message, capsys):
    with pytest.raises(SystemExit):
        train_sodm.parse_args(argv)
    assert message in capsys.readouterr().err


def test_the_estimator_tunes_and_returns_itself_with_the_best_point(spark):
    from pyspark.ml.linalg import Vectors

    from sodm_spark.estimators.ml import SODMClassifier

    X, y = make_problem(m=500, d=4, seed=61)
    df = spark.createDataFrame([(float(label), Vectors.dense(row)) for row, label in zip(X, y)],
                               ["label", "features"])
    estimator = SODMClassifier(levels=1, p=2, strata=3, seed=3)
    best, result = estimator.tune(df, {"gamma": [0.25, 1.0], "lam": [1.0, 100.0],
                                       "theta": [0.1], "v": [0.5]})
    assert len(result.points) == 4 and result.partitions == 2
    point = result.best.point
    assert best.getLam() == point.lam and best.getTheta() == point.theta
    assert best.getGamma() == pytest.approx(result.base_gamma * point.gamma_scale)
    assert estimator.getLam() == SODMParams().lam  # the estimator tuned is left as it was
    model = best.fit(df)
    assert model.transform(df).where("prediction = label").count() > 0.7 * 500
    with pytest.raises(ValueError, match="unknown grid keys"):
        estimator.tune(df, {"C": [1.0]})


def test_a_sampled_search_cuts_large_partitions_into_seeded_pieces(spark, binary_prepared):
    params, prepared = binary_prepared
    parts = collected_parts(prepared)
    keys, max_rows = [0, 2], 90
    pieces = {key: search_subsets(len(parts[key][1]), max_rows, 2, params.seed, key)
              for key in keys}
    for key, subsets in pieces.items():
        assert [len(rows) for rows in subsets] == [max_rows, max_rows]
        together = np.concatenate(subsets)
        assert len(np.unique(together)) == 2 * max_rows  # disjoint
        assert together.min() >= 0 and together.max() < len(parts[key][1])
        again = search_subsets(len(parts[key][1]), max_rows, 2, params.seed, key)  # a retry
        assert all(np.array_equal(a, b) for a, b in zip(subsets, again))
    assert len(search_subsets(200, 90, 5, params.seed, 0)) == 2  # as many as it holds
    whole = search_subsets(80, 90, 2, params.seed, 0)  # not larger: searched whole
    assert len(whole) == 1 and np.array_equal(whole[0], np.arange(80))
    assert not np.array_equal(pieces[0][0], search_subsets(len(parts[0][1]), max_rows, 2,
                                                           params.seed + 1, 0)[0])
    result = tune_sodm(spark.sparkContext, prepared, params, SMALL_GRID, keys=keys,
                       max_rows=max_rows, pieces=2)
    X_val, y_val = prepared.validation_pair
    cut = [(parts[key][0][rows], parts[key][1][rows]) for key in keys for rows in pieces[key]]
    expected = brute_force(cut, X_val, y_val, prepared.kernel.gamma, SMALL_GRID)
    np.testing.assert_allclose([p.validation_accuracy for p in result.points], expected,
                               rtol=0, atol=1e-6)
    whole = brute_force([parts[key] for key in keys], X_val, y_val, prepared.kernel.gamma,
                        SMALL_GRID)
    assert whole != expected  # the pieces are what was searched


def test_the_search_sample_holds_about_its_rows_once_partitions_are_cut():
    assert SEARCH_SAMPLE_ROWS // SEARCH_PARTITION_ROWS == 8
    # large partitions count as SEARCH_PARTITION_ROWS rows each: 8 of 27, not 1
    keys = search_sample(27, 22_194, 2, seed=0)
    assert len(keys) == 8 and keys == sorted(set(keys)) and max(keys) < 27
    assert len(search_sample(243, 2_466, 2, seed=0)) == 9  # ceil(20,000 / 2,466)
    assert search_sample(3, 100, 2, seed=0) == [0, 1, 2]  # all of them
    assert len(search_sample(27, 22_194, 16, seed=0)) == 16  # one per core at least
    assert search_sample(27, 22_194, 2, seed=0) == keys != search_sample(27, 22_194, 2, seed=1)
    # pieces of SEARCH_PARTITION_ROWS rows per sampled partition: one each when the sample
    # has enough partitions, eight from the one partition of 60,000 rows, no more than it holds
    assert search_pieces(8, 22_194) == 1 and search_pieces(9, 2_466) == 1
    assert search_pieces(1, 60_000) == 8 and search_pieces(2, 60_000) == 4
    assert search_pieces(1, 6_000) == 2 and search_pieces(1, 1_000) == 1


def test_the_second_round_scores_the_finalists_on_larger_pieces_of_the_same_rows(
        spark, binary_prepared, monkeypatch):
    from sodm_spark.selection.tuning import GridPoint
    from sodm_spark.spark import tune as tune_module

    params, prepared = binary_prepared
    parts = collected_parts(prepared)
    keys, max_rows = [0, 1, 2], 90
    default = GridPoint(0.5, 10.0, 0.4, 0.3)
    result = tune_sodm(spark.sparkContext, prepared, params, SMALL_GRID, keys=keys,
                       max_rows=max_rows, pieces=2, default=default)
    finalists = tune_module.finalists(result)
    ranked = sorted(result.points, key=lambda p: (-p.validation_accuracy, p.sweeps_max))
    assert finalists[:3] == [p.point for p in ranked[:3]]
    assert len(finalists) == 3 + (default not in finalists[:3]) and default in finalists
    # pieces of p × 90 = 270 rows from the 3 × 180 sampled rows: two pieces
    monkeypatch.setattr(tune_module, "SEARCH_PARTITION_ROWS", max_rows)
    tune_module.final_round(spark.sparkContext, prepared, params, result, keys, pieces=2)
    assert (result.final_pieces, result.final_piece_rows) == (2, 270)
    sampled = [np.sort(np.concatenate(search_subsets(len(parts[key][1]), max_rows, 2,
                                                     params.seed, key))) for key in keys]
    X = np.concatenate([parts[key][0][rows] for key, rows in zip(keys, sampled)])
    y = np.concatenate([parts[key][1][rows] for key, rows in zip(keys, sampled)])
    cut = [(X[:270], y[:270]), (X[270:], y[270:])]
    X_val, y_val = prepared.validation_pair
    by_point = {p.point: p for p in result.final_points}
    assert sorted(by_point, key=str) == sorted(finalists, key=str)
    for point in finalists:
        grid = ParamGrid((point.gamma_scale,), (point.lam,), (point.theta,), (point.v,))
        expected = brute_force(cut, X_val, y_val, prepared.kernel.gamma, grid)[0]
        assert by_point[point].validation_accuracy == pytest.approx(expected, abs=1e-9)
    # the fit takes the second round's best, or the default unless that one is beaten
    # significantly on the validation rows
    finals = result.final_points
    best = finals[best_point([p.validation_accuracy for p in finals],
                             [p.sweeps_max for p in finals])]
    kept = by_point[default]
    from sodm_spark.selection.tuning import significantly_better
    expected_choice = best.point if significantly_better(best.correct, kept.correct) \
        else default
    assert result.best.point == expected_choice
    report = result.to_dict()
    assert report["final_round"]["pieces"] == 2 and len(report["final_round"]["points"]) == \
        len(finalists)
    assert report["best"]["final_validation_accuracy"] == by_point[expected_choice] \
        .validation_accuracy
    # no sample drawn (every partition searched): no second round
    whole = tune_sodm(spark.sparkContext, prepared, params, SMALL_GRID)
    tune_module.final_round(spark.sparkContext, prepared, params, whole, None, 1)
    assert whole.final_points == [] and whole.to_dict()["final_round"] is None


# --- ranked by another metric than accuracy (SODMParams.metric) --------------------------------


def _two_points():
    """Two grid points' decision values on an 80/20 slice: the first predicts the majority class
    everywhere (0.80 accuracy, AUC at chance), the second ranks the rows well with its threshold
    low (0.66 accuracy, AUC near 1)."""
    rng = np.random.default_rng(31)
    y = np.where(np.arange(1000) < 200, 1.0, -1.0)
    majority = -1.0 - 0.01 * rng.random(1000)
    ranked = (y > 0) * 2.5 + rng.normal(size=1000) * 0.6 - 0.1
    return y, [majority, ranked]


def test_the_search_takes_the_best_point_by_the_metric():
    from sklearn.metrics import roc_auc_score

    from sodm_spark.selection.metrics import Evaluation
    from sodm_spark.selection.tuning import choose_point

    y, scores = _two_points()
    right = [np.where(s > 0, 1.0, -1.0) == y for s in scores]
    by_auc = [Evaluation(s, y, metric="auc") for s in scores]
    assert [np.mean(r) for r in right] == [0.8, 0.66]
    assert [j.value for j in by_auc] == pytest.approx([roc_auc_score(y, s) for s in scores])
    assert choose_point(right, [10, 10]) == 0  # accuracy: the majority-class point
    assert choose_point(by_auc, [10, 10]) == 1  # AUC: the point that ranks
    # the default point is kept unless the best beats it significantly, by the metric
    assert choose_point(right, [10, 10], default=1) == 0
    assert choose_point(by_auc, [10, 10], default=0) == 1
    close = by_auc[1].with_scores(scores[1] + 0.05 * np.random.default_rng(2).normal(size=1000))
    assert choose_point([by_auc[1], close], [10, 10], default=0) == 0
    # logloss: lower is better
    by_loss = [Evaluation(s, y, metric="logloss") for s in scores]
    assert by_loss[1].value < by_loss[0].value and choose_point(by_loss) == 1


def test_train_job_with_metric_auc_tunes_stops_and_reports_by_it(spark, job_files, capsys):
    metrics = job_files / "metrics.json"
    report = job_files / "report"
    assert train_sodm.main(["--data", str(job_files / "train.svm"), "--levels", "1", "--tune",
                            "--grid", "gamma=0.5,2 lam=10,1000 theta=0.1 v=0.5", "--metric",
                            "auc", "--tune-report", str(report), "--metrics-out",
                            str(metrics)]) == 0
    out = capsys.readouterr().out
    summary = json.loads(metrics.read_text())
    tuning = summary["tuning"]
    assert tuning["metric"] == "auc"
    assert tuning["best"]["validation_auc"] == max(p["validation_auc"] for p in tuning["points"])
    assert "val auc" in (report / "tuning.txt").read_text()
    # the levels table has the AUC column beside the accuracy's
    lines = out.splitlines()
    header = next(line for line in lines if line.split()[:2] == ["level", "partitions"])
    assert "val acc     val auc  test acc" in header
    assert summary["metric"] == "auc" and summary["levels"]
    for entry in summary["levels"]:
        assert {"validation_accuracy", "validation_auc", "validation_decisions"} <= set(entry)
        row = next(line.split() for line in lines if line.split()[:2] == [
            str(entry["level"]), str(entry["partitions"])])
        assert row[-1] == f"{entry['validation_auc']:.4f}"
        assert row[-2] == f"{entry['validation_accuracy']:.4f}"
    best = next(e for e in summary["levels"] if e["level"] == summary["best_level"])
    assert summary["validation_auc"] == best["validation_auc"]
    assert summary["validation_accuracy"] == best["validation_accuracy"]  # kept for old readers
    assert f"(validation accuracy {best['validation_accuracy']:.4f}, auc " \
        f"{best['validation_auc']:.4f} on " in out
