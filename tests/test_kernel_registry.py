"""The kernel registry (sodm_spark.core.kernels.kernel_names) is the only list of kernels:
every registered kernel is taken by the training job's flags, by the pyspark.ml estimator's
Params as its fit validates them, by the scikit-learn estimator, by the int16 storage of the
exact solver and by the ONNX export, and the documents that list kernels for users name it.
No Spark session: the job's and the estimator's settings are checked as they are before Spark
starts."""
import re
from pathlib import Path

import numpy as np
import pytest

from sodm_spark.core.kernels import Kernel, kernel_class, kernel_names
from sodm_spark.estimators.ml import SODMClassifier
from sodm_spark.estimators.sklearn import ODMClassifier
from sodm_spark.jobs import train_args
from sodm_spark.models.expansion import KernelExpansion
from sodm_spark.solvers.dcd_settings import DCDSettings, ODMHyperparameters
from sodm_spark.solvers.odm_dcd import solve_odm_dual
from sodm_spark.spark.dsvrg.fit import DSVRGParams
from sodm_spark.spark.sodm.params import SODMParams
from sodm_spark.spark.train import fit_params

from conftest import make_problem

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", kernel_names())
def test_the_job_and_the_pyspark_ml_estimator_take_every_registered_kernel(name, no_config):
    job = fit_params(vars(train_args.parse_args([*no_config, "--kernel", name])))
    estimator = fit_params(SODMClassifier(kernel=name)._settings())
    if name == "linear":  # the linear kernel fits DSVRG (Algorithm 2)
        assert isinstance(job, DSVRGParams) and job == estimator
    else:
        assert isinstance(job, SODMParams) and job.kernel == estimator.kernel == name
    with pytest.raises(ValueError, match=f"known kernels are {', '.join(kernel_names())}"):
        fit_params({"kernel": "sigmoid"})


@pytest.mark.parametrize("name", kernel_names())
def test_the_scikit_learn_estimator_and_the_int16_storage_take_every_registered_kernel(name):
    X, y = make_problem(m=60, d=4, seed=1)
    model = ODMClassifier(kernel=name, lam=100.0).fit(X, y)
    assert type(model.kernel_) is kernel_class(name) and model.score(X, y) > 0.6
    # the exact solver keeps a cached Q in int16 where the kernel's diagonal bounds its values
    kernel = Kernel.create(name, 0.5, degree=2, coef0=1.0)
    assert kernel.bounded_by_diagonal
    result = solve_odm_dual(X, y, kernel, ODMHyperparameters(10.0, 0.1, 0.5),
                            settings=DCDSettings(dtype="int16", max_iter=5))
    assert result.storage == "int16"


@pytest.mark.parametrize("name", kernel_names())
def test_the_onnx_export_takes_every_registered_kernel(name):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from sodm_spark.models.onnx_export import to_onnx

    rng = np.random.default_rng(7)
    X = rng.normal(size=(200, 5))
    model = KernelExpansion(X[:40], rng.normal(size=(40, 1)),
                            Kernel.create(name, 0.3, degree=2, coef0=1.0, offset=0.5),
                            np.array([0, 1]))
    session = ort.InferenceSession(to_onnx(model).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    scores = dict(zip([output.name for output in session.get_outputs()],
                      session.run(None, {"features": X})))["scores"]
    f = model.decision_function(X)
    assert np.abs(scores - f).max() <= 1e-10 * np.abs(f).max()


def _kernels_named(text: str) -> set:
    return {name for name in kernel_names() if re.search(rf"\b{name}\b", text)}


def test_the_documents_listing_kernels_for_users_name_every_registered_kernel(capsys,
                                                                               no_config):
    flags = [line for line in (ROOT / "docs" / "jobs.md").read_text().splitlines()
             if line.startswith("| `--kernel`")]
    assert len(flags) == 1 and _kernels_named(flags[0]) == set(kernel_names())
    listed = [line for line in (ROOT / "README.md").read_text().splitlines()
              if line.startswith("Kernels:")]
    assert len(listed) == 1 and _kernels_named(listed[0]) == set(kernel_names())
    docstring = ODMClassifier.__doc__.split("kernel : ", 1)[1].split("\n    gamma", 1)[0]
    assert _kernels_named(docstring) == set(kernel_names())
    assert _kernels_named(SODMClassifier().getParam("kernel").doc) == set(kernel_names())
    with pytest.raises(SystemExit):
        train_args.parse_args([*no_config, "--help"])
    # the flag's help (its usage, "[--kernel KERNEL]", has no space after the name)
    flag_help = " ".join(capsys.readouterr().out.split()).split("--kernel KERNEL ", 1)[1]
    assert _kernels_named(flag_help.split(" --", 1)[0]) == set(kernel_names())
