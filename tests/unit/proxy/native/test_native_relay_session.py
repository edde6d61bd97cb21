"""A `Session` with the native relay on, between socket pairs: the hand-overs between the engine
and the Python pumps keep every byte in order, and a streamed Fetch response whose tail carries
leader hints is finished by Python with its addresses rewritten.

The peers are sockets this test drives with frames it builds; what a real broker and clients do
through the relay is in tests/integration/proxy/native/test_native_relay.py.
"""

from __future__ import annotations

import ssl
import struct
from pathlib import Path

import pytest
import trio

from protocol.messages.fetch_response import (
    FetchableTopicResponse,
    FetchResponse,
    NodeEndpoint,
    PartitionData,
)
from proxy.config.proxy_yaml import parse_config
from proxy.filters.address_rewrite import AddressRewriter
from proxy.filters.api_versions import ApiVersionsNegotiator
from proxy.filters.chain import FilterChain, SessionContext
from proxy.native import path_choice
from proxy.native import relay as native_relay
from proxy.net.transport import PlainTransport, TlsTransport
from proxy.observability.metrics import Metrics
from proxy.session.session import Session
from proxy.upstream.brokers import BrokerDirectory
from tests.support.certs import CertificateAuthority
from tests.support.native_parts import ENGINE, TLS, needs
from tests.support.session_env import session_environment

pytestmark = needs(ENGINE)

FETCH, HEARTBEAT = 1, 12
CONFIG = parse_config({"upstream": {"bootstrap": "127.0.0.1:9092"},
                       "listen": {"bootstrap": "127.0.0.1:0", "advertised_host": "herald",
                                  "broker_port_base": 30000}})


def request(api: int, version: int, corr: int) -> bytes:
    payload = struct.pack(">hhih", api, version, corr, 3) + b"app" + b"\x00" + b"body"
    return struct.pack(">i", len(payload)) + payload


def fetch_response(corr: int, records: bytes, endpoints: list[NodeEndpoint]) -> bytes:
    msg = FetchResponse(session_id=7, node_endpoints=endpoints, responses=[
        FetchableTopicResponse(topic_id=b"\x11" * 16, partitions=[
            PartitionData(partition_index=0, high_watermark=5, last_stable_offset=5,
                          records=records)])])
    payload = struct.pack(">i", corr) + b"\x00" + msg.encode(16)
    return struct.pack(">i", len(payload)) + payload


