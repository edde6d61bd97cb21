"""The proxy core at the level of frames: correlation, acks=0, opaque bytes, bad input, failures.

Most tests run Herald in this process (so they can look at its correlation tables) in front of
the real session broker, and talk to it with a frame-level client.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import struct
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
from confluent_kafka.admin import AdminClient

from protocol.api_keys import ApiKey
from protocol.framing import frame
from protocol.messages.api_versions_response import ApiVersionsResponse
from protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from protocol.messages.produce_response import ProduceResponse
from proxy.config.proxy_yaml import parse_config
from proxy.devtools.embedded_kafka import KafkaCluster
from proxy.net import wire
from proxy.net.splice import Splicer
from proxy.server import Proxy
from tests.support import raw_client as raw
from tests.support.clients import consume_all, create_topic
from tests.support.herald_process import HeraldProcess, herald_config


async def start_proxy(nursery: trio.Nursery, upstream: str, **overrides: object) -> Proxy:
    """An in-process Herald on the Python data path (these tests look at its sessions and
    streams; the native relay has tests of its own, which compare it with this path)."""
    overrides.setdefault("performance", {"native_relay": "off"})
    proxy = Proxy(parse_config(herald_config(upstream, **overrides)))
    nursery.start_soon(proxy.serve)
    await proxy.ready.wait()
    return proxy


@pytest.fixture
async def proxy(kafka: KafkaCluster, nursery: trio.Nursery) -> AsyncIterator[Proxy]:
    p = await start_proxy(nursery, kafka.bootstrap)
    yield p
    p.stop()


def bootstrap_of(p: Proxy) -> str:
    return str(p.config.listen.bootstrap)


async def make_topic(address: str, name: str) -> None:
    await trio.to_thread.run_sync(create_topic, address, name)


async def test_acks0_gets_no_response_and_leaves_no_correlation_entry(
    proxy: Proxy, kafka: KafkaCluster, topic_name: str
) -> None:
    await make_topic(kafka.bootstrap, topic_name)
    client = await raw.TrioRawClient.connect(bootstrap_of(proxy))
    await client.send(raw.produce(1, topic_name, [b"fire", b"forget"], acks=0))
    await client.send(raw.api_versions(2))
    first = await client.recv()
    assert first is not None and raw.correlation_id(first) == 2
    (session,) = proxy.sessions
    assert dict(session.in_flight) == {}
    # The records were written all the same.
    got = await trio.to_thread.run_sync(consume_all, kafka.bootstrap, topic_name, 2)
    assert [m.value() for m in got] == [b"fire", b"forget"]
    await client.aclose()


async def test_pipelined_requests_are_answered_in_order(proxy: Proxy) -> None:
    client = await raw.TrioRawClient.connect(bootstrap_of(proxy))
    burst = b"".join(
        raw.api_versions(c) if c % 2 else raw.metadata(c, []) for c in range(100, 160)
    )
    await client.send(burst)
    seen = []
    for _ in range(60):
        payload = await client.recv()
        assert payload is not None
        seen.append(raw.correlation_id(payload))
    assert seen == list(range(100, 160))
    (session,) = proxy.sessions
    assert not session.in_flight
    await client.aclose()


class RecordingRelay:
    """A TCP relay that keeps every byte of every connection, per direction."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.split(",")[0].rsplit(":", 1)
        self.upstream = (host, int(port))
        self.connections: list[tuple[bytearray, bytearray]] = []
        self.port = 0

    async def serve(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, client: trio.SocketStream) -> None:
        upstream = await trio.open_tcp_stream(*self.upstream)
        record = (bytearray(), bytearray())
        self.connections.append(record)

        async def pipe(src: trio.SocketStream, dst: trio.SocketStream, log: bytearray) -> None:
            try:
                while data := await src.receive_some(65536):
                    log += data
                    await dst.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            nursery.cancel_scope.cancel()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(pipe, client, upstream, record[0])
            nursery.start_soon(pipe, upstream, client, record[1])


