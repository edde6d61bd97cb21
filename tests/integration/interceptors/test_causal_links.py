"""Herald records the causal link itself (`trace_context` with ``link``), through a real broker
and real clients: a service's consumer and producer, different connections of one pod
(sidecar), and two pods behind one Herald (gateway) that read the same trace. The services
continue traces as OpenTelemetry does (same trace id, a new span id) and write no link."""

from __future__ import annotations

import os
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from kafka import KafkaConsumer, KafkaProducer

from proxy.devtools.embedded_kafka import KafkaCluster, free_port
from tests.support.clients import create_topic
from tests.support.herald_process import HeraldProcess, herald_config
from tests.support.metrics import moved, scrape, total, wait_for
from tests.support.native_parts import ENGINE, needs, require
from tests.support.source_socks import SourceSocks

CHAINS = {"produce": [{"type": "trace_context", "link": {"scope": "host"}},
                      {"type": "audit"}]}
EVENTS = "herald_interceptor_events_total"
PYTHON_PATH = "herald_python_path_total"
ENGINE_COULD_NOT = ("produce_chain", "fetch_chain", "engine_declined")


def _trace() -> str:
    return os.urandom(16).hex()


def _tp(trace: str) -> bytes:
    """A traceparent of `trace` with a span of its own: how a service continues a trace."""
    return f"00-{trace}-{os.urandom(8).hex()}-01".encode()


def _write_direct(broker: str, topic: str, traces: list[str]) -> list[tuple[str, int, int]]:
    """Records of the given traces written straight to the broker (their producer is not
    behind this Herald); their keys in order."""
    keys: list[tuple[str, int, int]] = []
    producer = Producer({"bootstrap.servers": broker})
    for trace in traces:
        producer.produce(topic, b"in", headers=[("traceparent", _tp(trace))],
                         on_delivery=lambda err, m: keys.append(
                             (m.topic(), m.partition(), m.offset())))
        assert producer.flush(30) == 0
    return keys


def _learn_ids(herald: HeraldProcess, *topics: str) -> None:
    """Herald learns the topics' ids from a Metadata answer it passes, before the service's
    sessions begin. A native phase's plan names the ids Herald knew when the phase began: a
    consumer whose first fetch races its own Metadata answer on another connection has that
    one response handed to Python (a topic id the plan lacks), which is right but is not what
    these tests measure."""
    client = Producer({"bootstrap.servers": herald.bootstrap})
    for topic in topics:
        md = client.list_topics(topic, timeout=30).topics[topic]
        assert md.error is None and md.partitions, (topic, md.error)


def _consume(bootstrap: str, topic: str, count: int, client_id: str,
             herald: HeraldProcess | None = None) -> list:
    """`count` records of `topic`, read by a new group; on a short read the assertion says
    what the consumer saw (errors, assignments) and, given `herald`, the end of its log."""
    seen: list[str] = []
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                         "client.id": client_id, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False,
                         "error_cb": lambda err: seen.append(f"error {err}")})
    consumer.subscribe([topic], on_assign=lambda _c, parts: seen.append(
        f"assigned {[(p.topic, p.partition, p.offset) for p in parts]}"))
    got = []
    deadline = time.monotonic() + 120  # twice librdkafka's request timeout
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error():
                seen.append(f"message error {msg.error()}")
            elif msg is not None:
                got.append(msg)
            if len(got) == count:
                break
    finally:
        consumer.close()
    log = herald.logs()[-6000:] if herald is not None else ""
    assert len(got) == count, (len(got), seen, log)
    return got


def _read_back(broker: str, topic: str, count: int) -> dict[str, list[dict[str, list]]]:
    """The records of `topic` as the broker holds them: trace id -> the headers of each."""
    out: dict[str, list[dict[str, list]]] = {}
    for msg in _consume(broker, topic, count, "checker"):
        headers: dict[str, list] = {}
        for k, v in msg.headers() or []:
            headers.setdefault(k, []).append(v)
        trace = headers["traceparent"][0].decode().split("-")[1]
        out.setdefault(trace, []).append(headers)
    return out


