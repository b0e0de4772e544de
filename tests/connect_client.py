"""Fits and scores through a Spark Connect session, for tests/test_spark_connect.py: a process
of its own, a client of the Connect server at URL (the run's shared server,
conftest.connect_url), beside the test's classic session, which fits the same models
meanwhile. Its fits' arrays go to OUT_DIR/connect.npz, the binary model, saved through the
Connect session, to OUT_DIR/model_connect.

Usage: python tests/connect_client.py URL DATA_DIR OUT_DIR
"""
import os
import sys

import numpy as np


def main(url: str, data_dir: str, out_dir: str) -> None:
    from pyspark.sql import SparkSession

    from sodm_spark.estimators.ml import SODMClassificationModel, SODMClassifier
    from sodm_spark.spark import engine
    from sodm_spark.spark.session import stop_session
    from tests.test_spark_connect import FITS

    # a session of its own on the server: this setting is the session's, as are its views
    spark = SparkSession.builder.remote(url) \
        .config("spark.sql.shuffle.partitions", "4").getOrCreate()
    try:
        # what a Spark Connect client's session answers (tests/test_engine_asks.py: the others)
        assert engine.server_client(spark) is spark.client, type(spark)
        assert engine.driver_jvm(spark) is None and engine.driver_hadoop(spark) is None
        assert not engine.reads_text_lines(spark)
        assert engine.job_tags(spark) == (spark.addTag, spark.removeTag, spark.interruptTag)
        frames = engine.context_of(spark)
        assert not engine.has_accumulators(frames) and not engine.distributes_files(frames)
        assert engine.executor_count(frames) is None and not engine.persisted_rdds(frames)
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
                folder = os.path.join(out_dir, "model_connect")
                model.write().overwrite().save(folder)
                back = SODMClassificationModel.load(folder).transform(df)
                arrays["binary_reloaded"] = back.select("prediction").toPandas()[
                    "prediction"].to_numpy()
        np.savez(os.path.join(out_dir, "connect.npz"), **arrays)
    finally:
        stop_session(spark)  # releases the session on the server, which goes on serving


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    main(*sys.argv[1:])
