"""Where Spark's Kafka connector comes from: Maven Central, through Spark's own package
mechanism (`spark.jars.packages`), resolved by Ivy into the project's cache folder.

The connector must match the installed PySpark exactly (same Spark and Scala versions), so
its coordinate is derived from `pyspark.__version__` rather than written down twice.
"""

from __future__ import annotations

from pathlib import Path

from configuration.cache import cache_root

SCALA_BINARY = "2.13"  # PySpark 4 is built for Scala 2.13


def spark_version() -> str:
    import pyspark

    return pyspark.__version__


def connector_coordinate(version: str | None = None) -> str:
    """`group:artifact:version` of the spark-sql-kafka connector for this PySpark."""
    return f"org.apache.spark:spark-sql-kafka-0-10_{SCALA_BINARY}:{version or spark_version()}"


def ivy_dir() -> Path:
    """Ivy's home for `spark.jars.ivy`: resolved jars land in `<ivy>/jars`, reused offline."""
    return cache_root() / "spark-ivy"


def connector_jar(version: str | None = None) -> Path:
    """Where Ivy puts the connector jar once resolved."""
    v = version or spark_version()
    return ivy_dir() / "jars" / f"org.apache.spark_spark-sql-kafka-0-10_{SCALA_BINARY}-{v}.jar"


def manifest(version: str | None = None) -> Path:
    """The list of jars one resolution of the connector gave (it and its dependencies)."""
    return ivy_dir() / f"herald-connector-{version or spark_version()}.txt"


def cached_jars() -> list[str] | None:
    """The connector's resolved jars, if every one of them is in the cache.

    Sessions then name the jars (`spark.jars`) instead of asking Ivy again, which would look
    each of them up in its remote resolvers on every start.
    """
    try:
        jars = manifest().read_text().split()
    except OSError:
        return None
    if not jars or not all(Path(j).is_file() for j in jars):
        return None
    return jars
