"""DSVRG on Spark (the SODM paper, Algorithm 2; docs/design.md §3): ``fit.py`` the round robin
(``fit_dsvrg``), ``blocks.py`` the input chunks and the partitions' resident blocks,
``holdout.py`` the slice held out of the epochs that the model's calibration is fitted on.

May import the shared modules of ``spark/`` (``io/``, ``session.py``, ``partitioning.py``,
``records.py``) and every layer below ``spark/``; never ``spark/sodm/``, ``train.py`` or
``tune.py``. This ``__init__`` imports nothing.
"""
