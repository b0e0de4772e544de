"""numba's cache of the package's compiled loops when the package runs from a zip
(``spark-submit --py-files sodm_spark.zip``, docs/cluster.md): kept by what the module's
source is, not by where the zip lies.

numba keeps the loops of a zipped module under its user cache folder (``~/.cache/numba``, or
``$XDG_CACHE_HOME/numba``) in a folder named after the zip's path (its ``ZipCacheLocator``).
A cluster puts each application's ``--py-files`` in a new folder on every executor
(``work/app-…/N/`` on a standalone worker, a container's folder on YARN), so every executor of
every job compiled every loop it ran again: about 6 s of CPU for a kernel fit's loops in one
process (a 3,000-row fit on this machine: 17.7 s with a cold cache, 11.2 s warm), on every
executor, every run of a scheduled job.

The locator :func:`install` adds (``SourceKeyedZipLocator``, a subclass of numba's) names the
folder by the module's path inside the zip and the sha256 of its source (numba's own stamp of
a zipped module), so the executors of one machine share the loops across applications and
executors. numba's index still checks that stamp, a changed module gets a folder of its own,
and two versions side by side keep theirs. :func:`install` puts it first among numba's
locators; the package's ``__init__`` calls it when the package is imported from a zip, before
any loop is decorated (numba picks a function's locator when ``njit(cache=True)`` wraps it).
Elsewhere, numba's locators apply unchanged.
"""
from __future__ import annotations

import os
from pathlib import PurePosixPath

#: The folder under numba's user cache folder that holds the zipped package's loops
FOLDER = "sodm_spark-zip"


def _locator_class() -> type:
    from numba.core import caching

    class SourceKeyedZipLocator(caching.ZipCacheLocator):
        """numba's locator of a function of a zipped module, keyed by the module's path in
        the zip and its source's sha256 instead of the zip's location (the module
        docstring)."""

        def __init__(self, py_func: object, py_file: str) -> None:
            super().__init__(py_func, py_file)
            stamp = self.get_source_stamp()  # the sha256 of the module's source
            module = PurePosixPath(self._internal_path).with_suffix("")
            # numba's folder is <its user cache folder>/<one name from the zip's path>
            user_cache = os.path.dirname(self._cache_path)
            self._cache_path = os.path.join(user_cache, FOLDER,
                                            f"{'.'.join(module.parts)}-{stamp.hex()[:24]}")

    return SourceKeyedZipLocator


def install() -> bool:
    """Put ``SourceKeyedZipLocator`` first among numba's cache locators (once); False
    where this numba has no zip locator to build on, which leaves numba's behaviour as it
    is."""
    try:
        from numba.core import caching
    except ImportError:
        return False
    # the class that lists the locators is CacheImpl in numba 0.68, _CacheImpl before
    impl = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl", None)
    if impl is None or not hasattr(caching, "ZipCacheLocator"):
        return False
    locators = impl._locator_classes
    if not any(getattr(found, "__name__", "") == "SourceKeyedZipLocator" for found in locators):
        locators.insert(0, _locator_class())
    return True
