"""Spark jobs the driver runs from a thread of its own while it goes on with other work.

Such a job must end before the session does. When the driver's own work fails (a refused
input, say), the job stops its session while the thread is still collecting; Python then prints
the thread's Py4J error and the JVM's stack ("Exception in thread ...", "Job 1 cancelled
because SparkContext was shut down") above the job's one ``error:`` line. A
:func:`background_job` tags its thread's Spark operations, and on leaving its ``with`` block,
also on an error, cancels them by the tag, joins the thread and keeps its error off the console.

The tag is a SparkContext job tag on a classic session and an operation tag on a Spark Connect
one: a classic session's own ``interruptTag`` (pyspark 4.0) finds only tags added by the
calling thread, so from the driver's thread it cancelled nothing and the failed job waited the
warm-up out (4 s here).
"""
from __future__ import annotations

import threading
import uuid
from contextlib import contextmanager, suppress

from .frames import is_connect

#: Seconds between cancellations while the thread is still running: an operation the thread
#: submits after one ``interruptTag`` (there is no other way to know it has started) is
#: cancelled by the next.
CANCEL_EVERY_SECONDS = 0.2
#: Longest wait for a cancelled thread: a cancelled job ends within a task's kill, and a
#: thread still running after this is left to the session's stop (its error stays quiet).
CANCEL_WAIT_SECONDS = 60.0


class BackgroundJob:
    """``action()`` (Spark operations of ``spark``) in a daemon thread under a tag of its own;
    :meth:`wait` joins it, :meth:`stop` cancels and joins it."""

    def __init__(self, spark, action, name: str):
        self._spark, self._action = spark, action
        self.tag = f"sodm-{name}-{uuid.uuid4().hex[:12]}"  # unique: nothing else is cancelled
        self._stopping = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"sodm {name}", daemon=True)

    def _tags(self):
        """(add, remove, cancel) of the tag: a tag added is the adding thread's own (its pinned
        JVM thread, or the Connect client's thread local), so only this thread's jobs carry
        it; cancelling works from any thread."""
        if is_connect(self._spark):
            return self._spark.addTag, self._spark.removeTag, self._spark.interruptTag
        sc = self._spark.sparkContext
        return sc.addJobTag, sc.removeJobTag, sc.cancelJobsWithTag

    def _run(self):
        add, remove, _ = self._tags()
        try:
            add(self.tag)
            if not self._stopping.is_set():
                self._action()
        except Exception as error:  # noqa: BLE001 - never printed: the jobs run beside the
            # driver's work only to save it time, and a real problem of theirs (Python workers
            # that cannot start) fails the driver's own jobs with its message; a cancelled or
            # shut-down one is no problem at all
            self.error = error
        finally:
            with suppress(Exception):  # the session may be gone
                remove(self.tag)

    def start(self) -> BackgroundJob:
        self._thread.start()
        return self

    def wait(self) -> None:
        """Let the job finish (its error, if any, stays in :attr:`error`)."""
        self._thread.join()

    def stop(self) -> None:
        """Cancel the job's operations and join the thread."""
        self._stopping.set()
        cancel, waited = self._tags()[2], 0.0
        while self._thread.is_alive() and waited < CANCEL_WAIT_SECONDS:
            with suppress(Exception):  # the session may be stopping already
                cancel(self.tag)
            self._thread.join(CANCEL_EVERY_SECONDS)
            waited += CANCEL_EVERY_SECONDS


@contextmanager
def background_job(spark, action, name: str):
    """``with background_job(spark, df.collect, "warm-up") as job:`` runs ``action()`` in a
    thread while the block runs (``job.wait()`` where the block needs it done); leaving the
    block, also on an error, cancels what is still running and joins the thread, so no job of
    it outlives the block or prints on the console."""
    job = BackgroundJob(spark, action, name).start()
    try:
        yield job
    finally:
        job.stop()
