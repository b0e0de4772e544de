"""Operations around the jobs: the jobs' TOML defaults and output checks (``jobconf.py``),
scheduled retraining's model versions, promotion and lock (``retrain.py``) and the loopback
standalone cluster (``cluster.py``, run as ``python -m sodm_spark.cluster``).

The top of the package beside ``benchmarking/`` (docs/design.md §5): may import any layer
below; today it imports ``core/`` and ``data/`` only, and starts no Spark session. This
``__init__`` imports nothing.
"""
