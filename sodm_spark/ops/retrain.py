"""Scheduled retraining: a lock, versioned model directories and a ``_LATEST`` pointer file,
on the local disk or any store by URI (docs/operations.md, "Scheduled retraining"). No
symlinks and no kernel locks, so the same registry works on HDFS and object stores.

Layout under a models directory::

    models/
      versions/v0007-snapshot-2026-11-20/   model/ (KernelExpansion), metrics.json, decision.json
      _LATEST                               v0007-snapshot-2026-11-20: the production model
      .retrain.lock                         the running retrain's pid, host, start and token

A version is whole before ``_LATEST`` can name it: written to a staging directory and renamed
into place (local disks, HDFS), or on object stores, which have no rename, uploaded under its
name before ``_LATEST`` moves. ``_LATEST`` is written last, through the store's atomic
replace (:mod:`sodm_spark.data.filesystems`: a staging file ``os.replace``-d over it locally,
one PUT on an object store; on HDFS readers take the staging file in the moment between
delete and rename). A run that dies at any point therefore leaves ``_LATEST`` naming a
complete model. Registries written before pointer files existed (a ``latest`` symlink, no
``_LATEST``) are still read through the symlink, and one that has the symlink keeps it in
step after ``_LATEST``, for readers of the old layout; a new registry has no symlink. (The
underscore: on a case-insensitive disk ``LATEST`` would be the old symlink's name.)

The lock is :class:`sodm_spark.ops.lock.RetrainLock` (a file created only if absent). No Spark
here: the retraining job trains, this module keeps the files.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import InputError
from ..data.storage import (COMPLETE_MARKER, LocalStore, join, local_path, read_replaced,
                            store_for, uri_scheme)
from .lock import LockedError, RetrainLock, StorePath  # noqa: F401 (the jobs import them here)

# Exit codes of jobs/retrain.py (also in its --help and docs/operations.md); a failure exits
# with its kind's code (sodm_spark.core.errors.EXIT_CODES: 2 settings, 4 unexpected, 5 input,
# 6 resources).
PROMOTED = 0  # the new model is the production model now
KEPT = 1  # the new model was worse than production by more than the threshold; latest unchanged
USAGE = 2  # bad flags (argparse), the settings code of every job
LOCKED = 3  # another retrain holds the lock

POINTER = "_LATEST"
_VERSION = re.compile(r"^v(\d{4,})-")


def _version_number(name: str) -> int:
    """The n of a version folder's name ``v<n>-<label>``, one :data:`_VERSION` matches."""
    match = _VERSION.match(name)
    assert match is not None  # only such names are versions (version_names)
    return int(match.group(1))


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


def _upload(store, local: Path, target: str) -> None:
    """The files under the local folder ``local`` into ``target`` of ``store``, completion
    markers last."""
    store.mkdirs(target)
    files = sorted((p for p in local.rglob("*") if p.is_file()),
                   key=lambda p: (p.name == COMPLETE_MARKER, p.as_posix()))
    for folder in sorted(p for p in local.rglob("*") if p.is_dir()):
        store.mkdirs(join(target, *folder.relative_to(local).parts))
    for path in files:
        store.write_bytes(join(target, *path.relative_to(local).parts), path.read_bytes())


