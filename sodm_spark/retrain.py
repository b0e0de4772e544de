"""Scheduled retraining: a lock, versioned model directories and an atomic ``latest`` pointer.

Layout under a models directory::

    models/
      versions/v0007-snapshot-2026-11-20/   model/ (KernelExpansion), metrics.json, decision.json
      latest -> versions/v0007-...          symlink, moved atomically
      .retrain.lock                         pid, host and start time of the run holding it

Every version is written to a temporary directory and renamed into place; ``latest`` is moved by
creating a temporary symlink and ``os.replace``-ing it over the old one (``ln -sfn`` is not
atomic). A run that dies at any point therefore leaves ``latest`` pointing at a complete model.
No Spark here: ``jobs/retrain.py`` trains, this module keeps the files.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

# Exit codes of jobs/retrain.py (also in its --help and the README).
PROMOTED = 0  # the new model is the production model now
KEPT = 1  # the new model was worse than production by more than the threshold; latest unchanged
USAGE = 2  # bad flags (argparse)
LOCKED = 3  # another retrain holds the lock
FAILED = 4  # no snapshot, unreadable data or a failed fit; latest unchanged

_VERSION = re.compile(r"^v(\d{4,})-")


class LockedError(RuntimeError):
    """Another run holds the lock."""


class RetrainLock:
    """An exclusive lock file; a lock whose process is gone, or older than ``stale_seconds``,
    is stale and taken over."""

    def __init__(self, directory, stale_seconds: float = 6 * 3600.0):
        self.path = Path(directory) / ".retrain.lock"
        self.stale_seconds = stale_seconds
        self.taken_over: dict | None = None

    def _holder(self) -> dict | None:
        try:
            return json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, json.JSONDecodeError):
            return {}  # half-written by a run that died while taking it: stale

    def _is_stale(self, holder: dict) -> bool:
        if not holder or time.time() - holder.get("started", 0) > self.stale_seconds:
            return True
        if holder.get("host") != socket.gethostname():
            return False  # cannot see processes on another host; trust the age limit
        try:
            os.kill(int(holder["pid"]), 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                             "started": time.time()})
        for _ in range(2):
            try:
                handle = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = self._holder()
                if holder is None:
                    continue  # released in between
                if not self._is_stale(holder):
                    raise LockedError(
                        f"another retrain (pid {holder.get('pid')} on {holder.get('host')}, "
                        f"started {time.ctime(holder.get('started', 0))}) holds {self.path}; "
                        "wait for it, or remove the file if that process is gone.")
                self.taken_over = holder
                self.path.unlink(missing_ok=True)
                continue
            with os.fdopen(handle, "w") as stream:
                stream.write(record)
            return
        raise LockedError(f"could not take {self.path}: another run keeps taking it.")

    def release(self) -> None:
        holder = self._holder()
        if holder and holder.get("pid") == os.getpid():
            self.path.unlink(missing_ok=True)

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
