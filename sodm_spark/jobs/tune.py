"""Choose ODM's hyperparameters (γ, λ, θ, v) on a sample of the top level's partitions, without
fitting.

    sodm-tune --data train.libsvm --levels 3 [--grid 'gamma=0.5,1,2 lam=1e4,1e5']
    spark-submit jobs/tune.py --data train.libsvm --levels 3

A seeded sample of the top level's partitions (K = p^L; about 20,000 rows, cut into pieces of
2,500) solves its local ODM for every grid point in one task per partition and γ multiple (the
kernel matrix computed once, warm starts along λ); each
point is scored on the same validation rows the training job holds out. Prints one line per
grid point as it is scored, then the table best first and the flags to pass to the training
job; writes tuning.json, tuning.txt and the heat map tuning.png to --tune-report (default
./tuning-report; the heat map needs matplotlib, `pip install "sodm-spark[plots]"`). The flags
are the training job's (same defaults, same [train_sodm] table of the job config);
`sodm-train --tune` tunes and fits in one run.
"""
from __future__ import annotations

import sys

from sodm_spark.core.errors import run_job
from sodm_spark.jobs import train_sodm
from sodm_spark.ops.jobconf import use_packaged_spark_conf


def main(argv=None, prog="tune.py") -> int:
    return train_sodm.main(argv, prog=prog, description=__doc__.split("\n\n")[0],
                           tune_only=True)


def command() -> int:
    """``sodm-tune``, the console command (pyproject.toml ``[project.scripts]``)."""
    use_packaged_spark_conf()
    return run_job(lambda argv=None: main(argv, prog="sodm-tune"))


if __name__ == "__main__":  # spark-submit of this file, python -m sodm_spark.jobs.tune
    use_packaged_spark_conf()
    sys.exit(run_job(main))
