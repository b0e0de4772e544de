"""Saving and loading the pyspark.ml classes of :mod:`sodm_spark.estimators.ml` (docs/design.md §7).

Spark ML metadata (JSON) plus the model's ``data/arrays.npz`` and ``data/metadata.json`` (no
pickles), written as a new version folder of the model directory (:mod:`sodm_spark.data.storage`),
so an overwrite never leaves a half-written model. The store is the one Spark's own writer of
the metadata uses (:func:`model_store`): a plain path is Spark's default file system through
the classic session's Hadoop ``FileSystem``; a URI goes through
:func:`sodm_spark.data.storage.store_for` (``file:`` the local disk; others the session's Hadoop
file system, or pyarrow's when there is no JVM, as on Spark Connect). A class read back names a
``_from_saved(store, folder)`` constructor: the estimator needs nothing, the model its kernel
expansion.
"""
from __future__ import annotations

import json
import uuid

from pyspark.ml.util import (DefaultParamsReader, DefaultParamsWriter, MLReadable, MLReader,
                             MLWritable, MLWriter)

from ..data.storage import (LocalStore, is_uri, join, replace_versioned, resolve_version,
                            store_for)
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


def _metadata_class(store, metadata_dir):
    """The ``class`` a Spark ML metadata folder names (None if unreadable)."""
    for name in store.list(metadata_dir):
        if name.startswith("part-"):
            try:
                return json.loads(store.read_bytes(join(metadata_dir, name)))["class"]
            except (OSError, ValueError, KeyError):
                return None
    return None


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
        store = model_store(path)
        folder = resolve_version(store, path, "metadata") or path
        metadata = DefaultParamsReader.loadMetadata(folder, self.sparkSession)
        instance = self.cls._from_saved(store, folder)
        instance._resetUid(metadata["uid"])
        DefaultParamsReader.getAndSetParams(instance, metadata)
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
