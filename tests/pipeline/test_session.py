"""Spark's driver starts from the class archive setup made (pipeline.session.class_archive)."""

from __future__ import annotations

from pathlib import Path

from pipeline.session import class_archive
from tests.support.required_parts import class_archive as setup_archive


def test_the_driver_maps_the_class_archive(spark: object) -> None:
    from pyspark import SparkContext

    archive = setup_archive(class_archive())
    gateway = SparkContext._gateway
    assert gateway is not None and gateway.proc is not None
    maps = Path(f"/proc/{gateway.proc.pid}/maps").read_text()
    assert str(archive) in maps
