"""jobs/benchmark.py: methods side by side under time budgets, its outputs, the README region,
and its answers to bad flags. Small generated data, local[2] through the ``spark`` fixture."""
import json
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from sklearn.svm import SVC, LinearSVC

from sodm_spark import ODMClassifier
from sodm_spark.benchmarking import budget, report
from sodm_spark.benchmarking.plots import plot_seconds_vs_rows, plot_speedup_vs_cores
from sodm_spark.benchmarking.scaling import levels_for_rows, speedups
from sodm_spark.core.kernels import resolve_gamma
from sodm_spark.data.datasets import DatasetUnavailable, load_dataset

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "jobs"))
import benchmark  # noqa: E402

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
README = "# project\n\ntext before\n\n<!-- results:start -->\nold results\n<!-- results:end -->\n\n## after\nkept\n"


def _is_png(path: Path) -> bool:
    return path.exists() and path.read_bytes()[:8] == PNG_SIGNATURE and path.stat().st_size > 5000


def test_methods_side_by_side_write_json_markdown_pngs_and_the_readme_region(spark, tmp_path,
                                                                            capsys):
    readme = tmp_path / "README.md"
    readme.write_text(README)
    out = tmp_path / "results"
    flags = ["--dataset", "linear", "--train-rows", "900", "--test-rows", "400", "--seed", "2",
             "--methods", "sodm,exact-odm,svc,linearsvc,mllib-linearsvc", "--levels", "1",
             "--lam", "100", "--svc-C", "3", "--linear-C", "0.5", "--budget-seconds", "300",
             "--scaling", "rows", "--rows", "300,900", "--scaling-methods", "svc",
             "--partition-rows", "400", "--solved-levels", "1", "--out-dir", str(out),
             "--readme", str(readme)]
    assert benchmark.main(flags) == 0
    document = json.loads((out / "benchmark.json").read_text())
    rows = {(r["method"], r.get("level")): r for r in document["results"]}
    assert all(r["status"] == "ok" for r in document["results"])
    assert [r.get("level") for r in document["results"] if r["method"] == "sodm"] == [1, 0]

    # independent references on the same split with the same gamma and hyperparameters
    data = load_dataset("linear", train_rows=900, test_rows=400, seed=2)
    gamma = resolve_gamma("scale", data.X_train)
    assert document["gamma"] == pytest.approx(gamma)
    score = lambda model: model.fit(data.X_train, data.y_train).score(data.X_test, data.y_test)  # noqa: E731
    exact = score(ODMClassifier(gamma=gamma, lam=100, theta=0.1, v=0.5, tol=1e-3))
    assert rows[("exact-odm", None)]["accuracy"] == pytest.approx(exact, abs=1e-12)
    assert rows[("svc", None)]["accuracy"] == pytest.approx(score(SVC(C=3, gamma=gamma)), abs=1e-12)
    liblinear = score(LinearSVC(C=0.5, random_state=2, max_iter=5000))
    assert rows[("linearsvc", None)]["accuracy"] == pytest.approx(liblinear, abs=1e-12)
    # MLlib solves the same hinge problem (regParam = 1/(C·M)) with another optimizer
    assert abs(rows[("mllib-linearsvc", None)]["accuracy"] - liblinear) <= 0.03
    # SODM's last level solves the whole problem: the exact ODM's answer, to the tolerance
    assert abs(rows[("sodm", 0)]["accuracy"] - exact) <= 0.01
    assert rows[("sodm", 0)]["n_sv"] == rows[("exact-odm", None)]["n_sv"] > 0
    assert rows[("sodm", 1)]["partitions"] == 3 and rows[("sodm", 0)]["partitions"] == 1

    scaled = document["scaling_rows"]
    assert all(r["status"] == "ok" for r in scaled)
    # levels grow with M so that partitions stay at most --partition-rows rows; one level solved
    assert [(r["rows"], r["method"], r.get("level"), r.get("rows_per_partition"))
            for r in scaled] == [(300, "sodm", 0, 300), (300, "svc", None, None),
                                 (900, "sodm", 1, 300), (900, "svc", None, None)]

    markdown = (out / "benchmark.md").read_text()
    for name in ("SODM", "exact ODM", "SVC (LIBSVM)", "MLlib LinearSVC", "M (rows)"):
        assert f"| {name} |" in markdown
    for image in ("accuracy_vs_seconds.png", "seconds_vs_rows.png"):
        assert _is_png(out / image)
    text = readme.read_text()
    assert text.startswith("# project\n\ntext before\n\n<!-- results:start -->\n## Results")
    assert text.endswith("<!-- results:end -->\n\n## after\nkept\n")
    assert "jobs/benchmark.py --dataset linear" in text and "](results/accuracy_vs_seconds.png)" in text
    lines = capsys.readouterr().out
    assert "[benchmark 1/5] SODM: started" in lines and "MLlib LinearSVC: finished" in lines


