"""numba's cache of a zipped module's loops is kept by the module's source, not by where the zip
lies (sodm_spark.core.zip_kernel_cache): a copy of the same zip elsewhere (the next executor,
the next application) loads the loops the first compiled; a changed module compiles its own."""
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LOOPS = """from numba import njit


@njit(cache=True)
def shifted(x):
    return x + {shift}
"""

#: Imports the module of the zip argv[1] (after installing the locator when argv[2] is "1"),
#: calls its loop once and prints the loop's value, cache hits, misses and cache folder.
PROBE = """import sys
if sys.argv[2] == "1":
    from sodm_spark.core.zip_kernel_cache import install
    assert install()
sys.path.insert(0, sys.argv[1])
import zipped_loops
value = zipped_loops.shifted(1.0)
stats = zipped_loops.shifted.stats
print(value, sum(stats.cache_hits.values()), sum(stats.cache_misses.values()), stats.cache_path)
"""


def _zip(path: Path, shift: int) -> Path:
    path.parent.mkdir(parents=True)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("zipped_loops.py", LOOPS.format(shift=shift))
    return path


def _probe(zip_path: Path, cache: Path, install: bool = True):
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "PYTHONPATH": str(ROOT)}
    env.pop("NUMBA_CACHE_DIR", None)
    result = subprocess.run([sys.executable, "-c", PROBE, str(zip_path), "1" if install else "0"],
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    value, hits, misses, folder = result.stdout.split()
    return float(value), int(hits), int(misses), folder


def test_a_copy_of_the_zip_elsewhere_loads_the_loops_and_a_changed_module_compiles(tmp_path):
    cache = tmp_path / "cache"
    first = _zip(tmp_path / "app-1" / "0" / "loops.zip", shift=1)
    value, hits, misses, folder = _probe(first, cache)
    assert (value, hits, misses) == (2.0, 0, 1)  # compiled and saved
    assert folder.startswith(str(cache / "numba" / "sodm_spark-zip" / "zipped_loops-"))
    copy = tmp_path / "app-2" / "3" / "loops.zip"
    copy.parent.mkdir(parents=True)
    shutil.copy(first, copy)
    assert _probe(copy, cache) == (2.0, 1, 0, folder)  # the same source: loaded
    # numba's own locator names its folder after the zip's path: the copy compiles again
    elsewhere = tmp_path / "app-3" / "1" / "loops.zip"
    elsewhere.parent.mkdir(parents=True)
    shutil.copy(first, elsewhere)
    assert _probe(elsewhere, cache, install=False)[1:3] == (0, 1)
    changed = _zip(tmp_path / "app-4" / "0" / "loops.zip", shift=5)
    value, hits, misses, other = _probe(changed, cache)
    assert (value, hits, misses) == (6.0, 0, 1) and other != folder


def test_the_package_imported_from_a_zip_installs_the_locator(tmp_path):
    archive = tmp_path / "sodm_spark.zip"
    with zipfile.ZipFile(archive, "w") as out:
        for source in sorted((ROOT / "sodm_spark").rglob("*.py")):
            out.write(source, source.relative_to(ROOT))
    check = ("import sys; sys.path.insert(0, sys.argv[1]); import sodm_spark; "
             "from numba.core import caching; "
             "print(caching.CacheImpl._locator_classes[0].__name__, "
             "sodm_spark.__file__.startswith(sys.argv[1]))")
    for path, expected in ((str(archive), "SourceKeyedZipLocator True"),
                           (str(tmp_path / "nothing-here"), "UserProvidedCacheLocator False")):
        result = subprocess.run([sys.executable, "-c", check, path], capture_output=True,
                                text=True, timeout=300, cwd=tmp_path,
                                env={**os.environ, "PYTHONPATH": ""})
        assert result.returncode == 0, result.stderr[-2000:]
        assert result.stdout.split() == expected.split()
