"""TLS sessions on the native relay engine (`proxy/native/relay_tls.c`) over socket pairs.

Herald's two ends are `ssl.SSLSocket`s whose handshakes Python makes, as `TlsTransport` does;
the engine then carries on those very connections. The application and the broker are TLS
peers on plain sockets through `ssl.SSLObject` over memory BIOs, so a test sees (and may
tamper with) every byte on the wire. What Python does after a hand-over (the reference path)
is played here on the same `SSLSocket`s: it must find each connection exactly where the engine
left it.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from pathlib import Path

import pytest

from proxy.native import relay as native_relay
from tests.support.certs import CertificateAuthority
from tests.support.native.engine import (
    API_VERSIONS,
    FETCH,
    METADATA,
    request,
    response,
    table,
)
from tests.support.native_parts import TLS, needs

pytestmark = needs(TLS)

VERSIONS = {"1.2": ssl.TLSVersion.TLSv1_2, "1.3": ssl.TLSVersion.TLSv1_3}
ALLOWED = table((API_VERSIONS, 3), (FETCH, 12))


class Contexts:
    """The four sides' contexts, at one TLS version: the application trusts Herald's listener
    certificate, Herald trusts the broker's."""

    def __init__(self, folder: Path, version: str) -> None:
        ca = CertificateAuthority(folder)
        herald, broker = ca.issue("herald", "herald"), ca.issue("broker", "broker")
        pinned = VERSIONS[version]
        self.herald_server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.herald_server.load_cert_chain(herald.cert, herald.key)
        self.broker = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.broker.load_cert_chain(broker.cert, broker.key)
        self.app = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        self.herald_client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        for ctx in (self.app, self.herald_client):
            ctx.load_verify_locations(ca.pem)
            ctx.check_hostname = False
        for ctx in (self.herald_server, self.broker, self.app, self.herald_client):
            ctx.minimum_version = ctx.maximum_version = pinned


@pytest.fixture(scope="module", params=list(VERSIONS))
def contexts(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
             ) -> Contexts:
    return Contexts(tmp_path_factory.mktemp(f"tls{request.param}"), request.param)


class Peer:
    """A TLS peer on a plain socket, whose ciphertext the test holds."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext, server_side: bool) -> None:
        self.sock = sock
        sock.settimeout(5)
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_side=server_side)

    def handshake(self) -> None:
        while True:
            try:
                self.tls.do_handshake()
                self.sock.sendall(self.outgoing.read())
                return
            except ssl.SSLWantReadError:
                self.sock.sendall(self.outgoing.read())
                self._fill()

    def _fill(self) -> None:
        data = self.sock.recv(1 << 16)
        assert data, "the connection ended"
        self.incoming.write(data)

    def seal(self, data: bytes) -> bytes:
        """`data` as the records this peer would send, not sent."""
        self.tls.write(data)
        return self.outgoing.read()

    def send(self, data: bytes) -> None:
        self.sock.sendall(self.seal(data))

    def recv_exactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            try:
                out += self.tls.read(n - len(out))
            except ssl.SSLWantReadError:
                self._fill()
        return bytes(out)


def python_recv_exactly(sock: ssl.SSLSocket, n: int) -> bytes:
    """What the Python path reads from one of Herald's ends, after a hand-over."""
    sock.settimeout(5)
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        assert chunk, "the connection ended"
        out += chunk
    return bytes(out)


class TlsRig:
    """An engine session with TLS on both sides: app <-> Herald <-> broker."""

    def __init__(self, engine: object, ctx: Contexts, allowed: bytes = ALLOWED) -> None:
        self.engine = engine
        self.allowed = allowed
        app_sock, client_end = socket.socketpair()
        upstream_end, broker_sock = socket.socketpair()
        self.client_end = ctx.herald_server.wrap_socket(client_end, server_side=True,
                                                        do_handshake_on_connect=False)
        self.upstream_end = ctx.herald_client.wrap_socket(upstream_end,
                                                          do_handshake_on_connect=False)
        self.app = Peer(app_sock, ctx.app, server_side=False)
        self.broker = Peer(broker_sock, ctx.broker, server_side=True)
        for peer, end in ((self.app, self.client_end), (self.broker, self.upstream_end)):
            end.settimeout(5)
            herald_side = threading.Thread(target=end.do_handshake)
            herald_side.start()
            peer.handshake()
            herald_side.join()
        self.sid = native_relay.next_session_id()

    def register(self, prefill: bytes = b"") -> None:
        for end in (self.client_end, self.upstream_end):
            end.setblocking(False)
        self.sid += 10_000
        self.engine.register(
            self.sid, self.client_end.fileno(), self.upstream_end.fileno(), self.allowed,
            8 << 20, 100, 64 * 1024, 600.0, 60.0, prefill,
            client_tls=self.client_end._sslobj, upstream_tls=self.upstream_end._sslobj)

    def wait_handover(self) -> native_relay.Handover:
        import select
        for _ in range(100):
            select.select([self.engine.notify_fd], [], [], 0.1)
            if self.sid in self.engine.events():
                return native_relay.Handover(*self.engine.take(self.sid))
        raise AssertionError("the engine did not hand the session over")

    def drain(self) -> None:
        """Stop the phase: nothing may be left unforwarded or in flight."""
        self.engine.stop(self.sid)
        state = self.wait_handover()
        assert (state.reason, state.client, state.upstream, state.in_flight) == (
            "drain", b"", b"", [])

    def close(self) -> None:
        for s in (self.client_end, self.upstream_end, self.app.sock, self.broker.sock):
            s.close()