async def test_frames_nobody_decodes_pass_byte_identical(
    kafka: KafkaCluster, nursery: trio.Nursery, topic_name: str
) -> None:
    await make_topic(kafka.bootstrap, topic_name)
    relay = RecordingRelay(kafka.bootstrap)
    await nursery.start(relay.serve)
    proxy = await start_proxy(nursery, f"127.0.0.1:{relay.port}")
    client = await raw.TrioRawClient.connect(bootstrap_of(proxy))
    # Produce v9 (acks=1), Fetch v12 and ListGroups v3: frames Herald forwards undecoded.
    sent = (raw.produce(7, topic_name, [b"a" * 100, b"b" * 5000])
            + raw.fetch(8, topic_name) + raw.list_groups(9))
    await client.send(sent)
    for corr in (7, 8, 9):
        payload = await client.recv()
        assert payload is not None and raw.correlation_id(payload) == corr
    produced = ProduceResponse.decode(payload_of(client.received, 0), 9, 4 + 1)
    assert produced.responses[0].partition_responses[0].error_code == 0
    ours = [c for c in relay.connections if bytes(c[0]) == sent]
    assert len(ours) == 1, "the relay saw exactly the client's bytes on one connection"
    assert bytes(ours[0][1]) == bytes(client.received)
    await client.aclose()
    proxy.stop()


