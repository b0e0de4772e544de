"""Spark layer of sodm-spark: moves numpy blocks between tasks (docs/design.md §5); the numerics
live below it (solvers/, partition/, model.py) and never import Spark.

- ``io/``: files and DataFrames into ``RDD[Block]`` (LIBSVM, CSV, Parquet, Arrow) and the
  block checks.
- SODM (Algorithm 1): ``sodm.py`` the level loop (``fit_sodm``), ``sodm_prepare.py`` labels,
  held-out rows, strata (Eqns 7-8) and partitions, ``sodm_tasks.py`` what one task runs on one
  partition, ``sodm_params.py`` the knobs and per-level records; ``checkpoint.py`` level
  checkpoints, ``memory.py`` the memory one task may use.
- DSVRG (Algorithm 2): ``dsvrg.py`` the round robin, ``dsvrg_blocks.py`` the resident blocks.
- ``train.py`` the one way into a fit (the job, ``SODMClassifier``, the benchmark): parameters
  from user settings, the label values checked, DSVRG or the levels, a search first if asked.
- ``tune.py`` the grid search as Spark jobs; ``predict.py`` Arrow batch scoring;
  ``single.py`` a comparator in one task; ``hadoop_store.py`` models on any Hadoop file
  system; ``session.py`` sessions and driver-side blocks; ``zipimport_cache.py`` a worker
  import fix.
"""
from .zipimport_cache import install as _install_zipimport_cache

# Workers import this package when they unpickle our task functions; from then on their
# per-task import-cache reset stops re-reading pyspark's zips (see zipimport_cache).
_install_zipimport_cache()
