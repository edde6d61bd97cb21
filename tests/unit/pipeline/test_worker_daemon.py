"""The Python workers' daemon leaves Spark's bundled archives off the import path when the
installed PySpark can be imported instead, and only then (`pipeline.worker_daemon`)."""

from __future__ import annotations

import pipeline.worker_daemon as daemon

SITE = "/venv/lib/python3.11/site-packages"
ZIP = f"{SITE}/pyspark/python/lib/pyspark.zip"
PY4J = f"{SITE}/pyspark/python/lib/py4j-0.10.9.9-src.zip"
JAR = f"{SITE}/pyspark/jars/spark-core_2.13-4.0.0.jar"
STDLIB_ZIP = "/usr/lib/python311.zip"


def test_the_bundled_archives_and_their_importers_go():
    path = ["/app", ZIP, PY4J, JAR, STDLIB_ZIP, SITE]
    cache = {ZIP: "zi", f"{ZIP}/pyspark": "zi", JAR: "zi", f"{JAR}/org": "zi", SITE: "fi",
             STDLIB_ZIP: "zi"}

    assert daemon.without_bundled_archives(path, cache)

    assert path == ["/app", STDLIB_ZIP, SITE]  # Python's own zip is not Spark's
    assert cache == {SITE: "fi", STDLIB_ZIP: "zi"}


def test_a_path_without_them_is_left_alone():
    path, cache = ["/app", STDLIB_ZIP, SITE], {SITE: "fi"}

    assert not daemon.without_bundled_archives(path, cache)

    assert path == ["/app", STDLIB_ZIP, SITE] and cache == {SITE: "fi"}


def test_they_stay_when_pyspark_could_only_come_from_them(monkeypatch):
    monkeypatch.setattr(daemon.importlib.util, "find_spec",
                        lambda name: None if name == "pyspark" else object())
    path, cache = ["/app", ZIP, PY4J, SITE], {ZIP: "zi"}

    assert not daemon.without_bundled_archives(path, cache)

    assert path == ["/app", ZIP, PY4J, SITE] and cache == {ZIP: "zi"}
