"""The Params of :mod:`sodm_spark.estimators.ml`: one table of every ODM/SODM Param (name,
type, doc), their defaults read from :class:`~sodm_spark.spark.sodm.params.SODMParams`, and the
``setX`` / ``getX`` methods pyspark.ml classes spell out by hand."""
from __future__ import annotations

import re
from typing import Any, Callable

from pyspark.ml.param import Param, Params, TypeConverters
from pyspark.ml.param.shared import (HasFeaturesCol, HasLabelCol, HasMaxIter, HasPredictionCol,
                                     HasProbabilityCol, HasRawPredictionCol, HasSeed, HasTol,
                                     HasWeightCol)

from ..core.defaults import COMPRESS_METHOD, FIT_INTERCEPT, MAX_SV
from ..core.kernels import kernel_names
from ..spark.sodm.fit import FitOptions
from ..spark.sodm.params import SODMParams
from ..spark.train import sodm_params


def _gamma_converter(value):
    if isinstance(value, str) and value in ("scale", "auto"):
        return value
    return TypeConverters.toFloat(value)


def _max_sv_converter(value):
    """maxSV: 'auto', 'none' or a number of points (at least 1)."""
    if isinstance(value, str) and value in ("auto", "none"):
        return value
    points = TypeConverters.toInt(value)
    if points < 1:
        raise TypeError(f"maxSV must be 'auto', 'none' or a number of points >= 1, got {value!r}")
    return points


def _param(name, converter, doc):
    return Param(Params._dummy(), name, doc, typeConverter=converter)


_CONVERTERS = {"text": TypeConverters.toString, "int": TypeConverters.toInt,
               "float": TypeConverters.toFloat, "bool": TypeConverters.toBoolean,
               "gamma": _gamma_converter, "maxsv": _max_sv_converter}

# Every ODM/SODM param: its name, its type (a key of _CONVERTERS) and its doc, continued on
# indented lines; the shared mixins add the columns, tol, maxIter and seed.
_PARAM_TABLE = """\
kernel             text   KERNELS
gamma              gamma  'scale' (1/(d·Var X)), 'auto' (1/d) or a number
degree             int    polynomial degree
coef0              float  polynomial offset
fitIntercept       bool   linear kernel: fit an unpenalized intercept (as MLlib's LinearSVC)
kernelOffset       float  other kernels: solve with k + c, a penalized bias (default 0)
inputMap           text   auto (dense rows of 256+ features, rbf or matern kernel: fitted on the
                          principal components that keep 95% of the variance when they are at
                          most a third of the features; stored in the model) or none
scale              text   minmax (every column onto [0, 1] before the kernel, stored in the
                          model) or none
lam                float  λ > 0, weight of the margin loss
theta              float  θ in [0, 1), margin band half-width
v                  float  v in (0, 1], weight of margins above 1+θ
p                  int    partitions merged per level (>= 2)
levels             int    L: start from p^L partitions (unset: chosen from the rows, as the
                          job's --levels auto)
strata             int    S landmark strata (Eqns 7-8)
stopLevel          int    last level solved (0 = all data)
partitioner        text   stratified, random, kmeans, dip or cascade
warmStart          text   scaled (γ/p) or concat
cacheMb            float  cap on the kernel cache per task in MB (unset: the memory budget
                          decides)
kernelStorage      text   auto (cached kernels in int16 fixed point, half float32's memory,
                          where the kernel's diagonal bounds its values), float32 or int16
device             text   auto (a GPU a task sees, else the CPU's numba solvers), cpu (the
                          array solver on numpy) or gpu (a CUDA GPU; refused before any pass
                          when neither the driver sees one nor the conf asks for executor
                          GPUs): where each partition's solve runs; the linear kernel ignores it
autoStop           bool   stop merging when a level no longer improves the validation accuracy
                          by minImprovement (a held-out validationFraction of the rows); the
                          model is the best level's
validationFraction float  share of the rows held out for autoStop (at most 10,000 rows:
                          exactly that many from 100,000 rows on)
minImprovement     float  autoStop: least validation accuracy gain a merge must bring (in the
                          units of metric)
metric             text   what the stop rule, the level kept, tune and the global step judge by
                          on the validation slice: accuracy (default), auc, logloss, f1 or
                          balanced_accuracy
timeBudget         float  autoStop: no level whose predicted seconds would end the fit later
globalStep         text   auto (after the levels, one Nyström ODM of every row when the chosen
                          level is near the majority class or the last merge gained nothing;
                          kept where the validation slice ranks it higher), always or none
globalCentres      int    centres of the global step (unset: the most whose predicted passes
                          fit the step's time budget, up to 20,000)
classWeight        text   balanced (each class the same total weight, n / (C·n_c)) or
                          label:weight pairs such as '0:1,1:5': each class's rows weighted in
                          every solve, the global step and the validation scores (unset: 1)
calibration        text   sigmoid (default: Platt's sigmoid of the decision values), isotonic
                          (a monotone map; needs more rows) or none: class probabilities
                          fitted on the validation slice, the model's probabilityCol
maxSV              maxsv  auto (default: a model of more than 100,000 support vectors
                          compressed where the validation slice keeps its accuracy, as the
                          job's --max-sv), none (every support vector) or N points at most
compressMethod     text   random (default), kmeans, landmarks or largest: how maxSV chooses a
                          compression's points
"""


