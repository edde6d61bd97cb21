"""The pipeline's settings: a `pipeline:` section of a YAML file of the proxy.yaml family
(Herald itself ignores that section), then command-line flags on top.

Validation goes through `configuration.schema.build_config`, so a bad value is refused with
its YAML path (`pipeline.stream.trigger: expected one of ...`), the same way Herald's own
configuration is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from configuration import (
    ConfigError,
    ErrorCollector,
    InvalidConfig,
    build_config,
    parse_host_port,
    read_yaml,
)
from protocol.contracts.headers import RESERVED_PREFIX

SECTION = "pipeline"
_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")


@dataclass
class StreamConfig:
    checkpoint: str = ""                # folder of the query's checkpoint (offsets, state)
    trigger: Literal["available_now", "processing_time"] = "available_now"
    interval_s: float = 10.0            # the processing-time trigger's period
    watermark_s: float = 60.0           # event-time watermark: newest hop time minus this
    flow_gap_s: float = 60.0            # a flow is final once the watermark passes last hop + gap
    max_flow_age_s: float = 3600.0      # a flow older than this (first hop) is evicted
    max_flow_hops: int = 10_000         # a flow holding more hops is evicted
    late_retention_s: float = 3600.0    # how long a finalised trace is remembered (late hops)
    accuracy: float = 0.01              # relative accuracy of the stream's percentiles
    max_offsets_per_trigger: int = 0    # records per micro-batch at most (0: no cap)
    state_buckets: int = 64             # state keys, hash buckets of trace ids (per checkpoint)
    metrics_bind: str = "127.0.0.1:9465"  # Prometheus /metrics of the stream ("": off)
    metrics_top: int = 50               # label values kept per label; the rest are `other`

    def __post_init__(self) -> None:
        if self.metrics_bind:
            try:
                parse_host_port(self.metrics_bind, "")
            except ConfigError:
                raise InvalidConfig("metrics_bind",
                                    f"expected HOST:PORT or '', got {self.metrics_bind!r}"
                                    ) from None
        for key in ("interval_s", "flow_gap_s", "max_flow_age_s", "max_flow_hops",
                    "state_buckets", "metrics_top"):
            if getattr(self, key) <= 0:
                raise InvalidConfig(key, "must be > 0")
        for key in ("watermark_s", "late_retention_s", "max_offsets_per_trigger"):
            if getattr(self, key) < 0:
                raise InvalidConfig(key, "must be >= 0")
        if not 0 < self.accuracy < 1:
            raise InvalidConfig("accuracy", "must be in (0, 1)")


@dataclass
class PipelineConfig:
    bootstrap: str = "127.0.0.1:9092"   # Kafka bootstrap servers (the brokers or Herald)
    topics: list[str] = field(default_factory=list)
    terminal_topics: list[str] = field(default_factory=list)  # where a flow is meant to end
    max_wait_ms: int = 60_000           # a hop that waited longer breaks its flow
    time_source: Literal["herald", "broker"] = "herald"  # herald.time, else broker timestamp
    header_prefix: str = RESERVED_PREFIX  # the audit interceptor's prefix
    starting_offsets: str = "earliest"  # Spark's Kafka source syntax: earliest, or JSON
    ending_offsets: str = "latest"      # batch only
    output: str = "pipeline-out"
    master: str = "local[*]"
    driver_memory: str = "1g"
    shuffle_partitions: int = 4
    time_bucket_s: int = 60             # percentiles over time: one point per bucket
    top: int = 20                       # rows of the report's lists (broken flows, producers)
    kafka: dict[str, str] = field(default_factory=dict)  # extra kafka.* source options
    fetch_topic: str = ""               # fetch_log observations: produce-to-consume latency
    # How an inferred parent's fetch is matched to the hop's producer, as `trace_context`'s
    # `link.scope` keys a service: the consumer's host is the producer's (`host`), or host and
    # client id both (`client_id`). Observations without a host match by client id.
    inference_scope: Literal["host", "client_id"] = "host"
    stream: StreamConfig = field(default_factory=StreamConfig)

    def __post_init__(self) -> None:
        for key in ("topics", "terminal_topics"):
            for i, name in enumerate(getattr(self, key)):
                if not _TOPIC.fullmatch(name):
                    raise InvalidConfig(f"{key}[{i}]", f"not a topic name: {name!r}")
        for key in ("max_wait_ms", "shuffle_partitions", "time_bucket_s", "top"):
            if getattr(self, key) <= 0:
                raise InvalidConfig(key, "must be > 0")
        if not self.bootstrap:
            raise InvalidConfig("bootstrap", "must not be empty")
        if self.fetch_topic and not _TOPIC.fullmatch(self.fetch_topic):
            raise InvalidConfig("fetch_topic", f"not a topic name: {self.fetch_topic!r}")

    def source_options(self, topics: list[str] | None = None) -> dict[str, str]:
        """Options of Spark's Kafka source common to batch and streaming reads."""
        opts = {
            "kafka.bootstrap.servers": self.bootstrap,
            "subscribe": ",".join(topics or self.topics),
            "includeHeaders": "true",
            "startingOffsets": self.starting_offsets,
            "failOnDataLoss": "false",
        }
        for key, value in self.kafka.items():
            opts[key if key.startswith("kafka.") else f"kafka.{key}"] = str(value)
        return opts


def parse_pipeline_config(data: object, path: str = SECTION) -> PipelineConfig:
    """The settings of a `pipeline:` mapping; every bad key is reported (one `ConfigError`).

    Keys a run needs but flags may give instead (`topics`, `stream.checkpoint`) are checked by
    `load_pipeline_config`, once the flags are applied.
    """
    # build_config is typed for any dataclass (it returns Any): it builds the one it is given.
    config: PipelineConfig = build_config(PipelineConfig, data, path)
    return config


def pipeline_section(doc: object, file: str | Path) -> dict[str, Any]:
    """The `pipeline:` mapping of a parsed YAML document of the proxy.yaml family ({} when it
    has none)."""
    if doc is not None and not isinstance(doc, dict):
        raise ConfigError(f"{file}: expected a mapping at the top level")
    section = (doc or {}).get(SECTION)
    if section is None:
        return {}
    if not isinstance(section, dict):
        raise ConfigError(f"{SECTION}: expected a mapping")
    return dict(section)


def load_pipeline_config(file: str | Path | None, overrides: Mapping[str, object] | None = None,
                         *, streaming: bool = False) -> PipelineConfig:
    """The `pipeline:` section of `file` (if given) with `overrides` (flags) applied on top.

    Overrides are applied before validation, so a bad flag is reported like a bad key, and
    every error is reported at once. `streaming` runs also need `stream.checkpoint`.
    """
    data = pipeline_section(read_yaml(file), file) if file is not None else {}
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if "." in key:  # stream.checkpoint and the like
            outer, inner = key.split(".", 1)
            data[outer] = {**(data.get(outer) or {}), inner: value}
        else:
            data[key] = value
    errors = ErrorCollector()
    config = errors.attempt(parse_pipeline_config, data)
    if not data.get("topics"):
        errors.add(f"{SECTION}.topics: required (or --topics)")
    stream = data.get("stream") or {}
    if streaming and isinstance(stream, dict) and not stream.get("checkpoint"):
        errors.add(f"{SECTION}.stream.checkpoint: required (or --checkpoint)")
    errors.check()
    assert config is not None
    return config
