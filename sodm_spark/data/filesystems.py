"""The stores a model path can name: the local disk, and what pyarrow.fs reaches, with the few
operations a model directory needs and what each store guarantees (docs/operations.md, "Where
models live").

A path is a plain path or a URI ``scheme:/...``. :class:`LocalStore` takes plain paths and
``file:`` URIs (``file:/tmp/m``, ``file:///tmp/m``) and works through ``os``; :class:`ArrowStore`
takes any URI ``pyarrow.fs.FileSystem.from_uri`` understands: ``file``, ``hdfs`` and ``viewfs``
(libhdfs), ``s3`` (and Hadoop's ``s3a`` / ``s3n`` names for it), ``gs`` / ``gcs``, ``abfs`` /
``abfss``, with pyarrow's own credentials (the provider's environment variables, instance
roles). It needs no JVM and no Spark session, so it is how a Spark Connect client (no py4j
gateway) reaches a store. Which store a path gets is decided by
:func:`sodm_spark.data.storage.store_for`.

Every store declares two things the versioned writes of :mod:`sodm_spark.data.storage` rely on:

``atomic_rename``
    a directory renamed to a new name appears whole or not at all: the local disk, HDFS.
    Object stores (S3, GCS, Azure blobs) have no rename, only copies: False there.
``atomic_replace``
    :meth:`replace_bytes` swaps a small file so that a reader sees the old bytes or the new
    ones: the local disk (``os.replace``) and object stores (one PUT replaces one object
    whole). False on HDFS, where a file cannot be renamed over another: the old one is
    deleted first, and a reader that finds no file reads the staging file about to take its
    place (:func:`sodm_spark.data.storage.read_replaced`).

A store that cannot be reached, or refuses an operation (a bucket that does not exist, missing
permissions, a server gone half way through a version), raises :class:`StoreError`: one line
naming the path, what was being done and the store's own reason, so a job ends with it instead
of a traceback. A missing file stays a FileNotFoundError (readers ask for files that may be
gone).
"""
from __future__ import annotations

import os
import re
import shutil
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..core.errors import SettingsError, one_line

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):/")  # two letters at least: not C:/
# Hadoop's names of file systems whose directory rename is atomic; any other (s3a, gs, wasb,
# abfs, ...) is written without renames, the completion marker last
ATOMIC_RENAME_SCHEMES = frozenset({"file", "hdfs", "viewfs", "webhdfs", "swebhdfs", "ofs",
                                   "o3fs"})
# Hadoop's scheme -> pyarrow's (the others are the same in both)
_ARROW_SCHEMES = {"s3a": "s3", "s3n": "s3", "gcs": "gs"}
_ARROW_ATOMIC = frozenset({"local", "hdfs", "mock"})  # pyarrow's type_name of such stores
_ARROW_DIRECTORIES = frozenset({"local", "hdfs", "mock"})  # parents must exist to write


# how much of a store's own reason a StoreError keeps: the AWS SDK's carry request ids and
# connection details past the part that says what happened
_REASON_CHARACTERS = 400


class StoreError(SettingsError):
    """A store by URI that could not be reached or refused an operation (module docstring): a
    settings problem for the jobs (the endpoint, the bucket or container, the credentials).
    ``consequence``: what the failure left, for the user (what readers still get)."""

    def __init__(self, path: str, doing: str, reason: BaseException | str,
                 consequence: str = ""):
        reason = one_line(first_line(reason) if isinstance(reason, BaseException) else reason)
        if len(reason) > _REASON_CHARACTERS:
            reason = reason[:_REASON_CHARACTERS - 3] + "..."
        super().__init__(f"{path}: the store could not {doing} ({reason})"
                         + (f"; {consequence}" if consequence else "")
                         + ". Check that the store is reachable, that the bucket or container "
                         "exists and that the credentials allow this (docs/operations.md, "
                         "\"Object stores\").")
        self.path, self.doing, self.reason = path, doing, reason


class CorruptFile(OSError):
    """A file whose bytes are not those written: its store's checksum says so (Hadoop's .crc
    files, HDFS blocks), as for a file cut or changed after it was written."""


def uri_scheme(path) -> str | None:
    """The lower-case scheme of a URI (``hdfs`` of ``hdfs://nn/m``), None for a plain path."""
    match = _SCHEME.match(str(path))
    return match.group(1).lower() if match else None


def is_uri(path) -> bool:
    """True for ``scheme:/...`` paths (``file:``, ``hdfs://``, ``s3a://``...), False for plain
    local paths."""
    return uri_scheme(path) is not None


def join(base: str, *names: str) -> str:
    return "/".join([str(base).rstrip("/"), *names])


