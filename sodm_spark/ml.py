"""The class path ``sodm_spark.ml``, which Spark ML metadata saved before the package was laid
out by concept names: a saved Pipeline's stages are loaded by the class their metadata names.
The classes are :mod:`sodm_spark.estimators.ml`."""
from .estimators.ml import SODMClassificationModel, SODMClassifier  # noqa: F401