def _inputs(broker: str, name: str, partitions: int
            ) -> tuple[str, str, list[str], dict[str, tuple[str, int, int]]]:
    """An input topic of `partitions` holding one record of each of three new traces (written
    straight to the broker), and an empty output topic: (input, output, the traces, the key
    of each trace's record)."""
    tag = uuid.uuid4().hex[:8]
    src, dst = f"{name}-in-{tag}", f"{name}-out-{tag}"
    create_topic(broker, src, partitions)
    create_topic(broker, dst, 1)
    traces = [_trace() for _ in range(3)]
    return src, dst, traces, dict(zip(traces, _write_direct(broker, src, traces), strict=True))


def _value(key: tuple[str, int, int]) -> bytes:
    return "{}:{}:{}".format(*key).encode()


def test_sidecar_links_what_one_client_fetched_to_what_another_produces(
    herald_chain: HeraldProcess, kafka: KafkaCluster
) -> None:
    """One pod: its consumer and its producer are different clients (different client ids,
    different connections) of the same host. The producer's records that continue a trace the
    consumer fetched name the fetched record, exactly; the others name none."""
    src, dst, traces, written = _inputs(kafka.bootstrap, "side", 3)
    before = scrape(herald_chain)
    fetched = _consume(herald_chain.bootstrap, src, 3, "svc-reader")
    assert sorted((m.topic(), m.partition(), m.offset()) for m in fetched) == \
        sorted(written.values())
    unfetched = _trace()
    producer = Producer({"bootstrap.servers": herald_chain.bootstrap, "client.id": "svc-writer"})
    for trace in [*traces[:2], unfetched]:
        producer.produce(dst, b"out", headers=[("traceparent", _tp(trace))])
    producer.produce(dst, b"untraced")
    assert producer.flush(30) == 0
    got = _read_back(kafka.bootstrap, dst, 4)
    for trace in traces[:2]:
        (record,) = got[trace]
        assert record["herald.parent"] == [_value(written[trace])]
        assert record["herald.client_id"] == [b"svc-writer"]
    assert "herald.parent" not in got[unfetched][0]
    (new,) = [r for t, rs in got.items() if t not in (*traces, unfetched) for r in rs]
    assert "herald.parent" not in new  # a new trace Herald started continues nothing
    after = wait_for(herald_chain, lambda s: total(s, EVENTS, event="link_made")
                     - total(before, EVENTS, event="link_made") >= 2)

    def moved(event: str) -> float:
        return total(after, EVENTS, event=event) - total(before, EVENTS, event=event)
    assert moved("link_made") == 2 and moved("link_parents") == 2
    assert moved("link_missed_unseen") == 1  # the unfetched trace (the untraced is no miss)
    assert moved("link_remembered") == 3
    assert total(after, "herald_interceptor_level", path="fetch",
                 interceptor="trace_context.fetched", level="link_memory_entries") >= 3


