"""``spark-submit benchmarks/import_probe.py``: the file of the sodm_spark package that the
driver and the Python workers import when a command starts this way, as one JSON line
(``{"driver": ..., "workers": [...]}``): benchmarks/bench_back_ends.py checks with it that a
version's commands run that version's code. The script lies outside the package, so that its
own folder on the path decides nothing."""
import json

from pyspark.sql import SparkSession


def imported_file(_=None) -> str:
    """Where ``import sodm_spark`` finds the package, in the process that calls it."""
    import sodm_spark

    return sodm_spark.__file__


if __name__ == "__main__":
    spark = SparkSession.builder.appName("sodm-spark import probe").getOrCreate()
    try:  # two partitions: each local core's worker imports on its own
        workers = spark.sparkContext.parallelize(range(2), 2).map(imported_file).collect()
    finally:
        spark.stop()
    print(json.dumps({"driver": imported_file(), "workers": sorted(set(workers))}))
