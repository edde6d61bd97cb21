"""Spark's driver starts from the class archive setup made (pipeline.session.class_archive).

On the whole suite the archive is made beside it (scripts/test.sh): this test waits for that
job, and looks at a driver started after it, since the workers' own drivers may have started
before the archive was there."""

from __future__ import annotations

import subprocess
import sys

from configuration.cache import cache_root
from pipeline.session import class_archive
from tests.support.background_builds import wait_for_build
from tests.support.herald_process import REPO
from tests.support.required_parts import class_archive as setup_archive

# The job's status file (tests/support/background_builds.py), written by scripts/test.sh.
TRAINER_STATUS = cache_root() / "jvm-archives" / "spark.status"

_MAPS_ARCHIVE = """
import sys
from pathlib import Path
from pyspark import SparkContext
from pipeline.session import SparkSettings, spark_session
spark = spark_session(SparkSettings(master="local[1]"))
maps = Path(f"/proc/{SparkContext._gateway.proc.pid}/maps").read_text()
spark.stop()
print("mapped" if sys.argv[1] in maps else "not mapped")
"""


def test_the_driver_maps_the_class_archive() -> None:
    wait_for_build(TRAINER_STATUS, timeout_s=1500)
    archive = setup_archive(class_archive())
    result = subprocess.run([sys.executable, "-c", _MAPS_ARCHIVE, str(archive)], cwd=REPO,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1:] == ["mapped"], result.stdout[-2000:]
