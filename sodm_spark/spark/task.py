"""What a running Spark task knows of itself, for the functions the Spark layer ships to its
tasks (a classic session's RDD operations, Spark Connect's ``mapInArrow``). A leaf module: the
engine (:mod:`.engine`) and the DataFrame path (:mod:`.frames`, :mod:`.frame_rdd`) import it,
it imports none of them, and pyspark only when called.
"""
from __future__ import annotations


def task_partition() -> int:
    """The partition index of the Spark task this runs in. The in-process back end's tasks
    are handed their index instead (:mod:`.in_process`)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        raise RuntimeError("task_partition() is called inside a Spark task only")
    return context.partitionId()
