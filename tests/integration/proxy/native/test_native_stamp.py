"""The native relay stamping Produce requests (`performance.native_relay: auto` with a
`trace_context` + `audit` chain) through a real broker, compared with the Python path (`off`):
the same header keys in the same order on every record, valid values, records that carry
their own trace context keep it (the engine stamps those too, an application that traces every
send never leaving it), compressed batches (lz4, zstd, gzip, snappy from librdkafka, lz4 from
the Java producer) are stamped in the engine too, and the interceptor metrics and request
counts match.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from functools import partial

import pytest
from confluent_kafka import Producer

from proxy.devtools.embedded_kafka import KafkaCluster
from tests.support.clients import consume_all, create_topic
from tests.support.herald_process import HeraldProcess
from tests.support.java_tools import CONSOLE_CONSUMER, PRODUCER_PERF, command_properties, run_tool
from tests.support.metrics import by_labels, moved, scrape, wait_for
from tests.support.native_herald import native_herald
from tests.support.native_parts import ENGINE, needs

pytestmark = needs(ENGINE)

CHAINS = {"produce": [{"type": "trace_context", "mode": "record"}, {"type": "audit"}]}
HANDOVERS = "herald_native_relay_handovers_total"
TRACEPARENT = re.compile(rb"00-[0-9a-f]{32}-[0-9a-f]{16}-01")
UUID7 = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")
GIVEN = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture(scope="module")
def herald_for(kafka: KafkaCluster) -> Callable[[str], HeraldProcess]:
    return partial(native_herald, kafka, interceptors=CHAINS)


def _send(bootstrap: str, topic: str, count: int, **conf: object) -> list[bytes]:
    """One request per record; every tenth carries its own traceparent."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all",
                         "client.id": "stamp-test", **conf})
    values = []
    for i in range(count):
        value = f"value-{i}".encode() * (i % 7 + 1)
        headers = [("app", b"x")] + ([("traceparent", GIVEN)] if i % 10 == 3 else [])
        producer.produce(topic, value, key=None if i % 3 else b"k", headers=headers)
        values.append(value)
        assert producer.flush(30) == 0
    return values


COUNTERS = ("herald_interceptor_records_total", "herald_interceptor_headers_added_total",
            "herald_interceptor_events_total", "herald_interceptor_batches_total",
            "herald_batches_reencoded_total")


def test_stamped_natively_as_in_python(herald_on: HeraldProcess, herald_off: HeraldProcess,
                                       topic_name: str) -> None:
    count = 150
    keys = {}
    counted = {}
    for proc in (herald_on, herald_off):
        on = proc is herald_on
        topic = f"{topic_name}-{on}"
        create_topic(proc.bootstrap, topic)
        before = scrape(proc)
        values = _send(proc.bootstrap, topic, count)
        got = consume_all(proc.bootstrap, topic, count)
        assert [m.value() for m in got] == values
        keys[on] = [[k for k, _ in m.headers()] for m in got]
        for i, m in enumerate(got):
            headers = dict(m.headers())
            if i % 10 == 3:
                assert headers["traceparent"] == GIVEN  # kept
            else:
                assert TRACEPARENT.fullmatch(headers["traceparent"])
            assert UUID7.fullmatch(headers["herald.msg_id"])
            assert headers["herald.client_id"] == b"stamp-test"
            assert headers["herald.principal"] == b"User:ANONYMOUS"
            assert headers["herald.time"].isdigit()
            assert headers["herald.cluster"] == headers["herald.origin"] != b""
        counted[on] = _counted(proc, before, count)
    assert keys[True] == keys[False]
    assert keys[True][0] == ["app", "traceparent", "herald.client_id", "herald.principal",
                             "herald.source", "herald.proxy", "herald.cluster", "herald.time",
                             "herald.msg_id", "herald.origin"]
    on, off = counted[True], counted[False]
    assert on.pop("handovers") < count // 2  # most Produce requests never left the engine
    assert off.pop("handovers") == 0
    _assert_same_work(on, off)
    assert on == off  # one record per request: the batches are the same too
    assert on["produce"] == count


