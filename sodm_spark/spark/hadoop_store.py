"""Model files on any Hadoop file system (HDFS, S3A, GCS, ``file://``...) through the running
classic Spark session's JVM: the same operations as :class:`sodm_spark.data.storage.LocalStore`,
so a model is saved and loaded whole on the cluster's store, with the cluster's configuration
and credentials, never split with the driver's disk. A Spark Connect client has no JVM
(:meth:`HadoopStore.for_session` is None there): :func:`sodm_spark.data.storage.store_for` then
reaches the store through pyarrow. Renames are atomic on ``file``, ``hdfs`` and ``viewfs``
(and the other schemes of ``ATOMIC_RENAME_SCHEMES``), not on object stores
(:mod:`sodm_spark.data.filesystems` says what each store guarantees)."""
from __future__ import annotations

from ..core.errors import SettingsError
from ..data.filesystems import ATOMIC_RENAME_SCHEMES, CorruptFile, replace_through_staging
from .engine import HadoopFiles, driver_hadoop
from .io import error_text

_CHUNK_BYTES = 8 << 20  # one py4j call per 8 MB written
# where create(path, overwrite=false) is decided by one server (the NameNode): create-if-absent
_EXCLUSIVE_CREATE = frozenset({"hdfs", "viewfs"})


class HadoopStore:
    """A Hadoop ``FileSystem`` reached through py4j (paths are URIs): ``filesystem``, one of
    ``hadoop``'s."""

    def __init__(self, hadoop: HadoopFiles, filesystem):
        self._hadoop, self._fs = hadoop, filesystem
        try:
            scheme = str(filesystem.getUri().getScheme() or "").lower()
        except Exception:  # noqa: BLE001 - a file system that names no scheme: no renames
            scheme = ""
        self.atomic_rename = scheme in ATOMIC_RENAME_SCHEMES
        self.atomic_replace = not self.atomic_rename  # one PUT; renames delete the old first
        self.exclusive_create = scheme in _EXCLUSIVE_CREATE

    @classmethod
    def for_session(cls, path: str) -> "HadoopStore | None":
        """:meth:`for_path` when a classic Spark session runs (a JVM behind py4j), None when
        none does (no session, or a Spark Connect client:
        :func:`~sodm_spark.spark.engine.driver_hadoop`)."""
        if driver_hadoop() is None:
            return None
        return cls.for_path(path)

    @classmethod
    def for_path(cls, path: str) -> "HadoopStore":
        hadoop = driver_hadoop()
        if hadoop is None:
            raise SettingsError(f"{path} is on a Hadoop file system; reading or writing it needs a "
                                "running Spark session (SparkSession.builder.getOrCreate()), or "
                                "use a local path.")
        try:
            filesystem = hadoop.path(path).getFileSystem(hadoop.configuration)
        except Exception as error:  # py4j: unknown scheme, missing connector or credentials
            raise SettingsError(f"{path}: no Hadoop file system for it "
                                f"({error_text(error)}). Check the scheme and "
                                "that its connector is on the classpath.") from None
        return cls(hadoop, filesystem)

    def _path(self, path: str):
        return self._hadoop.path(path)

    def exists(self, path: str) -> bool:
        return bool(self._fs.exists(self._path(path)))

    def is_dir(self, path: str) -> bool:
        hpath = self._path(path)
        return bool(self._fs.exists(hpath) and self._fs.getFileStatus(hpath).isDirectory())

    def list(self, path: str) -> list[str]:
        if not self.is_dir(path):
            return []
        return sorted(status.getPath().getName()
                      for status in self._fs.listStatus(self._path(path)))

    def mkdirs(self, path: str) -> None:
        self._fs.mkdirs(self._path(path))

    def read_bytes(self, path: str) -> bytes:
        try:
            stream = self._fs.open(self._path(path))
            try:
                return bytes(self._hadoop.jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
            finally:
                stream.close()
        except Exception as error:  # py4j: a checksum mismatch (truncated copy), a lost node
            if isinstance(error, OSError):
                raise
            text = error_text(error)
            if "ChecksumException" in text:  # Hadoop's .crc beside it: written, then changed
                raise CorruptFile(f"its bytes do not match the checksum Hadoop wrote beside "
                                  f"it: {text}") from None
            raise OSError(text) from None

    def write_bytes(self, path: str, data: bytes) -> None:
        stream = self._fs.create(self._path(path), True)
        try:
            view = memoryview(data)
            for start in range(0, len(view), _CHUNK_BYTES):
                stream.write(bytearray(view[start:start + _CHUNK_BYTES]))
        finally:  # close() commits the file (object stores upload it then)
            stream.close()

    def replace_bytes(self, path: str, data: bytes) -> None:
        """``path`` holds ``data`` afterwards: one PUT on object stores (atomic); elsewhere a
        staging file renamed over it, the old one deleted first (Hadoop renames over nothing:
        :func:`~sodm_spark.data.filesystems.replace_through_staging`)."""
        replace_through_staging(self, path, data, self.rename)

    def create_new(self, path: str, data: bytes) -> bool:
        """Create ``path`` holding ``data`` if it does not exist (False if it does); exclusive
        where ``exclusive_create`` (HDFS: the NameNode refuses a second create)."""
        try:
            stream = self._fs.create(self._path(path), False)
        except Exception as error:  # py4j: FileAlreadyExistsException, or a real failure
            if "AlreadyExists" in str(error) or self._fs.exists(self._path(path)):
                return False
            raise OSError(error_text(error)) from None
        try:
            stream.write(bytearray(data))
        finally:
            stream.close()
        return True

    def rename(self, source: str, target: str) -> None:
        target_path = self._path(target)
        if self._fs.exists(target_path):
            raise FileExistsError(f"{target} exists; another writer is saving this model.")
        if not self._fs.rename(self._path(source), target_path):
            raise OSError(f"the file system refused to rename {source} to {target}.")

    def delete(self, path: str) -> None:
        self._fs.delete(self._path(path), True)