class ModelStore:
    """Versioned model directories and the ``_LATEST`` pointer (module docstring). A local
    ``directory`` (a plain path or ``file:``) gives ``Path`` objects, one by URI
    :class:`StorePath` strings; ``store``: the store to use (default: by the path)."""

    def __init__(self, directory, store=None):
        if store is None and uri_scheme(directory) in (None, "file"):
            store = LocalStore()
        self._store = store  # by URI: found at the first use (a Spark session may start first)
        self._local = isinstance(store, LocalStore)
        self.directory = Path(local_path(directory)) if self._local else \
            StorePath(str(directory).rstrip("/"))
        self.versions = self.directory / "versions"
        self.pointer = self.directory / POINTER
        self.legacy_link = self.directory / "latest"  # the symlink of registries written before

    @property
    def store(self):
        if self._store is None:
            self._store = store_for(self.directory)
        return self._store

    @property
    def latest(self):
        """The production version's folder (None if there is none): ``store.latest / "model"``."""
        return self.latest_version()

    def version_names(self) -> list[str]:
        return sorted((name for name in self.store.list(str(self.versions))
                       if _VERSION.match(name)),
                      key=_version_number)

    def latest_version(self):
        """The folder ``_LATEST`` names (a registry written before: the ``latest`` symlink's
        target), None if there is none or it is gone; a ValueError if ``_LATEST`` names no
        version."""
        data = read_replaced(self.store, str(self.pointer))
        if data is not None:
            name = data.decode("utf-8", "replace").strip()
            if not _VERSION.match(name) or "/" in name or "\\" in name:
                raise InputError(f"{self.pointer} names {name[:80]!r}, not a folder of "
                                 f"{self.versions}; write the production version's folder name "
                                 "into it.")
            version = self.versions / name
            return version if self.store.is_dir(str(version)) else None
        if self._local and self.legacy_link.is_symlink():
            target = self.directory / os.readlink(self.legacy_link)
            return target if target.is_dir() else None
        return None

    def write_version(self, label: str, write):
        """Create the next version ``v<n>-<label>``: ``write(folder)`` fills a local folder
        (a ``Path``), which then becomes the version whole (renamed; uploaded to a store by
        URI, renamed where the store renames atomically)."""
        self.store.mkdirs(str(self.versions))
        names = self.version_names()
        number = _version_number(names[-1]) + 1 if names else 1
        safe = re.sub(r"[^A-Za-z0-9._-]+", "_", label)[:80] or "model"
        final = self.versions / f"v{number:04d}-{safe}"
        if self._local:
            staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=self.versions))
            try:
                write(staging)
                os.rename(staging, final)
            finally:
                if staging.exists():
                    shutil.rmtree(staging)
            return final
        with tempfile.TemporaryDirectory(prefix="sodm-version-") as local:
            write(Path(local))
            if not getattr(self.store, "atomic_rename", True):
                _upload(self.store, Path(local), str(final))  # _LATEST names it once whole
                return final
            staging = self.versions / f".{final.name}.tmp-{uuid.uuid4().hex[:12]}"
            try:
                _upload(self.store, Path(local), str(staging))
                self.store.rename(str(staging), str(final))
            finally:
                if self.store.exists(str(staging)):
                    self.store.delete(str(staging))
        return final

    def point_latest(self, version) -> None:
        """Make ``version`` the production model: ``_LATEST`` replaced atomically, written last
        (then the ``latest`` symlink of a registry written before, if it has one)."""
        self.store.replace_bytes(str(self.pointer), f"{version.name}\n".encode())
        if self._local and self.legacy_link.is_symlink():
            temporary = self.directory / f".latest.tmp-{os.getpid()}"
            temporary.unlink(missing_ok=True)
            os.symlink(os.path.relpath(version, self.directory), temporary)
            os.replace(temporary, self.legacy_link)

    def prune(self, keep: int) -> list[str]:
        """Delete all but the newest ``keep`` versions, never the one ``_LATEST`` names; and
        what runs that died left (staging folders, staging pointers)."""
        current = self.latest_version()
        names = self.version_names()
        doomed = [n for n in names[:-keep] if current is None or n != current.name] \
            if keep > 0 else []
        for name in doomed:
            if self._local:
                shutil.rmtree(self.versions / name)
            else:
                self.store.delete(str(self.versions / name))
        for name in self.store.list(str(self.versions)):
            if name.startswith(".") and ".tmp-" in name:
                self.store.delete(str(self.versions / name))
        if self.store.exists(str(self.pointer)):
            for name in self.store.list(str(self.directory)):
                if name.startswith(f".{POINTER}.tmp-"):
                    self.store.delete(str(self.directory / name))
        return doomed