@pytest.fixture
def engine():
    made = native_relay._relay.Engine((0.001, 0.01, 0.1, 1.0))
    yield made
    made.close()


@pytest.fixture
def rigs(engine, contexts: Contexts):
    made: list[TlsRig] = []

    def make(allowed: bytes = ALLOWED) -> TlsRig:
        rig = TlsRig(engine, contexts, allowed)
        made.append(rig)
        return rig

    yield make
    for rig in made:
        rig.close()


def python_round_trip(rig: TlsRig, corr: int) -> None:
    """One request and its response through Herald's ends by the Python path: the TLS
    connections go on where the engine left them."""
    ask = request(API_VERSIONS, 3, corr, b"\x00\x00", flexible=True)
    rig.app.send(ask)
    got = python_recv_exactly(rig.client_end, len(ask))
    assert got == ask
    rig.upstream_end.sendall(got)
    assert rig.broker.recv_exactly(len(ask)) == ask
    answer = response(corr, b"p" * 300)
    rig.broker.send(answer)
    rig.client_end.sendall(python_recv_exactly(rig.upstream_end, len(answer)))
    assert rig.app.recv_exactly(len(answer)) == answer


def native_round_trip(rig: TlsRig, corr: int, size: int) -> None:
    """One Fetch request and its response of `size` bytes through the engine."""
    ask = request(FETCH, 12, corr, b"y" * 2000, flexible=True)
    rig.app.send(ask)
    assert rig.broker.recv_exactly(len(ask)) == ask
    answer = response(corr, b"z" * size)
    rig.broker.send(answer)
    assert rig.app.recv_exactly(len(answer)) == answer


def test_frames_pass_byte_for_byte_through_tls_on_both_sides(rigs, engine) -> None:
    rig = rigs()
    rig.register()
    requests = request(API_VERSIONS, 3, 1, b"\x00\x00", flexible=True) + request(
        FETCH, 12, 2, b"x" * 70_000, flexible=True)
    for i in range(0, 203, 7):  # frames split across many records
        rig.app.send(requests[i:i + 7])
    rig.app.send(requests[203:])  # and records of up to 16 KiB
    assert rig.broker.recv_exactly(len(requests)) == requests
    # Far above every buffer, written while the application does not read: backpressure,
    # partial writes of records, and reads that stop and go on.
    responses = response(1, b"v" * 100) + response(2, bytes(range(256)) * 16_000)
    sender = threading.Thread(target=rig.broker.send, args=(responses,))
    sender.start()
    assert rig.app.recv_exactly(len(responses)) == responses
    sender.join()
    rig.drain()
    counted, _ = engine.collect()
    assert counted == (len(requests), len(requests), len(responses), len(responses))
    assert engine.tls_bytes == counted  # every byte went through TLS, none spliced
    assert engine.spliced == 0
    python_round_trip(rig, 3)  # the Python path carries on the same connections
    for end in (rig.client_end, rig.upstream_end):  # and waits for more, as its pumps do
        end.setblocking(False)
        with pytest.raises(ssl.SSLWantReadError):
            end.recv(1)
    rig.register()  # then the engine again
    native_round_trip(rig, 4, 5000)
    rig.drain()


