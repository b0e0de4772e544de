"""``python -m sodm_spark.cluster``: the command line of the loopback standalone cluster, kept at
this name for docker/docker-compose.yml's health checks and the guides; the code is
:mod:`sodm_spark.ops.cluster`."""
import sys

from .ops.cluster import *  # noqa: F403 - the names, for ``from sodm_spark.cluster import ...``
from .ops.cluster import main

if __name__ == "__main__":
    sys.exit(main())
