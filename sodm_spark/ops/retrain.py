"""Scheduled retraining: a lock, versioned model directories and an atomic ``latest`` pointer.

Layout under a models directory::

    models/
      versions/v0007-snapshot-2026-11-20/   model/ (KernelExpansion), metrics.json, decision.json
      latest -> versions/v0007-...          symlink, moved atomically
      .retrain.lock                         flock-ed by the running retrain (its pid, host, start)

Every version is written to a temporary directory and renamed into place; ``latest`` is moved by
creating a temporary symlink and ``os.replace``-ing it over the old one (``ln -sfn`` is not
atomic). A run that dies at any point therefore leaves ``latest`` pointing at a complete model.
No Spark here: ``jobs/retrain.py`` trains, this module keeps the files.
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

# Exit codes of jobs/retrain.py (also in its --help and docs/operations.md); a failure exits
# with its kind's code (sodm_spark.core.errors.EXIT_CODES: 2 settings, 4 unexpected, 5 input,
# 6 resources).
PROMOTED = 0  # the new model is the production model now
KEPT = 1  # the new model was worse than production by more than the threshold; latest unchanged
USAGE = 2  # bad flags (argparse), the settings code of every job
LOCKED = 3  # another retrain holds the lock

_VERSION = re.compile(r"^v(\d{4,})-")


class LockedError(RuntimeError):
    """Another run holds the lock."""


class RetrainLock:
    """An exclusive lock: a kernel lock (``fcntl.flock``) on ``.retrain.lock``, which also
    records the holder's pid, host and start time.

    The kernel lets one open file hold it and releases it when the holder's process ends, so
    two runs can never hold it at once, and a run that died leaves a file anyone can lock
    (its record is reported as ``taken_over``). Release deletes the file while still holding
    the lock; a run that locked the file just before it was deleted sees that its file is no
    longer the one at the path and tries again. ``stale_seconds``: a live holder older than
    this is named as probably hung in the error (it is never taken over: kill it first).
    """

    def __init__(self, directory, stale_seconds: float = 6 * 3600.0):
        self.path = Path(directory) / ".retrain.lock"
        self.stale_seconds = stale_seconds
        self.taken_over: dict | None = None
        self._handle: int | None = None

    def _holder(self) -> dict | None:
        try:
            return json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, json.JSONDecodeError):
            return {}  # half-written by a run that died while taking it

    def _refuse(self) -> LockedError:
        holder = self._holder() or {}
        started = holder.get("started", 0)
        hung = (f"; it has held it for {(time.time() - started) / 3600:.1f} h, longer than "
                f"{self.stale_seconds / 3600:g} h: if that run hangs, stop it"
                if started and time.time() - started > self.stale_seconds else
                "; wait for it to finish")
        return LockedError(f"another retrain (pid {holder.get('pid')} on {holder.get('host')}, "
                           f"started {time.ctime(started)}) holds {self.path}{hung}.")

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(100):  # only a release racing with us makes us go round
            handle = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o644)
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(handle)
                raise self._refuse() from None
            try:
                same_file = os.fstat(handle).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same_file = False
            if not same_file:  # the holder released (deleted) it in between: lock afresh
                os.close(handle)
                continue
            previous = os.read(handle, 1 << 16)
            if previous:
                try:
                    record = json.loads(previous)
                    self.taken_over = record if isinstance(record, dict) else {}
                except json.JSONDecodeError:
                    self.taken_over = {}
            record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "started": time.time()}).encode()
            os.ftruncate(handle, 0)
            os.pwrite(handle, record, 0)
            os.fsync(handle)
            self._handle = handle
            return
        raise LockedError(f"could not take {self.path}: other runs keep taking and releasing it.")

    def release(self) -> None:
        if self._handle is None:
            return
        try:
            self.path.unlink(missing_ok=True)  # while locked: nobody else holds this file
        finally:
            os.close(self._handle)  # closing the last descriptor drops the kernel lock
            self._handle = None

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()


@dataclass
class Decision:
    promote: bool
    reason: str
    new_accuracy: float
    production_accuracy: float | None


def decide(new_accuracy: float, production_accuracy: float | None,
           max_drop: float = 0.0) -> Decision:
    """Promote unless the new model is worse than production by more than ``max_drop``."""
    if production_accuracy is None:
        return Decision(True, "no production model yet", new_accuracy, None)
    if new_accuracy >= production_accuracy - max_drop:
        return Decision(True, f"holdout accuracy {new_accuracy:.4f} vs production "
                        f"{production_accuracy:.4f} (allowed drop {max_drop:g})",
                        new_accuracy, production_accuracy)
    return Decision(False, f"holdout accuracy {new_accuracy:.4f} is below production "
                    f"{production_accuracy:.4f} by more than {max_drop:g}",
                    new_accuracy, production_accuracy)


def newest_snapshot(directory) -> Path:
    """The newest entry (file or directory, by modification time, then name) of ``directory``."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"snapshot directory {directory} does not exist.")
    entries = [p for p in directory.iterdir() if not p.name.startswith((".", "_"))]
    if not entries:
        raise FileNotFoundError(f"snapshot directory {directory} is empty: nothing to train on.")
    return max(entries, key=lambda p: (p.stat().st_mtime, p.name))


class ModelStore:
    """Versioned model directories with an atomic ``latest`` symlink (module docstring)."""

    def __init__(self, directory):
        self.directory = Path(directory)
        self.versions = self.directory / "versions"
        self.latest = self.directory / "latest"

    def version_names(self) -> list[str]:
        if not self.versions.is_dir():
            return []
        return sorted((p.name for p in self.versions.iterdir() if _VERSION.match(p.name)),
                      key=lambda name: int(_VERSION.match(name).group(1)))

    def latest_version(self) -> Path | None:
        if not self.latest.is_symlink():
            return None
        target = self.directory / os.readlink(self.latest)
        return target if target.is_dir() else None

    def write_version(self, label: str, write) -> Path:
        """Create the next version ``v<n>-<label>`` by ``write(staging_dir)`` then a rename."""
        self.versions.mkdir(parents=True, exist_ok=True)
        names = self.version_names()
        number = int(_VERSION.match(names[-1]).group(1)) + 1 if names else 1
        safe = re.sub(r"[^A-Za-z0-9._-]+", "_", label)[:80] or "model"
        final = self.versions / f"v{number:04d}-{safe}"
        staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=self.versions))
        try:
            write(staging)
            os.rename(staging, final)
        finally:
            if staging.exists():
                shutil.rmtree(staging)
        return final

    def point_latest(self, version: Path) -> None:
        """Move ``latest`` to ``version`` atomically (temporary symlink + os.replace)."""
        temporary = self.directory / f".latest.tmp-{os.getpid()}"
        temporary.unlink(missing_ok=True)
        os.symlink(os.path.relpath(version, self.directory), temporary)
        os.replace(temporary, self.latest)

    def prune(self, keep: int) -> list[str]:
        """Delete all but the newest ``keep`` versions, never the one ``latest`` names."""
        current = self.latest_version()
        names = self.version_names()
        doomed = [n for n in names[:-keep] if current is None or n != current.name] \
            if keep > 0 else []
        for name in doomed:
            shutil.rmtree(self.versions / name)
        for leftover in self.versions.glob(".*.tmp-*") if self.versions.is_dir() else []:
            shutil.rmtree(leftover, ignore_errors=True)  # staging dirs of runs that died
        return doomed
