"""A real Kafka Streams application through Herald (Java, from Maven Central), with the classic
group protocol and with KIP-1071's streams protocol, exactly once (transactions v2): every
input record comes out once, upper-cased, continuing the input record's trace (Streams
forwards headers) and linked to it (`herald.parent`, by the link memory)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer

from proxy.devtools.embedded_kafka import KafkaCluster
from tests.support.clients import consume_all, create_topic
from tests.support.herald_process import HeraldProcess, herald_config
from tests.support.streams.app import running_app

CHAINS = {"produce": [{"type": "trace_context", "link": {"scope": "host"}}, {"type": "audit"}]}
RECORDS = 30


@pytest.fixture(scope="module")
def herald_streams(kafka: KafkaCluster) -> Iterator[HeraldProcess]:
    with HeraldProcess(herald_config(kafka.bootstrap, interceptors=CHAINS)) as proc:
        yield proc


def _trace_id(headers: dict[str, bytes]) -> str:
    return headers["traceparent"].decode().split("-")[1]


@pytest.mark.parametrize("protocol", ["classic", "streams"])
def test_a_streams_application_reads_and_writes_through_herald_exactly_once(
    herald_streams: HeraldProcess, protocol: str
) -> None:
    bootstrap = herald_streams.bootstrap
    source, sink = (f"streams-{side}-{uuid.uuid4().hex[:8]}" for side in ("in", "out"))
    create_topic(bootstrap, source)
    create_topic(bootstrap, sink)
    with running_app(bootstrap, f"app-{uuid.uuid4().hex[:8]}", source, sink,
                     protocol) as lines:
        producer = Producer({"bootstrap.servers": bootstrap})
        for i in range(RECORDS):
            producer.produce(source, f"record-{i}".encode())
        assert producer.flush(30) == 0
        inputs = {m.value().decode(): dict(m.headers() or [])
                  for m in consume_all(bootstrap, source, RECORDS)}
        outputs = consume_all(bootstrap, sink, RECORDS, timeout=120,
                              conf={"isolation.level": "read_committed"})
    values = sorted(m.value().decode() for m in outputs)
    assert values == sorted(f"RECORD-{i}" for i in range(RECORDS)), "\n".join(lines[-40:])
    for msg in outputs:
        headers = dict(msg.headers() or [])
        source_headers = inputs[msg.value().decode().lower()]
        # The output continues the input's trace and names it as its parent.
        assert _trace_id(headers) == _trace_id(source_headers)
        assert any(k == "herald.parent" for k, _ in msg.headers() or []), headers
        assert headers["herald.msg_id"] != source_headers["herald.msg_id"]
