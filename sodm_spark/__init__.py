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

The package is folders, one concept each; the layers, top to bottom (an import only ever runs
downwards; nothing below :mod:`.spark` imports Spark; docs/design.md §5):

- :mod:`.jobs`: the command lines, thin argparse front-ends: console commands (``sodm-train``,
  ...), ``python -m sodm_spark.jobs.NAME`` and files for ``spark-submit`` (the repository's
  ``jobs/*.py`` call them).
- :mod:`.benchmarking`: every method and its peers side by side (``sodm-benchmark``);
  :mod:`.ops`: the jobs' TOML defaults, scheduled retraining, the loopback standalone cluster
  (``python -m sodm_spark.cluster``, the one module beside the folders).
- :mod:`.estimators`: ``SODMClassifier`` (pyspark.ml) and ``ODMClassifier`` (scikit-learn).
- :mod:`.spark`: the Spark layer, moving numpy blocks between tasks: ``sodm/`` (Algorithm 1,
  the levels) and ``dsvrg/`` (Algorithm 2) over the shared ``io/`` (files and DataFrames to
  blocks), ``partitioning.py`` (rows dealt into partitions), sessions and memory; one-task
  comparators, tuning, batch scoring.
- :mod:`.baselines`: the comparators, numerics beside each estimator.
- :mod:`.models` (``KernelExpansion``, compression, scoring) and :mod:`.selection` (the stop
  rule, the hyperparameter search).
- :mod:`.solvers` (the product's ODM and SVRG solvers), :mod:`.partition` (landmarks, strata,
  k-means) and :mod:`.data` (named data sets and generators, text parsers, versioned model
  folders).
- :mod:`.core`: the foundations: GEMM kernel blocks, dense or CSR rows, per-column statistics
  and the feature scaling, input checks, how a job fails, memory.

The public classes are imported lazily, so that Spark's Python workers, which import
``sodm_spark.solvers`` and friends, do not pay for scikit-learn or pyspark.ml imports.
"""
import os
from importlib import import_module

__version__ = "0.1.0"

if not os.path.exists(__file__):  # imported from a zip (--py-files): its loops' numba cache
    from .core.zip_kernel_cache import install as _install_zip_kernel_cache

    _install_zip_kernel_cache()

# in a reused Spark Python worker, a full collection after each task scans only what is new
# (sodm_spark.core.worker_heap); elsewhere this does nothing
from .core.worker_heap import install as _install_worker_heap  # noqa: E402

_install_worker_heap()

_PUBLIC = {"ODMClassifier": "sodm_spark.estimators.sklearn",
           "SODMClassifier": "sodm_spark.estimators.ml",
           "SODMClassificationModel": "sodm_spark.estimators.ml",
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
