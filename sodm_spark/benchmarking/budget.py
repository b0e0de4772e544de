"""Per-method time budgets: a method still running at its budget is stopped and reported as
not finished (the SODM paper's N/A in Table 2), and the benchmark moves on.

* Spark methods run in this process under a Spark job group; a watchdog thread cancels the
  group (``interruptOnCancel=True``) at the budget, and keeps cancelling until the method has
  returned, so a job submitted after the first cancel is stopped as well.
* Driver-side numpy / scikit-learn methods run in a child process (``spawn`` context: no fork
  of a process holding a JVM gateway and thread pools), killed at the budget. The clock starts
  when the child says it has loaded its data, so interpreter start-up is not charged.
"""
from __future__ import annotations

import multiprocessing
import shutil
import tempfile
import threading
import time
import traceback
import uuid
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import Any

import numpy as np

from ..spark.engine import persisted_rdds

OK, NOT_FINISHED, FAILED, SKIPPED = "ok", "not finished", "failed", "skipped"


@dataclass
class Outcome:
    status: str
    # what the method returned (a child's unpickled); each caller knows what its method gives
    value: Any = None
    seconds: float = 0.0  # wall seconds from the start of the clock to the end or the stop
    note: str = ""


class ArrayStore:
    """Arrays written once as ``.npy`` files in a temporary folder, for child processes."""

    def __init__(self, arrays: dict):
        self.path = Path(tempfile.mkdtemp(prefix="sodm-benchmark-"))
        for name, array in arrays.items():
            np.save(self.path / f"{name}.npy", np.ascontiguousarray(array))

    @staticmethod
    def load(path) -> dict:
        return {file.stem: np.load(file) for file in Path(path).glob("*.npy")}

    def close(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def _child_main(connection, target: str, args: tuple) -> None:
    """Child process: run ``module:function(*args, ready=...)`` and send back its result."""
    try:
        module, name = target.split(":")
        function = getattr(import_module(module), name)
        result = function(*args, ready=lambda: connection.send(("ready", None)))
        connection.send(("done", result))
    except BaseException as error:  # noqa: BLE001 - everything goes back to the parent
        lines = traceback.format_exception_only(type(error), error)
        connection.send(("error", "".join(lines).strip()))
    finally:
        connection.close()


def run_in_child(target: str, args: tuple, budget_seconds: float,
                 startup_seconds: float = 600.0) -> Outcome:
    """Run ``target`` ("module:function", called with ``*args, ready=callback``) in a spawned
    child; kill it if it has not answered ``budget_seconds`` after calling ``ready()``."""
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_child_main, args=(sender, target, args), daemon=True,
                              name=f"benchmark {target}")
    process.start()
    sender.close()
    started = time.perf_counter()
    deadline, loading = started + startup_seconds, True
    try:
        while True:
            remaining = deadline - time.perf_counter()
            if remaining <= 0 or not receiver.poll(remaining):
                note = (f"did not load its data within {startup_seconds:g} s" if loading
                        else f"stopped at the {budget_seconds:g} s budget")
                return Outcome(NOT_FINISHED, seconds=time.perf_counter() - started, note=note)
            try:
                kind, payload = receiver.recv()
            except EOFError:
                process.join(5)
                return Outcome(FAILED, seconds=time.perf_counter() - started,
                               note=f"the child process died (exit code {process.exitcode}; "
                                    "out of memory?)")
            if kind == "ready":
                started = time.perf_counter()
                deadline, loading = started + budget_seconds, False
            elif kind == "done":
                return Outcome(OK, value=payload, seconds=time.perf_counter() - started)
            else:
                return Outcome(FAILED, seconds=time.perf_counter() - started, note=payload)
    finally:
        receiver.close()
        if process.is_alive():
            process.kill()
        process.join(10)


def _persistent_rdd_ids(sc) -> set:
    return {int(key) for key in persisted_rdds(sc).keys()}


def _unpersist_new(sc, before: set) -> None:
    """Drop the RDDs a stopped method left cached (they would crowd the next method out)."""
    persistent = persisted_rdds(sc)
    for key in list(persistent.keys()):
        if int(key) not in before:
            try:
                persistent[key].unpersist(False)
            except Exception:  # noqa: BLE001 - best effort: a leftover cache costs only memory
                pass


def run_spark_with_budget(sc, name: str, budget_seconds: float, function) -> Outcome:
    """Run ``function()`` (which submits Spark jobs from this thread) under a job group that a
    watchdog cancels at ``budget_seconds``; an exception after that means "not finished"."""
    group = f"benchmark-{name}-{uuid.uuid4().hex[:8]}"
    sc.setJobGroup(group, f"benchmark: {name}", interruptOnCancel=True)
    before = _persistent_rdd_ids(sc)
    done, expired = threading.Event(), threading.Event()

    def watchdog():
        if done.wait(budget_seconds):
            return
        expired.set()
        while not done.is_set():  # a job started after one cancel is cancelled by the next
            try:
                sc.cancelJobGroup(group)
            except Exception:  # noqa: BLE001 - the context may be stopping; keep trying
                pass
            done.wait(0.5)

    thread = threading.Thread(target=watchdog, name=f"budget {name}", daemon=True)
    started = time.perf_counter()
    thread.start()
    try:
        value = function()
        outcome = Outcome(OK, value=value)
    except Exception as error:  # noqa: BLE001 - a failed method must not end the benchmark
        text = " ".join(str(error).split())[:300]
        outcome = Outcome(FAILED, note=f"{type(error).__name__}: {text}")
    finally:
        done.set()
        thread.join()
        for key in ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel"):
            sc.setLocalProperty(key, None)
    outcome.seconds = time.perf_counter() - started
    if expired.is_set():
        outcome = Outcome(NOT_FINISHED, seconds=outcome.seconds,
                          note=f"stopped at the {budget_seconds:g} s budget")
    if outcome.status != OK:
        _unpersist_new(sc, before)
    return outcome
