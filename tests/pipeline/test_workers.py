"""Spark's Python workers import the installed PySpark, with none of Spark's bundled archives
on their import path (`pipeline.worker_daemon`: each archive importer re-reads its archive at
every task)."""

from __future__ import annotations

from pipeline.worker_daemon import _bundled


def _probe(_: object) -> object:
    import sys

    import pyspark

    yield (pyspark.__file__, list(sys.path),
           [k for k, v in sys.path_importer_cache.items() if type(v).__name__ == "zipimporter"])


def test_workers_import_the_installed_pyspark_without_the_archives(spark):
    file, path, zip_importers = spark.sparkContext.parallelize([0], 1).mapPartitions(
        _probe).collect()[0]

    assert file.endswith("site-packages/pyspark/__init__.py"), file
    assert not [p for p in path if _bundled(p)], path
    assert not [k for k in zip_importers if ".jar" in k or "pyspark.zip" in k or "py4j-" in k]
