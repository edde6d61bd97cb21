"""APM stitching in a real APM: Herald's traces and an instrumented application's, seen in
Jaeger v2 (tests/support/jaeger.py).

Two producers write through Herald, whose `trace_context` member stamps the records and whose
spans go to Jaeger over OTLP:

- an application instrumented the way Python applications are, with OpenTelemetry's
  confluent-kafka instrumentation, producing inside a span of its own: its records carry its
  `send` span's context, which Herald keeps (Herald's own `send` span, in a trace of its own,
  links to each context it carried);
- a plain producer with no tracing: Herald starts a trace per record, and its `send` span is
  the root whose ids the record's `traceparent` carries.

An instrumented consumer reads both topics through Herald. Asked through Jaeger's query API:
each consumer `process` span links (as OpenTelemetry's messaging conventions do) to its
record's context, and that context is a span Jaeger holds: the application's `send` span for
the first topic, Herald's for the second. Herald's `receive` spans link to the contexts of the
records its fetches delivered.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.confluent_kafka import ConfluentKafkaInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from proxy.devtools.embedded_kafka import KafkaCluster
from tests.support.clients import create_topic
from tests.support.herald_process import HeraldProcess, herald_config
from tests.support.jaeger import Jaeger, running_jaeger

RUN = uuid.uuid4().hex[:8]
APP_TOPIC, PLAIN_TOPIC = f"orders-{RUN}", f"plain-{RUN}"
RECORDS = 5
CHAINS = {"produce": [{"type": "trace_context", "mode": "record"}, {"type": "audit"}]}


@pytest.fixture(scope="module")
def jaeger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jaeger]:
    with running_jaeger(tmp_path_factory.mktemp("jaeger")) as running:
        yield running


@pytest.fixture(scope="module")
def herald(kafka: KafkaCluster, jaeger: Jaeger) -> Iterator[HeraldProcess]:
    env = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": jaeger.otlp,
           "OTEL_BSP_SCHEDULE_DELAY": "200", "OTEL_SERVICE_NAME": f"herald-{RUN}"}
    with HeraldProcess(herald_config(kafka.bootstrap, interceptors=CHAINS), env=env) as proc:
        yield proc


def _provider(jaeger: Jaeger, service: str) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(
        OTLPSpanExporter(endpoint=f"{jaeger.otlp}/v1/traces")))
    return provider


def _hex(value: str) -> str:
    """An id as Jaeger's v3 API writes it (hex; base64 in some OTLP JSON encoders)."""
    if len(value) in (16, 32) and all(c in "0123456789abcdef" for c in value.lower()):
        return value.lower()
    import base64
    return base64.b64decode(value).hex()


def _links(span: dict) -> set[tuple[str, str]]:
    return {(_hex(link["traceId"]), _hex(link["spanId"])) for link in span.get("links", [])}


def _attributes(span: dict) -> dict[str, str]:
    return {a["key"]: next(iter(a["value"].values()), None) for a in span.get("attributes", [])}


def _context(headers: dict[str, bytes]) -> tuple[str, str]:
    _, trace_id, span_id, _ = headers["traceparent"].decode().split("-")
    return trace_id, span_id


