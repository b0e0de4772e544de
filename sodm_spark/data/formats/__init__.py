"""Text formats parsed in pure numpy + numba (no Spark): the readers in
:mod:`sodm_spark.spark.io.libsvm` hand whole partitions of text here."""
