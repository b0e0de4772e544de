"""Memory of this machine, and the share a kernel solve may take (pure Python, no Spark).

The exact solver is fast only while the whole kernel matrix of a problem is cached (docs/design.md
§1.3: a cached sweep is memory-bound and cheap, on-demand blocks recompute m²·d work per sweep).
So the cache should take what memory the machine really has, not a fixed guess.
"""
from __future__ import annotations

import os

#: Kept free for the operating system, the driver's Python objects and the pickled copies of a
#: partition that a Spark task holds while it unpacks its block.
RESERVE_MB = 1024.0


def physical_memory_mb() -> float:
    """Total RAM of this machine in MB."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20


def available_memory_mb() -> float:
    """Memory that can be allocated now without swapping (Linux MemAvailable), in MB.

    Falls back to the physical memory where /proc/meminfo is missing (not Linux).
    """
    try:
        with open("/proc/meminfo") as handle:
            lines = handle.readlines()
    except OSError:  # not Linux
        return physical_memory_mb()
    for line in lines:
        if line.startswith("MemAvailable:"):
            return float(line.split()[1]) / 1024.0
    return physical_memory_mb()


def size_mb(text: object) -> float:
    """Spark's size strings ('512m', '2g', '1024k', plain MiB) in MB."""
    text = str(text).strip().lower().rstrip("b")
    units = {"k": 1 / 1024, "m": 1.0, "g": 1024.0, "t": 1024.0 ** 2}
    return float(text[:-1]) * units[text[-1]] if text and text[-1] in units else float(text)


def share_per_task(memory_mb: float, cores: int, running_tasks: int,
                   per_worker_limit_mb: float | None = None) -> float:
    """Memory each of the tasks that really run at once may use.

    ``running_tasks`` tasks (a level's partitions) on an executor with ``cores`` task slots
    run ``min(running_tasks, cores)`` at a time and share ``memory_mb``; a level with one
    partition gives its single task all of it. ``per_worker_limit_mb`` is a hard cap Spark
    sets on every Python worker (``spark.executor.pyspark.memory`` / executor cores).
    """
    share = memory_mb / max(1, min(int(running_tasks), int(cores)))
    return share if per_worker_limit_mb is None else min(share, per_worker_limit_mb)
