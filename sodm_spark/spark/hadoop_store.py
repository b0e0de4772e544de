"""Model files on any Hadoop file system (HDFS, S3A, GCS, ``file://``...) through the running
Spark session's JVM: the same operations as :class:`sodm_spark.data.storage.LocalStore`, so a model
is saved and loaded whole on the cluster's store, never split with the driver's disk."""
from __future__ import annotations

from .io import error_text

_CHUNK_BYTES = 8 << 20  # one py4j call per 8 MB written


class HadoopStore:
    """A Hadoop ``FileSystem`` reached through py4j (paths are URIs)."""

    def __init__(self, jvm, hadoop_conf, filesystem):
        self._jvm, self._conf, self._fs = jvm, hadoop_conf, filesystem

    @classmethod
    def for_path(cls, path: str) -> "HadoopStore":
        from pyspark import SparkContext

        sc = SparkContext._active_spark_context
        if sc is None:
            raise ValueError(f"{path} is on a Hadoop file system; reading or writing it needs a "
                             "running Spark session (SparkSession.builder.getOrCreate()), or "
                             "use a local path.")
        jvm, conf = sc._jvm, sc._jsc.hadoopConfiguration()
        try:
            filesystem = jvm.org.apache.hadoop.fs.Path(path).getFileSystem(conf)
        except Exception as error:  # py4j: unknown scheme, missing connector or credentials
            raise ValueError(f"{path}: no Hadoop file system for it "
                             f"({error_text(error)}). Check the scheme and "
                             "that its connector is on the classpath.") from None
        return cls(jvm, conf, filesystem)

    def _path(self, path: str):
        return self._jvm.org.apache.hadoop.fs.Path(path)

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
                return bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
            finally:
                stream.close()
        except Exception as error:  # py4j: a checksum mismatch (truncated copy), a lost node
            if isinstance(error, OSError):
                raise
            raise OSError(error_text(error)) from None

    def write_bytes(self, path: str, data: bytes) -> None:
        stream = self._fs.create(self._path(path), True)
        try:
            view = memoryview(data)
            for start in range(0, len(view), _CHUNK_BYTES):
                stream.write(bytearray(view[start:start + _CHUNK_BYTES]))
        finally:  # close() commits the file (object stores upload it then)
            stream.close()

    def rename(self, source: str, target: str) -> None:
        target_path = self._path(target)
        if self._fs.exists(target_path):
            raise FileExistsError(f"{target} exists; another writer is saving this model.")
        if not self._fs.rename(self._path(source), target_path):
            raise OSError(f"the file system refused to rename {source} to {target}.")

    def delete(self, path: str) -> None:
        self._fs.delete(self._path(path), True)
