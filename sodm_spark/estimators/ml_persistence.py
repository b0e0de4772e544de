"""Saving and loading the pyspark.ml classes of :mod:`sodm_spark.estimators.ml` (docs/design.md §7).

Spark ML metadata (JSON) plus the model's ``data/arrays.npz`` and ``data/metadata.json`` (no
pickles), written as a new version folder of the model directory (:mod:`sodm_spark.data.storage`),
so an overwrite never leaves a half-written model. The store is the one Spark's own writer of
the metadata uses (:func:`model_store`): a plain path is Spark's default file system through
the classic session's Hadoop ``FileSystem``; a URI goes through
:func:`sodm_spark.data.storage.store_for` (``file:`` the local disk; others the session's Hadoop
file system, or pyarrow's when there is no JVM, as on Spark Connect). A class read back names a
``_from_saved(store, folder)`` constructor: the estimator needs nothing, the model its kernel
expansion. The reader takes the newest complete version, reads the Spark ML metadata through the
same store (no Spark job) and refuses a damaged folder in one line naming the file, as
:func:`sodm_spark.models.expansion.read_model_files` does for the arrays.
"""
from __future__ import annotations

import json
import uuid

from pyspark.ml.util import (DefaultParamsReader, DefaultParamsWriter, MLReadable, MLReader,
                             MLWritable, MLWriter)

from ..core.errors import InputError
from ..data.storage import (LocalStore, current_version, is_uri, join, read_saved_file,
                            replace_versioned, store_for)
from ..spark.hadoop_store import HadoopStore


def model_store(path: str):
    """The store of a pyspark.ml model path: for a plain path Spark's default file system (the
    classic session's Hadoop one, where Spark writes the metadata; the local disk without a
    JVM), for a URI :func:`~sodm_spark.data.storage.store_for`'s."""
    if is_uri(path):
        return store_for(path)
    store = HadoopStore.for_session(path)
    return store if store is not None else LocalStore()


class ParamsOnlyWriter(MLWriter):
    """Spark ML metadata (and the model's arrays) written as a new version of the directory
    (:mod:`sodm_spark.data.storage`) on Spark's file system: ``overwrite().save(path)`` replaces the
    model atomically instead of deleting the old one first, as MLWriter would."""

    def __init__(self, instance):
        super().__init__()
        self.instance = instance

    def save(self, path):
        if not isinstance(path, str):
            raise TypeError(f"path should be a string, got type {type(path)}")
        store = model_store(path)
        if not self.shouldOverwrite and store.exists(path):
            raise OSError(f"Path {path} already exists. To overwrite it, use "
                          "write().overwrite().save(path): the old model stays readable until "
                          "the new one is complete.")
        folder = replace_versioned(path, self._write_version, flat_names=("data",),
                                   store=store)
        _point_to_class(store, path, folder)

    def _write_version(self, store, folder):
        DefaultParamsWriter.saveMetadata(self.instance, folder, self.sparkSession)

    def saveImpl(self, path):  # MLWriter's contract; save() above does the whole job
        self._write_version(model_store(path), path)


# what every Spark ML metadata record holds (DefaultParamsWriter's), and a reader uses
_SPARK_METADATA_KEYS = ("class", "uid", "paramMap", "sparkVersion", "defaultParamMap")
_REDO = ("Copy the whole model directory again, or save the model again "
         "(model.write().overwrite().save(path)).")


def _metadata_part(store, metadata_dir: str) -> str | None:
    """The path of the part file holding a Spark ML metadata folder's record (None if none)."""
    parts = [name for name in store.list(metadata_dir) if name.startswith("part-")]
    return join(metadata_dir, parts[0]) if parts else None


