"""Spark layer of sodm-spark: moves numpy blocks between tasks (design.md §5); numerics live elsewhere."""
from .zipimport_cache import install as _install_zipimport_cache

# Workers import this package when they unpickle our task functions; from then on their
# per-task import-cache reset stops re-reading pyspark's zips (see zipimport_cache).
_install_zipimport_cache()