def test_over_budget_methods_are_reported_not_finished_and_the_run_goes_on(spark, tmp_path):
    out = tmp_path / "out"
    flags = ["--dataset", "nonlinear", "--train-rows", "3000", "--test-rows", "200",
             "--methods", "sodm,exact-odm", "--levels", "1", "--tol", "1e-9",
             "--budget-seconds", "0.05", "--out-dir", str(out)]
    assert benchmark.main(flags) == 0
    document = json.loads((out / "benchmark.json").read_text())
    # each method's last row says it did not finish; a level that ended before the stop took
    # effect (in a session whose JVM earlier tests warmed, level 1 of 3,000 rows can, and with
    # reused Python workers level 0 after it) keeps its own row, as finished
    results = document["results"]
    finals = [r for number, r in enumerate(results)
              if number + 1 == len(results) or results[number + 1]["method"] != r["method"]]
    assert [(r["method"], r["status"]) for r in finals] == [
        ("sodm", "not finished"), ("exact-odm", "not finished")]
    assert all("budget" in r["note"] for r in finals)
    finished = [r for r in results if not any(r is final for final in finals)]
    assert all(r["method"] == "sodm" and r["status"] == "ok" for r in finished)
    assert [r["level"] for r in finished] == [1, 0][:len(finished)]  # the fit's levels, in order
    markdown = (out / "benchmark.md").read_text()
    assert markdown.count("N/A (> 0.05 s)") == 2 * 2  # accuracy and fit s of both rows
    # the session still works and holds no cache the stopped SODM left behind
    sc = spark.sparkContext
    assert sc.parallelize(range(10), 2).sum() == 45
    assert sc.getLocalProperty("spark.jobGroup.id") is None


def test_spark_budget_cancels_a_running_job_and_a_child_is_killed(spark):
    sc = spark.sparkContext
    sleepy = lambda: sc.parallelize(range(2), 2).map(lambda x: time.sleep(120) or x).collect()  # noqa: E731
    outcome = budget.run_spark_with_budget(sc, "sleepy", 1.0, sleepy)
    assert outcome.status == budget.NOT_FINISHED and "1 s budget" in outcome.note
    assert sc.parallelize(range(4), 2).map(lambda x: x * x).sum() == 14  # the run goes on
    failing = budget.run_spark_with_budget(sc, "failing", 60.0, lambda: 1 / 0)
    assert failing.status == budget.FAILED and "ZeroDivisionError" in failing.note

    data = load_dataset("nonlinear", train_rows=3000, test_rows=10)
    store = budget.ArrayStore({"X_train": data.X_train, "y_train": data.y_train,
                               "X_test": data.X_test, "y_test": data.y_test})
    try:
        settings = {"lam": 1e4, "theta": 0.1, "v": 0.5, "tol": 1e-12, "max_iter": 100000,
                    "cache_mb": 100.0, "seed": 0}
        outcome = budget.run_in_child("sodm_spark.benchmarking.driver_fit:fit_and_score",
                                      ("exact-odm", settings, 0.1, str(store.path)), 0.05)
    finally:
        store.close()
    assert outcome.status == budget.NOT_FINISHED and "budget" in outcome.note


def test_readme_region_rewriting_replaces_only_the_marked_region(tmp_path):
    path = tmp_path / "README.md"
    path.write_text(README)
    report.rewrite_readme(path, "## Results\n\nnew table\n")
    expected = README.replace("old results\n", "## Results\n\nnew table\n")
    assert path.read_text() == expected
    report.rewrite_readme(path, "## Results\n\nnew table\n")  # idempotent
    assert path.read_text() == expected
    path.write_text("# no markers here\n")
    with pytest.raises(ValueError, match="results:start"):
        report.rewrite_readme(path, "x")
    assert path.read_text() == "# no markers here\n"


