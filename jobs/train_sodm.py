"""spark-submit jobs/train_sodm.py ...: the training job, sodm_spark/jobs/train_sodm.py (also
the console command ``sodm-train``; docs/jobs.md)."""
import sys

from sodm_spark.core.errors import run_job
from sodm_spark.jobs.train_sodm import main, parse_args, train  # noqa: F401 - its names

if __name__ == "__main__":
    sys.exit(run_job(main))
