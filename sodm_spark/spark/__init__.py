"""Spark layer of sodm-spark: moves numpy blocks between tasks (docs/design.md §5); the numerics
live below it (solvers/, partition/, models/, core/) and never import Spark.

Top to bottom inside it (an import only runs downwards; ``sodm/`` and ``dsvrg/`` never import
each other):

- ``train.py`` the one way into a fit (the job, ``SODMClassifier``, the benchmark): parameters
  from user settings, the label values checked, DSVRG or the levels, a search first if asked;
  ``tune.py`` the grid search as Spark jobs.
- ``sodm/`` (Algorithm 1): ``fit.py`` the level loop (``fit_sodm``), ``prepare.py`` labels,
  held-out rows and the top level's partitions, ``tasks.py`` what one task runs on one
  partition, ``level_model.py`` a level's model, ``params.py`` the knobs and per-level records,
  ``plan.py`` the level count and each level's plan, ``checkpoint.py`` level checkpoints.
- ``dsvrg/`` (Algorithm 2): ``fit.py`` the round robin, ``blocks.py`` the resident blocks.
- Shared: ``partitioning.py`` the ``(key, Chunk)`` records of partitioned rows and the dealing
  of rows into partitions (SODM and DSVRG alike); ``io/`` files and DataFrames into
  ``RDD[Block]`` (LIBSVM, CSV, Parquet, Arrow) and the block checks; ``session.py`` sessions,
  driver-side blocks and how persisted rows are kept; ``frames.py``/``frame_rdd.py`` the RDD
  operations over DataFrames (Spark Connect), ``in_process.py`` over lists in this process (no
  JVM; ``train.py``'s ``fit_in_process`` fits on it); ``memory.py`` the memory one task may
  use; ``gpu.py`` the GPUs Spark gives tasks (the device setting); ``records.py`` the rows
  of a fit's metrics JSON; ``predict.py`` Arrow batch scoring; ``single.py`` a comparator in
  one task; ``hadoop_store.py`` models on any Hadoop file system; ``zipimport_cache.py`` a
  worker import fix.
"""
from .zipimport_cache import install as _install_zipimport_cache

# Workers import this package when they unpickle our task functions; from then on their
# per-task import-cache reset stops re-reading pyspark's zips (see zipimport_cache).
_install_zipimport_cache()