@pytest.mark.parametrize("flags, message", [
    (["--methods", "sodm,libsvm"], "unknown method 'libsvm'"),
    (["--partitioners", "stratified,hash"], "unknown partitioner 'hash'"),
    (["--scaling", "threads"], "unknown scaling 'threads'"),
    (["--methods", "none"], "nothing to do"),
    (["--data", "a.libsvm", "--dataset", "letter"], "not both"),
    (["--cache-mb", "lots"], "expected megabytes or 'auto'"),
    (["--readme-region", "a b"], "--readme-region takes letters"),
])
def test_bad_flags_are_refused_with_a_message(flags, message, capsys):
    with pytest.raises(SystemExit):
        benchmark.parse_args(flags)
    assert message in capsys.readouterr().err


def test_cache_auto_means_the_jobs_memory_plan():
    assert benchmark.parse_args(["--cache-mb", "auto"]).cache_mb is None
    assert benchmark.parse_args(["--cache-mb", "512"]).cache_mb == 512.0
    from sodm_spark.benchmarking.driver_fit import build_estimator
    from sodm_spark.benchmarking.run import settings_of
    from sodm_spark.benchmarking.spark_methods import sodm_params
    settings = settings_of(benchmark.parse_args(["--cache-mb", "auto"]))
    assert sodm_params(settings, 0.1, "stratified").cache_mb is None
    assert build_estimator("exact-odm", settings, 0.1).cache_mb is None
    assert build_estimator("svc", settings, 0.1).cache_size == 2000.0


@pytest.mark.parametrize("dataset, package", [("fashion-mnist", "dataset-fashion-mnist"),
                                              ("satellite", "r-cran-mlbench"),
                                              ("letter", "r-cran-mlbench")])
def test_missing_dataset_package_names_the_package(dataset, package, tmp_path):
    with pytest.raises(SystemExit, match=package):
        benchmark.main(["--dataset", dataset, "--dataset-root", str(tmp_path),
                        "--methods", "svc", "--out-dir", str(tmp_path / "out")])


def test_mlbench_satellite_loads_as_a_binary_split():
    try:
        data = load_dataset("satellite", seed=1)
    except DatasetUnavailable as error:  # only a missing package skips; bad data fails
        pytest.skip(str(error))
    assert data.X_train.shape == (4435, 36) and data.X_test.shape == (2000, 36)
    assert set(np.unique(data.y_train)) == {-1.0, 1.0}
    # 3,492 of the 6,435 rows are grey soils (1,358 + 626 + 1,508 in mlbench's counts)
    assert int((data.y_train > 0).sum() + (data.y_test > 0).sum()) == 3492


def test_levels_grow_with_rows_so_partitions_keep_their_size():
    assert levels_for_rows(10000, 3, 2000, 2) == (2, 1)
    assert levels_for_rows(100000, 3, 2000, 2) == (4, 3)
    assert levels_for_rows(1000000, 3, 2000, 2) == (6, 5)
    assert levels_for_rows(1500, 3, 2000, 2) == (0, 0)
    for rows in (10**4, 10**5, 10**6):
        levels, _ = levels_for_rows(rows, 3, 2000, 1)
        assert 2000 / 3 < rows / 3 ** levels <= 2000


def test_speedup_table_and_plots_from_known_seconds(tmp_path):
    def level(cores, depth, seconds, final=False):
        return {"method": "sodm", "name": "SODM", "status": "ok", "cores": cores, "depth": depth,
                "level": 3 - depth, "partitions": 3 ** (3 - depth), "level_seconds": seconds,
                "fit_seconds": 3 * seconds, "final": final, "rows": 1000 * cores,
                "rows_per_partition": 500}

    rows = [level(1, 0, 8.0), level(1, 1, 6.0, True), level(2, 0, 4.0), level(2, 1, 4.0, True)]
    table = {(r["cores"], r["depth"]): r["speedup"] for r in speedups(rows)}
    assert table == {(1, 0): 1.0, (2, 0): 2.0, (1, 1): 1.0, (2, 1): 1.5, (1, None): 1.0,
                     (2, None): 1.5}
    plot_speedup_vs_cores(rows, tmp_path / "cores.png", "title")
    not_finished = {"method": "svc", "name": "SVC", "status": "not finished", "rows": 2000,
                    "fit_seconds": 9.0}
    plot_seconds_vs_rows(rows + [not_finished], tmp_path / "rows.png", "title", budget=9.0)
    assert _is_png(tmp_path / "cores.png") and _is_png(tmp_path / "rows.png")