def test_hand_over_and_resume_mid_stream(rigs) -> None:
    rig = rigs()
    rig.register()
    first = request(FETCH, 12, 1, b"a" * 10, flexible=True)
    rig.app.send(first)
    assert rig.broker.recv_exactly(len(first)) == first
    rig.broker.send(response(1, b"r" * 50))
    assert rig.app.recv_exactly(len(response(1, b"r" * 50))) == response(1, b"r" * 50)
    metadata = request(METADATA, 12, 2, b"\x01\x00\x00", flexible=True)  # not in the table
    three = request(FETCH, 12, 3, b"b" * 10, flexible=True)
    four = request(FETCH, 12, 4, b"c" * 3000, flexible=True)
    rig.app.send(metadata + three + four[:5])
    state = rig.wait_handover()
    assert (state.reason, state.client, state.in_flight) == (
        "request", metadata + three + four[:5], [])
    # Python forwards the Metadata request and its answer...
    rig.upstream_end.settimeout(5)
    rig.upstream_end.sendall(metadata)
    assert rig.broker.recv_exactly(len(metadata)) == metadata
    rig.broker.send(response(2, b"m" * 40))
    rig.client_end.settimeout(5)
    rig.client_end.sendall(python_recv_exactly(rig.upstream_end, len(response(2, b"m" * 40))))
    assert rig.app.recv_exactly(len(response(2, b"m" * 40))) == response(2, b"m" * 40)
    # ...and hands the session back with the frames after it, the last one partial.
    rig.register(prefill=three + four[:5])
    rig.app.send(four[5:])
    assert rig.broker.recv_exactly(len(three) + len(four)) == three + four
    rig.broker.send(response(3) + response(4, b"d" * 20_000))
    answers = response(3) + response(4, b"d" * 20_000)
    assert rig.app.recv_exactly(len(answers)) == answers
    rig.drain()


def test_records_read_ahead_go_back_to_python_whole(rigs) -> None:
    """The engine reads ahead: records it read from the socket and did not decrypt are in the
    connection at the hand-over, and Python's next read finds them there."""
    rig = rigs()
    rig.register()
    metadata = request(METADATA, 12, 2, b"\x01\x00\x00", flexible=True)  # not in the table
    after = [request(FETCH, 12, 3 + i, b"e" * 500, flexible=True) for i in range(20)]
    rig.app.sock.sendall(rig.app.seal(metadata) + b"".join(map(rig.app.seal, after)))
    state = rig.wait_handover()
    assert state.reason == "request" and state.client.startswith(metadata)
    rest = b"".join(after)
    taken = len(state.client) - len(metadata)
    assert state.client[len(metadata):] == rest[:taken]
    assert python_recv_exactly(rig.client_end, len(rest) - taken) == rest[taken:]
    assert rig.client_end.pending() == 0


def test_plaintext_held_inside_the_connection_is_taken(rigs) -> None:
    """Python read part of a record: the rest waits decrypted inside the connection, where no
    socket readiness announces it. The engine must take it from there at once."""
    rig = rigs()
    whole = request(FETCH, 12, 1, b"q" * 3000, flexible=True)
    rig.app.send(whole)  # one record
    head = python_recv_exactly(rig.client_end, 5)
    assert rig.client_end.pending() > 0
    rig.register(prefill=head)
    assert rig.broker.recv_exactly(len(whole)) == whole  # nothing more was sent
    rig.broker.send(response(1))
    assert rig.app.recv_exactly(len(response(1))) == response(1)
    rig.drain()


def test_records_encrypted_and_unsent_go_out_before_the_hand_over(rigs) -> None:
    """The engine encrypts many records into a buffer of its own and sends them together: a
    socket that takes only part of them leaves the rest there, in order, and the session
    goes back to Python only once they are all out (Python's socket BIO writes behind
    them)."""
    rig = rigs()
    rig.client_end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    rig.register()
    ask = request(FETCH, 12, 1, b"a" * 10, flexible=True)
    rig.app.send(ask)
    assert rig.broker.recv_exactly(len(ask)) == ask
    # Fits the engine's 64 KiB buffer whole, so it is all encrypted at once; the socket
    # takes a few KiB of its records.
    answer = response(1, bytes(range(256)) * 200)
    rig.broker.send(answer)
    time.sleep(0.2)
    rig.engine.stop(rig.sid)
    time.sleep(0.3)
    assert rig.sid not in rig.engine.events()  # records are still to go out
    assert rig.app.recv_exactly(len(answer)) == answer
    state = rig.wait_handover()
    assert (state.reason, state.client, state.upstream, state.in_flight) == (
        "drain", b"", b"", [])
    python_round_trip(rig, 2)  # the next record Python writes follows them
    rig.register()
    native_round_trip(rig, 3, 200_000)  # and the engine again, records held and sent
    rig.drain()


