"""sodm-spark: Optimal margin Distribution Machines, exact and scalable (SODM) on Spark.

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