def _metadata_class(store, metadata_dir):
    """The ``class`` a Spark ML metadata folder names (None if unreadable)."""
    part = _metadata_part(store, metadata_dir)
    try:
        return None if part is None else json.loads(store.read_bytes(part))["class"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def read_spark_metadata(store, folder: str) -> dict:
    """The Spark ML metadata record of the saved model version ``folder`` (its ``metadata/``
    part file, one JSON line, as ``DefaultParamsWriter`` writes it), read through ``store``;
    an InputError naming the file when it is missing, truncated, not JSON or lacks a key."""
    metadata_dir = join(folder, "metadata")
    part = _metadata_part(store, metadata_dir)
    if part is None:
        raise InputError(f"{metadata_dir} holds no Spark ML metadata (part-00000): not a saved "
                         f"pyspark.ml model, or an incomplete copy. {_REDO}")
    data = read_saved_file(store, part, _REDO)
    try:
        text = data.decode("utf-8")
        record = json.loads(next((line for line in text.splitlines() if line.strip()), ""))
    except (ValueError, UnicodeDecodeError) as error:
        raise InputError(f"{part} is truncated or corrupt, not valid JSON ({error}); the "
                         f"model cannot be read. {_REDO}") from None
    missing = [key for key in _SPARK_METADATA_KEYS
               if not isinstance(record, dict) or key not in record]
    if missing:
        raise InputError(f"{part} is not a Spark ML metadata record: it has no "
                         f"{', '.join(missing)}. {_REDO}")
    return record


def _point_to_class(store, path, folder):
    """A copy of the version's ``metadata`` at the top of ``path``: pyspark's generic loaders
    (a Pipeline's or CrossValidator's stages) read the class to load from ``path/metadata``
    before handing the path to our reader, which then reads the newest version. Written once
    per path (renamed into place; on an object store copied in place), replaced only when
    another class is saved there."""
    top, source = join(path, "metadata"), join(folder, "metadata")
    wanted = _metadata_class(store, source)
    if store.exists(top) and _metadata_class(store, top) == wanted:
        return
    if not getattr(store, "atomic_rename", True):  # an object store: copied in place
        if store.exists(top):
            store.delete(top)
        for name in store.list(source):
            if not name.endswith(".crc"):
                store.write_bytes(join(top, name), store.read_bytes(join(source, name)))
        return
    staging = join(path, f".metadata.tmp-{uuid.uuid4().hex[:12]}")
    try:
        for name in store.list(source):
            if not name.endswith(".crc"):
                store.write_bytes(join(staging, name), store.read_bytes(join(source, name)))
        if store.exists(top):
            store.delete(top)
        store.rename(staging, top)
    finally:
        if store.exists(staging):
            store.delete(staging)


class ModelWriter(ParamsOnlyWriter):
    def _write_version(self, store, folder):
        super()._write_version(store, folder)
        self.instance.expansion.write_files(store, join(folder, "data"))


class VersionedReader(MLReader):
    def __init__(self, cls):
        super().__init__()
        self.cls = cls

    def load(self, path):
        """The instance saved at ``path`` (its newest complete version): the metadata and the
        model's files checked first (one-line InputErrors), nothing written."""
        store = model_store(path)
        if not store.is_dir(path):
            raise InputError(f"{path} is not a saved pyspark.ml model: "
                             f"{'it is a file' if store.exists(path) else 'no such directory'}.")
        # a directory written before versions holds data/ at its top; the metadata/ there is
        # also in versioned directories (_point_to_class), so it marks nothing
        folder = current_version(store, path, "data")
        metadata = read_spark_metadata(store, folder)
        instance = self.cls._from_saved(store, folder)
        try:
            instance._resetUid(metadata["uid"])
            DefaultParamsReader.getAndSetParams(instance, metadata)
        except (AttributeError, TypeError, ValueError) as error:  # a Param this class lacks
            raise InputError(f"{_metadata_part(store, join(folder, 'metadata'))}: its "
                             f"parameters do not fit {self.cls.__name__} ({error}). "
                             f"{_REDO}") from None
        return instance


class VersionedReadWrite(MLReadable, MLWritable):
    """``write()``/``read()`` through the classes above; a model sets ``_writer = ModelWriter``
    and overrides ``_from_saved`` to load its arrays."""

    _writer = ParamsOnlyWriter

    def write(self):
        return self._writer(self)

    @classmethod
    def read(cls):
        return VersionedReader(cls)

    @classmethod
    def _from_saved(cls, store, folder):
        return cls()
