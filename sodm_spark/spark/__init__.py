"""Spark layer of sodm-spark: moves numpy blocks between tasks (design.md §5); numerics live elsewhere.

- io/: files and DataFrames into ``RDD[Block]`` (LIBSVM, CSV, Parquet, Arrow) and the block checks.
"""
from .zipimport_cache import install as _install_zipimport_cache

# Workers import this package when they unpickle our task functions; from then on their
# per-task import-cache reset stops re-reading pyspark's zips (see zipimport_cache).
_install_zipimport_cache()
