"""spark-submit jobs/tune.py ...: the search alone, sodm_spark/jobs/tune.py (also the console
command ``sodm-tune``; docs/jobs.md)."""
import sys

from sodm_spark.core.errors import run_job
from sodm_spark.jobs.tune import main

if __name__ == "__main__":
    sys.exit(run_job(main))