def test_gateway_never_links_across_pods(herald_chain: HeraldProcess,
                                         kafka: KafkaCluster) -> None:
    """Two pods behind one Herald (127.0.0.1, and 127.0.0.2 through a SOCKS proxy bound to
    it) read records of the same trace from different topics. Each pod's continuation names
    what that pod fetched, never what the other did; a trace only the other pod fetched gets
    no link."""
    tag = uuid.uuid4().hex[:8]
    in1, in2, out = f"gw-in1-{tag}", f"gw-in2-{tag}", f"gw-out-{tag}"
    for topic in (in1, in2, out):
        create_topic(kafka.bootstrap, topic, 1)
    shared, only_pod1 = _trace(), _trace()
    r0, r2 = _write_direct(kafka.bootstrap, in1, [shared, only_pod1])
    (r1,) = _write_direct(kafka.bootstrap, in2, [shared])

    _consume(herald_chain.bootstrap, in1, 2, "pod1-reader")
    with SourceSocks("127.0.0.2") as pod2:
        consumer = KafkaConsumer(in2, bootstrap_servers=herald_chain.bootstrap,
                                 group_id=uuid.uuid4().hex, client_id="pod2-reader",
                                 auto_offset_reset="earliest", enable_auto_commit=False,
                                 consumer_timeout_ms=20000, proxy_url=pod2.url)
        got = next(iter(consumer))
        consumer.close()
        assert (got.topic, got.partition, got.offset) == r1
        producer = KafkaProducer(bootstrap_servers=herald_chain.bootstrap,
                                 client_id="pod2-writer", proxy_url=pod2.url)
        for trace in (shared, only_pod1):
            producer.send(out, b"pod2", headers=[("traceparent", _tp(trace))]).get(30)
        producer.close()
    pod1 = Producer({"bootstrap.servers": herald_chain.bootstrap, "client.id": "pod1-writer"})
    pod1.produce(out, b"pod1", headers=[("traceparent", _tp(shared))])
    assert pod1.flush(30) == 0

    records = _read_back(kafka.bootstrap, out, 3)
    by_pod = {r["herald.client_id"][0]: r for r in records[shared]}
    assert by_pod[b"pod2-writer"]["herald.source"][0].startswith(b"127.0.0.2:")
    assert by_pod[b"pod1-writer"]["herald.source"][0].startswith(b"127.0.0.1:")
    assert by_pod[b"pod1-writer"]["herald.parent"] == [_value(r0)]
    assert by_pod[b"pod2-writer"]["herald.parent"] == [_value(r1)]
    (lone,) = records[only_pod1]
    assert "herald.parent" not in lone and r2[0] == in1


def _on_the_engine(before: dict, after: dict, produced: int) -> None:
    """The session reached the engine and its Produce requests ran there: no session was
    Python's whole, none of the `produced` one-record requests went to Python because the
    engine could not take it, and most of them were not handled in Python at all."""
    assert moved(before, after, PYTHON_PATH, scope="session") == 0
    requests = moved(before, after, "herald_requests_total", api="Produce")
    in_python = moved(before, after, PYTHON_PATH, scope="frame", api="Produce")
    assert requests >= produced and in_python < produced // 2, (requests, in_python)
    for reason in ENGINE_COULD_NOT:
        assert moved(before, after, PYTHON_PATH, scope="frame", reason=reason,
                     api="Produce") == 0, reason


@needs(ENGINE)
def test_with_links_on_untraced_and_traced_records_stay_native(herald_chain: HeraldProcess,
                                                               kafka: KafkaCluster) -> None:
    """With links on, Produce requests are stamped by the engine (one request per record, far
    fewer hand-overs to Python than requests): records without trace context get a new trace
    and no link, and traced ones whose trace this client never fetched are looked up in the
    memory by the engine itself, counted as missed, and get no link."""
    topic = f"native-{uuid.uuid4().hex[:8]}"
    create_topic(kafka.bootstrap, topic, 1)
    count = 40
    before = scrape(herald_chain)
    producer = Producer({"bootstrap.servers": herald_chain.bootstrap, "linger.ms": 0,
                         "client.id": "plain-app"})
    for i in range(count):
        producer.produce(topic, b"v%d" % i)
        assert producer.flush(30) == 0
    after = wait_for(herald_chain, lambda s: moved(
        before, s, "herald_interceptor_records_total", path="produce", outcome="seen",
        interceptor="trace_context") >= count)
    assert moved(before, after, "herald_interceptor_records_total", path="produce",
                 outcome="seen", interceptor="trace_context") == count
    assert moved(before, after, "herald_native_relay_handovers_total", reason="request") \
        < count // 2
    _on_the_engine(before, after, count)
    for i in range(count):
        producer.produce(topic, b"t%d" % i, headers=[("traceparent", _tp(_trace()))])
        assert producer.flush(30) == 0
    traced = wait_for(herald_chain, lambda s: moved(
        after, s, "herald_interceptor_events_total", event="link_missed_unseen") >= count)
    # Every traced record was looked up and missed: none of their traces was fetched.
    assert moved(after, traced, EVENTS, event="link_missed_unseen") == count
    assert moved(after, traced, EVENTS, event="link_made") == 0
    assert moved(after, traced, "herald_native_relay_handovers_total", reason="request") \
        < count // 2
    _on_the_engine(after, traced, count)
    got = _read_back(kafka.bootstrap, topic, 2 * count)
    assert sum(len(rs) for rs in got.values()) == 2 * count
    assert not any("herald.parent" in r for rs in got.values() for r in rs)


