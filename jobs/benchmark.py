"""python jobs/benchmark.py ... (or spark-submit): methods side by side,
sodm_spark/jobs/benchmark.py (also the console command ``sodm-benchmark``; docs/jobs.md)."""
import sys

from sodm_spark.core.errors import run_job
from sodm_spark.jobs.benchmark import main, parse_args  # noqa: F401 - its names

if __name__ == "__main__":
    sys.exit(run_job(main))
