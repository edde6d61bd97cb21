"""The daemon that forks PySpark's Python workers (`spark.python.daemon.module`): PySpark's
own, started without the archives Spark puts first on the workers' import path.

Why. Spark's launcher puts `pyspark.zip`, py4j's source zip and the `spark-core` jar (a zip
of thousands of entries) on every worker's `PYTHONPATH`, and every task a worker runs begins
with `importlib.invalidate_caches()`. On Python 3.11 that makes each zip importer on the path
read its archive's directory again: in the stream's profile at 5,000 records/s that was 17% of
the workers' CPU, more than the hold's own decisions. The archives hold the same release as
the installed package (one wheel ships them all), so when the installed `pyspark` and `py4j`
can be imported without them, the workers leave them out and import those instead. Where
they cannot (a Spark whose Python exists only as those archives), the path is left as Spark
set it."""

from __future__ import annotations

import importlib.util
import os
import sys
import warnings
from typing import TypeVar

Importer = TypeVar("Importer")  # what an importer cache holds per path (sys's: a finder or None)

BUNDLED_ZIPS = ("pyspark.zip", "py4j-")  # the zips Spark's launcher puts on the path


def _bundled(entry: str) -> bool:
    """Whether a path entry is one of the archives Spark's launcher adds (its jars too)."""
    name = os.path.basename(entry)
    return entry.endswith(".jar") or (entry.endswith(".zip") and name.startswith(BUNDLED_ZIPS))


def without_bundled_archives(path: list[str], importer_cache: dict[str, Importer]) -> bool:
    """Take Spark's bundled archives off `path` (in place) and their importers out of
    `importer_cache`, if `pyspark` and `py4j` can still be imported; True if it did."""
    dropped = [p for p in path if _bundled(p)]
    if not dropped:
        return False
    saved = path[:]
    path[:] = [p for p in path if not _bundled(p)]
    if not all(importlib.util.find_spec(m) is not None for m in ("pyspark", "py4j")):
        path[:] = saved
        return False
    for key in [k for k in importer_cache if k.startswith(tuple(dropped))]:
        del importer_cache[key]
    return True


# PySpark's own concatenation of a task's output frames (with an empty all-null one) warns
# about a pandas deprecation on every stream task; nothing of Herald's can act on it.
PYSPARK_CONCAT_WARNING = "The behavior of DataFrame concatenation with empty or all-NA"


def main() -> None:
    warnings.filterwarnings("ignore", message=PYSPARK_CONCAT_WARNING, category=FutureWarning)
    without_bundled_archives(sys.path, sys.path_importer_cache)
    from pyspark.daemon import manager

    manager()  # type: ignore[no-untyped-call]  # pyspark.daemon has no annotations


if __name__ == "__main__":
    main()
