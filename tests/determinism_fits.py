"""The fits of tests/test_determinism.py on one session, run by spark-submit (its --master
sets the cores): each input's ``train_sodm`` job in turn, joining the session this script
starts, so that one JVM fits every input.

Usage: spark-submit --master local[N] [--conf ...] tests/determinism_fits.py OUT_DIR
       FORMAT=DATA [FORMAT=DATA ...]
writes each fit's model to OUT_DIR/FORMAT.
"""
import os
import sys


def main(out_dir: str, *inputs: str) -> None:
    from sodm_spark.jobs import train_sodm
    from sodm_spark.spark.session import get_session, stop_session

    spark, _ = get_session("sodm-spark test: determinism fits")  # spark-submit's settings
    try:
        for given in inputs:
            fmt, data = given.split("=", 1)
            assert train_sodm.main(["--data", data, "--format", fmt, "--levels", "2",
                                    "--seed", "3",
                                    "--model-out", os.path.join(out_dir, fmt)]) == 0, fmt
    finally:
        stop_session(spark)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    main(*sys.argv[1:])
