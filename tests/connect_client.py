"""Fits and scores through a Spark Connect session, for tests/test_spark_connect.py: started
as its own process, because a Connect server in local mode brings its own SparkContext and a
process holds one.

Usage: python tests/connect_client.py DATA_DIR OUT.npz
"""
import os
import sys

import numpy as np


def main(data_dir: str, out: str) -> None:
    from pyspark.sql import SparkSession

    from sodm_spark.estimators.ml import SODMClassificationModel, SODMClassifier
    from sodm_spark.spark.engine import is_connect
    from tests.test_spark_connect import FITS

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.remote("local[2]")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "4").getOrCreate())
    try:
        assert is_connect(spark), type(spark)
        arrays = {}
        for name, (data, settings) in FITS.items():
            df = spark.read.parquet(os.path.join(data_dir, data))
            model = SODMClassifier(**settings).fit(df)
            scored = model.transform(df).select("rawPrediction", "prediction").toPandas()
            arrays[f"{name}_coef"] = model.expansion.coef
            arrays[f"{name}_sv"] = model.expansion.support_vectors
            arrays[f"{name}_raw"] = np.stack([v.toArray() for v in scored["rawPrediction"]])
            arrays[f"{name}_prediction"] = scored["prediction"].to_numpy()
            if name == "binary":  # saved through the Connect session, read back by both
                folder = os.path.join(data_dir, "model_connect")
                model.write().overwrite().save(folder)
                back = SODMClassificationModel.load(folder).transform(df)
                arrays["binary_reloaded"] = back.select("prediction").toPandas()[
                    "prediction"].to_numpy()
        np.savez(out, **arrays)
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    main(*sys.argv[1:])