@needs(ENGINE)
@pytest.mark.parametrize("audit_after", [False, True], ids=["audit_first", "audit_after"])
def test_the_engine_links_traced_records_exactly(kafka: KafkaCluster, audit_after: bool) -> None:
    """A service's consumer fetches traced records through Herald, whose engine scans the
    Fetch responses and remembers them; its producer then continues those traces and is
    stamped by the engine, links included, read from the memory the scan filled: exact
    parents, whichever side of `trace_context` `audit` sits (after it, its forgery check
    keeps Herald's own links, which the engine knows it wrote). No Fetch or Produce request
    went to Python because the engine could not take it."""
    trace = {"type": "trace_context", "link": {"scope": "host"}}
    chains = {"produce": [trace, {"type": "audit"}] if audit_after else
              [{"type": "audit"}, trace]}
    config = herald_config(kafka.bootstrap, interceptors=chains,
                           admin={"bind": f"127.0.0.1:{free_port()}"})
    tag = uuid.uuid4().hex[:8]
    src, dst = f"eng-in-{tag}", f"eng-out-{tag}"
    create_topic(kafka.bootstrap, src, 2)
    create_topic(kafka.bootstrap, dst, 1)
    count = 30
    traces = [_trace() for _ in range(count)]
    written = dict(zip(traces, _write_direct(kafka.bootstrap, src, traces), strict=True))
    with HeraldProcess(config) as herald:
        _learn_ids(herald, src, dst)
        start = scrape(herald)
        _consume(herald.bootstrap, src, count, "svc-reader", herald)
        before = wait_for(herald, lambda s: moved(start, s, EVENTS, event="link_remembered")
                          >= count)
        producer = Producer({"bootstrap.servers": herald.bootstrap, "linger.ms": 0,
                             "client.id": "svc-writer"})
        for trace_id in traces:
            producer.produce(dst, b"out", headers=[("traceparent", _tp(trace_id))])
            assert producer.flush(30) == 0
        after = wait_for(herald, lambda s: moved(before, s, EVENTS, event="link_made")
                         >= count)
    assert moved(start, before, EVENTS, event="link_remembered") == count
    for api in ("Fetch", "Produce"):
        for reason in ENGINE_COULD_NOT:
            assert moved(start, after, PYTHON_PATH, scope="frame", reason=reason, api=api) \
                == 0, (api, reason)
    assert moved(before, after, "herald_native_relay_handovers_total", reason="request") \
        < count // 2
    assert moved(before, after, EVENTS, event="link_made") == count
    assert moved(before, after, EVENTS, event="link_parents") == count
    assert moved(before, after, EVENTS, event="forged_stripped") == 0
    got = _read_back(kafka.bootstrap, dst, count)
    for trace_id in traces:
        (record,) = got[trace_id]
        assert record["herald.parent"] == [_value(written[trace_id])]
        assert record["herald.client_id"] == [b"svc-writer"]


