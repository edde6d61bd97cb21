"""One cache folder for everything fetched once: the Kafka jars and Spark's connector."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline import deps
from proxy.devtools import kafka_dist


def test_kafka_jars_and_the_spark_connector_share_one_cache_root(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HERALD_CACHE_DIR", str(tmp_path))
    assert kafka_dist.cache_root() == deps.cache_root() == tmp_path
    assert deps.ivy_dir() == tmp_path / "spark-ivy"
    monkeypatch.delenv("HERALD_CACHE_DIR")
    checkout = Path(kafka_dist.__file__).resolve().parents[2]
    assert deps.ivy_dir() == checkout / ".cache" / "spark-ivy"
    assert kafka_dist.cache_root() == checkout / ".cache"
