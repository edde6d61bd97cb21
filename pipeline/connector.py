"""Resolving Spark's Kafka connector into the cache, once: setup runs
`python -m pipeline.connector`. Where the jars go and how a session finds them is
`pipeline.deps`; resolving needs a JVM, so a throwaway local session (`pipeline.session`)
does it."""

from __future__ import annotations

from pathlib import Path

from pipeline.deps import (
    cached_jars,
    connector_coordinate,
    connector_jar,
    ivy_dir,
    manifest,
    spark_version,
)
from pipeline.session import SparkSettings, spark_session


def ensure_connector() -> Path:
    """Resolve the connector into the Ivy cache once (setup runs this); later Spark sessions
    find every jar there. Resolution needs a JVM, so a throwaway local session does it."""
    jar = connector_jar()
    if cached_jars() is None:
        spark = spark_session(SparkSettings(master="local[1]", driver_memory="512m"),
                              resolve=True)
        try:
            resolved = spark.sparkContext.getConf().get("spark.jars", "")
        finally:
            spark.stop()
        jars = [j.removeprefix("file://").removeprefix("file:") for j in resolved.split(",")
                if j.strip()]
        if str(jar) not in jars:
            raise RuntimeError(f"{connector_coordinate()} was not resolved into {ivy_dir()}")
        manifest().write_text("\n".join(jars) + "\n")
    return jar


if __name__ == "__main__":
    print(f"setup: Spark {spark_version()} Kafka connector in {ensure_connector().parent}")
