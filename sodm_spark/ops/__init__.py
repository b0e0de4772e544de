"""Operations around the jobs: the jobs' TOML defaults and output checks (``jobconf.py``),
scheduled retraining's model versions and promotion (``retrain.py``) and its lock
(``lock.py``), and the loopback standalone cluster (``cluster.py``, run as
``python -m sodm_spark.cluster``).

Beside ``benchmarking/``, below ``jobs/`` (docs/design.md §5): may import any layer below;
today it imports ``core/`` and ``data/`` only, and starts no Spark session. This ``__init__``
imports nothing. ``conf_defaults/`` beside the folders holds the configuration files that
``jobconf.py`` falls back to in an installed package.
"""