def split(path) -> tuple[str, str]:
    """(parent, name) of a path or URI; the parent of a bare name is ``.``."""
    parent, slash, name = str(path).rstrip("/").rpartition("/")
    return (parent or "/", name) if slash else (".", name)


def first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def arrow_uri(uri: str) -> str:
    """``uri`` as pyarrow names it (``s3a://b/k`` is ``s3://b/k``)."""
    scheme = uri_scheme(uri)
    return _ARROW_SCHEMES.get(scheme, scheme) + str(uri)[len(scheme):] if scheme else str(uri)


def _arrow_filesystem(uri: str):
    """``pyarrow.fs.FileSystem.from_uri`` of ``uri``: (file system, its path)."""
    from pyarrow import fs

    return fs.FileSystem.from_uri(arrow_uri(uri))


def local_path(path) -> str:
    """The local path of a plain path or a ``file:`` URI (``file:/a``, ``file:///a``,
    ``file://localhost/a``); a ValueError for another URI."""
    text = str(path)
    scheme = uri_scheme(text)
    if scheme is None:
        return text
    if scheme != "file":
        raise SettingsError(f"{text} is not on the local disk (scheme {scheme}:).")
    rest = text[len("file:"):]
    if rest.startswith("//"):
        host, _, rest = rest[2:].partition("/")
        if host not in ("", "localhost"):
            raise SettingsError(f"{text} names the host {host!r}; a file: URI names this "
                                "machine's disk (file:///path).")
        rest = "/" + rest
    return rest


def staging_name(name: str) -> str:
    """A hidden name beside ``name`` for a file about to replace it; later ones sort later."""
    return f".{name}.tmp-{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"


def replace_through_staging(store, path: str, data: bytes, move) -> None:
    """``path`` of ``store`` holds ``data`` afterwards: one write where renames are not atomic
    (an object store's PUT replaces an object whole); else a staging file beside it, put in its
    place by ``move(staging, path)``, the old file deleted first where the store cannot rename
    over one (``atomic_replace`` False: HDFS; :func:`sodm_spark.data.storage.read_replaced`
    covers that moment). The staging file never stays."""
    if not store.atomic_rename:
        store.write_bytes(path, data)
        return
    path = str(path).rstrip("/")
    parent, name = split(path)
    staging = join(parent, staging_name(name))
    try:
        store.write_bytes(staging, data)
        if not store.atomic_replace and store.exists(path):
            store.delete(path)
        move(staging, path)
    finally:
        if store.exists(staging):
            store.delete(staging)


class LocalStore:
    """The local file system: plain paths and ``file:`` URIs (paths are strings). The
    operations every store offers (:class:`ArrowStore`,
    :class:`sodm_spark.spark.hadoop_store.HadoopStore`)."""

    atomic_rename = True
    atomic_replace = True

    def exists(self, path: str) -> bool:
        return os.path.exists(local_path(path))

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(local_path(path))

    def list(self, path: str) -> list[str]:
        path = local_path(path)
        return sorted(os.listdir(path)) if os.path.isdir(path) else []

    def mkdirs(self, path: str) -> None:
        os.makedirs(local_path(path), exist_ok=True)

    def read_bytes(self, path: str) -> bytes:
        return Path(local_path(path)).read_bytes()

    def write_bytes(self, path: str, data: bytes) -> None:
        path = local_path(path)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())

    def replace_bytes(self, path: str, data: bytes) -> None:
        """``path`` holds ``data`` afterwards; a reader sees the old bytes or these."""
        path = local_path(path)
        staging = os.path.join(os.path.dirname(path) or ".", staging_name(os.path.basename(path)))
        try:
            self.write_bytes(staging, data)
            os.replace(staging, path)
        finally:
            if os.path.lexists(staging):
                os.remove(staging)

    def rename(self, source: str, target: str) -> None:
        source, target = local_path(source), local_path(target)
        if os.path.exists(target):
            raise FileExistsError(f"{target} exists; another writer is saving this model.")
        os.rename(source, target)

    def delete(self, path: str) -> None:
        path = local_path(path)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.lexists(path):
            os.remove(path)


