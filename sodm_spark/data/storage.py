"""Where models live (a local folder or any store by URI) and model directories that are
replaced atomically, whatever the store (docs/operations.md, "Where models live").

:func:`store_for` picks the store of a path: a plain path or a ``file:`` URI is the local disk
(:class:`~sodm_spark.data.filesystems.LocalStore`); any other URI (``hdfs://``, ``s3a://``,
``gs://``, ``abfss://``, ...) is reached through the running classic Spark session's Hadoop
``FileSystem`` (:mod:`sodm_spark.spark.hadoop_store`) when there is one, since that is the
cluster's own configuration and credentials and the file system Spark's writers use, else
through ``pyarrow.fs`` (:class:`~sodm_spark.data.filesystems.ArrowStore`), the only way without
a JVM (a Spark Connect client, a plain Python process). Every store offers the few operations
a model directory needs and says whether its renames are atomic.

A model directory holds versions, each complete before it is visible::

    model/
      v-000002/           metadata.json, arrays.npz (or a pyspark.ml model's metadata/, data/)
        _COMPLETE         written once the version's files are all in place
      v-000001/           the previous version, kept for readers that just resolved it

:func:`resolve_version` picks the highest complete version: readers trust nothing else. The
rule :func:`replace_versioned` keeps on every store: the files of version ``n`` are all in
place before its ``_COMPLETE`` is written. Where renames are atomic (local disks, HDFS) the
version is written into a hidden staging folder, renamed to ``v-<n>`` (a new name: nothing is
overwritten) and then marked complete; object stores have no rename, so the files are written
straight under ``v-<n>`` and ``_COMPLETE`` last. A writer killed at any point therefore leaves
the old complete model or the new one readable at the path, on every store. Directories
written before versions existed (the files at the top) are still read, and replaced by the
first versioned write. One writer at a time per path (the retraining job holds its lock).
"""
from __future__ import annotations

import os
import re
import shutil
import stat
import sys
import tempfile
import uuid
from pathlib import Path

from ..core.errors import InputError, SettingsError
from .filesystems import (ArrowStore, CorruptFile, LocalStore, StoreError,  # noqa: F401
                          first_line, is_uri, join, local_path, split, uri_scheme)

COMPLETE_MARKER = "_COMPLETE"
_VERSION = re.compile(r"^v-(\d{6,})$")
KEEP_VERSIONS = 2  # the new one and the one before it (a reader may have just resolved it)


def replace_file(path, write) -> None:
    """A file written by ``write(staging_path)`` (a local path) that replaces ``path`` whole:
    readers (a scheduler polling metrics, a resume) see the old file or the new one, never
    half of one. Locally (a plain path, ``file:``) the staging file is beside ``path`` and
    renamed over it, keeping its permission bits; on a store by URI its bytes replace the file
    through the store (:func:`store_for`; one PUT on an object store)."""
    if is_uri(path) and uri_scheme(path) != "file":
        with tempfile.TemporaryDirectory(prefix="sodm-file-") as local:
            staging = Path(local) / split(path)[1]
            write(staging)
            store_for(path).replace_bytes(str(path), staging.read_bytes())
        return
    path = Path(local_path(path))
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


def _advice(scheme: str) -> str:
    if scheme in ("hdfs", "viewfs"):
        return ("Run it with a classic Spark session (spark-submit), or let pyarrow load "
                "libhdfs (JAVA_HOME, ARROW_LIBHDFS_DIR, CLASSPATH from `hadoop classpath "
                "--glob`), or use a local path.")
    if scheme in ("s3", "s3a", "s3n", "gs", "gcs", "abfs", "abfss"):
        return ("Give pyarrow the store's credentials (its provider's environment variables: "
                "docs/operations.md, \"Object stores\"), or run with a classic Spark session "
                "holding the Hadoop connector, or use a local path.")
    return ("pyarrow reaches file:, hdfs://, viewfs://, s3:// (s3a://), gs://, abfs(s)://; "
            "another scheme needs a classic Spark session with its Hadoop connector "
            "(spark-submit), or use a local path.")


