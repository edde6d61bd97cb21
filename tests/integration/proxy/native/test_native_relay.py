"""The native relay (`performance.native_relay: auto`) through a real broker, compared with the
Python path (`off`): the same records arrive, the metrics count the same requests, and frames
a filter reads still go through the filter.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from functools import partial

import pytest
from confluent_kafka import Producer

from bench.bench_proxy import send
from proxy.devtools.embedded_kafka import KafkaCluster
from tests.support.clients import consume_all, create_topic
from tests.support.herald_process import HeraldProcess
from tests.support.java_tools import CONSOLE_CONSUMER, PRODUCER_PERF, run_tool
from tests.support.metrics import moved, scrape, wait_for
from tests.support.native_herald import native_herald
from tests.support.native_parts import ENGINE, needs

pytestmark = needs(ENGINE)

HANDOVERS = "herald_native_relay_handovers_total"
PYTHON_PATH = "herald_python_path_total"


@pytest.fixture(scope="module")
def herald_for(kafka: KafkaCluster) -> Callable[[str], HeraldProcess]:
    return partial(native_herald, kafka)


def _produce(bootstrap: str, topic: str, values: list[bytes], **conf: object) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, **conf})
    for value in values:
        producer.produce(topic, value, headers=[("h", value[:8])])
        assert producer.flush(30) == 0  # one Produce request per record


def test_same_records_and_request_counts_on_and_off(
    herald_on: HeraldProcess, herald_off: HeraldProcess, topic_name: str
) -> None:
    values = [f"record-{i}-".encode() * (i % 50 + 1) for i in range(200)]
    counted = {}
    for proc in (herald_on, herald_off):
        topic = f"{topic_name}-{proc is herald_on}"
        create_topic(proc.bootstrap, topic)
        before = scrape(proc)
        _produce(proc.bootstrap, topic, values, acks="all")
        got = consume_all(proc.bootstrap, topic, len(values))
        assert [m.value() for m in got] == values
        assert [m.headers() for m in got] == [[("h", v[:8])] for v in values]
        # Compared once they agree (for a while): the closing consumer's last requests, read
        # from it, may not have been forwarded yet at the first scrape.
        after = wait_for(proc, lambda s, b=before: moved(
            b, s, "herald_request_duration_seconds_count", api="Produce") >= len(values)
            and moved(b, s, "herald_bytes_total", direction="client_to_proxy") == moved(
                b, s, "herald_bytes_total", direction="proxy_to_upstream"))
        counted[proc is herald_on] = (
            moved(before, after, "herald_requests_total", api="Produce"),
            moved(before, after, "herald_request_duration_seconds_count", api="Produce"),
            moved(before, after, HANDOVERS),
        )
        # Every byte read from one side went to the other.
        assert moved(before, after, "herald_bytes_total", direction="client_to_proxy") == moved(
            before, after, "herald_bytes_total", direction="proxy_to_upstream")
    assert counted[True][:2] == counted[False][:2] == (len(values), len(values))
    assert counted[True][2] > 0  # the engine carried these sessions
    assert counted[False][2] == 0


def test_python_path_says_why(herald_on: HeraldProcess, herald_off: HeraldProcess,
                              topic_name: str) -> None:
    """`herald_python_path_total`: with the engine off every session and request is counted
    as Python's for that reason; with it on, no session is, and of the requests only those a
    filter reads (and a few between native phases)."""
    values = [f"v{i}".encode() for i in range(100)]
    moves = {}
    for proc in (herald_on, herald_off):
        topic = f"{topic_name}-{proc is herald_on}"
        create_topic(proc.bootstrap, topic)
        before = scrape(proc)
        _produce(proc.bootstrap, topic, values, acks=1)
        after = scrape(proc)
        moves[proc is herald_on] = {
            "sessions": moved(before, after, PYTHON_PATH, scope="session"),
            "off": moved(before, after, PYTHON_PATH, scope="session", reason="native_relay_off"),
            "produce": moved(before, after, PYTHON_PATH, scope="frame", api="Produce"),
            "metadata": moved(before, after, PYTHON_PATH, scope="frame", reason="filter",
                              api="Metadata"),
        }
    off, on = moves[False], moves[True]
    assert off["sessions"] == off["off"] >= 1
    assert off["produce"] == len(values)
    assert on["sessions"] == 0
    assert on["metadata"] >= 1
    assert on["produce"] < len(values) / 4, on


def test_metadata_mid_stream_hands_over_and_back(herald_on: HeraldProcess,
                                                 topic_name: str) -> None:
    create_topic(herald_on.bootstrap, topic_name)
    before = scrape(herald_on)
    producer = Producer({"bootstrap.servers": herald_on.bootstrap, "linger.ms": 0, "acks": 1})
    sent = []
    for i in range(300):
        value = f"v{i}".encode()
        producer.produce(topic_name, value)
        sent.append(value)
        if i % 50 == 25:
            # A Metadata request on the producer's broker connection, between its Produce
            # requests: the address rewriter reads it, so Python takes the session for it.
            producer.list_topics(topic_name, timeout=10)
        if i % 10 == 0:
            assert producer.flush(30) == 0
    assert producer.flush(30) == 0
    got = consume_all(herald_on.bootstrap, topic_name, len(sent))
    assert [m.value() for m in got] == sent
    after = scrape(herald_on)
    assert moved(before, after, HANDOVERS, reason="request") >= 5
    assert moved(before, after, "herald_requests_total", api="Produce") >= 30


def test_java_producer_and_consumer(herald_on: HeraldProcess) -> None:
    topic = f"t-native-java-{uuid.uuid4().hex[:8]}"
    create_topic(herald_on.bootstrap, topic, partitions=3)
    records = 20_000
    result = run_tool(
        PRODUCER_PERF, "--bootstrap-server", herald_on.bootstrap, "--topic", topic,
        "--num-records", str(records), "--record-size", "1024", "--throughput", "-1",
        "--command-property", "acks=all", timeout=120,
    )
    assert "Exception" not in result.stderr, result.stderr[-3000:]
    summary = [line for line in result.stdout.splitlines() if "99th" in line]
    assert summary and re.match(rf"{records} records sent", summary[0]), result.stdout
    result = run_tool(
        CONSOLE_CONSUMER, "--bootstrap-server", herald_on.bootstrap, "--topic", topic,
        "--from-beginning", "--max-messages", str(records), "--timeout-ms", "30000",
        timeout=120,
    )
    assert f"Processed a total of {records} messages" in result.stderr, result.stderr[-2000:]


def test_large_records_are_spliced_through_byte_for_byte(herald_on: HeraldProcess,
                                                        topic_name: str) -> None:
    # Records of 100-700 KB: Produce bodies and Fetch records far above the engine's buffers,
    # which go socket to socket through its pipes.
    values = [bytes([i % 251]) * 1000 + uuid.uuid4().bytes * (6_000 + 1_200 * (i % 32))
              for i in range(40)]
    create_topic(herald_on.bootstrap, topic_name)
    before = scrape(herald_on)
    producer = Producer({"bootstrap.servers": herald_on.bootstrap, "linger.ms": 50,
                         "acks": "all", "message.max.bytes": 1_000_000})
    for value in values:
        producer.produce(topic_name, value, headers=[("n", value[:4])])
    assert producer.flush(60) == 0
    got = consume_all(herald_on.bootstrap, topic_name, len(values))
    assert [m.value() for m in got] == values
    assert [m.headers() for m in got] == [[("n", v[:4])] for v in values]
    after = scrape(herald_on)
    payload = sum(map(len, values))
    assert moved(before, after, "herald_native_relay_spliced_bytes_total") > payload


def test_a_producer_that_never_pauses_gets_back_to_the_engine(herald_on: HeraldProcess,
                                                              topic_name: str) -> None:
    # librdkafka at full speed always has a request partly read: the Python pumps must hand
    # the session back with that part, or after its first Metadata request (librdkafka
    # refreshes every 5 minutes) the producer would stay on the Python path for good.
    create_topic(herald_on.bootstrap, topic_name, partitions=3)
    failed = []
    producer = Producer({"bootstrap.servers": herald_on.bootstrap, "acks": "all",
                         "on_delivery": lambda err, msg: err and failed.append(err)})
    value = b"v" * 1024
    send(producer, topic_name, value, [], 0.001)
    assert producer.flush(30) == 0
    before = scrape(herald_on)
    for i in range(60_000):
        send(producer, topic_name, value, [], 0.001)
        if i % 20_000 == 5_000:
            producer.list_topics(topic_name, timeout=10)  # a Metadata request: Python's
            last_metadata = scrape(herald_on)
    assert producer.flush(60) == 0 and not failed
    after = scrape(herald_on)
    assert moved(before, after, HANDOVERS, reason="request") >= 3  # back after each
    # After the last Metadata request, 15 MB more: the engine carried them.
    assert moved(last_metadata, after, "herald_native_relay_spliced_bytes_total") > 5e6


def test_a_chain_on_produce_still_sees_every_record(kafka: KafkaCluster, topic_name: str) -> None:
    chains = {"produce": [{"type": "insert_header", "header": "app.id", "value": "checkout"}]}
    with native_herald(kafka, "auto", interceptors=chains) as proc:
        create_topic(proc.bootstrap, topic_name)
        before = scrape(proc)
        values = [f"r{i}".encode() for i in range(100)]
        _produce(proc.bootstrap, topic_name, values, acks="all")
        got = consume_all(proc.bootstrap, topic_name, len(values))
        assert [m.value() for m in got] == values
        assert all(("app.id", b"checkout") in m.headers() for m in got)
        after = scrape(proc)
        assert moved(before, after, "herald_requests_total", api="Produce") == len(values)
        # The sessions did run on the engine, and came back to Python for the Produce
        # requests (which is why every record carries the header).
        assert moved(before, after, HANDOVERS, reason="request") >= 1