def test_cores_scaling_refuses_a_session_it_did_not_start(spark, tmp_path):
    with pytest.raises(SystemExit, match="needs the job's own session"):
        benchmark.main(["--methods", "none", "--scaling", "cores", "--out-dir", str(tmp_path)])


def _run_peers(tmp_path, methods, seed):
    out = tmp_path / "results"
    assert benchmark.main(["--dataset", "nonlinear", "--train-rows", "900", "--test-rows", "400",
                           "--seed", str(seed), "--methods", methods, "--xgb-trees", "30",
                           "--xgb-depth", "4", "--nystroem-components", "200", "--nystroem-C", "1",
                           "--out-dir", str(out)]) == 0
    rows = {r["method"]: r for r in json.loads((out / "benchmark.json").read_text())["results"]}
    assert all(r["status"] == "ok" for r in rows.values()), rows
    return rows, (out / "benchmark.md").read_text(), load_dataset(
        "nonlinear", train_rows=900, test_rows=400, seed=seed)


def test_nystroem_peers_against_scikit_learn(spark, tmp_path):
    from sklearn.kernel_approximation import Nystroem
    from sklearn.pipeline import make_pipeline

    rows, markdown, data = _run_peers(tmp_path, "nystroem-linear,nystroem-spark", 3)
    gamma = resolve_gamma("scale", data.X_train)
    pipeline = make_pipeline(Nystroem(kernel="rbf", gamma=gamma, n_components=200,
                                      random_state=3),
                             LinearSVC(C=1, random_state=3, max_iter=5000))
    nystroem = pipeline.fit(data.X_train, data.y_train).score(data.X_test, data.y_test)
    assert rows["nystroem-linear"]["accuracy"] == pytest.approx(nystroem, abs=1e-12)
    # other landmarks (as many) and MLlib's optimizer on the same kind of features
    assert abs(rows["nystroem-spark"]["accuracy"] - nystroem) <= 0.05
    assert rows["nystroem-spark"]["model_floats"] == 200 * data.n_features + 200 * 200 + 201
    for name in ("Nyström + LinearSVC", "Nyström + MLlib LinearSVC"):
        assert f"| {name} |" in markdown and "landmarks" in markdown


def test_xgboost_peers_against_xgboost(spark, tmp_path):
    xgboost = pytest.importorskip("xgboost")  # the .[bench] extra; skipped without it
    rows, markdown, data = _run_peers(tmp_path, "xgboost,xgboost-spark", 3)
    trees = xgboost.XGBClassifier(tree_method="hist", n_estimators=30, max_depth=4,
                                  random_state=3).fit(data.X_train, data.y_train > 0)
    expected = np.mean(np.where(trees.predict(data.X_test) > 0, 1.0, -1.0) == data.y_test)
    assert rows["xgboost"]["accuracy"] == pytest.approx(expected, abs=1e-12)
    # the same kind of trees grown by XGBoost's Spark workers
    assert abs(rows["xgboost-spark"]["accuracy"] - expected) <= 0.03
    for name in ("XGBoost", "XGBoost on Spark"):
        assert f"| {name} |" in markdown


def test_a_peer_whose_package_is_missing_is_skipped_with_the_install_command(spark, tmp_path,
                                                                             monkeypatch):
    from sodm_spark.benchmarking import driver_fit

    monkeypatch.setitem(driver_fit.OPTIONAL_PACKAGES, "xgboost", "no_such_package_here")
    monkeypatch.setitem(driver_fit.OPTIONAL_PACKAGES, "xgboost-spark", "no_such_package_here")
    out = tmp_path / "results"
    assert benchmark.main(["--dataset", "nonlinear", "--train-rows", "200", "--test-rows", "100",
                           "--methods", "xgboost,xgboost-spark", "--out-dir", str(out)]) == 0
    rows = json.loads((out / "benchmark.json").read_text())["results"]
    assert [r["status"] for r in rows] == ["skipped", "skipped"]
    assert all("pip install -e '.[bench]'" in r["note"] for r in rows)


