"""The three back ends of the fit (sodm_spark.spark.engine.context_of): classic Spark (RDDs),
DataFrames (sodm_spark.spark.frames, the path of a Spark Connect session, here over the local
session's DataFrames) and in-process (sodm_spark.spark.in_process). Their records land where
the RDD operations put them, and the same seeded fits (the levels of two and three classes,
weights, a search, the global step, DSVRG for the linear kernel, a fit resumed from the
checkpoint of an interrupted level) give the same models, bit for bit, on all three.
tests/test_spark_connect.py runs the estimator and the jobs through a real Connect server."""
import subprocess
import sys
from dataclasses import fields, is_dataclass

import numpy as np
import pytest
from sklearn.datasets import make_classification

from sodm_spark.spark.io import numpy_to_blocks
from sodm_spark.spark.engine import map_with_reports, ordered_sum
from sodm_spark.spark.frames import FrameContext
from sodm_spark.spark.in_process import InProcessContext, in_process_context
from sodm_spark.spark.sodm.fit import FitOptions
from sodm_spark.spark.train import ScoredRows, Search, fit_in_process, fit_params, train

#: name: (classes, with weights, the fit's settings)
FITS = {
    "binary": (2, False, {"levels": 2, "seed": 3, "gamma": 0.2, "lam": 100.0}),
    "classes": (3, False, {"levels": 2, "seed": 3, "strata": 5, "gamma": 0.2, "lam": 100.0}),
    "weights": (2, True, {"levels": 2, "seed": 5, "gamma": 0.2, "lam": 100.0}),
    "search": (2, False, {"levels": 2, "seed": 3}),
    # after level 2's 9 partitions, which the step reads as 8 blocks of consecutive ones
    "global step": (2, False, {"levels": 3, "seed": 3, "gamma": 0.2, "lam": 100.0,
                               "global_step": "always", "stop_level": 2}),
    "linear": (2, False, {"kernel": "linear", "seed": 3}),
    # interrupted after level 2 (stop_level=2 stands for the killed driver), then resumed from
    # its checkpoint: tests/test_faults.py kills a real driver
    "resume": (2, True, {"levels": 2, "seed": 3, "gamma": 0.2, "lam": 100.0,
                         "auto_stop": False}),
}


def _glom(rdd):
    return [sorted(part) for part in rdd.glom().collect()]


def _local_glom(rdd):
    return [sorted(part) for part in rdd._all()]


def test_records_in_process_land_where_the_rdd_operations_put_them(spark):
    """parallelize's slices, partitionBy, coalesce's consecutive ranges, repartition,
    zipWithIndex, runJob on some partitions, reduce, the ordered sums and the reports beside
    the data: as a SparkContext gives them."""
    sc, local = spark.sparkContext, InProcessContext(2)
    for values, slices in ((list(range(10)), 4), (list(range(3000)), 3), (list(range(7)), 7)):
        assert _local_glom(local.parallelize(values, slices)) == \
            _glom(sc.parallelize(values, slices))
    pairs = [(k % 5, k) for k in range(23)]
    assert _local_glom(local.parallelize(pairs, 3).partitionBy(5, lambda k: k)) == \
        _glom(sc.parallelize(pairs, 3).partitionBy(5, lambda k: k))
    fourteen = list(range(14))
    assert _local_glom(local.parallelize(fourteen, 7).coalesce(3)) == \
        _glom(sc.parallelize(fourteen, 7).coalesce(3))
    values = list(range(10))
    assert local.parallelize(values, 3).zipWithIndex().collect() == \
        sc.parallelize(values, 3).zipWithIndex().collect()
    assert local.runJob(local.parallelize(values, 4), lambda it: [sum(it)], [1, 3]) == \
        sc.runJob(sc.parallelize(values, 4), lambda it: [sum(it)], [1, 3])
    assert local.parallelize(values, 4).treeReduce(lambda a, b: a + b) == 45
    assert local.parallelize(values, 4).count() == 10
    assert local.parallelize(values, 2).take(3) == [0, 1, 2]
    assert local.parallelize(values, 2).filter(lambda v: v % 2).collect() == [1, 3, 5, 7, 9]
    floats = list(np.random.default_rng(0).normal(size=200) * 1e8)
    assert ordered_sum(local.parallelize(floats, 40), float, lambda a, b: a + b) == \
        ordered_sum(sc.parallelize(floats, 40), float, lambda a, b: a + b)

    def fn(records, report):
        records = list(records)
        report({records[0]: len(records)})
        yield from (r * 2 for r in records)

    data, reports = map_with_reports(sc, sc.parallelize(range(12), 3), fn)
    local_data, local_reports = map_with_reports(local, local.parallelize(range(12), 3), fn)
    assert local_reports == reports == {0: 4, 4: 4, 8: 4}
    assert local_data.collect() == data.collect()
    with pytest.raises(Exception, match="empty"):
        local.parallelize([], 2).reduce(lambda a, b: a + b)


def _data(classes: int, weighted: bool):
    X, y = make_classification(n_samples=1200, n_features=6, n_informative=4,
                               n_classes=classes, random_state=11)
    X_test, y_test = X[1000:], y[1000:].astype(float)
    X, y = X[:1000], y[:1000].astype(float)
    weights = np.random.default_rng(2).uniform(0.2, 3.0, len(y)) if weighted else None
    return X, y, weights, (X_test, y_test)