def _read_param_table(table: str) -> dict:
    """name: (converter, doc) of each entry of ``table``."""
    params: dict[str, tuple[Callable[[Any], Any], str]] = {}
    name: str | None = None
    for line in table.splitlines():
        if line.startswith(" "):  # the doc goes on
            assert name is not None, "the table's first line names a Param"
            converter, doc = params[name]
            params[name] = (converter, f"{doc} {line.strip()}")
        else:
            name, kind, doc = line.split(None, 2)
            params[name] = (_CONVERTERS[kind], doc)
    return params


# the kernels as the registry names them (sodm_spark.core.kernels), not a copy of its list
_PARAMS = _read_param_table(_PARAM_TABLE.replace(
    "KERNELS", f"{', '.join(kernel_names()[:-1])} or {kernel_names()[-1]}"))


class _SODMParams(HasFeaturesCol, HasLabelCol, HasPredictionCol, HasRawPredictionCol,
                  HasProbabilityCol, HasTol, HasMaxIter, HasSeed, HasWeightCol):
    """The params of :data:`_PARAMS` (set on the class below) and their SODMParams defaults."""

    def __init__(self):
        super().__init__()
        defaults = SODMParams()
        self._setDefault(fitIntercept=FIT_INTERCEPT, maxSV=MAX_SV, compressMethod=COMPRESS_METHOD,
                         **{name: getattr(defaults, _field(name)) for name in _SODM_PARAM_NAMES})

    def _settings(self) -> dict:
        """The Params as :func:`~sodm_spark.spark.train.fit_params` reads them."""
        settings = {_field(name): self.getOrDefault(name) for name in _SODM_PARAM_NAMES}
        settings["fit_intercept"] = self.getOrDefault("fitIntercept")
        # kernel='linear': maxIter and tol, when set, bound DSVRG's epochs and its relative
        # objective change (as LinearSVC's bound its iterations); unset, the job's 30 epochs
        # and 1e-6, since their defaults (1000, 1e-2) are the kernel solves' sweeps and tol
        for param, setting in ((self.maxIter, "epochs"), (self.tol, "epoch_tol")):
            if self.isSet(param):
                settings[setting] = self.getOrDefault(param)
        return settings

    def _sodm_params(self) -> SODMParams:
        return sodm_params(self._settings())

    def _level_options(self) -> FitOptions:
        """The fit's options the Params set: the compression's (maxSV, compressMethod)."""
        return FitOptions(max_sv=self.getOrDefault("maxSV"),
                          compress_method=self.getOrDefault("compressMethod"))


# pyspark.ml finds Params as class attributes (Params._copy_params reads dir(cls))
for _name, (_converter, _doc) in _PARAMS.items():
    setattr(_SODMParams, _name, _param(_name, _converter, _doc))
del _name, _converter, _doc

# The Params that map one to one onto SODMParams fields (camelCase -> snake_case);
# fitIntercept belongs to the linear path (DSVRGParams) and is added by _settings; maxSV and
# compressMethod are the fit's options (_level_options).
_OPTION_PARAM_NAMES = ("maxSV", "compressMethod")
_SODM_PARAM_NAMES = tuple(name for name in _PARAMS
                          if name != "fitIntercept" and name not in _OPTION_PARAM_NAMES) + (
    "tol", "maxIter", "seed")


def _field(param_name: str) -> str:
    return re.sub("([A-Z])", r"_\1", param_name).lower()


def _make_setters_and_getters(cls):
    """setX/getX for every param (the shared column, tol, maxIter and seed params included), as
    pyspark.ml classes spell them out by hand; the shared mixins' own getters are kept."""
    for name in _SODM_PARAM_NAMES + _OPTION_PARAM_NAMES + (
            "fitIntercept", "featuresCol", "labelCol", "predictionCol", "rawPredictionCol",
            "weightCol"):
        title = name[0].upper() + name[1:]

        def setter(self, value, _name=name):
            return self._set(**{_name: value})

        def getter(self, _name=name):
            return self.getOrDefault(_name)

        setter.__name__, getter.__name__ = f"set{title}", f"get{title}"
        setter.__doc__ = f"Sets the value of :py:attr:`{name}`."
        getter.__doc__ = f"Gets the value of :py:attr:`{name}` or its default."
        setattr(cls, f"set{title}", setter)
        if not hasattr(cls, f"get{title}"):
            setattr(cls, f"get{title}", getter)
    return cls
