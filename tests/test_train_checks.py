"""The checks before a fit, settled once in sodm_spark/spark/train.py (check_request,
check_rows) for the training job, SODMClassifier and the benchmark alike: one checking pass over
the rows, the label values the fit takes, the level count resolved from the rows, the levels
the rows allow and the memory the top level needs.
"""
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "jobs"))
import train_sodm  # noqa: E402

from sodm_spark.core.errors import SettingsError  # noqa: E402
from sodm_spark.data.datasets import make_nonlinear  # noqa: E402
from sodm_spark.spark import train as entry  # noqa: E402
from sodm_spark.spark.dsvrg.fit import DSVRGParams  # noqa: E402
from sodm_spark.spark.memory import MemoryBudgetError  # noqa: E402
from sodm_spark.spark.io import numpy_to_blocks  # noqa: E402
from sodm_spark.spark.sodm.params import SODMParams  # noqa: E402
from sodm_spark.spark.sodm.plan import auto_level_count  # noqa: E402

FAST = dict(gamma=1.0, lam=1e4, global_step="none", auto_stop=False)


@pytest.fixture(scope="module")
def rows(spark):
    X, y = make_nonlinear(700, seed=3)
    return spark.sparkContext, X, y, numpy_to_blocks(spark.sparkContext, X, y)


@pytest.fixture
def passes(monkeypatch):
    """How many checking passes the fit made (entry.checked_classes: check_rows' one)."""
    count = []
    original = entry.checked_classes

    def counted(*args, **kwargs):
        count.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(entry, "checked_classes", counted)
    return count


def test_the_level_count_is_resolved_once_from_the_rows(rows):
    sc, X, y, blocks = rows
    params = SODMParams(p=2, stop_level=5, **FAST)
    checked = entry.check_rows(sc, blocks, X.shape[1], params)
    memory = entry.executor_memory(sc, None, params.device)
    levels = auto_level_count(X.shape[0], 2, X.shape[1], memory, params)
    assert checked.params.levels == levels and checked.params.stop_level == min(5, levels)
    assert list(checked.classes) == [-1.0, 1.0] and checked.n_rows == X.shape[0]
    assert checked.row_width == X.shape[1]
    # the fit takes the levels as resolved: its levels table starts there
    trained = entry.train(sc, blocks, X.shape[1], checked)
    assert trained.params == checked.params
    assert trained.fit.levels[0].level == levels


def test_levels_the_rows_cannot_hold_and_a_top_level_memory_cannot_are_refused(rows):
    sc, X, _, blocks = rows
    with pytest.raises(SettingsError, match="asks for 2187 partitions but the data have only "
                                            "700 rows"):
        entry.check_rows(sc, blocks, X.shape[1], SODMParams(levels=7, **FAST))
    with pytest.raises(MemoryBudgetError, match="a task may use"):
        entry.check_rows(sc, blocks, X.shape[1], SODMParams(levels=0, memory_mb=1e-3, **FAST))


def test_the_label_values_are_refused_in_the_callers_words(rows):
    sc, X, y, _ = rows
    one_class = numpy_to_blocks(sc, X, np.ones_like(y))

    def refuse(classes):
        raise ValueError(f"mine: {classes.size}")

    with pytest.raises(ValueError, match="mine: 1"):
        entry.check_rows(sc, one_class, X.shape[1], SODMParams(**FAST), refuse_classes=refuse)
    three = numpy_to_blocks(sc, X, np.arange(y.size) % 3.0)
    with pytest.raises(ValueError, match="DSVRG"):
        entry.check_rows(sc, three, X.shape[1], DSVRGParams())
    # the linear path resolves no levels and checks no level's memory
    checked = entry.check_rows(sc, rows[3], X.shape[1], DSVRGParams())
    assert checked.params == DSVRGParams() and checked.n_rows == X.shape[0]


def test_the_job_and_the_estimator_pass_over_the_rows_once_before_the_fit(spark, passes,
                                                                           tmp_path):
    assert train_sodm.main(["--rows", "600", "--gamma", "1", "--lam", "1e4", "--theta", "0.1",
                            "--v", "0.2", "--global-step", "none", "--max-sv", "none",
                            "--metrics-out", str(tmp_path / "m.json")]) == 0
    assert len(passes) == 1
    from pyspark.ml.linalg import Vectors

    from sodm_spark.estimators.ml import SODMClassifier

    X, y = make_nonlinear(500, seed=5)
    frame = spark.createDataFrame([(Vectors.dense(x), float(label > 0))
                                   for x, label in zip(X, y)], ["features", "label"])
    SODMClassifier(levels=1, gamma=1.0, globalStep="none").fit(frame)
    assert len(passes) == 2
