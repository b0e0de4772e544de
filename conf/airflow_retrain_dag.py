"""Example Airflow DAG: nightly SODM retraining with SparkSubmitOperator.

Copy into Airflow's dags/ folder; needs apache-airflow-providers-apache-spark and a Spark
connection `spark_default` whose host is the cluster master (e.g. spark://spark-master:7077).
Paths are those of the image built by docker/Dockerfile, where the package is installed on
every node (so no --py-files is needed).
"""
from datetime import datetime, timedelta

from airflow import DAG
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

with DAG(
    dag_id="sodm_retrain",
    schedule="30 2 * * *",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,  # retrain.py also refuses to run twice at once (exit code 3)
    default_args={"retries": 1, "retry_delay": timedelta(minutes=15)},
) as dag:
    SparkSubmitOperator(
        task_id="retrain_sodm",
        conn_id="spark_default",
        application="/opt/sodm-spark/jobs/retrain.py",
        conf={"spark.executorEnv.SPARK_CONF_DIR": "/opt/sodm-spark/conf"},
        application_args=["--snapshots", "/data/snapshots", "--holdout", "/data/holdout.libsvm",
                          "--models-dir", "/models", "--max-drop", "0.002", "--keep", "5"],
        # Exit code 1 (production kept) is a normal outcome; SparkSubmitOperator fails the task
        # on any non-zero code, so alert on it rather than retrying (retries help 3, locked, and
        # 4, an unexpected failure such as a lost executor; not 2 settings, 5 input, 6 memory).
    )
