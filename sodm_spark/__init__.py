"""sodm-spark: Optimal margin Distribution Machines, exact and scalable (SODM) on Spark.

The design (the problem in one parameterization, SODM, DSVRG, the data flow of a fit) is
``docs/design.md``; docstrings cite it as "docs/design.md §N" and cite the papers by these
short names (full entries in docs/design.md §9):

- *the SODM paper*: Wang, Cao, Zhang, Shi & Jin, "Scalable Optimal Margin Distribution
  Machine" (Algorithms 1-2, Eqns 1-8);
- *the CSVRG paper*: Tan, Zhang & Wang, "Coreset Stochastic Variance-Reduced Gradient with
  Application to Optimal Margin Distribution Machine", AAAI 2019;
- *the CVR paper*: Tsang, Kwok & Lai, "Core Vector Regression for Very Large Regression
  Problems", ICML 2005;
- *the coreset SVM paper*: "Small Coresets to Represent Large Training Data for Support Vector
  Machines" (anonymous authors, a manuscript under double-blind review).

The layers, top to bottom (an import only ever runs downwards; numerics never import Spark):

- ``jobs/`` (outside the package): thin argparse front-ends for ``spark-submit``.
- :mod:`.benchmarking`: every method and its peers side by side (``jobs/benchmark.py``).
- :mod:`.ml` (+ :mod:`.ml_persistence`): ``SODMClassifier``, the pyspark.ml Estimator/Model.
  :mod:`.retrain`, :mod:`.jobconf`, :mod:`.cluster`: scheduled retraining, the jobs' TOML
  defaults, the loopback standalone cluster.
- :mod:`.spark`: the Spark layer, moving numpy blocks between tasks: ``io/`` (files and
  DataFrames to blocks), the SODM levels, DSVRG, one-task comparators, tuning, batch scoring.
- :mod:`.sklearn` (``ODMClassifier``) and :mod:`.baselines` (the comparators, numerics beside
  each estimator), sharing :mod:`.estimator_inputs` (the scikit-learn fit preamble).
- Numerics, pure numpy/numba: :mod:`.solvers` (the product's ODM and SVRG solvers),
  :mod:`.partition` (landmarks, strata, k-means), :mod:`.model` (``KernelExpansion``),
  :mod:`.compression` and :mod:`.scoring` (serving), :mod:`.stopping` (the stop rule),
  :mod:`.tuning` (+ :mod:`.tuning_report`), :mod:`.datasets` (named data sets and generators),
  :mod:`.formats` (text parsers).
- Foundations: :mod:`.kernels` (GEMM kernel blocks), :mod:`.sparse_rows` (dense or CSR rows,
  the sparse products of their kernel blocks), :mod:`.column_stats` (per-column statistics,
  the feature scaling), :mod:`.validation` (input checks and their messages), :mod:`.storage`
  (versioned model folders), :mod:`.resources` (memory).

The public classes are imported lazily, so that Spark's Python workers, which import
``sodm_spark.solvers`` and friends, do not pay for scikit-learn or pyspark.ml imports.
"""
from importlib import import_module

__version__ = "0.1.0"
_PUBLIC = {"ODMClassifier": "sodm_spark.sklearn", "SODMClassifier": "sodm_spark.ml",
           "SODMClassificationModel": "sodm_spark.ml",
           "CSVRGClassifier": "sodm_spark.baselines.csvrg",
           "CVMClassifier": "sodm_spark.baselines.cvm",
           "CVRRegressor": "sodm_spark.baselines.cvm",
           "CoresetSVMClassifier": "sodm_spark.baselines.coreset_svm"}
__all__ = sorted(_PUBLIC)


def __getattr__(name):
    if name in _PUBLIC:
        return getattr(import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'sodm_spark' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_PUBLIC))