def test_a_client_closing_mid_record(rigs) -> None:
    # Between frames: the session comes back to Python at its frame boundary, which finds
    # the connection ended as it would have.
    rig = rigs()
    rig.register()
    one = request(FETCH, 12, 1, flexible=True)
    records = rig.app.seal(one) + rig.app.seal(request(FETCH, 12, 2, flexible=True))
    rig.app.sock.sendall(records[:-10])  # the second record cut short
    rig.app.sock.shutdown(socket.SHUT_WR)
    assert rig.broker.recv_exactly(len(one)) == one
    state = rig.wait_handover()
    assert (state.reason, state.client, [e[0] for e in state.in_flight]) == (
        "client_eof", b"", [1])
    rig.client_end.settimeout(5)
    assert rig.client_end.recv(100) == b""  # a ragged end, as TlsTransport's sockets see it

    # Within a frame: nothing to resume.
    rig = rigs()
    rig.register()
    frame = request(FETCH, 12, 1, b"x" * 100, flexible=True)
    records = rig.app.seal(frame[:50]) + rig.app.seal(frame[50:])
    rig.app.sock.sendall(records[:-10])
    rig.app.sock.shutdown(socket.SHUT_WR)
    assert rig.wait_handover().reason == "client_closed"


def test_a_corrupted_record_ends_its_session_only(rigs) -> None:
    hit, other = rigs(), rigs()
    hit.register()
    other.register()
    first = request(FETCH, 12, 1, flexible=True)
    hit.app.send(first)
    assert hit.broker.recv_exactly(len(first)) == first
    record = bytearray(hit.app.seal(request(FETCH, 12, 2, b"c" * 100, flexible=True)))
    record[len(record) // 2] ^= 0x40
    hit.app.sock.sendall(record)
    state = hit.wait_handover()
    assert state.reason == "socket_error"
    assert state.detail.startswith("TLS error on the client connection: TLS: ")
    assert "bad record mac" in state.detail or "decryption failed" in state.detail
    # The broker saw nothing of the corrupted record; the other session goes on.
    native_round_trip(other, 7, 9000)
    other.drain()

    # From the broker's side, likewise.
    rig = rigs()
    rig.register()
    rig.app.send(first)
    assert rig.broker.recv_exactly(len(first)) == first
    record = bytearray(rig.broker.seal(response(1, b"d" * 100)))
    record[-3] ^= 0x01
    rig.broker.sock.sendall(record)
    state = rig.wait_handover()
    assert state.reason == "socket_error"
    assert state.detail.startswith("TLS error on the upstream connection: TLS: ")


def test_close_notify_read_with_the_records_before_it(rigs) -> None:
    """A read decrypts every whole record the connection holds: the end of the stream met
    after them (close_notify) is the next read's answer, once they are forwarded."""
    rig = rigs()
    rig.register()
    one, two = (request(FETCH, 12, corr, b"g" * 100, flexible=True) for corr in (1, 2))
    records = rig.app.seal(one) + rig.app.seal(two)
    try:
        rig.app.tls.unwrap()
    except ssl.SSLWantReadError:
        pass  # the peer's close_notify is not awaited
    rig.app.sock.sendall(records + rig.app.outgoing.read())
    assert rig.broker.recv_exactly(len(one + two)) == one + two
    state = rig.wait_handover()
    assert (state.reason, state.client, [e[0] for e in state.in_flight]) == (
        "client_eof", b"", [1, 2])


def test_what_the_engine_cannot_carry_stays_in_python(rigs, engine, contexts) -> None:
    rig = rigs()
    fds = (rig.client_end.fileno(), rig.upstream_end.fileno(), ALLOWED, 1 << 20, 100,
           64 * 1024, 600.0, 60.0, b"")
    with pytest.raises(TypeError, match="_ssl._SSLSocket"):
        engine.register(1, *fds, client_tls=object())
    with pytest.raises(ValueError, match="descriptor"):  # another connection's TLS
        engine.register(1, *fds, client_tls=rig.upstream_end._sslobj)
    fresh_a, fresh_b = socket.socketpair()
    fresh = contexts.herald_server.wrap_socket(fresh_a, server_side=True,
                                               do_handshake_on_connect=False)
    with pytest.raises(ValueError, match="handshake is not complete"):
        engine.register(1, fresh.fileno(), *fds[1:], client_tls=fresh._sslobj)
    fresh.close()
    fresh_b.close()
    assert engine.events() == []  # nothing was registered


def test_kernel_tls_is_told_as_the_kernel_lists_it() -> None:
    """The probe's answer agrees with the kernel's list of the upper layer protocols it has
    (read after the probe, which may load the module)."""
    found = native_relay.kernel_tls()
    listed = Path("/proc/sys/net/ipv4/tcp_available_ulp").read_text().split()
    assert found == ("tls" in listed)