def _classic_hadoop_store(path: str, reasons: list):
    """The running classic Spark session's Hadoop store for ``path``, or None (reason noted).
    No session without pyspark imported: then nothing is imported at all."""
    if "pyspark" not in sys.modules:
        reasons.append("no Spark session")
        return None
    from ..spark.hadoop_store import HadoopStore

    try:
        store = HadoopStore.for_session(path)
    except ValueError as error:
        reasons.append(first_line(error))
        return None
    if store is None:
        reasons.append("no classic Spark session (a Spark Connect client has no JVM)")
    return store


def store_for(path):
    """The store that reaches ``path`` (the module docstring says which, and why): the local
    disk for a plain path or a ``file:`` URI; for another URI the classic Spark session's
    Hadoop file system if one runs and reaches it, else pyarrow's; else a one-line ValueError
    naming the path, the scheme and what to do."""
    scheme = uri_scheme(path)
    if scheme is None or scheme == "file":
        return LocalStore()
    path, reasons = str(path), []
    store = _classic_hadoop_store(path, reasons)
    if store is not None:
        return store
    try:
        return ArrowStore.for_path(path)
    except ValueError as error:
        reasons.append(first_line(error))
    raise SettingsError(f"{path}: no file system reaches the scheme {scheme}: "
                        f"({'; '.join(reasons)}). {_advice(scheme)}")


def read_replaced(store, path: str) -> bytes | None:
    """The bytes of a small file written by the store's ``replace_bytes`` (a pointer), None if
    there is none. On a store whose replace deletes the old file first (HDFS), a reader in
    that moment reads the finished staging file that is about to take its place."""
    path = str(path).rstrip("/")
    for _ in range(3):
        if store.exists(path):
            try:
                return store.read_bytes(path)
            except OSError:  # replaced while we looked: look again
                continue
        if getattr(store, "atomic_replace", True):
            return None
        parent, name = split(path)
        staged = [n for n in store.list(parent) if n.startswith(f".{name}.tmp-")]
        if not staged:
            return None
        try:  # empty: still being written (the first pointer), so there is none yet
            return store.read_bytes(join(parent, max(staged))) or None
        except OSError:  # renamed into place meanwhile: read the file again
            continue
    return None


def read_saved_file(store, path: str, redo: str) -> bytes:
    """The bytes of a file of a saved model on ``store``; an InputError naming it, ``redo``
    saying what to do, when the store cannot read it: a local disk's refusal (permissions, a
    file removed meanwhile), a Hadoop checksum that no longer matches (a file cut or changed
    after it was written). A store that cannot be reached raises its own StoreError."""
    try:
        return store.read_bytes(path)
    except CorruptFile as error:
        raise InputError(f"{path} is truncated or corrupt ({error}). {redo}") from None
    except OSError as error:
        raise InputError(f"{path} is unreadable ({error.strerror or error}). {redo}") from None


def version_number(name: str) -> int | None:
    match = _VERSION.match(name)
    return int(match.group(1)) if match else None


def _complete(store, path: str, number: int) -> bool:
    return store.exists(join(path, f"v-{number:06d}", COMPLETE_MARKER))


def resolve_version(store, path: str, flat_marker: str) -> str | None:
    """The folder holding the current files of the model directory ``path``: its highest
    complete version, else ``path`` itself when it holds ``flat_marker`` (a directory
    written before versions existed), else None."""
    path = str(path).rstrip("/") or "/"
    complete = [number for number in map(version_number, store.list(path))
                if number is not None and _complete(store, path, number)]
    if complete:
        return join(path, f"v-{max(complete):06d}")
    return path if store.exists(join(path, flat_marker)) else None


def current_version(store, path: str, flat_marker: str) -> str:
    """:func:`resolve_version`, refused when ``path`` holds versions but none is complete (an
    InputError naming the newest one's missing ``_COMPLETE``): a save that stopped before its
    end, or a copy that left the markers out. ``path`` itself when it holds no versions (the
    caller says what is missing there)."""
    path = str(path).rstrip("/") or "/"
    folder = resolve_version(store, path, flat_marker)
    if folder is not None:
        return folder
    numbers = [n for n in map(version_number, store.list(path)) if n is not None]
    if numbers:
        others = "" if len(numbers) == 1 else f", as are the other {len(numbers) - 1} versions'"
        raise InputError(f"{join(path, f'v-{max(numbers):06d}', COMPLETE_MARKER)} is missing"
                         f"{others}: no version of {path} is complete (a save that stopped "
                         "before its end, or a copy without the _COMPLETE files). Copy the "
                         "whole directory again, or save the model again.")
    return path


