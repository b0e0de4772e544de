"""Data and files, free of Spark: the named data sets and generators (``datasets.py``), data of
any size (``big_data.py``), text parsers (``formats/``), versioned model folders
(``storage.py``) and the stores paths and URIs name (``filesystems.py``: the local disk,
pyarrow's file systems).

May import ``core/`` only (docs/design.md §5). One import runs upwards, lazily: ``storage.py``
reaches a path with a scheme (``hdfs://``, ``s3a://``) through the running classic Spark
session's Hadoop FileSystem (``sodm_spark.spark.hadoop_store``), imported only when such a path
is given and pyspark is loaded. This ``__init__`` imports nothing.
"""
