"""sodm_spark/spark/train.py: the one way into a fit, shared by jobs/train_sodm.py,
SODMClassifier and the benchmark; its settings mean the same on every path.

The modules under test are imported inside the tests, so that a checkout without them fails
each test on its own assertion rather than at collection.
"""
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "jobs"))
import train_sodm  # noqa: E402


@pytest.fixture(scope="module")
def linear_frame(spark):
    from pyspark.ml.linalg import Vectors

    from sodm_spark.data.datasets import make_linear

    X, y = make_linear(600, 5, seed=13, centred=False)
    return spark.createDataFrame([(Vectors.dense(x), float(label > 0))
                                  for x, label in zip(X, y)], ["features", "label"])


def test_the_linear_estimator_honours_max_iter_and_tol(linear_frame):
    from sodm_spark.estimators.ml import SODMClassifier

    def fitted(**params):
        model = SODMClassifier(kernel="linear", lam=100.0, **params).fit(linear_frame)
        return len(model.levelStats), model.expansion.support_vectors[0]

    epochs, w = fitted()  # unset: the job's 30 epochs at most, stopped at 1e-6
    assert 1 < epochs <= 30
    one_epoch, w_one = fitted(maxIter=1)
    assert one_epoch == 1
    assert not np.allclose(w_one, w)
    # tol 0 never stops early: every one of maxIter epochs runs
    assert fitted(maxIter=epochs + 2, tol=0.0)[0] == epochs + 2


def test_the_job_and_the_estimator_build_the_same_parameters():
    from sodm_spark.estimators.ml import SODMClassifier
    from sodm_spark.spark.dsvrg.fit import DSVRGParams
    from sodm_spark.spark.train import fit_params

    job = fit_params(vars(train_sodm.parse_args(["--kernel", "linear", "--epochs", "7",
                                                 "--lam", "10"])))
    estimator = fit_params(SODMClassifier(kernel="linear", maxIter=7, lam=10.0)._settings())
    assert job == estimator == DSVRGParams(lam=10.0, theta=0.1, v=0.2, epochs=7)
    # the kernel solves' --tol is not DSVRG's, so not checked on the linear path
    assert fit_params(vars(train_sodm.parse_args(["--kernel", "linear", "--tol", "0"]))) \
        == DSVRGParams(lam=1e5, theta=0.1, v=0.2)
    with pytest.raises(ValueError, match=r"tol \(the violation bound\)"):
        fit_params(vars(train_sodm.parse_args(["--tol", "0"])))
    job = fit_params(vars(train_sodm.parse_args(["--gamma", "0.5", "--lam", "10"])))
    assert job == SODMClassifier(gamma=0.5, lam=10.0)._sodm_params()


def test_settings_left_unset_keep_the_defaults():
    from sodm_spark.spark.dsvrg.fit import DSVRGParams
    from sodm_spark.spark.sodm.params import SODMParams
    from sodm_spark.spark.train import fit_params

    assert fit_params({"gamma": None, "lam": None, "levels": None, "rows": 9}) == SODMParams()
    linear = fit_params({"kernel": "linear", "epochs": None, "epoch_tol": 0.5,
                         "partitions": 3, "fit_intercept": False})
    assert linear == DSVRGParams(lam=SODMParams.lam, theta=SODMParams.theta, v=SODMParams.v,
                                 relative_change_tol=0.5, n_partitions=3, fit_intercept=False)
    with pytest.raises(ValueError, match="epochs must be a positive integer"):
        fit_params({"kernel": "linear", "epochs": 0})


def test_the_linear_kernel_takes_no_search_nor_level_options():
    from sodm_spark.spark.dsvrg.fit import DSVRGParams
    from sodm_spark.spark.sodm.fit import FitOptions
    from sodm_spark.spark.train import Search, train

    # refused before any pass over the data (no Spark context needed)
    with pytest.raises(ValueError, match="a search cannot apply"):
        train(None, None, 3, DSVRGParams(), search=Search())
    with pytest.raises(ValueError, match="max_sv cannot apply"):
        train(None, None, 3, DSVRGParams(), level_options=FitOptions(max_sv=5000))


def test_the_classes_a_fit_takes():
    from sodm_spark.spark.train import check_classes

    assert check_classes([0, 1, 2], linear=False).size == 3
    assert check_classes([-1, 1], linear=True).size == 2
    with pytest.raises(ValueError, match=r"kernel='linear'\): the labels hold 3 classes.*DSVRG is a binary classifier"):
        check_classes([0, 1, 2], linear=True)
    with pytest.raises(ValueError, match=r"hold 1 class \(1\); SODM needs at least two"):
        check_classes([1.0], linear=False)

    def refuse(classes):
        raise ValueError(f"in my words: {classes.size}")

    with pytest.raises(ValueError, match="in my words: 1"):
        check_classes([1.0], linear=False, refuse=refuse)