@pytest.mark.parametrize("splice", [True, False], ids=["splice", "copy"])
async def test_large_responses_stream_through_byte_identical(
    kafka: KafkaCluster, nursery: trio.Nursery, topic_name: str, splice: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fetch responses of 64 KiB and more are forwarded as they arrive (record data spliced
    from socket to socket); the client still gets exactly the broker's bytes. Without splice(2)
    (platforms other than Linux) the same bytes are copied through Herald instead."""
    if not splice:
        monkeypatch.setattr(Splicer, "create", classmethod(lambda cls: None))
    elif not hasattr(os, "splice"):
        pytest.skip("splice(2) is Linux only")
    await make_topic(kafka.bootstrap, topic_name)
    relay = RecordingRelay(kafka.bootstrap)
    await nursery.start(relay.serve)
    proxy = await start_proxy(nursery, f"127.0.0.1:{relay.port}")
    client = await raw.TrioRawClient.connect(bootstrap_of(proxy))
    values = [bytes([i]) * 20_000 for i in range(20)]  # 400 KB in one batch
    await client.send(raw.produce(1, topic_name, values))
    await client.send(raw.metadata(2, [topic_name]))
    assert (await client.recv()) is not None
    meta = await client.recv()
    assert meta is not None
    topic_id = wire.decode_response(ApiKey.METADATA, 12, meta)[1].topics[0].topic_id
    streamed = proxy.metrics.responses_streamed._value.get()
    start = len(client.received)
    # v12: no filter reads it; v16: the address rewriter reads only its tail.
    sent = raw.fetch(3, topic_name) + raw.fetch(4, "", version=16, topic_id=topic_id)
    await client.send(sent)
    bodies = [await client.recv(), await client.recv()]
    for body in bodies:
        assert body is not None and len(body) > 400_000
        assert all(v in body for v in values)
    assert proxy.metrics.responses_streamed._value.get() == streamed + 2
    (session,) = proxy.sessions
    assert (session._splicer is not None) is splice
    ours = [c for c in relay.connections if bytes(c[0]).endswith(sent)]
    assert len(ours) == 1
    assert bytes(ours[0][1]).endswith(bytes(client.received[start:]))
    await client.aclose()
    proxy.stop()


async def test_a_half_closed_client_still_gets_the_response_being_streamed(
    proxy: Proxy, kafka: KafkaCluster, topic_name: str
) -> None:
    """A client that shuts down its sending side while a large response is still on its way
    gets all of it: the session waits for the stream, which is no longer in the correlation
    table, before it closes."""
    await make_topic(kafka.bootstrap, topic_name)
    writer = await raw.TrioRawClient.connect(bootstrap_of(proxy))
    values = [bytes([i]) * 40_000 for i in range(20)]  # 800 KB per batch
    for corr in range(10):
        await writer.send(raw.produce(corr, topic_name, values))
        produced = await writer.recv()
        assert produced is not None
    await writer.aclose()

    # A small receive buffer, and a client that stops reading: the 8 MB response stalls in
    # Herald's stream, whatever the kernel's buffers hold.
    sock = trio.socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    host, port = bootstrap_of(proxy).rsplit(":", 1)
    await sock.connect((host, int(port)))
    stream = trio.SocketStream(sock)
    fetch = FetchRequest(max_wait_ms=100, min_bytes=1, max_bytes=1 << 24, topics=[FetchTopic(
        topic=topic_name, partitions=[FetchPartition(
            partition=0, fetch_offset=0, partition_max_bytes=1 << 24)])])
    streamed = proxy.metrics.responses_streamed._value.get()
    await stream.send_all(raw.request_frame(1, 12, 99, fetch))
    received = bytearray(await stream.receive_some(8))
    with trio.fail_after(10):
        while proxy.metrics.responses_streamed._value.get() == streamed:
            await trio.sleep(0.01)
    await stream.send_eof()
    await trio.sleep(0.5)  # Herald reads the end of the client's requests meanwhile
    with trio.fail_after(30):
        while data := await stream.receive_some(1 << 20):
            received += data
    size = struct.unpack_from(">i", received)[0]
    assert size > 8_000_000
    assert len(received) == 4 + size
    assert raw.correlation_id(bytes(received[4:])) == 99
    await stream.aclose()


def payload_of(stream: bytes, index: int) -> bytes:
    """The `index`-th frame payload of a byte stream."""
    pos = 0
    for _ in range(index):
        pos += 4 + struct.unpack_from(">i", stream, pos)[0]
    size = struct.unpack_from(">i", stream, pos)[0]
    return bytes(stream[pos + 4 : pos + 4 + size])


async def test_bad_frames_close_only_their_own_connection(
    proxy: Proxy, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="herald")
    healthy = await raw.TrioRawClient.connect(bootstrap_of(proxy))
    await healthy.send(raw.api_versions(1))
    assert await healthy.recv() is not None

    oversized = await raw.TrioRawClient.connect(bootstrap_of(proxy))
    await oversized.send(struct.pack(">i", 200 * 1024 * 1024) + b"\x00" * 16)
    assert await oversized.recv() is None

    short = await raw.TrioRawClient.connect(bootstrap_of(proxy))
    await short.send(struct.pack(">i", 3) + b"\x00\x01\x02")
    assert await short.recv() is None

    garbage_produce = await raw.TrioRawClient.connect(bootstrap_of(proxy))
    await garbage_produce.send(raw.request_frame(0, 9, 5, b"\xff\xff\xff\xff\x01"))
    assert await garbage_produce.recv() is None

    # The healthy connection, opened first, still works.
    await healthy.send(raw.api_versions(2))
    payload = await healthy.recv()
    assert payload is not None and raw.correlation_id(payload) == 2

    reasons = [r.fields["reason"] for r in caplog.records if r.getMessage() == "connection_closed"]
    assert any(x.startswith("frame too large") for x in reasons), reasons
    assert any(x.startswith("malformed") for x in reasons), reasons
    assert sum(x.startswith("malformed") for x in reasons) == 2, reasons
    await healthy.aclose()


async def test_api_versions_advertise_only_what_herald_decodes(
    proxy: Proxy, kafka: KafkaCluster
) -> None:
    from proxy.filters.api_versions import codec_range

    async def versions(address: str) -> dict[int, tuple[int, int]]:
        client = await raw.TrioRawClient.connect(address)
        await client.send(raw.api_versions(1))
        payload = await client.recv()
        await client.aclose()
        assert payload is not None
        msg = ApiVersionsResponse.decode(payload, 3, 4)
        return {k.api_key: (k.min_version, k.max_version) for k in msg.api_keys}

    through = await versions(bootstrap_of(proxy))
    direct = await versions(kafka.nodes[0].address)
    assert through.keys() <= direct.keys()
    for key, (low, high) in direct.items():
        codec = codec_range(key)
        if codec is None:
            assert through[key] == (low, high)
        else:
            want = (max(low, codec[0]), min(high, codec[1]))
            assert through[key] == want
    # SaslHandshake v0 would be followed by unframed tokens: only v1 is offered.
    assert through[17][0] == 1


async def test_api_versions_newer_than_herald_are_answered_and_the_session_goes_on(
    proxy: Proxy, kafka: KafkaCluster
) -> None:
    """A client newer than Herald's codec asks ApiVersions in a version Herald cannot read
    (as Kafka 4.4's clients asked v5 of a Herald built from 4.3): Herald answers it as a
    broker answers a version newer than itself (KIP-511), UNSUPPORTED_VERSION in a v0 body
    with the ApiVersions versions it reads, and the connection then serves the version the
    client retries in. Every version up to 127 past the codec, on one connection."""
    from protocol.messages.api_versions_request import ApiVersionsRequest
    from proxy.filters.api_versions import codec_range

    low, newest = codec_range(ApiKey.API_VERSIONS) or (0, 0)
    body = ApiVersionsRequest(client_software_name="raw", client_software_version="1").encode(3)

    async def unknown_version(client: raw.TrioRawClient, version: int, corr: int) -> Any:
        await client.send(raw.request_frame(ApiKey.API_VERSIONS, version, corr, body))
        payload = await client.recv()
        assert payload is not None, f"closed on ApiVersions v{version}"
        assert raw.correlation_id(payload) == corr
        return ApiVersionsResponse.decode(payload, 0, 4)

    client = await raw.TrioRawClient.connect(bootstrap_of(proxy))
    for corr, version in enumerate(range(newest + 1, newest + 128)):
        msg = await unknown_version(client, version, corr)
        assert msg.error_code == 35
        assert [(k.api_key, k.min_version, k.max_version) for k in msg.api_keys] == [
            (ApiKey.API_VERSIONS, low, newest)]
    # The client's retry in the newest version Herald reads: the broker's answer, narrowed.
    await client.send(raw.request_frame(ApiKey.API_VERSIONS, newest, 500, ApiVersionsRequest(
        client_software_name="raw", client_software_version="1")))
    payload = await client.recv()
    assert payload is not None and raw.correlation_id(payload) == 500
    retried = ApiVersionsResponse.decode(payload, newest, 4)
    assert retried.error_code == 0 and len(retried.api_keys) > 20
    await client.aclose()
    # A broker answers a version newer than itself alike.
    direct = await raw.TrioRawClient.connect(kafka.nodes[0].address)
    msg = await unknown_version(direct, newest + 1, 1)
    await direct.aclose()
    assert msg.error_code == 35
    assert ApiKey.API_VERSIONS in {k.api_key for k in msg.api_keys}


async def test_versions_beyond_the_codec_are_answered_forwarded_or_refused_by_name(
    proxy: Proxy, caplog: pytest.LogCaptureFixture
) -> None:
    """Every API key (and three no release defines), one and 127 versions past what Herald
    reads: a request no member reads is forwarded, and the broker answers or closes as it
    does on its own; one a member must read and cannot is refused by name, as a broker
    refuses a version it does not know, never taken for a malformed frame; ApiVersions is
    answered. Another connection, open throughout, is served after the walk."""
    from protocol.api_keys import API_KEYS
    from protocol.messages import REQUESTS

    caplog.set_level(logging.INFO, logger="herald")
    address = bootstrap_of(proxy)
    healthy = await raw.TrioRawClient.connect(address)
    outcomes: dict[str, int] = {}
    chain = proxy.chain
    for api in [*API_KEYS, 200, 1000, 32767]:
        cls = REQUESTS.get(api)
        newest = cls.MAX_VERSION if cls is not None else (
            (API_KEYS[api].max_version or 0) if api in API_KEYS else 0)
        for version in (newest + 1, newest + 127):
            client = await raw.TrioRawClient.connect(address)
            if api in API_KEYS:
                await client.send(raw.request_frame(api, version, 9, b""))
            else:  # header v1 by hand: the codec writes headers of known APIs only
                await client.send(frame(struct.pack(">hhih", api, version, 9, -1)))
            payload = await client.recv(timeout=30)
            await client.aclose()
            unreadable = bool(chain.unreadable(api, version))
            if api == ApiKey.API_VERSIONS:
                assert payload is not None and raw.correlation_id(payload) == 9
                kind = "answered by Herald"
            elif unreadable:
                assert payload is None, (api, version)
                kind = "refused by Herald"
            else:
                kind = "broker answered" if payload is not None else "broker closed"
            outcomes[kind] = outcomes.get(kind, 0) + 1
    await healthy.send(raw.api_versions(2))
    payload = await healthy.recv()
    assert payload is not None and raw.correlation_id(payload) == 2
    await healthy.aclose()
    reasons = [r.fields["reason"] for r in caplog.records if r.getMessage() == "connection_closed"]
    assert not any(x.startswith("malformed") for x in reasons), reasons
    refused = [x for x in reasons if x.startswith("unreadable version")]
    assert len(refused) == outcomes["refused by Herald"], (reasons, outcomes)
    assert outcomes["answered by Herald"] == 2
    assert outcomes.get("broker answered", 0) + outcomes.get("broker closed", 0) > 100


def test_admin_operations_see_only_herald_addresses(herald: HeraldProcess) -> None:
    admin = AdminClient({"bootstrap.servers": herald.bootstrap})
    cluster = admin.describe_cluster().result(timeout=30)
    assert [(n.id, n.host, n.port) for n in cluster.nodes] == [
        (1, "127.0.0.1", herald.port_base + 1)
    ]
    assert cluster.controller is not None
    # FindCoordinator (batched v4+ from librdkafka) is rewritten too.
    group = f"coord-{time.time_ns()}"
    described = admin.describe_consumer_groups([group])[group].result(timeout=30)
    assert (described.coordinator.host, described.coordinator.port) == (
        "127.0.0.1", herald.port_base + 1
    )


async def test_broker_going_away_closes_its_client_connections(
    private_cluster: KafkaCluster, nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="herald")
    proxy = await start_proxy(nursery, private_cluster.bootstrap)
    client = await raw.TrioRawClient.connect(bootstrap_of(proxy))
    await client.send(raw.api_versions(1))
    assert await client.recv() is not None
    other = await raw.TrioRawClient.connect(bootstrap_of(proxy))

    await trio.to_thread.run_sync(private_cluster.stop_node, 1)
    assert await client.recv(timeout=30) is None
    assert await other.recv(timeout=30) is None
    assert any(r.getMessage() == "connection_closed"
               and r.fields["reason"] == "upstream closed the connection"
               for r in caplog.records)

    # Herald itself is unharmed: it accepts, and serves again once the broker is back.
    await trio.to_thread.run_sync(private_cluster.restart_node, 1)
    again = await raw.TrioRawClient.connect(bootstrap_of(proxy))
    await again.send(raw.api_versions(5))
    payload = await again.recv()
    assert payload is not None and raw.correlation_id(payload) == 5
    await again.aclose()
    proxy.stop()


def test_sigterm_lets_in_flight_requests_finish(kafka: KafkaCluster, topic_name: str) -> None:
    create_topic(kafka.bootstrap, topic_name)
    with HeraldProcess(herald_config(kafka.bootstrap, shutdown={"grace_s": 10})) as herald:
        client = raw.SocketRawClient(herald.bootstrap)
        client.send(raw.api_versions(1))
        assert client.recv() is not None
        # A long-poll Fetch on an empty partition: the broker holds it for 3 s.
        started = time.monotonic()
        client.send(raw.fetch(2, topic_name, max_wait_ms=3000))
        time.sleep(0.5)
        herald.signal(signal.SIGTERM)
        herald.wait_for_log("event=shutdown_started")
        # The listener closes as the drain begins: new connections are refused.
        address = ("127.0.0.1", int(herald.bootstrap.rsplit(":")[1]))
        deadline = time.monotonic() + 5
        while True:
            try:
                socket.create_connection(address, 2).close()
            except OSError:
                break
            assert time.monotonic() < deadline, "still accepting after shutdown_started"
            time.sleep(0.05)
        payload = client.recv()
        assert payload is not None and raw.correlation_id(payload) == 2
        assert time.monotonic() - started >= 2.5
        assert client.recv() is None  # then the connection is closed
        assert herald.wait(timeout=15) == 0
        client.close()
        assert "shutdown_started" in herald.logs()


def test_sighup_reloads_the_chains_and_refuses_a_bad_file(
    kafka: KafkaCluster, topic_name: str
) -> None:
    import yaml
    from confluent_kafka import Producer

    def chains(value: str) -> dict:
        return {"produce": [{"type": "insert_header", "header": "v", "value": value}]}

    config = herald_config(kafka.bootstrap, interceptors=chains("one"))
    with HeraldProcess(config) as herald:
        producer = Producer({"bootstrap.servers": herald.bootstrap})

        def send(value: bytes) -> None:
            producer.produce(topic_name, value)
            assert producer.flush(30) == 0

        send(b"1")
        herald.config_path.write_text(yaml.safe_dump({**config, "interceptors": chains("two")}))
        herald.signal(signal.SIGHUP)
        herald.wait_for_log("event=config_reloaded")
        send(b"2")
        bad = {**config, "interceptors": {"produce": [{"type": "insert_header"}]}}
        herald.config_path.write_text(yaml.safe_dump(bad))
        herald.signal(signal.SIGHUP)
        herald.wait_for_log("event=config_reload_rejected")
        send(b"3")
        got = consume_all(herald.bootstrap, topic_name, 3)
        assert [(m.value(), m.headers()) for m in got] == [
            (b"1", [("v", b"one")]), (b"2", [("v", b"two")]), (b"3", [("v", b"two")]),
        ]
        logs = herald.logs()
        assert "event=config_reloaded" in logs
        assert "event=config_reload_rejected" in logs
        assert "interceptors.produce[0].header: required" in logs


async def test_topic_ids_herald_has_not_learned_are_refused_not_let_through(
    kafka: KafkaCluster, nursery: trio.Nursery, topic_name: str
) -> None:
    """Produce v13 names topics by id only. An id no Metadata response has named yet cannot be
    checked against the chains, so its records are refused (retriable) rather than written
    unchecked; after the client's Metadata request (through Herald) they are accepted."""
    if kafka.version.startswith("3."):
        pytest.skip("Produce v13 needs a Kafka 4 broker")
    from confluent_kafka import Consumer, TopicCollection, TopicPartition

    await make_topic(kafka.bootstrap, topic_name)  # directly: Herald never saw its id

    def topic_id() -> bytes:
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        desc = admin.describe_topics(TopicCollection([topic_name]))[topic_name].result(30)
        uid = desc.topic_id
        return struct.pack(">qq", uid.get_most_significant_bits(),
                           uid.get_least_significant_bits())

    tid = await trio.to_thread.run_sync(topic_id)
    proxy = await start_proxy(nursery, kafka.bootstrap,
                              interceptors={"produce": [{"type": "audit"}]})
    client = await raw.TrioRawClient.connect(bootstrap_of(proxy))
    forged = [("herald.principal", b"User:admin")]

    def error_of(payload: bytes) -> int:
        msg = ProduceResponse.decode(payload, 13, 5)  # header v1: id + empty tag section
        return msg.responses[0].partition_responses[0].error_code

    await client.send(raw.produce(1, "", [b"early"], version=13, topic_id=tid, headers=forged))
    assert error_of(await client.recv()) == 100  # UNKNOWN_TOPIC_ID

    def high_watermark() -> int:
        probe = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "probe"})
        try:
            return probe.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=10)[1]
        finally:
            probe.close()

    assert await trio.to_thread.run_sync(high_watermark) == 0  # nothing was written

    await client.send(raw.metadata(2, [topic_name]))
    assert await client.recv() is not None
    await client.send(raw.produce(3, "", [b"later"], version=13, topic_id=tid, headers=forged))
    assert error_of(await client.recv()) == 0
    got = await trio.to_thread.run_sync(consume_all, kafka.bootstrap, topic_name, 1)
    assert got[0].value() == b"later"
    assert ("herald.principal", b"User:admin") not in got[0].headers()
    await client.aclose()
    proxy.stop()

    # The fetch path likewise: a fresh Herald with a fetch chain hands out no records of an
    # unnamed topic id (they could carry what the chain must strip) until Metadata named it.
    from protocol.messages.fetch_response import FetchResponse
    from protocol.records import split_batches

    fresh = await start_proxy(nursery, kafka.bootstrap, interceptors={
        "fetch": [{"type": "drop_headers", "headers": ["prefix:herald."]}]})
    reader = await raw.TrioRawClient.connect(bootstrap_of(fresh))

    async def fetched(corr: int) -> tuple[int, list]:
        await reader.send(raw.fetch(corr, "", version=13, topic_id=tid))
        msg = FetchResponse.decode(await reader.recv(), 13, 5)
        part = msg.responses[0].partitions[0]
        batches = split_batches(part.records or b"")
        return part.error_code, [r for b in batches for r in b.records]

    assert await fetched(4) == (100, [])
    await reader.send(raw.metadata(5, [topic_name]))
    assert await reader.recv() is not None
    error, records = await fetched(6)
    assert error == 0 and [r.value for r in records] == [b"later"]
    assert not [k for k, _ in records[0].headers if k.startswith("herald.")]
    await reader.aclose()
    fresh.stop()
