"""Keeps PySpark's per-task import-cache reset cheap on Python 3.10-3.11.

Before every task a PySpark worker calls ``importlib.invalidate_caches()``. On Python 3.10 and
3.11 that makes every ``zipimporter`` re-read its archive's directory at once (CPython
gh-103200, made lazy in 3.12; Spark stops calling it needlessly in SPARK-54744, after 4.0).
A pip-installed pyspark puts ``pyspark.zip``, the py4j zip and the spark-core jar on the
workers' path, and each package imported from them has its own importer: about 150 ms per task
here, more than a top-level SODM task's solve on small partitions. With hundreds of partitions
per level that is tens of seconds per fit.

:func:`install` makes an importer re-read its archive only when the file changed (size or
modification time), which keeps the documented meaning of invalidation for archives that do
change. Importing :mod:`sodm_spark.spark` installs it, so a worker runs it from the first
task that unpickles one of our functions; on Python 3.12+ it does nothing.
"""
from __future__ import annotations

import os
import sys
import zipimport

_STAMP = "_sodm_archive_stamp"


def _archive_stamp(path: str):
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_mtime_ns, status.st_size


def _make_invalidate(reread):
    def invalidate_caches(self):
        stamp = _archive_stamp(self.archive)
        if stamp is not None and self.__dict__.get(_STAMP) == stamp:
            return  # the archive has not changed since this importer last read it
        reread(self)
        self.__dict__[_STAMP] = stamp

    setattr(invalidate_caches, "sodm_rereads_changed_archives_only", True)  # noqa: B010 (a function's own mark)
    return invalidate_caches


def install() -> bool:
    """Patch ``zipimporter.invalidate_caches`` on Python 3.10-3.11; True when patched now."""
    if not (3, 10) <= sys.version_info[:2] < (3, 12):
        return False
    current = zipimport.zipimporter.invalidate_caches
    if getattr(current, "sodm_rereads_changed_archives_only", False):
        return False
    # the patch replaces the method on the class, which is what mypy's method-assign refuses
    patched = _make_invalidate(current)
    zipimport.zipimporter.invalidate_caches = patched  # type: ignore[method-assign]
    return True