def _three_class_file(tmp_path):
    """A LIBSVM file of three classes labelled 2, 5, 7 (rings of a nonlinear problem)."""
    from sklearn.datasets import dump_svmlight_file

    rng = np.random.default_rng(5)
    X = rng.normal(size=(900, 6))
    radius = np.linalg.norm(X[:, :3], axis=1)
    y = np.select([radius < 1.3, radius < 1.9], [2, 5], 7)
    path = tmp_path / "three.libsvm"
    dump_svmlight_file(X, y, str(path), zero_based=False)
    return path, X, y


def test_multiclass_data_run_the_multiclass_methods_and_skip_the_binary_ones(spark, tmp_path):
    path, X, y = _three_class_file(tmp_path)
    readme = tmp_path / "README.md"
    readme.write_text(README + "<!-- results-multiclass:start -->\nold\n"
                      "<!-- results-multiclass:end -->\n")
    out = tmp_path / "results"
    assert benchmark.main(["--data", str(path), "--test-fraction", "0.3", "--seed", "4",
                           "--methods", "sodm,svc,nystroem-linear,mllib-linearsvc,dsvrg,cvm",
                           "--levels", "1", "--lam", "100", "--svc-C", "3", "--linear-C", "0.5",
                           "--nystroem-components", "150", "--out-dir", str(out), "--readme",
                           str(readme), "--readme-region", "results-multiclass"]) == 0
    document = json.loads((out / "benchmark.json").read_text())
    assert document["data"]["n_classes"] == 3
    rows = {(r["method"], r.get("level")): r for r in document["results"]}
    assert rows[("dsvrg", None)]["status"] == rows[("cvm", None)]["status"] == "skipped"
    assert "two classes only" in rows[("dsvrg", None)]["note"]

    # the same split as the job (seeded hold-out), references fitted on the raw labels
    from sodm_spark.data.datasets import seeded_split as _seeded_split
    X_train, y_train, X_test, y_test = _seeded_split(X, y.astype(float), 270, 4)
    gamma = resolve_gamma("scale", X_train)
    assert document["gamma"] == pytest.approx(gamma)
    svc = SVC(C=3, gamma=gamma).fit(X_train, y_train).score(X_test, y_test)
    assert rows[("svc", None)]["accuracy"] == pytest.approx(svc, abs=1e-12)
    assert rows[("svc", None)]["model_floats"] == rows[("svc", None)]["n_sv"] * (6 + 2)
    from sklearn.kernel_approximation import Nystroem
    from sklearn.pipeline import make_pipeline
    nystroem = make_pipeline(Nystroem(gamma=gamma, n_components=150, random_state=4),
                             LinearSVC(C=1, random_state=4, max_iter=5000))
    assert rows[("nystroem-linear", None)]["accuracy"] == pytest.approx(
        nystroem.fit(X_train, y_train).score(X_test, y_test), abs=1e-12)
    # SODM's last level is the exact one-vs-rest ODM of every class
    exact = ODMClassifier(gamma=gamma, lam=100, theta=0.1, v=0.5, tol=1e-3).fit(X_train, y_train)
    assert abs(rows[("sodm", 0)]["accuracy"] - exact.score(X_test, y_test)) <= 0.01
    assert rows[("sodm", 0)]["accuracy"] > 0.6  # far above the 1/3 of guessing
    # MLlib: one LinearSVC per class; a linear model cannot separate rings, so only sanity
    mllib = rows[("mllib-linearsvc", None)]
    assert mllib["status"] == "ok" and "OneVsRest over 3 classes" in mllib["note"]
    assert mllib["model_floats"] == 3 * (6 + 1)

    text = readme.read_text()
    assert text.startswith(README)  # the default region is untouched
    assert "<!-- results-multiclass:start -->\n### More results: three.libsvm, 3 classes" in text
    assert "#### Methods side by side: three.libsvm" in text
    assert "three.libsvm" in text and "3 classes: labels 2, 5, 7" in text


