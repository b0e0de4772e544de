"""One default per setting: every place that offers a setting (ODMClassifier's signature,
SODMClassifier's keywords and Param defaults, the training job's and the benchmark's flags,
SODMParams, DSVRGParams, what the linear path fits, the documents) gives the same value when it is left
unset. Each value is read from its own place and compared with the others, never with the
shared constant (sodm_spark.core.defaults), so that a literal copied into one of them fails
here. No Spark session is needed.
"""
import inspect
import re
import tomllib
from pathlib import Path

import pytest

from sodm_spark.estimators.ml import SODMClassifier
from sodm_spark.estimators.sklearn import ODMClassifier
from sodm_spark.jobs import benchmark, train_args
from sodm_spark.spark.dsvrg.fit import DSVRGParams
from sodm_spark.spark.sodm.params import SODMParams
from sodm_spark.spark.train import fit_params

ROOT = Path(__file__).resolve().parents[1]

# (ODMClassifier's name or None, SODMClassifier's Param, SODMParams' field, the benchmark's
# flag or None): the settings the estimators, the Spark fits and the jobs share
SHARED = [
    ("kernel", "kernel", "kernel", None),
    ("gamma", "gamma", "gamma", "gamma"),
    ("degree", "degree", "degree", None),
    ("coef0", "coef0", "coef0", None),
    ("kernel_offset", "kernelOffset", "kernel_offset", None),
    ("lam", "lam", "lam", "lam"),
    ("theta", "theta", "theta", "theta"),
    ("v", "v", "v", "v"),
    ("tol", "tol", "tol", "tol"),
    ("max_iter", "maxIter", "max_iter", "max_iter"),
    ("class_weight", "classWeight", "class_weight", None),
    ("calibration", "calibration", "calibration", None),
    ("device", "device", "device", None),
    (None, "scale", "scale", None),
    (None, "inputMap", "input_map", None),
    (None, "p", "p", "p"),
    (None, "levels", "levels", None),
    (None, "strata", "strata", "strata"),
    (None, "stopLevel", "stop_level", "stop_level"),
    (None, "partitioner", "partitioner", None),
    (None, "warmStart", "warm_start", "warm_start"),
    (None, "cacheMb", "cache_mb", "cache_mb"),
    (None, "kernelStorage", "kernel_storage", None),
    (None, "seed", "seed", "seed"),
    (None, "autoStop", "auto_stop", None),
    (None, "validationFraction", "validation_fraction", None),
    (None, "minImprovement", "min_improvement", None),
    (None, "timeBudget", "time_budget", None),
    (None, "metric", "metric", None),
    (None, "globalStep", "global_step", None),
    (None, "globalCentres", "global_centres", None),
]


@pytest.fixture(scope="module")
def places(no_config):
    """Each place's unset values, read as a user of that place meets them."""
    job_args = train_args.parse_args(no_config)
    return {
        "ODMClassifier": ODMClassifier().get_params(),
        "SODMClassifier keywords": {
            name: parameter.default for name, parameter
            in inspect.signature(SODMClassifier.__init__).parameters.items()},
        "SODMClassifier Params": {param.name: value for param, value
                                  in SODMClassifier().extractParamMap().items()},
        "SODMParams": vars(SODMParams()),
        # what the job fits with no flag (its unset --gamma, --lam, --theta, --v included)
        "train job": vars(fit_params(vars(job_args))),
        "train job flags": vars(job_args),
        "benchmark flags": vars(benchmark.parse_args(no_config)),
    }


@pytest.mark.parametrize("local, param, field, bench", SHARED, ids=[row[2] for row in SHARED])
def test_every_place_offering_a_setting_defaults_it_alike(places, local, param, field, bench):
    found = {"SODMParams": places["SODMParams"][field],
             "SODMClassifier keywords": places["SODMClassifier keywords"][param],
             "SODMClassifier Params": places["SODMClassifier Params"][param],
             "train job": places["train job"][field]}
    if local is not None:
        found["ODMClassifier"] = places["ODMClassifier"][local]
    if bench is not None:
        found["benchmark flags"] = places["benchmark flags"][bench]
    flag = places["train job flags"].get(field)
    if flag is not None:  # a flag given a default of its own (--lam and the like have none)
        found["train job flags"] = flag
    assert len({repr(value) for value in found.values()}) == 1, found


