"""spark-submit jobs/train_baseline.py ...: a comparator as one Spark task,
sodm_spark/jobs/train_baseline.py (also the console command ``sodm-train-baseline``;
docs/jobs.md)."""
import sys

from sodm_spark.core.errors import run_job
from sodm_spark.jobs.train_baseline import estimator_params, main, parse_args  # noqa: F401

if __name__ == "__main__":
    sys.exit(run_job(main))