def test_pareto_front_keeps_the_rows_nothing_beats_on_both_time_and_accuracy():
    from sodm_spark.benchmarking.plots import pareto_front

    points = [(5.0, 0.90), (1.0, 0.80), (2.0, 0.85), (3.0, 0.84), (9.0, 0.90), (7.0, 0.95),
              (2.0, 0.70)]
    rows = [{"fit_seconds": s, "accuracy": a} for s, a in points]
    brute = [r for r in rows if not any(o["fit_seconds"] <= r["fit_seconds"] and
                                        o["accuracy"] >= r["accuracy"] and o is not r and
                                        (o["fit_seconds"], o["accuracy"]) !=
                                        (r["fit_seconds"], r["accuracy"]) for o in rows)]
    front = pareto_front(rows)
    assert front == sorted(brute, key=lambda r: r["fit_seconds"])
    assert [(r["fit_seconds"], r["accuracy"]) for r in front] == [
        (1.0, 0.80), (2.0, 0.85), (5.0, 0.90), (7.0, 0.95)]


def test_report_only_rewrites_markdown_pngs_and_the_readme_from_the_json(tmp_path):
    out = tmp_path / "results"
    out.mkdir()
    document = {"command": "python jobs/benchmark.py --methods svc", "date": "2026-01-02",
                "machine": {"cores": 2, "cpu": "cpu", "ram_gib": 1.0, "os": "os",
                            "python": "3", "pyspark": "4", "numpy": "2",
                            "scikit-learn": "1"},
                "master": "local[2]", "total_seconds": 60.0, "budget_seconds": 10.0,
                "settings": {"lam": 1.0, "theta": 0.1, "v": 0.5, "tol": 1e-3, "linear_lam": 1.0,
                             "svc_C": 1.0, "linear_C": 1.0, "p": 3, "levels": 1,
                             "strata": 20},
                "gamma": 0.5, "data": {"name": "d", "train_rows": 10, "test_rows": 5,
                                       "features": 2, "source": "s", "positive_class": "p"},
                "results": [{"method": "svc", "name": "SVC (LIBSVM)", "status": "ok",
                             "runs_on": "1 process", "accuracy": 0.875, "fit_seconds": 1.5,
                             "n_sv": 3, "model_floats": 9, "note": ""}]}
    (out / "benchmark.json").write_text(json.dumps(document))
    readme = tmp_path / "README.md"
    readme.write_text(README)
    assert benchmark.main(["--report-only", "--out-dir", str(out), "--readme", str(readme)]) == 0
    assert "| SVC (LIBSVM) |  |  | 1 process | 0.8750 | 1.5 |" in (out / "benchmark.md").read_text()
    assert _is_png(out / "accuracy_vs_seconds.png")
    assert "python jobs/benchmark.py --methods svc" in readme.read_text()
    with pytest.raises(SystemExit, match="not found"):
        benchmark.main(["--report-only", "--out-dir", str(tmp_path / "none")])


def test_xgboost_peers_on_three_classes(spark, tmp_path):
    xgboost = pytest.importorskip("xgboost")  # the .[bench] extra; skipped without it
    path, X, y = _three_class_file(tmp_path)
    out = tmp_path / "results"
    assert benchmark.main(["--data", str(path), "--test-fraction", "0.3", "--seed", "4",
                           "--methods", "xgboost,xgboost-spark", "--xgb-trees", "20",
                           "--xgb-depth", "3", "--out-dir", str(out)]) == 0
    rows = {r["method"]: r for r in json.loads((out / "benchmark.json").read_text())["results"]}
    from sodm_spark.data.datasets import seeded_split as _seeded_split
    X_train, y_train, X_test, y_test = _seeded_split(X, y.astype(float), 270, 4)
    classes = np.unique(y_train)
    trees = xgboost.XGBClassifier(tree_method="hist", n_estimators=20, max_depth=3,
                                  random_state=4).fit(X_train, np.searchsorted(classes, y_train))
    expected = np.mean(classes[trees.predict(X_test)] == y_test)
    assert rows["xgboost"]["accuracy"] == pytest.approx(expected, abs=1e-12)
    assert rows["xgboost-spark"]["status"] == "ok"
    assert abs(rows["xgboost-spark"]["accuracy"] - expected) <= 0.05