def _fit(sc, name, checkpoint=None, interrupted=True):
    classes, weighted, settings = FITS[name]
    X, y, weights, test = _data(classes, weighted)

    def run(settings, options=None):
        return train(sc, numpy_to_blocks(sc, X, y, weights=weights), X.shape[1],
                     fit_params(settings), rows=ScoredRows(test=test),
                     search=Search.of_defaults() if name == "search" else None,
                     level_options=options)

    if name != "resume" or not interrupted:
        return run(settings)
    interrupted = run(dict(settings, stop_level=2), FitOptions(checkpoint_dir=checkpoint))
    assert [entry.level for entry in interrupted.fit.levels] == [2]
    return run(settings, FitOptions(checkpoint_dir=checkpoint, resume=True))


def _arrays(value, path="model"):
    """Every array and number of a fitted model, by where it lies in it."""
    if isinstance(value, np.ndarray):
        yield path, value
    elif is_dataclass(value) and not isinstance(value, type):
        for field in fields(value):
            yield from _arrays(getattr(value, field.name), f"{path}.{field.name}")
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _arrays(item, f"{path}[{index}]")
    elif isinstance(value, dict):
        for key in sorted(value, key=str):
            yield from _arrays(value[key], f"{path}[{key!r}]")
    elif isinstance(value, (int, float, str, bool)) or value is None:
        yield path, value


#: the back ends against classic Spark: what context_of gives without a session, and the
#: DataFrame path a Connect session takes
BACK_ENDS = {"in-process": lambda spark: in_process_context(2),
             "frames": lambda spark: FrameContext(spark)}


@pytest.mark.parametrize("name", list(FITS))
def test_the_back_ends_fit_the_classic_model_bit_for_bit(spark, name, tmp_path):
    classic = _fit(spark.sparkContext, name, tmp_path / "classic")
    if name == "resume":  # the resumed fit is the uninterrupted one
        whole = _fit(spark.sparkContext, name, interrupted=False)
        assert [e.level for e in classic.fit.levels] == [e.level for e in whole.fit.levels] \
            == [2, 1, 0]
        _assert_same(whole, classic, name)
    for back_end, context in BACK_ENDS.items():
        other = _fit(context(spark), name, tmp_path / back_end)
        _assert_same(classic, other, name)


def _assert_same(classic, other, name):
    assert other.params == classic.params
    expected, found = dict(_arrays(classic.fit.model)), dict(_arrays(other.fit.model))
    assert found.keys() == expected.keys()
    for path, value in expected.items():
        if isinstance(value, np.ndarray):
            assert found[path].dtype == value.dtype and np.array_equal(found[path], value), path
        else:
            assert found[path] == value, path
    if name == "linear":  # DSVRG's primal
        assert np.array_equal(other.fit.w, classic.fit.w)
        assert other.fit.intercept == classic.fit.intercept
        assert [e.objective for e in other.fit.epochs] == [e.objective for e in classic.fit.epochs]
    else:
        assert other.fit.test_accuracy == classic.fit.test_accuracy
    if name == "global step":  # after 9 partitions (8 blocks of consecutive ones)
        assert [(e.level, e.partitions) for e in other.fit.levels] == [(3, 27), (2, 9)]
        assert other.fit.global_step["ran"] and \
            other.fit.global_step["validation_accuracy"] == \
            classic.fit.global_step["validation_accuracy"]
    if name == "search":
        assert [p.validation_accuracy for p in other.search.points] == \
            [p.validation_accuracy for p in classic.search.points]


def test_the_public_in_process_fit_searches_as_the_job_does():
    """fit_in_process: no Spark session, the job's defaults, a search when no hyperparameter
    is given; the same model as train() on the in-process context with that search."""
    X, y, _, test = _data(2, False)
    trained = fit_in_process(X, y, cores=2, test=test, levels=2, seed=3)
    assert trained.search is not None and trained.fit.test_accuracy > 0.8
    again = _fit(in_process_context(2), "search")
    np.testing.assert_array_equal(trained.fit.model.coef, again.fit.model.coef)
    given = fit_in_process(X, y, cores=2, test=test, levels=2, seed=3, gamma=0.2, lam=100.0)
    assert given.search is None


NO_PYSPARK = '''
import importlib.abc, sys
class Refused(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("pyspark", "py4j"):
            raise ImportError(f"No module named {name!r}")
sys.meta_path.insert(0, Refused())
import numpy as np
from sodm_spark.spark.train import fit_in_process
data = np.load(sys.argv[1])
trained = fit_in_process(data["X"], data["y"], cores=2, test=(data["Xt"], data["yt"]),
                         levels=2, seed=3, gamma=0.2, lam=100.0)
assert not any(name.split(".")[0] in ("pyspark", "py4j") for name in sys.modules)
np.save(sys.argv[2], trained.fit.model.coef)
'''


def test_the_in_process_fit_needs_no_pyspark(tmp_path):
    """A machine without Spark (one GPU, no Java: benchmarks/bench_gpu.py) fits the levels:
    with pyspark and py4j unimportable, fit_in_process imports neither and gives the model it
    gives here."""
    X, y, _, test = _data(2, False)
    np.savez(tmp_path / "rows.npz", X=X, y=y, Xt=test[0], yt=test[1])
    script = tmp_path / "no_pyspark.py"
    script.write_text(NO_PYSPARK)
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "rows.npz"),
                           str(tmp_path / "coef.npy")], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    here = fit_in_process(X, y, cores=2, test=test, levels=2, seed=3, gamma=0.2, lam=100.0)
    np.testing.assert_array_equal(np.load(tmp_path / "coef.npy"), here.fit.model.coef)
