"""OpenTelemetry traces exported by Herald over OTLP/HTTP to a receiver on loopback.

The receiver is a tiny HTTP server decoding the OTLP protobuf, as a collector would. The key
property: the trace ids Herald writes into records are the ids of the spans it exports, so an
APM tool can join the two.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from proxy.devtools.embedded_kafka import KafkaCluster
from tests.support.clients import consume_all, create_topic
from tests.support.herald_process import HeraldProcess, herald_config
from tests.support.otlp_receiver import Exported, Receiver

RUN = uuid.uuid4().hex[:8]
BATCH_TOPIC = f"tb-{RUN}"
RECORD_TOPIC = f"tr-{RUN}"
STRICT_TOPIC = f"strict-{RUN}"
GIVEN_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
GIVEN_SPAN = "00f067aa0ba902b7"
GIVEN = f"00-{GIVEN_TRACE}-{GIVEN_SPAN}-01".encode()

CHAINS = {
    "produce": [
        {"type": "trace_context", "name": "tc_batch", "mode": "batch",
         "topics": [f"prefix:tb-{RUN}"]},
        {"type": "trace_context", "name": "tc_record", "mode": "record",
         "topics": [f"prefix:tr-{RUN}"]},
    ],
}


@pytest.fixture(scope="module")
def traced_herald(kafka: KafkaCluster, receiver: tuple[Receiver, int]) -> Iterator[HeraldProcess]:
    env = {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver[1]}",
        "OTEL_BSP_SCHEDULE_DELAY": "200",
        "OTEL_SERVICE_NAME": "herald-under-test",
    }
    with HeraldProcess(herald_config(kafka.bootstrap, interceptors=CHAINS), env=env) as proc:
        yield proc


def context_of(msg: Any) -> tuple[str, str]:
    """(trace id, parent id) of a consumed record's traceparent."""
    tp = dict(msg.headers() or [])["traceparent"].decode()
    _, trace_id, span_id, _ = tp.split("-")
    return trace_id, span_id


def by_ids(spans: list[Exported]) -> dict[tuple[str, str], Exported]:
    return {(s.trace_id, s.span_id): s for s in spans}


def test_batch_mode_send_span_is_the_context_written_into_the_records(
    traced_herald: HeraldProcess, receiver: tuple[Receiver, int], kafka: KafkaCluster
) -> None:
    collected = receiver[0]
    create_topic(traced_herald.bootstrap, BATCH_TOPIC)
    producer = Producer({"bootstrap.servers": traced_herald.bootstrap, "client.id": "tracer-app",
                         "linger.ms": 1000})
    for i in range(3):
        producer.produce(BATCH_TOPIC, f"plain-{i}".encode())
    producer.produce(BATCH_TOPIC, b"traced", headers=[("traceparent", GIVEN)])
    assert producer.flush(30) == 0
    got = consume_all(traced_herald.bootstrap, BATCH_TOPIC, 4)
    contexts = [context_of(m) for m in got]
    assert contexts[3] == (GIVEN_TRACE, GIVEN_SPAN)  # kept as it came
    new = {c: contexts[:3].count(c) for c in contexts[:3]}
    assert (GIVEN_TRACE, GIVEN_SPAN) not in new

    def complete(spans: list[Exported]) -> bool:
        ids = by_ids(spans)
        linked = {s.kind for s in spans if (GIVEN_TRACE, GIVEN_SPAN) in s.links}
        return all(c in ids for c in new) and linked >= {Span.SPAN_KIND_PRODUCER,
                                                          Span.SPAN_KIND_CONSUMER}

    spans = collected.wait(complete)
    ids = by_ids(spans)
    broker_port = int(kafka.nodes[0].address.rsplit(":", 1)[1])
    for ctx, count in new.items():
        span = ids[ctx]  # exported with exactly the ids the consumer continues from
        assert span.name == f"send {BATCH_TOPIC}"
        assert span.kind == Span.SPAN_KIND_PRODUCER
        assert span.service == "herald-under-test"
        assert span.status != Status.STATUS_CODE_ERROR
        a = span.attributes
        assert a["messaging.system"] == "kafka"
        assert a["messaging.operation.name"] == "send"
        assert a["messaging.operation.type"] == "send"
        assert a["messaging.destination.name"] == BATCH_TOPIC
        assert a["messaging.destination.partition.id"] == "0"
        assert a["messaging.client.id"] == "tracer-app"
        assert a["server.address"] == "127.0.0.1"
        assert a["server.port"] == broker_port
        assert a.get("messaging.batch.message_count", 1) == count
    # The record that came with its own context: Herald's send span links to it, and so does
    # the receive span of the fetch that read it; no span took its ids.
    linking = [s for s in spans if (GIVEN_TRACE, GIVEN_SPAN) in s.links]
    assert {(s.name, s.kind) for s in linking} == {
        (f"send {BATCH_TOPIC}", Span.SPAN_KIND_PRODUCER),
        (f"receive {BATCH_TOPIC}", Span.SPAN_KIND_CONSUMER)}
    assert all(s.trace_id != GIVEN_TRACE for s in linking)
    assert (GIVEN_TRACE, GIVEN_SPAN) not in ids


