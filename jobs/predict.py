"""spark-submit jobs/predict.py ...: batch scoring, sodm_spark/jobs/predict.py (also the
console command ``sodm-predict``; docs/jobs.md)."""
import sys

from sodm_spark.core.errors import run_job
from sodm_spark.jobs.predict import main, parse_args  # noqa: F401 - its names

if __name__ == "__main__":
    sys.exit(run_job(main))
