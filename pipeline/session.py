"""The one place a SparkSession is made, so the CLI, the tests and the benchmark agree on
its settings (connector, Ivy cache, quiet logs, UTC, small shuffles)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from configuration import jvm_archive
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


def class_archive() -> Path:
    """Where the class archive of Spark's driver JVM is kept (configuration/jvm_archive.py):
    one per PySpark install, made by `scripts/spark_archive.py` (setup runs it). A driver
    starting from it spent about half the CPU before its first job (10.9 CPU-s, then 5.9)."""
    import pyspark

    return jvm_archive.archive_path("spark-driver", [f"{Path(pyspark.__file__).parent}/jars/*"])


@dataclass
class SparkSettings:
    master: str = "local[*]"
    app_name: str = "herald-pipeline"
    driver_memory: str = "1g"
    executor_memory: str = "1g"
    shuffle_partitions: int = 4  # the tables are small aggregates: a few tasks suffice
    log_level: str = "ERROR"
    conf: dict[str, str] = field(default_factory=dict)  # more Spark settings, by name


def spark_session(settings: SparkSettings | None = None, resolve: bool = False,
                  write_archive: bool = False) -> SparkSession:
    """Start (or reuse) the SparkSession with the Kafka connector on its classpath.

    The connector's jars come from the cache once `connector.ensure_connector` resolved them;
    before that (or with `resolve`), Spark resolves the package from Maven Central itself.
    The driver's JVM is launched by this call, so driver memory is taken from `settings`. The
    executors run this same Python (`PYSPARK_PYTHON`), which matters on a cluster; everything
    binds to loopback unless a cluster master says otherwise. The driver starts from its
    class archive if there is one; with `write_archive` it writes one instead, which
    `stop_writing_archive` puts in place.
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
        # Off: with it on, every DataFrame and Column call walks the Python stack and makes
        # four more round trips to the JVM to tell it the call site, which was most of the
        # driver's Python time in a micro-batch (the analysis builds thousands of columns).
        # Spark's errors then name the failing expression without the Python line.
        .config("spark.python.sql.dataFrameDebugging.enabled", "false")
    )
    opts = jvm_opts()
    archive = class_archive()
    driver_opts = " ".join([opts, *(jvm_archive.dump_flags(archive) if write_archive
                                    else jvm_archive.use_flags(archive))]).strip()
    if driver_opts:
        builder = builder.config("spark.driver.extraJavaOptions", driver_opts)
    if opts:
        builder = builder.config("spark.executor.extraJavaOptions", opts)
    for name, value in s.conf.items():
        builder = builder.config(name, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(s.log_level)
    return spark


def stop_writing_archive(spark: SparkSession) -> str | None:
    """Stop the session started with `write_archive` and its driver JVM, which writes the
    class archive as it exits; put the archive in place if it exited cleanly. None once it is
    in place, else why not."""
    from pyspark import SparkContext

    spark.stop()
    gateway = SparkContext._gateway
    if gateway is None or gateway.proc is None:
        return "the driver's JVM was not started by this process"
    gateway.shutdown()
    gateway.proc.stdin.close()  # the driver exits when its Python's end of the pipe closes
    status = gateway.proc.wait(120)
    SparkContext._gateway = None
    SparkContext._jvm = None
    if jvm_archive.commit(class_archive(), status):
        return None
    return jvm_archive.not_committed(status)