def test_a_full_memory_evicts_and_the_missed_links_are_counted(kafka: KafkaCluster) -> None:
    """With room for two traces, the first of three fetched is evicted: its continuation gets
    no link and is counted as `link_missed_evicted`; the last two are linked."""
    chains = {"produce": [{"type": "trace_context", "link": {"capacity": 2}},
                          {"type": "audit"}]}
    config = herald_config(kafka.bootstrap, interceptors=chains,
                           admin={"bind": f"127.0.0.1:{free_port()}"})
    src, dst, traces, written = _inputs(kafka.bootstrap, "full", 1)
    with HeraldProcess(config) as herald:
        _consume(herald.bootstrap, src, 3, "reader")
        producer = Producer({"bootstrap.servers": herald.bootstrap, "client.id": "writer"})
        for trace in traces:
            producer.produce(dst, b"out", headers=[("traceparent", _tp(trace))])
        assert producer.flush(30) == 0
        samples = wait_for(herald, lambda s: total(s, EVENTS, event="link_made") >= 2)
    assert total(samples, EVENTS, event="link_missed_evicted") == 1
    assert total(samples, EVENTS, event="link_evicted") == 1
    assert total(samples, "herald_interceptor_level", level="link_memory_entries") == 2
    got = _read_back(kafka.bootstrap, dst, 3)
    assert "herald.parent" not in got[traces[0]][0]
    for trace in traces[1:]:
        assert got[trace][0]["herald.parent"] == [_value(written[trace])]


@pytest.mark.parametrize("relay", ["auto", "off"], ids=["native", "python"])
def test_a_memory_too_small_declares_the_parents_it_lost_on_the_records(
        kafka: KafkaCluster, relay: str) -> None:
    """Room for two traces, and a service that reads two records each of three traces (a, b,
    c, a, b, c) before it writes one record of each: every fetch evicts the least recent
    entry, whose parents are counted with its key and carried on when it is fetched again.
    The records Herald writes, read back from the broker, name what is left and declare the
    rest (`herald.parents_lost`): a names nothing and declares both of its parents evicted,
    b and c name their second input and declare the first. No parent is silently lost, on
    the native relay as with it off; on the native relay neither Fetch nor Produce went to
    Python because the engine could not take it."""
    if relay == "auto":
        require(ENGINE)
    chains = {"produce": [{"type": "trace_context", "link": {"capacity": 2}},
                          {"type": "audit"}]}
    config = herald_config(kafka.bootstrap, interceptors=chains,
                           admin={"bind": f"127.0.0.1:{free_port()}"},
                           performance={"native_relay": relay})
    tag = uuid.uuid4().hex[:8]
    src, dst = f"small-in-{tag}", f"small-out-{tag}"
    create_topic(kafka.bootstrap, src, 1)
    create_topic(kafka.bootstrap, dst, 1)
    traces = [_trace() for _ in range(3)]
    keys = _write_direct(kafka.bootstrap, src, traces * 2)
    second = dict(zip(traces, keys[3:], strict=True))
    with HeraldProcess(config) as herald:
        _learn_ids(herald, src, dst)
        start = scrape(herald)
        _consume(herald.bootstrap, src, 6, "svc-reader")
        wait_for(herald, lambda s: moved(start, s, EVENTS, event="link_remembered") >= 6)
        producer = Producer({"bootstrap.servers": herald.bootstrap, "linger.ms": 0,
                             "client.id": "svc-writer"})
        for trace in traces:
            producer.produce(dst, b"out", headers=[("traceparent", _tp(trace))])
            assert producer.flush(30) == 0
        after = wait_for(herald, lambda s: moved(start, s, EVENTS, event="link_made") >= 2
                         and moved(start, s, EVENTS, event="link_missed_evicted") >= 1)
    got = _read_back(kafka.bootstrap, dst, 3)
    (a,), (b,), (c,) = (got[t] for t in traces)
    assert "herald.parent" not in a and a["herald.parents_lost"] == [b"evicted:2"]
    for trace, record in zip(traces[1:], (b, c), strict=True):
        assert record["herald.parent"] == [_value(second[trace])]
        assert record["herald.parents_lost"] == [b"evicted:1"]
    assert moved(start, after, EVENTS, event="link_lost_evicted") == 4
    assert moved(start, after, EVENTS, event="link_evicted") == 4
    assert moved(start, after, EVENTS, event="forged_stripped") == 0
    if relay == "auto":
        for api in ("Fetch", "Produce"):
            for reason in ENGINE_COULD_NOT:
                assert moved(start, after, PYTHON_PATH, scope="frame", reason=reason,
                             api=api) == 0, (api, reason)