class ArrowStore:
    """A ``pyarrow.fs`` file system (paths are URIs under the one it was made for, or that
    file system's own paths). No JVM: Spark Connect clients reach their stores this way.

    ``atomic_rename`` is True for the local disk and HDFS, False for object stores (pass it
    to override: the tests simulate an object store on the local disk)."""

    def __init__(self, filesystem, base_uri: str | None = None, base_path: str | None = None,
                 atomic_rename: bool | None = None):
        self._fs = filesystem
        kind = filesystem.type_name
        self._base_uri = base_uri.rstrip("/") if base_uri else None
        self._base_path = (base_path.rstrip("/") or "/") if base_path is not None else None
        self.atomic_rename = kind in _ARROW_ATOMIC if atomic_rename is None else atomic_rename
        # one PUT replaces an object whole; a file system with directories renames over it
        # (locally) or deletes it first (HDFS)
        self.atomic_replace = not self.atomic_rename or kind in ("local", "mock")
        self._directories = kind in _ARROW_DIRECTORIES

    @classmethod
    def for_path(cls, uri: str) -> "ArrowStore":
        """The store reaching ``uri``; a one-line ValueError when pyarrow cannot."""
        uri = str(uri)
        scheme = uri_scheme(uri)
        if scheme is None:
            raise SettingsError(f"{uri} has no scheme; a plain path is the local disk.")
        if "?" in uri:
            raise SettingsError(f"{uri}: options in the URI are not taken here; give them to "
                                "pyarrow by its environment variables (AWS_ENDPOINT_URL, "
                                "AWS_REGION, ...).")
        try:
            filesystem, fs_path = _arrow_filesystem(uri)
        except Exception as error:  # noqa: BLE001 - unknown scheme, no libhdfs, no credentials
            raise SettingsError(f"pyarrow: {first_line(error)}") from None
        return cls(filesystem, uri, fs_path)

    def _path(self, path) -> str:
        path = str(path)
        if uri_scheme(path) is None:
            return path
        base = self._base_uri
        if base is not None and (path.rstrip("/") == base or path.startswith(base + "/")):
            assert self._base_path is not None  # given with the base URI (for_path)
            rest = path[len(base):].rstrip("/")
            return (self._base_path.rstrip("/") + rest) or "/"
        return _arrow_filesystem(path)[1]

    @contextmanager
    def _reaching(self, path, doing: str) -> Iterator[None]:
        """pyarrow's OSError inside the block as a :class:`StoreError` naming ``path``; a
        missing or existing file keeps its own error (a reader or a rename decides)."""
        try:
            yield
        except (FileNotFoundError, FileExistsError):
            raise
        except OSError as error:
            raise StoreError(str(path), doing, error) from error

    def _type(self, path):
        with self._reaching(path, "look it up"):
            return self._fs.get_file_info(self._path(path)).type

    def exists(self, path: str) -> bool:
        from pyarrow.fs import FileType

        return self._type(path) != FileType.NotFound

    def is_dir(self, path: str) -> bool:
        from pyarrow.fs import FileType

        return self._type(path) == FileType.Directory

    def list(self, path: str) -> list[str]:
        from pyarrow.fs import FileSelector

        if not self.is_dir(path):
            return []
        with self._reaching(path, "list it"):
            infos = self._fs.get_file_info(FileSelector(self._path(path), allow_not_found=True))
        return sorted(info.base_name for info in infos)

    def mkdirs(self, path: str) -> None:
        with self._reaching(path, "create it as a directory"):
            self._fs.create_dir(self._path(path), recursive=True)

    def read_bytes(self, path: str) -> bytes:
        with self._reaching(path, "read it"), \
                self._fs.open_input_stream(self._path(path), compression=None) as stream:
            return stream.read()

    def write_bytes(self, path: str, data: bytes) -> None:
        target = self._path(path)
        with self._reaching(path, "write it"):
            if self._directories and "/" in target.strip("/"):
                self._fs.create_dir(target.rstrip("/").rsplit("/", 1)[0], recursive=True)
            with self._fs.open_output_stream(target, compression=None) as stream:
                stream.write(data)  # closing commits it (object stores upload it then)

    def replace_bytes(self, path: str, data: bytes) -> None:
        """``path`` holds ``data`` afterwards (see ``atomic_replace`` in the module docstring)."""
        def move(staging, target):
            with self._reaching(target, "replace it"):
                self._fs.move(self._path(staging), self._path(target))  # over the old file

        replace_through_staging(self, path, data, move)

    def rename(self, source: str, target: str) -> None:
        if self.exists(target):
            raise FileExistsError(f"{target} exists; another writer is saving this model.")
        with self._reaching(source, f"rename it to {target}"):
            self._fs.move(self._path(source), self._path(target))

    def delete(self, path: str) -> None:
        from pyarrow.fs import FileType

        kind = self._type(path)
        with self._reaching(path, "delete it"):
            if kind == FileType.Directory:
                self._fs.delete_dir(self._path(path))
            elif kind != FileType.NotFound:
                self._fs.delete_file(self._path(path))
