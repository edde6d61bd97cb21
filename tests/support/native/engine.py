"""The native relay engine over socket pairs, with frames built here: the test plays the client
application on one pair and the broker on the other while the engine holds the proxy's two
ends."""

from __future__ import annotations

import select
import socket
import struct
import threading
import time

from proxy.native import path_choice
from proxy.native import relay as native_relay

METADATA, PRODUCE, FETCH, API_VERSIONS = 3, 0, 1, 18


MAX_VERSION = native_relay.MAX_VERSION


def table(*pairs: tuple[int, int]) -> bytes:
    out = bytearray(native_relay.MAX_API * MAX_VERSION)
    for api, version in pairs:
        out[api * MAX_VERSION + version] = 1
    return bytes(out)


def request(api: int, version: int, corr: int, body: bytes = b"", client_id: bytes = b"app",
            flexible: bool = False) -> bytes:
    head = struct.pack(">hhih", api, version, corr, len(client_id)) + client_id
    if flexible:
        head += b"\x00"  # no tagged fields
    payload = head + body
    return struct.pack(">i", len(payload)) + payload


def response(corr: int, body: bytes = b"\x00\x00") -> bytes:
    payload = struct.pack(">i", corr) + body
    return struct.pack(">i", len(payload)) + payload


def tcp_pair() -> tuple[socket.socket, socket.socket]:
    """Two connected TCP sockets over loopback: what the engine holds in a real proxy."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        near = socket.create_connection(listener.getsockname())
        far, _ = listener.accept()
    return near, far


class Rig:
    """An engine, a client socket pair and an upstream socket pair."""

    def __init__(self, allowed: bytes, max_frame: int = 1 << 20, max_in_flight: int = 100,
                 idle: float = 600.0, frame: float = 60.0, prefill: bytes = b"",
                 tcp: bool = False, grow_limit: int = -1, engine: object | None = None) -> None:
        """`grow_limit` >= 0: what the engine's buffers may grow by in all; `engine`: an
        engine made elsewhere (a `NativeRelay`'s) instead of one of the rig's own."""
        self.engine = engine if engine is not None else native_relay._relay.Engine(
            (0.001, 0.01, 0.1, 1.0), grow_limit)
        pair = tcp_pair if tcp else socket.socketpair
        self.app, self.client_end = pair()
        self.upstream_end, self.broker = pair()
        for s in (self.app, self.broker):
            s.settimeout(5)
        for s in (self.client_end, self.upstream_end):
            s.setblocking(False)
        self.held: list[socket.socket] = []  # more sessions' ends (`hold`), closed last
        self.sid = native_relay.next_session_id()
        self.engine.register(self.sid, self.client_end.fileno(), self.upstream_end.fileno(),
                             allowed, max_frame, max_in_flight, 64 * 1024, idle, frame, prefill)

    def recv_exactly(self, sock: socket.socket, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            assert chunk, f"stream ended after {len(out)} of {n} bytes"
            out += chunk
        return bytes(out)

    def nothing_on(self, sock: socket.socket, wait: float = 0.2) -> bool:
        ready, _, _ = select.select([sock], [], [], wait)
        return not ready

    def wait_handover(self, timeout: float = 5.0) -> native_relay.Handover:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            select.select([self.engine.notify_fd], [], [], 0.1)
            if self.sid in self.engine.events():
                return native_relay.Handover(*self.engine.take(self.sid))
        raise AssertionError("the engine did not hand the session over")

    def replan(self, allowed: bytes, stamp: tuple | None = None, fetch: tuple | None = None
               ) -> None:
        """Take the session back and register it again with a stamp or fetch plan."""
        self.engine.stop(self.sid)
        self.wait_handover()
        self.sid += 10_000
        self.engine.register(self.sid, self.client_end.fileno(), self.upstream_end.fileno(),
                             allowed, 1 << 20, 100, 64 * 1024, 600.0, 60.0, b"", stamp, fetch)

    def send_in_pieces(self, sock: socket.socket, data: bytes) -> threading.Thread:
        """Send `data` from a thread in writes of 1000 bytes (frames split across many)."""

        def send() -> None:
            for i in range(0, len(data), 1000):
                sock.sendall(data[i:i + 1000])

        sender = threading.Thread(target=send)
        sender.start()
        return sender

    def hold(self, allowed: bytes) -> None:
        """One more session on the engine, idle: its peers never send."""
        client, client_end = socket.socketpair()
        upstream_end, broker = socket.socketpair()
        for s in (client_end, upstream_end):
            s.setblocking(False)
        self.held += [client, client_end, upstream_end, broker]
        self.engine.register(native_relay.next_session_id(), client_end.fileno(),
                             upstream_end.fileno(), allowed, 1 << 20, 100, 64 * 1024, 600.0,
                             60.0, b"")

    def close(self) -> None:
        self.engine.close()
        for s in (self.app, self.client_end, self.upstream_end, self.broker, *self.held):
            s.close()


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def checked_table() -> bytes:
    checked = bytearray(native_relay.MAX_API * MAX_VERSION)
    checked[PRODUCE * MAX_VERSION + 10] = path_choice.UNLESS_TAGGED
    checked[FETCH * MAX_VERSION + 16] = path_choice.UNLESS_TAGGED
    return bytes(checked)


def send_behind(sock: socket.socket, data: bytes) -> None:
    """Send from a thread: more than socket buffers hold, while the test reads the far end."""
    threading.Thread(target=sock.sendall, args=(data,), daemon=True).start()


def fetches(rig: Rig, *corrs: int) -> None:
    frames = b"".join(request(FETCH, 16, c, flexible=True) for c in corrs)
    rig.app.sendall(frames)
    assert rig.recv_exactly(rig.broker, len(frames)) == frames