async def read_exactly(stream: trio.SocketStream, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = await stream.receive_some(n - len(out))
        assert chunk
        out += chunk
    return bytes(out)


async def test_leader_hints_in_a_streamed_fetch_tail_are_rewritten() -> None:
    app, client_end = trio.socket.socketpair()
    upstream_end, broker = trio.socket.socketpair()
    app, client_end = trio.SocketStream(app), trio.SocketStream(client_end)
    upstream_end, broker = trio.SocketStream(upstream_end), trio.SocketStream(broker)
    metrics = Metrics()
    relay = native_relay.NativeRelay(metrics)
    chain = FilterChain([ApiVersionsNegotiator(), AddressRewriter(BrokerDirectory(CONFIG.listen))])
    ctx = SessionContext(client_address="app", listener="bootstrap", upstream_address="broker")
    session = Session(PlainTransport(client_end), PlainTransport(upstream_end), ctx,
                      session_environment(chain, metrics, native=relay))
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(relay.run)
            nursery.start_soon(session.run)
            # The first request goes through Python (the session starts there) ...
            await app.send_all(request(HEARTBEAT, 4, 1))
            assert await read_exactly(broker, len(request(HEARTBEAT, 4, 1))) == request(
                HEARTBEAT, 4, 1)
            await broker.send_all(struct.pack(">iih", 6, 1, 0))
            assert await read_exactly(app, 10) == struct.pack(">iih", 6, 1, 0)
            # ... which then hands the session to the engine: wait until it did.
            with trio.fail_after(5):
                while not relay._waiting:
                    await trio.sleep(0.01)
            await app.send_all(request(FETCH, 16, 2))
            assert await read_exactly(broker, len(request(FETCH, 16, 2))) == request(FETCH, 16, 2)
            hinted = fetch_response(2, b"R" * 300_000,
                                    [NodeEndpoint(node_id=3, host="broker-3.internal", port=9092)])
            nursery.start_soon(broker.send_all, hinted)
            got = await read_exactly(app, len(hinted))
            tail_at = len(hinted) - 40
            assert got[:tail_at] == hinted[:tail_at]  # the streamed part, byte for byte
            msg = FetchResponse.decode(got[4:], 16, 5)
            assert [(e.node_id, e.host, e.port) for e in msg.node_endpoints] == [
                (3, "herald", 30003)]
            assert msg.responses[0].partitions[0].records == b"R" * 300_000
            # The session went back to Python for the tail, and on serving after it.
            await app.send_all(request(HEARTBEAT, 4, 3))
            assert await read_exactly(broker, len(request(HEARTBEAT, 4, 3))) == request(
                HEARTBEAT, 4, 3)
            await broker.send_all(struct.pack(">iih", 6, 3, 0))
            assert await read_exactly(app, 10) == struct.pack(">iih", 6, 3, 0)
            metrics.refresh()
            handovers = {s.labels["reason"]: s.value for m in metrics.registry.collect()
                         if m.name == "herald_native_relay_handovers" for s in m.samples
                         if s.name.endswith("_total")}
            assert handovers.get("response") == 1
            session.drain()
            await app.aclose()
            nursery.cancel_scope.cancel()
    finally:
        relay.close()


async def _tls_pair(server: ssl.SSLContext, client: ssl.SSLContext, herald_is_server: bool
                    ) -> tuple[trio.SSLStream, TlsTransport]:
    """A TLS peer (trio's SSLStream) and Herald's end of the same connection (`TlsTransport`,
    as Herald makes them), handshakes done."""
    a, b = trio.socket.socketpair()
    if herald_is_server:
        peer = trio.SSLStream(trio.SocketStream(a), client, server_hostname="herald")
        end = TlsTransport(trio.SocketStream(b), server, server_side=True)
    else:
        peer = trio.SSLStream(trio.SocketStream(a), server, server_side=True)
        end = TlsTransport(trio.SocketStream(b), client, server_side=False,
                           server_hostname="herald")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(peer.do_handshake)
        nursery.start_soon(end.handshake)
    return peer, end


def _contexts(folder: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    ca = CertificateAuthority(folder)
    cert = ca.issue("herald", "herald", hosts=("herald",))
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert.cert, cert.key)
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.load_verify_locations(ca.pem)
    return server, client


@needs(TLS)
@pytest.mark.parametrize("keylog", [False, True])
async def test_tls_sessions_move_to_the_engine_and_back(tmp_path: Path, keylog: bool) -> None:
    """TLS on both sides: the session goes to the engine after its first request, as a
    plaintext one does, and its frames pass byte for byte through the engine's TLS. A context
    that logs keys through Python keeps the session in Python, serving the same bytes."""
    server, client = _contexts(tmp_path)
    if keylog:
        server.keylog_filename = str(tmp_path / "keys.log")
    app, client_end = await _tls_pair(server, client, herald_is_server=True)
    broker, upstream_end = await _tls_pair(server, client, herald_is_server=False)
    assert (path_choice.tls_refusal(client_end) is not None) == keylog
    metrics = Metrics()
    relay = native_relay.NativeRelay(metrics)
    chain = FilterChain([ApiVersionsNegotiator(), AddressRewriter(BrokerDirectory(CONFIG.listen))])
    ctx = SessionContext(client_address="app", listener="bootstrap", upstream_address="broker")
    session = Session(client_end, upstream_end, ctx, session_environment(chain, metrics, relay))
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(relay.run)
            nursery.start_soon(session.run)
            for corr in range(1, 4):
                # The first goes through Python (a session starts there), the others natively.
                await app.send_all(request(HEARTBEAT, 4, corr))
                ask = request(HEARTBEAT, 4, corr)
                assert await read_exactly(broker, len(ask)) == ask
                answer = struct.pack(">iih", 6, corr, 0)
                await broker.send_all(answer)
                assert await read_exactly(app, 10) == answer
                if corr == 1 and not keylog:
                    with trio.fail_after(5):  # the session went to the engine
                        while not relay._waiting:
                            await trio.sleep(0.01)
            ask = request(FETCH, 11, 9)
            await app.send_all(ask)
            assert await read_exactly(broker, len(ask)) == ask
            big = struct.pack(">ii", 4 + 300_000, 9) + bytes(range(256)) * 1171 + b"e" * 24
            nursery.start_soon(broker.send_all, big)
            assert await read_exactly(app, len(big)) == big
            relay.fold()
            carried = {s.labels["direction"]: s.value for m in metrics.registry.collect()
                       if m.name == "herald_native_relay_tls_bytes" for s in m.samples
                       if s.name.endswith("_total")}
            if keylog:
                assert sum(carried.values()) == 0 and not relay._waiting
            else:
                assert carried["upstream_to_proxy"] >= len(big)
                assert carried["proxy_to_client"] >= len(big)
            session.drain()
            await app.aclose()
            nursery.cancel_scope.cancel()
    finally:
        relay.close()
