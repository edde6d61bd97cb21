"""The one place a SparkSession is made, so the CLI, the tests and the benchmark agree on
its settings (connector, Ivy cache, quiet logs, UTC, small shuffles)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pipeline.deps import cached_jars, connector_coordinate, ivy_dir

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


JVM_OPTS_ENV = "HERALD_SPARK_JVM_OPTS"
CODEGEN_CACHE_ENTRIES = 2000


def jvm_opts() -> str:
    """Extra flags for Spark's driver and executor JVMs: `HERALD_SPARK_JVM_OPTS`, empty by
    default. The test suite sets it: its jobs move a few hundred rows each, where the JIT's
    optimising compiler costs more CPU than it ever saves."""
    return os.environ.get(JVM_OPTS_ENV, "").strip()


@dataclass
class SparkSettings:
    master: str = "local[*]"
    app_name: str = "herald-pipeline"
    driver_memory: str = "1g"
    executor_memory: str = "1g"
    shuffle_partitions: int = 4  # the tables are small aggregates: a few tasks suffice
    log_level: str = "ERROR"
    conf: dict[str, str] = field(default_factory=dict)  # more Spark settings, by name


def spark_session(settings: SparkSettings | None = None, resolve: bool = False
                  ) -> SparkSession:
    """Start (or reuse) the SparkSession with the Kafka connector on its classpath.

    The connector's jars come from the cache once `connector.ensure_connector` resolved them;
    before that (or with `resolve`), Spark resolves the package from Maven Central itself.
    The driver's JVM is launched by this call, so driver memory is taken from `settings`. The
    executors run this same Python (`PYSPARK_PYTHON`), which matters on a cluster; everything
    binds to loopback unless a cluster master says otherwise.
    """
    from pyspark.sql import SparkSession

    s = settings or SparkSettings()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    ivy = ivy_dir()
    ivy.mkdir(parents=True, exist_ok=True)
    builder = SparkSession.builder.master(s.master).appName(s.app_name)
    jars = None if resolve else cached_jars()
    if jars is None:
        builder = (builder.config("spark.jars.packages", connector_coordinate())
                   .config("spark.jars.ivy", str(ivy)))
    else:
        builder = builder.config("spark.jars", ",".join(jars))
    builder = (
        builder
        .config("spark.driver.memory", s.driver_memory)
        .config("spark.executor.memory", s.executor_memory)
        .config("spark.sql.shuffle.partitions", str(s.shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.adaptive.enabled", "true")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        # The workers' daemon imports the installed PySpark, not Spark's bundled archives
        # (`pipeline.worker_daemon` says why).
        .config("spark.python.daemon.module", "pipeline.worker_daemon")
        # A micro-batch runs a few dozen stages, each with its generated classes: Spark's
        # cache of compiled classes (100 by default) would evict them before the next
        # micro-batch comes round, which then compiles them all again.
        .config("spark.sql.codegen.cache.maxEntries", str(CODEGEN_CACHE_ENTRIES))
    )
    opts = jvm_opts()
    if opts:
        builder = (builder.config("spark.driver.extraJavaOptions", opts)
                   .config("spark.executor.extraJavaOptions", opts))
    for name, value in s.conf.items():
        builder = builder.config(name, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(s.log_level)
    return spark
