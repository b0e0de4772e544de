"""Where models live: a local folder or any Hadoop file system, and model directories that are
replaced atomically.

A path with a scheme (``hdfs://``, ``s3a://``, ``file://``, ...) goes through the Hadoop
``FileSystem`` of the running Spark session (:mod:`sodm_spark.spark.hadoop_store`), every file
of it; a plain path through the local file system. Both offer the few operations a model
directory needs (:class:`LocalStore` lists them).

A model directory holds versions, each complete before it is visible::

    model/
      v-000002/           metadata.json, arrays.npz (or a pyspark.ml model's metadata/, data/)
        _COMPLETE         written once the version's files are all in place
      v-000001/           the previous version, kept for readers that just resolved it

:func:`replace_versioned` writes the next version into a hidden staging folder, renames it to
``v-<n>`` (a new name: nothing is overwritten, so the rename is atomic on local disks and HDFS)
and only then writes ``_COMPLETE``; :func:`resolve_version` picks the highest complete version.
A writer killed at any point therefore leaves the old complete model or the new one readable
at the path, on every file system. Directories written before versions existed (the files at
the top) are still read, and replaced by the first versioned write. One writer at a time per
path (the retraining job holds its lock).
"""
from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
import uuid
from pathlib import Path

COMPLETE_MARKER = "_COMPLETE"
_VERSION = re.compile(r"^v-(\d{6,})$")
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
KEEP_VERSIONS = 2  # the new one and the one before it (a reader may have just resolved it)


def is_uri(path) -> bool:
    """True for ``scheme://...`` paths (Hadoop file systems), False for local paths."""
    return bool(_URI.match(str(path)))


def join(base: str, *names: str) -> str:
    return "/".join([str(base).rstrip("/"), *names])


class LocalStore:
    """The local file system, with the operations :class:`sodm_spark.spark.hadoop_store.HadoopStore`
    also offers (paths are strings)."""

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def list(self, path: str) -> list[str]:
        return sorted(os.listdir(path)) if os.path.isdir(path) else []

    def mkdirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def read_bytes(self, path: str) -> bytes:
        return Path(path).read_bytes()

    def write_bytes(self, path: str, data: bytes) -> None:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())

    def rename(self, source: str, target: str) -> None:
        if os.path.exists(target):
            raise FileExistsError(f"{target} exists; another writer is saving this model.")
        os.rename(source, target)

    def delete(self, path: str) -> None:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.lexists(path):
            os.remove(path)


def replace_file(path, write) -> None:
    """A local file written by ``write(staging_path)`` beside ``path`` and renamed over it:
    readers (a scheduler polling metrics, a resume) see the old file or the new one, never
    half of one. A replaced file keeps its permission bits."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:12]}")
    try:
        write(staging)
        if path.exists():
            os.chmod(staging, stat.S_IMODE(os.stat(path).st_mode))
        os.replace(staging, path)
    finally:
        staging.unlink(missing_ok=True)


def move_into_place(staging: Path, path: Path) -> None:
    """Rename the finished local directory ``staging`` to ``path``, replacing what is there:
    readers see the old complete directory or the new one, never a partial one."""
    if path.exists():
        retired = Path(tempfile.mkdtemp(prefix=f".{path.name}.old-", dir=path.parent))
        os.rename(path, retired / path.name)
        os.rename(staging, path)
        shutil.rmtree(retired)
    else:
        os.rename(staging, path)


def store_for(path):
    """The store that reaches ``path``: Hadoop's for a URI, the local one otherwise."""
    if is_uri(path):
        from ..spark.hadoop_store import HadoopStore

        return HadoopStore.for_path(str(path))
    return LocalStore()


def version_number(name: str) -> int | None:
    match = _VERSION.match(name)
    return int(match.group(1)) if match else None


def resolve_version(store, path: str, flat_marker: str) -> str | None:
    """The folder holding the current files of the model directory ``path``: its highest
    complete version, else ``path`` itself when it holds ``flat_marker`` (a directory
    written before versions existed), else None."""
    path = str(path).rstrip("/") or "/"
    complete = [number for number in map(version_number, store.list(path)) if number is not None
                and store.exists(join(path, f"v-{number:06d}", COMPLETE_MARKER))]
    if complete:
        return join(path, f"v-{max(complete):06d}")
    return path if store.exists(join(path, flat_marker)) else None


def replace_versioned(path, write, flat_names=(), keep: int = KEEP_VERSIONS,
                      store=None) -> str:
    """Make ``write(store, folder)``'s files the current version of the model directory
    ``path`` (see the module docstring); returns the new version's folder.

    ``flat_names`` are the files a pre-version directory keeps at its top; they are deleted
    once the new version is complete, as are versions older than the newest ``keep`` and
    staging folders of writers that died. ``store``: the one to use (default: by the path).
    """
    store = store or store_for(path)
    path = str(path).rstrip("/") or "/"
    if store.exists(path) and not store.is_dir(path):
        raise ValueError(f"{path} is a file; a model is saved as a directory. Choose another "
                         "path or remove the file.")
    store.mkdirs(path)
    numbers = [n for n in map(version_number, store.list(path)) if n is not None]
    number = max(numbers, default=0) + 1
    staging = join(path, f".v-{number:06d}.tmp-{uuid.uuid4().hex[:12]}")
    final = join(path, f"v-{number:06d}")
    try:
        write(store, staging)
        store.rename(staging, final)
    finally:
        if store.exists(staging):
            store.delete(staging)
    store.write_bytes(join(final, COMPLETE_MARKER), b"")
    # from here on the new version is what readers get; tidy up what it replaces
    for name in store.list(path):
        older = version_number(name)
        if (older is not None and older <= number - keep) or name in flat_names or (
                name.startswith(".v-") and ".tmp-" in name):
            store.delete(join(path, name))
    return final