def test_the_linear_path_fits_the_same_defaults_everywhere(no_config):
    job = fit_params(vars(train_args.parse_args([*no_config, "--kernel", "linear"])))
    estimator = fit_params(SODMClassifier(kernel="linear")._settings())
    local = ODMClassifier(kernel="linear").get_params()
    assert isinstance(job, DSVRGParams) and job == estimator
    for name in ("lam", "theta", "v", "fit_intercept"):
        assert getattr(job, name) == local[name], name
    assert SODMClassifier().getFitIntercept() == local["fit_intercept"]
    # DSVRG's own settings: the job's flags and the estimator's unset maxIter and tol read
    # DSVRGParams' (the kernel solves' sweeps and tol are not DSVRG's)
    linear = DSVRGParams()
    assert (job.epochs, job.relative_change_tol) == (linear.epochs, linear.relative_change_tol)
    # ... and DSVRGParams built with nothing given (a caller of fit_dsvrg) fits the same problem
    for name in ("lam", "theta", "v", "fit_intercept", "calibration", "device"):
        assert getattr(linear, name) == local[name], name


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def test_the_documents_state_the_defaults_the_code_has():
    local = ODMClassifier().get_params()
    # docs/design.md §7: ODMClassifier's signature as the public interface states it
    design = (ROOT / "docs" / "design.md").read_text()
    stated = re.search(r"`ODMClassifier\(([^`]*)\)` \(those are its defaults", design)[1]
    for name, value in re.findall(r"(\w+)=([^,\s]+)", stated):
        assert repr(local[name]) == repr(eval(value)), name  # noqa: S307 (the document's literal)
    # docs/jobs.md, the flags' table: --lam, --theta, --v and --tol, --max-iter
    table = (ROOT / "docs" / "jobs.md").read_text()
    row = re.search(r"^\| `--lam`, `--theta`, `--v` \| [^|]*else ([^|]+) \|", table, re.M)[1]
    assert [_number(x) for x in row.split(",")] == [local["lam"], local["theta"], local["v"]]
    row = re.search(r"^\| `--tol`, `--max-iter` \| ([^|]+) \|", table, re.M)[1]
    assert [_number(x) for x in row.split(", ")] == [local["tol"], local["max_iter"]]


@pytest.mark.parametrize("path", ["conf/sodm-jobs.toml", "sodm_spark/conf_defaults/sodm-jobs.toml"])
def test_the_shipped_job_config_repeats_no_other_default(path):
    """The [train_sodm] table of the job config shipped with the project sets only values the
    flags default to anyway: a run with it and one without fit the same."""
    for key, value in tomllib.loads((ROOT / path).read_text())["train_sodm"].items():
        assert getattr(SODMParams(), key.replace("-", "_")) == value, key


def test_the_compression_and_the_search_point_default_alike_everywhere(places):
    """The compression the job's --max-sv and --compress-method leave unset is the fit's
    (FitOptions, what fit_in_process and the Spark fits take) and SODMClassifier's Params';
    the point a search keeps unless beaten is the same in the job, the estimator's tune and
    fit_in_process (Search.of_defaults), and it is the default grid's."""
    from sodm_spark.selection.tuning import DEFAULT_SEARCH_GRID_TEXT, DEFAULT_SEARCH_POINT, ParamGrid
    from sodm_spark.spark.sodm.fit import FitOptions
    from sodm_spark.spark.train import Search

    options = FitOptions()
    found = {"job flags": (places["train job flags"]["max_sv"],
                           places["train job flags"]["compress_method"]),
             "FitOptions": (options.max_sv, options.compress_method),
             "SODMClassifier Params": (places["SODMClassifier Params"]["maxSV"],
                                       places["SODMClassifier Params"]["compressMethod"]),
             "SODMClassifier keywords": (places["SODMClassifier keywords"]["maxSV"],
                                         places["SODMClassifier keywords"]["compressMethod"])}
    assert len(set(found.values())) == 1, found
    assert SODMClassifier()._level_options() == options
    assert Search.of_defaults().default == DEFAULT_SEARCH_POINT
    assert DEFAULT_SEARCH_POINT in ParamGrid.parse(DEFAULT_SEARCH_GRID_TEXT).points()
    # θ and v are not searched: the point keeps the fit's own
    assert (DEFAULT_SEARCH_POINT.theta, DEFAULT_SEARCH_POINT.v) == \
        (places["SODMParams"]["theta"], places["SODMParams"]["v"])


#: The solvers' own violation bounds, kept on purpose: a solver called directly (the tests'
#: brute-force comparisons, the baselines, ODMClassifier's exact path through its own tol)
#: solves to 1e-3, ten times tighter than the fit's TOL = 1e-2, which the Spark fit, the
#: search (ten times TOL, at most 1e-2) and the estimators always pass explicitly.
SOLVER_BOUNDS = {
    "LocalSolve.violation_tol": ("sodm_spark.solvers.local_solve", "LocalSolve", "violation_tol"),
    "DCDSettings.violation_tol": ("sodm_spark.solvers.dcd_settings", "DCDSettings",
                                  "violation_tol"),
    "PointSolve.violation_tol": ("sodm_spark.selection.tuning", "PointSolve", "violation_tol"),
    "NewtonSettings.violation_tol": ("sodm_spark.solvers.odm_newton", "NewtonSettings",
                                     "violation_tol"),
}


@pytest.mark.parametrize("name", sorted(SOLVER_BOUNDS))
def test_a_solver_keeps_its_own_bound_and_the_fit_passes_the_shared_one(name, places):
    import dataclasses
    import importlib

    module, cls, field = SOLVER_BOUNDS[name]
    found = {f.name: f.default for f in dataclasses.fields(getattr(importlib.import_module(module),
                                                                   cls))}[field]
    assert found == 1e-3 and found < places["SODMParams"]["tol"]
    # the fit's solves take SODMParams' tol, not the solver's default
    assert SODMParams().local_solve.violation_tol == places["SODMParams"]["tol"]
