"""Metrics collected at scrape time, tracing configuration and span bookkeeping, without a broker.

The end-to-end behaviour (real HTTP, real OTLP, real Kafka) is in tests/integration; here are
the cases that are hard to provoke there: counters across a chain reload, the per-partition
span and link bounds, the sampler override, and the OTEL_* switch logic.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import trio
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from configuration import ConfigError
from interceptors import build_chains
from protocol.compression import GZIP
from protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from protocol.messages.produce_response import (
    PartitionProduceResponse,
    ProduceResponse,
    TopicProduceResponse,
)
from protocol.records import Record, build_batch, split_batches
from proxy.config.proxy_yaml import parse_config
from proxy.filters.chain import Exchange, SessionContext
from proxy.filters.interception import InterceptorFilter
from proxy.filters.tracing import TracingFilter
from proxy.observability.metrics import Metrics
from proxy.observability.tracing import Tracing, exporters_from_env, tracing_from_env
from proxy.server import Proxy
from proxy.serving.collector import CollectorKeeper
from proxy.upstream.topic_ids import TopicIds

REPO = Path(__file__).resolve().parents[4]
CHAINS = {"produce": [{"type": "insert_header", "header": "app", "value": "x"}]}


def samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(metrics.registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text) for s in f.samples
    }


def value(metrics: Metrics, name: str, **labels: str) -> float:
    want = set(labels.items())
    return sum(v for (n, lbl), v in samples(metrics).items() if n == name and want <= set(lbl))


def produce_request(topic: str, records: bytes, acks: int = -1) -> ProduceRequest:
    return ProduceRequest(acks=acks, topic_data=[TopicProduceData(
        name=topic, partition_data=[PartitionProduceData(index=0, records=records)])])


def batch(n: int, headers: list[tuple[str, bytes | None]] | None = None,
          compression: int = 0) -> bytes:
    records = [Record(b"k", b"v" * 50, headers or [], offset_delta=i) for i in range(n)]
    return build_batch(records, compression=compression)


def ctx() -> SessionContext:
    return SessionContext("127.0.0.1:5555", "bootstrap", "127.0.0.1:9092", client_id="app-1")


def run_filter(f: InterceptorFilter | TracingFilter, exchange: Exchange, msg: Any) -> bool:
    return trio.run(f.on_request, ctx(), exchange, 0, 9, msg)


# ---- metrics -------------------------------------------------------------------------------


def test_interceptor_counters_survive_a_chain_reload_and_topics_are_allowlisted() -> None:
    metrics = Metrics(frozenset({"orders"}))
    icpt = InterceptorFilter(build_chains(CHAINS), TopicIds(), metrics.codec, metrics.topics)
    metrics.watch_interceptors(lambda: icpt.chains)
    run_filter(icpt, Exchange(), produce_request("orders", batch(3)))
    run_filter(icpt, Exchange(), produce_request("payments", batch(2, compression=GZIP)))
    seen = {"path": "produce", "interceptor": "insert_header", "outcome": "seen"}
    rec = "herald_interceptor_records_total"
    assert value(metrics, rec, **seen, topic="orders") == 3
    assert value(metrics, rec, **seen, topic="other") == 2
    assert value(metrics, rec, **seen, topic="payments") == 0  # not on the list
    assert value(metrics, "herald_batches_reencoded_total", compression="gzip") == 1
    assert value(metrics, "herald_batches_reencoded_total", compression="none") == 1
    assert value(metrics, "herald_compression_seconds_total", compression="gzip") > 0

    metrics.retire_chains(icpt.chains)  # what Proxy.reload does before swapping
    icpt.chains = build_chains(CHAINS)
    assert value(metrics, rec, **seen) == 5
    run_filter(icpt, Exchange(), produce_request("orders", batch(4)))
    assert value(metrics, rec, **seen, topic="orders") == 7
    assert value(metrics, rec, **seen, topic="other") == 2
    assert value(metrics, "herald_interceptor_headers_added_total") == 9


def test_rejections_are_counted_by_reason() -> None:
    metrics = Metrics()
    chains = build_chains({"produce": [{"type": "require_headers", "headers": ["tenant"]}]})
    icpt = InterceptorFilter(chains, TopicIds(), metrics.codec, metrics.topics)
    metrics.watch_interceptors(lambda: icpt.chains)
    run_filter(icpt, Exchange(), produce_request("orders", batch(3)))
    assert value(metrics, "herald_interceptor_records_total", outcome="rejected",
                 interceptor="require_headers") == 3


# ---- tracing configuration -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, []),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, ["otlp"]),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, ["otlp"]),
        ({"OTEL_TRACES_EXPORTER": "console"}, ["console"]),
        ({"OTEL_TRACES_EXPORTER": "otlp, console"}, ["otlp", "console"]),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c"}, []),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, []),
        ({"OTEL_SDK_DISABLED": "false", "OTEL_TRACES_EXPORTER": "otlp"}, ["otlp"]),
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, []),
    ],
)
def test_tracing_is_switched_by_the_standard_variables(
    env: dict[str, str], expected: list[str]
) -> None:
    assert exporters_from_env(env) == expected


def test_tracing_is_off_by_default_and_costs_no_chain_member() -> None:
    assert tracing_from_env({}) is None
    config = parse_config({
        "upstream": {"bootstrap": "127.0.0.1:9092"},
        "listen": {"bootstrap": "127.0.0.1:19092", "broker_port_base": 19100},
        "interceptors": CHAINS,
    })
    proxy = Proxy(config)
    assert not any(isinstance(f, TracingFilter) for f in proxy.chain.filters)
    assert proxy.interceptors.report_traces is False
    traced = Proxy(config, tracing=Tracing([]))
    assert any(isinstance(f, TracingFilter) for f in traced.chain.filters)
    assert traced.interceptors.report_traces is True


def test_admin_topic_labels_are_validated_with_their_path() -> None:
    doc: dict[str, Any] = {
        "upstream": {"bootstrap": "127.0.0.1:9092"},
        "listen": {"bootstrap": "127.0.0.1:19092"},
        "admin": {"topic_labels": ["orders", "orders", "a.b-c_d"]},
    }
    assert parse_config(doc).admin.topic_labels == ("orders", "a.b-c_d")
    doc["admin"]["topic_labels"] = ["ok", "bad topic"]
    with pytest.raises(ConfigError, match=r"^admin\.topic_labels\[1\]: expected a topic name"):
        parse_config(doc)
    doc["admin"]["topic_labels"] = "orders"
    with pytest.raises(ConfigError, match=r"^admin\.topic_labels: expected a list"):
        parse_config(doc)


# ---- spans ---------------------------------------------------------------------------------


def make_tracing(monkeypatch: pytest.MonkeyPatch, sampler: str) -> tuple[Tracing, Any]:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", sampler)
    memory = InMemorySpanExporter()
    return Tracing([memory]), memory


def traced_pair(
    tracing: Tracing, chains: dict[str, Any]
) -> tuple[InterceptorFilter, TracingFilter, list[int]]:
    skipped: list[int] = []
    icpt = InterceptorFilter(build_chains(chains), TopicIds())
    icpt.report_traces = True
    return icpt, TracingFilter(tracing, TopicIds(), skipped.append), skipped


def test_record_mode_spans_are_bounded_and_the_rest_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Herald's own spans follow the configured sampler; here it samples nothing, so only
    # spans for the contexts the interceptor wrote (sampled) into records can appear.
    tracing, memory = make_tracing(monkeypatch, "always_off")
    icpt, tf, skipped = traced_pair(tracing, {"produce": [{"type": "trace_context"}]})
    exchange = Exchange()
    msg = produce_request("orders", batch(130))
    run_filter(icpt, exchange, msg)
    run_filter(tf, exchange, msg)
    assert skipped == [30]
    response = ProduceResponse(responses=[TopicProduceResponse(
        name="orders", partition_responses=[PartitionProduceResponse(index=0, base_offset=500)])])
    trio.run(tf.on_response, ctx(), exchange, 0, 9, response)
    tracing.provider.force_flush()
    spans = memory.get_finished_spans()
    assert len(spans) == 100
    written = [dict(h)["traceparent"] for h in split_batches(msg.topic_data[0]
               .partition_data[0].records)[0].iter_headers()]
    by_ids = {(s.context.trace_id, s.context.span_id): s for s in spans}
    for i, tp in enumerate(written[:100]):
        span = by_ids[(int(tp[3:35], 16), int(tp[36:52], 16))]
        assert span.kind is SpanKind.PRODUCER
        assert span.attributes["messaging.kafka.offset"] == 500 + i
        assert span.attributes["messaging.client.id"] == "app-1"
    tracing.shutdown()


def test_links_are_bounded_and_errors_and_abandoned_exchanges_end_spans(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tracing, memory = make_tracing(monkeypatch, "always_on")
    icpt, tf, _ = traced_pair(tracing, {})
    given = [("traceparent", b"00-%032x-%016x-01" % (i + 1, i + 1)) for i in range(40)]
    records = [Record(b"k", b"v", [given[i]], offset_delta=i) for i in range(40)]
    exchange = Exchange()
    msg = produce_request("orders", build_batch(records))
    run_filter(tf, exchange, msg)
    failed = ProduceResponse(responses=[TopicProduceResponse(
        name="orders", partition_responses=[PartitionProduceResponse(index=0, error_code=10)])])
    trio.run(tf.on_response, ctx(), exchange, 0, 9, failed)

    abandoned = Exchange()
    run_filter(tf, abandoned, produce_request("orders", batch(1)))
    tf.on_abandoned(ctx(), abandoned)
    tracing.provider.force_flush()
    first, second = memory.get_finished_spans()
    assert len(first.links) == 32
    assert [lk.context.trace_id for lk in first.links] == list(range(1, 33))
    assert first.attributes["messaging.batch.message_count"] == 40
    assert first.status.status_code is StatusCode.ERROR
    assert first.attributes["error.type"] == "MESSAGE_TOO_LARGE"
    assert second.attributes["error.type"] == "connection_closed"
    tracing.shutdown()


def test_the_grafana_dashboard_only_uses_metrics_herald_exports() -> None:
    board = json.loads((REPO / "deploy/grafana/herald-dashboard.json").read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    used = {m for e in exprs for m in re.findall(r"\bherald_[a-z_]+", e)}
    metrics = Metrics()
    metrics.watch_interceptors(lambda: build_chains(CHAINS))
    CollectorKeeper(metrics, lambda: (0, 0))  # the collector's pauses, as the proxy adds them
    suffixes = {"counter": ["_total"], "gauge": [""], "info": ["_info"],
                "histogram": ["_bucket", "_count", "_sum"]}
    text = generate_latest(metrics.registry).decode()
    exported = {f.name + sfx for f in text_string_to_metric_families(text)
                for sfx in suffixes[f.type]}
    assert used and used <= exported, used - exported


def test_resource_defaults_to_herald_unless_the_environment_names_the_service(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
    tracing = tracing_from_env({"OTEL_TRACES_EXPORTER": "console"})
    assert tracing is not None
    attrs = tracing.provider.resource.attributes
    assert attrs["service.name"] == "herald"
    assert attrs["deployment.environment"] == "test"
    tracing.shutdown()
    monkeypatch.setenv("OTEL_SERVICE_NAME", "edge-proxy")
    tracing = tracing_from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"})
    assert tracing is not None
    assert tracing.provider.resource.attributes["service.name"] == "edge-proxy"
    tracing.shutdown()
