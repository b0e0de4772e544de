"""SODM on Spark (the SODM paper, Algorithm 1; docs/design.md §2): ``fit.py`` the level loop
(``fit_sodm``), ``prepare.py`` labels, held-out rows and the top level's partitions,
``tasks.py`` what one task runs on one partition (and the frozen settings it reads), ``level_model.py`` a level's model assembled
without the driver's result limit, ``params.py`` the knobs and per-level records, ``plan.py``
the level count and each level's plan and cost, ``global_step.py`` the Nyström ODM of every
row after the levels, ``checkpoint.py`` level checkpoints.

May import the shared modules of ``spark/`` (``io/``, ``session.py``, ``memory.py``,
``partitioning.py``, ``records.py``) and every layer below ``spark/``; never ``spark/dsvrg/``,
``train.py`` or ``tune.py``. This ``__init__`` imports nothing.
"""