def test_record_mode_one_span_per_record_context_and_receive_spans_link_to_them(
    traced_herald: HeraldProcess, receiver: tuple[Receiver, int]
) -> None:
    collected = receiver[0]
    create_topic(traced_herald.bootstrap, RECORD_TOPIC)
    producer = Producer({"bootstrap.servers": traced_herald.bootstrap, "linger.ms": 1000})
    for i in range(3):
        producer.produce(RECORD_TOPIC, f"r-{i}".encode())
    assert producer.flush(30) == 0
    fire_and_forget = Producer({"bootstrap.servers": traced_herald.bootstrap, "acks": 0})
    fire_and_forget.produce(RECORD_TOPIC, b"acks0")
    assert fire_and_forget.flush(30) == 0
    got = consume_all(traced_herald.bootstrap, RECORD_TOPIC, 4)
    contexts = [context_of(m) for m in got]
    assert len(set(contexts)) == 4  # record mode: a context per record

    def complete(spans: list[Exported]) -> bool:
        ids = by_ids(spans)
        linked = {lk for s in spans if s.kind == Span.SPAN_KIND_CONSUMER for lk in s.links}
        return all(c in ids for c in contexts) and set(contexts) <= linked

    spans = collected.wait(complete)
    ids = by_ids(spans)
    for msg, ctx in zip(got, contexts, strict=True):
        span = ids[ctx]
        assert span.name == f"send {RECORD_TOPIC}"
        assert span.kind == Span.SPAN_KIND_PRODUCER
        assert "messaging.batch.message_count" not in span.attributes  # one record each
        if msg.value() != b"acks0":  # acks=0 gets no response, so no offset
            assert span.attributes["messaging.kafka.offset"] == msg.offset()
    receives = [s for s in spans if s.name == f"receive {RECORD_TOPIC}"]
    assert receives and all(s.kind == Span.SPAN_KIND_CONSUMER for s in receives)
    assert all(s.attributes["messaging.operation.type"] == "receive" for s in receives)
    assert set(contexts) <= {lk for s in receives for lk in s.links}
    assert sum(s.attributes.get("messaging.batch.message_count", 1) for s in receives) >= 4


def test_a_failed_partition_ends_its_span_with_an_error(
    traced_herald: HeraldProcess, receiver: tuple[Receiver, int]
) -> None:
    # The broker refuses batches above the topic's max.message.bytes (the client does not
    # know the topic's limit, so the refusal comes from the broker). Created with its leader
    # ready: with no retries, a produce the new leader refused as not yet its own would end
    # the span with NOT_LEADER_OR_FOLLOWER instead.
    create_topic(traced_herald.bootstrap, STRICT_TOPIC, config={"max.message.bytes": "200"})
    producer = Producer({"bootstrap.servers": traced_herald.bootstrap, "retries": 0,
                         "message.timeout.ms": 10000})
    errors: list[Any] = []
    producer.produce(STRICT_TOPIC, b"x" * 1000,
                     on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(30)
    assert errors and errors[0] is not None

    def failed(spans: list[Exported]) -> bool:
        return any(s.name == f"send {STRICT_TOPIC}" for s in spans)

    spans = [s for s in receiver[0].wait(failed) if s.name == f"send {STRICT_TOPIC}"]
    assert spans and all(s.status == Status.STATUS_CODE_ERROR for s in spans)
    assert {s.attributes["error.type"] for s in spans} == {"MESSAGE_TOO_LARGE"}
