"""The heap of a reused Spark Python worker, scanned once per task instead of whole.

PySpark's daemon reuses each forked Python worker for task after task
(``spark.python.worker.reuse``, conf/spark-defaults.conf) and runs a full garbage collection
after every one (``gc.collect()`` in ``pyspark/daemon.py``). A full collection visits every
object the garbage collector tracks, and a worker that has imported this package, SciPy and
numba and loaded its compiled loops tracks hundreds of thousands, so the collection often took
longer than the task before it had computed: over a fit's many small tasks, most of the CPU
time of Spark's Python workers (docs/design.md §8, "Reused Python workers").

:func:`install`, run where the package is imported inside such a worker, adds a callback to
the garbage collector: after each full collection, the objects that survived it are frozen
(``gc.freeze``), so the next one scans only what the tasks since then created and collects
their reference cycles as before. Every :data:`FULL_SCAN_EVERY`-th full collection unfreezes
first and scans the whole heap, so that a long-lived object that later dies inside a
reference cycle is freed within that many tasks. Objects that die without a cycle are freed
at once by their reference counts, frozen or not. Outside a reused worker (a driver, a test,
``spark.python.worker.reuse=false``) nothing is installed; ``SODM_SPARK_FULL_GC=1`` in the
executors' environment leaves PySpark's behaviour as it is.
"""
from __future__ import annotations

import gc
import os
import sys

#: One full collection in this many scans the whole heap (the others scan what is new).
FULL_SCAN_EVERY = 32

#: The environment variable that keeps every collection whole.
OPT_OUT_ENV = "SODM_SPARK_FULL_GC"

_full_collections = [0]


def in_reused_spark_worker() -> bool:
    """Whether this process is a Python worker forked by PySpark's daemon: the daemon runs as
    ``python -m pyspark.daemon`` and its forked workers keep its ``__main__``."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(spec, "name", None) == "pyspark.daemon"


def freeze_survivors(phase: str, info: dict) -> None:
    """A ``gc.callbacks`` entry: after a full collection, freeze what survived it; before
    every :data:`FULL_SCAN_EVERY`-th one, unfreeze so that it scans everything."""
    if info.get("generation") != 2:
        return
    if phase == "start":
        _full_collections[0] += 1
        if _full_collections[0] % FULL_SCAN_EVERY == 0:
            gc.unfreeze()
    elif phase == "stop":
        gc.freeze()


def install() -> bool:
    """Add :func:`freeze_survivors` to the garbage collector's callbacks where this is a
    reused Spark Python worker (module docstring); True if it was added now."""
    if os.environ.get(OPT_OUT_ENV) or not in_reused_spark_worker() \
            or freeze_survivors in gc.callbacks:
        return False
    gc.callbacks.append(freeze_survivors)
    return True