def replace_versioned(path, write, flat_names=(), keep: int = KEEP_VERSIONS,
                      store=None) -> str:
    """Make ``write(store, folder)``'s files the current version of the model directory
    ``path`` (see the module docstring); returns the new version's folder.

    ``flat_names`` are the files a pre-version directory keeps at its top; they are deleted
    once the new version is complete, as are complete versions but the newest ``keep``,
    incomplete versions below the new one and staging folders (both left by writers that
    died). ``store``: the one to use (default: by the path).
    """
    store = store or store_for(path)
    path = str(path).rstrip("/") or "/"
    if store.exists(path) and not store.is_dir(path):
        raise SettingsError(f"{path} is a file; a model is saved as a directory. Choose another "
                            "path or remove the file.")
    store.mkdirs(path)
    numbers = [n for n in map(version_number, store.list(path)) if n is not None]
    number = max(numbers, default=0) + 1
    final = join(path, f"v-{number:06d}")
    if getattr(store, "atomic_rename", True):
        staging = join(path, f".v-{number:06d}.tmp-{uuid.uuid4().hex[:12]}")
        try:
            write(store, staging)
            store.rename(staging, final)
        finally:
            if store.exists(staging):
                store.delete(staging)
    else:  # no rename: readers skip the folder until its marker exists
        _unfinished_kept(path, final, lambda: write(store, final))
    _unfinished_kept(path, final, lambda: store.write_bytes(join(final, COMPLETE_MARKER), b""))
    # from here on the new version is what readers get; tidy up what it replaces
    names = store.list(path)
    complete = sorted(n for n in map(version_number, names)
                      if n is not None and n <= number and _complete(store, path, n))
    kept = set(complete[-max(keep, 1):])
    for name in names:
        older = version_number(name)
        if (older is not None and older < number and older not in kept) or name in flat_names \
                or (name.startswith(".v-") and ".tmp-" in name):
            store.delete(join(path, name))
    return final


def _unfinished_kept(path: str, final: str, step) -> None:
    """``step()`` of writing the version ``final`` of ``path``; a store's failure there says
    that readers still get what they got before (``final`` has no ``_COMPLETE``)."""
    try:
        step()
    except StoreError as error:
        raise StoreError(error.path, error.doing, error.reason,
                         f"{final} stays unfinished and is never read: readers of {path} still "
                         "get the model they got before") from error


def publish_directory(path, write, overwrite: bool = False, store=None) -> str:
    """Make the directory ``write(target)`` writes (Spark's ``frame.write.parquet(target)``, say)
    appear at ``path``, on any store; returns ``path``. A FileExistsError if it exists and
    ``overwrite`` is false.

    Atomic renames: written to a hidden sibling, then renamed into place (an old directory is
    renamed aside first and deleted last). Object stores: the old directory is deleted and
    ``write(path)`` writes in place; the writer's own completion marker (Spark's ``_SUCCESS``,
    written when its job commits) is what tells a reader the output is whole."""
    store = store or store_for(path)
    path = str(path).rstrip("/")
    parent, name = split(path)
    if not name:
        raise SettingsError(f"{path} names no directory to write.")
    if store.exists(path) and not overwrite:
        raise FileExistsError(f"{path} exists; pass overwrite (--overwrite) to replace it.")
    if not getattr(store, "atomic_rename", True):
        if store.exists(path):
            store.delete(path)
        write(path)
        return path
    token = uuid.uuid4().hex[:12]
    staging, retired = join(parent, f".{name}.tmp-{token}"), join(parent, f".{name}.old-{token}")
    try:
        write(staging)
        if store.exists(path):
            store.rename(path, retired)
            try:
                store.rename(staging, path)
            except BaseException:
                store.rename(retired, path)  # the old directory back where it was
                raise
        else:
            store.rename(staging, path)
    finally:
        if store.exists(staging):
            store.delete(staging)
        if store.exists(retired) and store.exists(path):
            store.delete(retired)
    return path