def _wait(what: str, found, timeout_s: float = 60):
    deadline = time.monotonic() + timeout_s
    while not (got := found()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert got, what
    return got


def test_traces_stitched_through_herald_in_jaeger(herald: HeraldProcess, jaeger: Jaeger) -> None:
    started = time.time()
    for topic in (APP_TOPIC, PLAIN_TOPIC):
        create_topic(herald.bootstrap, topic)
    app_service, consumer_service = f"checkout-{RUN}", f"billing-{RUN}"

    # The instrumented application, producing inside its own span.
    app = _provider(jaeger, app_service)
    instrumentor = ConfluentKafkaInstrumentor()
    producer = instrumentor.instrument_producer(
        Producer({"bootstrap.servers": herald.bootstrap}), tracer_provider=app)
    with app.get_tracer("checkout").start_as_current_span("checkout") as root:
        for i in range(RECORDS):
            producer.produce(APP_TOPIC, f"order-{i}".encode())
        assert producer.flush(30) == 0
    app_trace = format(root.get_span_context().trace_id, "032x")
    # The plain producer: no tracing of its own.
    plain = Producer({"bootstrap.servers": herald.bootstrap})
    for i in range(RECORDS):
        plain.produce(PLAIN_TOPIC, f"plain-{i}".encode())
    assert plain.flush(30) == 0

    # The instrumented consumer, through Herald.
    reader = _provider(jaeger, consumer_service)
    consumer = instrumentor.instrument_consumer(Consumer({
        "bootstrap.servers": herald.bootstrap, "group.id": f"billing-{RUN}",
        "auto.offset.reset": "earliest"}), tracer_provider=reader)
    consumer.subscribe([APP_TOPIC, PLAIN_TOPIC])
    contexts: dict[str, set[tuple[str, str]]] = {APP_TOPIC: set(), PLAIN_TOPIC: set()}
    deadline = time.monotonic() + 60
    while sum(map(len, contexts.values())) < 2 * RECORDS and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            contexts[msg.topic()].add(_context(dict(msg.headers() or [])))
    consumer.close()  # ends the last process span
    app.shutdown()
    reader.shutdown()
    assert all(len(c) == RECORDS for c in contexts.values()), contexts

    # The application's records kept its trace: one trace, the app's send spans in it.
    assert {t for t, _ in contexts[APP_TOPIC]} == {app_trace}
    app_spans = _wait("the application's trace in Jaeger", lambda: (
        spans if len(spans := jaeger.trace(app_trace)) >= 1 + RECORDS else []))
    by_id = {_hex(s["spanId"]): s for s in app_spans}
    for _, span_id in contexts[APP_TOPIC]:
        assert span_id in by_id, (span_id, sorted(by_id))
        assert by_id[span_id]["service"] == app_service
        assert _hex(by_id[span_id]["parentSpanId"]) == format(root.get_span_context().span_id,
                                                              "016x")

    # Herald started the plain records' traces: each context is Herald's own send span, the
    # root of its trace, with the messaging attributes.
    herald_service = f"herald-{RUN}"
    for trace_id, span_id in contexts[PLAIN_TOPIC]:
        spans = _wait(f"Herald's span of trace {trace_id}", lambda t=trace_id: jaeger.trace(t))
        root_span = next(s for s in spans if _hex(s["spanId"]) == span_id)
        assert root_span["service"] == herald_service
        assert not root_span.get("parentSpanId")
        attrs = _attributes(root_span)
        assert attrs.get("messaging.system") == "kafka", attrs
        assert attrs.get("messaging.destination.name") == PLAIN_TOPIC, attrs

    # Herald's send spans for the application's records link to the contexts they carried.
    herald_spans = _wait("Herald's spans", lambda: [
        s for s in jaeger.spans_of(herald_service, started) if s["name"] == f"send {APP_TOPIC}"])
    carried = set().union(*(_links(s) for s in herald_spans))
    assert contexts[APP_TOPIC] <= carried, (contexts[APP_TOPIC], carried)

    # Herald's receive spans (the fetches it answered) link to the contexts they delivered.
    for topic in (APP_TOPIC, PLAIN_TOPIC):
        received = _wait(f"Herald's receive spans of {topic}", lambda t=topic: [
            s for s in jaeger.spans_of(herald_service, started) if s["name"] == f"receive {t}"])
        assert contexts[topic] <= set().union(*(_links(s) for s in received)), topic
        assert all(_attributes(s).get("messaging.destination.name") == topic
                   for s in received)

    # Every record's consumer span links to its record's context: stitched in Jaeger.
    process = _wait("the consumer's process spans", lambda: [
        s for s in jaeger.spans_of(consumer_service, started) if s["name"].endswith("process")])
    linked = set().union(*(_links(s) for s in process))
    for topic in (APP_TOPIC, PLAIN_TOPIC):
        assert contexts[topic] <= linked, (topic, contexts[topic] - linked)
    print(f"jaeger: {len(contexts[APP_TOPIC]) + len(contexts[PLAIN_TOPIC])} consumer records "
          f"stitched ({len(process)} process spans), {len(contexts[PLAIN_TOPIC])} "
          f"Herald-rooted traces, services {jaeger.services()}, "
          f"dependencies {jaeger.dependencies()}")
