"""The user-facing estimators: ``ODMClassifier`` (scikit-learn, ``sklearn.py``, free of Spark; its
``probability=True`` calibration on out-of-fold decision values in ``probability.py``) and
``SODMClassifier`` / ``SODMClassificationModel`` (pyspark.ml, ``ml.py``, saved by
``ml_persistence.py``). The comparators' estimators live beside their numerics in
``baselines/``.

May import every layer below, ``spark/`` included; never ``ops/`` or ``benchmarking/``
(docs/design.md §5). This ``__init__`` imports nothing: ``sodm_spark``'s lazy names import the
modules, so Spark's workers never pay for scikit-learn or pyspark.ml.
"""
