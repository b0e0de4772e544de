"""Choose ODM's hyperparameters (γ, λ, θ, v) on a sample of the top level's partitions, without
fitting.

    spark-submit jobs/tune.py --data train.libsvm --levels 3 [--grid 'gamma=0.5,1,2 lam=1e4,1e5']

A seeded sample of the top level's partitions (K = p^L; about 20,000 rows, cut into pieces of
2,500) solves its local ODM for every grid point in one task per partition and γ multiple (the
kernel matrix computed once, warm starts along λ); each
point is scored on the same validation rows the training job holds out. Prints one line per
grid point as it is scored, then the table best first and the flags to pass to
jobs/train_sodm.py; writes tuning.json, tuning.txt and the heat map tuning.png to
--tune-report (default ./tuning-report). The flags are jobs/train_sodm.py's (same defaults,
same [train_sodm] table of the job config); `train_sodm.py --tune` tunes and fits in one run.
"""
from __future__ import annotations

import sys

import train_sodm
from sodm_spark.core.errors import run_job


def main(argv=None) -> int:
    return train_sodm.main(argv, prog="tune.py", description=__doc__.split("\n\n")[0],
                           tune_only=True)


if __name__ == "__main__":
    sys.exit(run_job(main))
