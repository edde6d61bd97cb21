"""What ends a session a hostile broker would otherwise keep or turn into an internal error:
`peer_closed` (whether a client has closed its side, read from the TCP state rather than its
bytes, as the pumps may not be reading it while they wait for answers), and broker node ids
Herald cannot advertise."""

from __future__ import annotations

import socket
import struct
import time

import pytest
import trio

from configuration import HostPort
from protocol.errors import CodecError
from proxy.limits.connection_guard import peer_closed
from proxy.serving.config import ListenConfig
from proxy.upstream.brokers import BrokerDirectory


def tcp_pair() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
    return client, server


def settled(check, timeout: float = 5.0) -> bool:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not check() and time.monotonic() < deadline:
        time.sleep(0.01)
    return check()


def test_a_client_that_sends_its_fin_or_resets_has_closed() -> None:
    client, server = tcp_pair()
    try:
        assert not peer_closed(server)
        client.sendall(b"a request the proxy has not read")
        client.shutdown(socket.SHUT_WR)
        assert settled(lambda: peer_closed(server))  # unread bytes notwithstanding
        assert not peer_closed(client)  # the proxy's side is still open
    finally:
        client.close()
        server.close()
    client, server = tcp_pair()
    try:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()  # a reset
        assert settled(lambda: peer_closed(server))
    finally:
        server.close()


def test_trio_sockets_and_what_is_not_tcp() -> None:
    async def check() -> None:
        client, server = tcp_pair()
        with trio.socket.from_stdlib_socket(server) as wrapped:  # what the pumps hold
            assert not peer_closed(wrapped)
            client.close()
            assert settled(lambda: peer_closed(wrapped))

    trio.run(check)
    left, right = socket.socketpair()
    with left, right:
        right.close()
        assert not peer_closed(left)  # no TCP state to read: busy, as before


def test_a_broker_node_id_herald_cannot_advertise_is_a_bad_response() -> None:
    """A node id whose Herald port would be past 65535 (a hostile broker's leader hint, say)
    makes the response one Herald cannot rewrite: the session closes as for any response it
    cannot read (CodecError, a warning), not as for a bug in Herald, and nothing is learnt."""
    directory = BrokerDirectory(ListenConfig(HostPort("127.0.0.1", 9092), "127.0.0.1", 40000))
    with pytest.raises(CodecError, match="broker node id 268435457 does not fit"):
        trio.run(directory.learn, 268435457, "10.0.0.1", 9092)
    assert directory.upstream == {}
    assert trio.run(directory.learn, 3, "10.0.0.1", 9092) == ("127.0.0.1", 40003)
