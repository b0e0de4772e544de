"""A Spark Connect server in a process of its own (conftest.launch_connect_server): the run's
shared one (conftest.connect_url), or one a test loses mid-job (tests/test_connect_failures.py);
a local[2] classic session with the Connect plugin listening on the port given. It prints
``ready`` once the server listens and stops when its standard input closes; a test that loses
the server kills its process group instead.

Usage: python tests/connect_server.py PORT
"""
import sys

from pyspark.sql import SparkSession


def main(port: str) -> None:
    spark = (SparkSession.builder.master("local[2]").appName("sodm-spark test Connect server")
             .config("spark.plugins", "org.apache.spark.sql.connect.SparkConnectPlugin")
             .config("spark.connect.grpc.binding.address", "127.0.0.1")
             .config("spark.connect.grpc.binding.port", port)
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "4").getOrCreate())
    try:
        print("ready", flush=True)
        sys.stdin.read()  # until the test closes it
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
