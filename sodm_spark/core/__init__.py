"""Foundations, free of Spark: the kernels and their blocks (``kernels.py``, one class each in
``product_kernels.py`` and ``distance_kernels.py``), dense or CSR rows and their sparse
products (``sparse_rows.py``), per-column statistics and the feature scaling
(``column_stats.py``), labels coded for the solvers and back, labels and accuracy from
decision values (``labels.py``), input checks and their messages (``validation.py``;
``estimator_inputs.py`` the fit preamble of every scikit-learn estimator here), the ODM
settings' shared defaults (``defaults.py``), how a job fails (``errors.py``) and the machine's
memory (``resources.py``).

The bottom layer (docs/design.md §5): imports nothing of ``sodm_spark`` outside ``core/`` and
never Spark; numpy, scipy and numba, plus scikit-learn in ``estimator_inputs.py`` alone (which
Spark's workers never load). This ``__init__`` imports nothing.
"""
