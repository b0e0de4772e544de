"""spark-submit jobs/retrain.py ...: scheduled retraining, sodm_spark/jobs/retrain.py (also the
console command ``sodm-retrain``; docs/jobs.md). Its exit codes are its own (0 promoted, 1 kept,
3 locked, ...), so ``main`` is called without run_job."""
import sys

from sodm_spark.jobs.retrain import main, parse_args, train_sodm  # noqa: F401 - its names

if __name__ == "__main__":
    sys.exit(main())