def _send_traced(bootstrap: str, topic: str) -> list[list[tuple[str, bytes]]]:
    """An application that traces its sends: every record carries its own valid traceparent
    (a later version's now and then), every third a tracestate too. First one request per
    record, then one request of a batch per partition (a long linger, then a flush)."""
    sent = []
    for linger, records in ((0, range(TRACED // 2)), (2000, range(TRACED // 2, TRACED))):
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": linger,
                             "acks": "all", "client.id": "apm-app"})
        for i in records:
            version = b"00" if i % 4 else b"01"
            tp = b"%s-%032x-%016x-%02x" % (version, 0xABC0 + i, 0x1230 + i, i % 2)
            if version != b"00":
                tp += b"-later"
            headers = [("app", b"%d" % i), ("traceparent", tp)]
            if i % 3 == 0:
                headers.append(("tracestate", b"vendor=%d,other@sys=x" % i))
            sent.append(headers)
            producer.produce(topic, b"v%d" % i, headers=headers, partition=i % 2)
            if not linger:
                assert producer.flush(30) == 0  # one Produce request per record
        assert producer.flush(30) == 0
    return sent


TRACED = 80
AUDIT = ["herald.client_id", "herald.principal", "herald.source", "herald.proxy",
         "herald.cluster", "herald.time", "herald.msg_id", "herald.origin"]


def test_records_with_their_own_traceparent_stay_native(
        herald_on: HeraldProcess, herald_off: HeraldProcess, topic_name: str) -> None:
    """Every record keeps its own trace context byte for byte and gets the audit headers;
    the Produce requests are stamped by the engine (no hand-over: without the keeping rule
    each would go to Python); the keys and the counters are those of the Python path."""
    counted = {}
    keys = {}
    for proc in (herald_on, herald_off):
        on = proc is herald_on
        topic = f"{topic_name}-{on}"
        create_topic(proc.bootstrap, topic, partitions=2)
        # A first record per partition, so that no request counted below is refused and
        # retried while the new topic's leaders settle (on one side only).
        warm = Producer({"bootstrap.servers": proc.bootstrap, "linger.ms": 0})
        for partition in (0, 1):
            warm.produce(topic, b"warm", partition=partition)
            assert warm.flush(30) == 0
        before = scrape(proc)
        sent = _send_traced(proc.bootstrap, topic)
        sending = scrape(proc)  # before the consumer's requests, which Python reads
        got = consume_all(proc.bootstrap, topic, TRACED + 2)
        assert len(got) == TRACED + 2
        by_value = {m.value(): m.headers() for m in got}
        keys[on] = {}
        for i, own in enumerate(sent):
            headers = by_value[b"v%d" % i]
            assert headers[:len(own)] == own  # kept as sent, in place
            assert [k for k, _ in headers[len(own):]] == AUDIT
            assert dict(headers)["herald.client_id"] == b"apm-app"
            keys[on][i] = [k for k, _ in headers]
        counted[on] = _counted(proc, before, TRACED, sending)
    assert keys[True] == keys[False]
    on, off = counted[True], counted[False]
    # Python sees the first Metadata requests of the new producers, and no Produce request:
    # at least TRACED // 2 + 1 of them, every record carrying a traceparent.
    assert on.pop("handovers") < 5
    assert off.pop("handovers") == 0
    _assert_same_work(on, off)
    assert on["produce"] >= TRACED // 2 + 1
    events = on["herald_interceptor_events_total"]
    assert not any("trace_new_context" in str(labels) for labels in events), events


BATCH_COUNTERS = ("herald_interceptor_batches_total", "herald_batches_reencoded_total", "produce")


def _assert_same_work(on: dict, off: dict) -> None:
    """The record counters of the engine and of the Python path are equal; the batch counters
    each agree with that side's own batches, since how librdkafka splits records that wait
    for a flush into requests is its timing's, not Herald's (once 42 against 43 requests)."""
    for side in (on, off):
        batches = side["herald_interceptor_batches_total"]
        seen = sum(n for labels, n in batches.items() if ("outcome", "seen") in labels)
        changed = sum(n for labels, n in batches.items() if ("outcome", "changed") in labels)
        assert seen == changed == sum(side["herald_batches_reencoded_total"].values()), side
        assert 0 < side["produce"] <= seen, side
    records = {name: n for name, n in on.items() if name not in BATCH_COUNTERS}
    assert records == {name: n for name, n in off.items() if name not in BATCH_COUNTERS}


def _counted(proc: HeraldProcess, before: dict, records: int, sent: dict | None = None
             ) -> dict:
    """The counters that moved since `before`, once both members have seen `records` records;
    the Produce requests, and the requests handed to Python until `sent` (default: now)."""
    after = wait_for(proc, lambda s: moved(
        before, s, "herald_interceptor_records_total", outcome="seen") >= 2 * records)
    counted: dict = {name: by_labels(before, after, name) for name in COUNTERS}
    counted["produce"] = moved(before, after, "herald_requests_total", api="Produce")
    counted["handovers"] = moved(before, sent or after, HANDOVERS, reason="request")
    return counted


CODECS = ("lz4", "zstd", "gzip", "snappy")
ROUNDS, PER_ROUND = 8, 20


def _send_compressed(bootstrap: str, topic: str, codec: str) -> list[tuple[bytes, list]]:
    """ROUNDS batches of PER_ROUND records (one batch per flush), values that compress (as
    librdkafka sends a batch uncompressed when compressing would not shrink it); every tenth
    record carries its own traceparent."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1000, "acks": "all",
                         "batch.num.messages": PER_ROUND, "compression.type": codec,
                         "client.id": "stamp-test"})
    sent = []
    for r in range(ROUNDS):
        for i in range(PER_ROUND):
            n = r * PER_ROUND + i
            value = f"order-{n}:".encode() + b"{'item': 'widget', 'qty': 1}" * (i % 5 + 2)
            headers = [("app", b"%d" % n)] + ([("traceparent", GIVEN)] if n % 10 == 3 else [])
            producer.produce(topic, value, key=b"k%d" % (n % 3), headers=headers)
            sent.append((value, headers))
        assert producer.flush(30) == 0
    return sent


@pytest.mark.parametrize("codec", CODECS)
def test_compressed_batches_stamped_natively_as_in_python(
        herald_on: HeraldProcess, herald_off: HeraldProcess, topic_name: str,
        codec: str) -> None:
    """librdkafka with compression.type lz4, zstd, gzip and snappy: the same records and
    headers as through the Python path, the same counters (the batches re-encoded with the
    producer's codec among them), and the Produce requests stamped in the engine."""
    total = ROUNDS * PER_ROUND
    keys = {}
    counted = {}
    for proc in (herald_on, herald_off):
        on = proc is herald_on
        topic = f"{topic_name}-{on}"
        create_topic(proc.bootstrap, topic)
        before = scrape(proc)
        sent = _send_compressed(proc.bootstrap, topic, codec)
        sending = scrape(proc)  # before the consumer's requests, which Python reads
        got = consume_all(proc.bootstrap, topic, total)
        assert [m.value() for m in got] == [v for v, _ in sent]
        keys[on] = [[k for k, _ in m.headers()] for m in got]
        for (_, own), m in zip(sent, got, strict=True):
            headers = m.headers()
            assert headers[:len(own)] == own  # the client's own headers, kept in place
            stamped = dict(headers)
            assert TRACEPARENT.fullmatch(stamped["traceparent"])
            assert UUID7.fullmatch(stamped["herald.msg_id"])
            assert stamped["herald.client_id"] == b"stamp-test"
        counted[on] = _counted(proc, before, total, sending)
    assert keys[True] == keys[False]
    on, off = counted[True], counted[False]
    assert on.pop("handovers") < ROUNDS // 2  # the Produce requests never left the engine
    assert off.pop("handovers") == 0
    _assert_same_work(on, off)
    reencoded = on["herald_batches_reencoded_total"]
    assert sum(n for labels, n in reencoded.items() if f"'{codec}'" in str(labels)) == ROUNDS


def test_java_producer_lz4(herald_on: HeraldProcess, herald_off: HeraldProcess) -> None:
    """The Java producer (ProducerPerformance, compression.type=lz4, idempotent): every
    record read back with the same headers as through the Python path; the engine stamped
    its batches (re-encoded lz4 batches counted, few requests handed to Python)."""
    records = 3_000
    lines = {}
    for proc in (herald_on, herald_off):
        topic = f"t-nstamp-jlz4-{uuid.uuid4().hex[:8]}"
        create_topic(proc.bootstrap, topic, partitions=3)
        before = scrape(proc)
        result = run_tool(
            PRODUCER_PERF, "--bootstrap-server", proc.bootstrap, "--topic", topic,
            "--num-records", str(records), "--record-size", "512", "--throughput", "-1",
            *command_properties(PRODUCER_PERF, {"acks": "all", "compression.type": "lz4"}),
            timeout=120,
        )
        assert "Exception" not in result.stderr, result.stderr[-3000:]
        after = scrape(proc)
        result = run_tool(
            CONSOLE_CONSUMER, "--bootstrap-server", proc.bootstrap, "--topic", topic,
            "--from-beginning", "--max-messages", str(records), "--timeout-ms", "30000",
            "--property", "print.headers=true", timeout=120,
        )
        assert f"Processed a total of {records} messages" in result.stderr, \
            result.stderr[-2000:]
        stamped = [line for line in result.stdout.splitlines() if "herald.msg_id:" in line]
        assert len(stamped) == records
        assert all("traceparent:00-" in line for line in stamped)
        lines[proc is herald_on] = {_header_keys(line) for line in stamped}
        assert moved(before, after, "herald_interceptor_records_total", outcome="changed",
                     interceptor="audit") == records
        reencoded = moved(before, after, "herald_batches_reencoded_total", compression="lz4")
        assert reencoded > 0
        if proc is herald_on:
            produced = moved(before, after, "herald_requests_total", api="Produce")
            assert moved(before, after, HANDOVERS, reason="request") < produced / 2
    assert lines[True] == lines[False]


def _header_keys(line: str) -> tuple[str, ...]:
    """The header keys of a console consumer line (`key:value,key:value<TAB>value`)."""
    headers = line.split("\t", 1)[0]
    return tuple(pair.split(":", 1)[0] for pair in headers.split(","))


def test_java_producer(herald_on: HeraldProcess) -> None:
    topic = f"t-nstamp-java-{uuid.uuid4().hex[:8]}"
    create_topic(herald_on.bootstrap, topic, partitions=3)
    records = 5_000
    before = scrape(herald_on)
    result = run_tool(
        PRODUCER_PERF, "--bootstrap-server", herald_on.bootstrap, "--topic", topic,
        "--num-records", str(records), "--record-size", "512", "--throughput", "-1",
        *command_properties(PRODUCER_PERF, {"acks": "all", "compression.type": "none"}),
        timeout=120,
    )
    assert "Exception" not in result.stderr, result.stderr[-3000:]
    result = run_tool(
        CONSOLE_CONSUMER, "--bootstrap-server", herald_on.bootstrap, "--topic", topic,
        "--from-beginning", "--max-messages", str(records), "--timeout-ms", "30000",
        "--property", "print.headers=true", timeout=120,
    )
    assert f"Processed a total of {records} messages" in result.stderr, result.stderr[-2000:]
    lines = [line for line in result.stdout.splitlines() if "herald.msg_id:" in line]
    assert len(lines) == records
    assert all("traceparent:00-" in line for line in lines)
    after = scrape(herald_on)
    assert moved(before, after, "herald_interceptor_records_total", outcome="changed",
                 interceptor="audit") == records
    # Its Produce requests (v13: topics by id) were stamped by the engine, not handed over.
    produced = moved(before, after, "herald_requests_total", api="Produce")
    assert produced > 0
    assert moved(before, after, HANDOVERS, reason="request") < produced / 2
