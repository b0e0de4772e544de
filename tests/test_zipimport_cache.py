"""The per-task import-cache reset re-reads a zip archive only when the archive changed."""
import zipfile
import zipimport

import pytest

from sodm_spark.spark import partitioning
from sodm_spark.spark.zipimport_cache import install


def _write_zip(path, modules):
    with zipfile.ZipFile(path, "w") as archive:
        for name in modules:
            archive.writestr(f"{name}.py", f"NAME = {name!r}\n")


@pytest.fixture
def directory_reads(monkeypatch):
    """Counts how often zipimport reads an archive's directory."""
    reads = []
    original = zipimport._read_directory
    monkeypatch.setattr(zipimport, "_read_directory",
                        lambda archive: reads.append(archive) or original(archive))
    return reads


def test_unchanged_archive_is_not_reread_and_a_changed_one_is(tmp_path, directory_reads):
    install()
    path = str(tmp_path / "pkg.zip")
    _write_zip(path, ["first_module"])
    importer = zipimport.zipimporter(path)
    assert importer.find_spec("second_module") is None

    importer.invalidate_caches()
    directory_reads.clear()
    importer.invalidate_caches()
    importer.invalidate_caches()
    assert directory_reads == []  # CPython 3.10-3.11 would read it twice here

    _write_zip(path, ["first_module", "second_module"])  # another size: a changed archive
    importer.invalidate_caches()
    assert importer.find_spec("second_module") is not None


def test_install_is_idempotent():
    install()
    patched = zipimport.zipimporter.invalidate_caches
    assert install() is False
    assert zipimport.zipimporter.invalidate_caches is patched


def test_spark_workers_stop_rereading_pyspark_zips(spark):
    # defined here so that cloudpickle ships it by value; its default argument makes the
    # worker import sodm_spark.spark, as unpickling any of our task functions does
    def _worker_rereads(_, uses=partitioning._deal):
        """Runs in a Python worker that unpickled a sodm_spark.spark function (``uses``):
        (zip importers on its path, archives read by a second import-cache reset)."""
        import importlib as imp
        import sys as worker_sys
        import zipimport as zi

        zip_importers = sum(isinstance(finder, zi.zipimporter)
                            for finder in worker_sys.path_importer_cache.values())
        reads = []
        original = zi._read_directory
        zi._read_directory = lambda archive: reads.append(archive) or original(archive)
        try:
            imp.invalidate_caches()  # what PySpark's worker does before each task
            reads.clear()
            imp.invalidate_caches()
            return zip_importers, len(reads)
        finally:
            zi._read_directory = original

    counts = spark.sparkContext.parallelize(range(4), 4).map(_worker_rereads).collect()
    assert all(importers > 0 for importers, _ in counts), counts  # pyspark.zip, py4j, jar
    assert all(rereads == 0 for _, rereads in counts), counts
