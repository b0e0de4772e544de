"""The jobs: command-line front-ends (flags, printed progress, exit codes) over the layers below.

Each job is a module here, run in three ways (docs/jobs.md, docs/cluster.md):

- a console command installed with the package (pyproject.toml ``[project.scripts]``):
  ``sodm-train`` (:mod:`.train_sodm`), ``sodm-tune`` (:mod:`.tune`), ``sodm-predict``
  (:mod:`.predict`), ``sodm-retrain`` (:mod:`.retrain`), ``sodm-benchmark``
  (:mod:`.benchmark`), ``sodm-train-baseline`` (:mod:`.train_baseline`);
- ``python -m sodm_spark.jobs.train_sodm ...``;
- ``spark-submit FILE ...`` with the module's file (spark-submit takes a file, not a module
  name), or the repository's ``jobs/*.py``, which import and call the same ``main``.

The modules import the package by absolute names, never relative ones: spark-submit runs the
file as a script, outside its package. The training job is four modules (its flags, its data,
its printed lines, its ``main``), so that each reads in one sitting.

The top layer (docs/design.md §5): may import every folder, and nothing imports it. This
``__init__`` imports nothing.
"""
