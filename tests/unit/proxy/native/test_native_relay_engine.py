"""The native relay engine (`proxy.native._relay`) over socket pairs, with frames built here.

Each test plays both peers: the client application on one socket pair, the broker on the
other; the engine holds the proxy's two ends.
"""

from __future__ import annotations

import random
import socket
import struct
import threading
import time

import pytest

from protocol.contracts.native_relay import (
    BYTE_DIRECTIONS,
    CLIENT_TO_PROXY,
    PROXY_TO_CLIENT,
    PROXY_TO_UPSTREAM,
    RESUME,
    UPSTREAM_TO_PROXY,
)
from proxy.native import path_choice
from proxy.native import relay as native_relay
from proxy.net import wire
from tests.support.native.engine import (
    API_VERSIONS,
    FETCH,
    MAX_VERSION,
    METADATA,
    PRODUCE,
    Rig,
    checked_table,
    fetches,
    request,
    response,
    send_behind,
    table,
    uvarint,
)
from tests.support.native_parts import ENGINE, needs

pytestmark = needs(ENGINE)


def produce(corr: int, acks: int, version: int = 7) -> bytes:
    if version >= 9:
        body = b"\x00" + struct.pack(">hi", acks, 30000) + b"\x01\x00"  # null txn id, no topics
        return request(PRODUCE, version, corr, body, flexible=True)
    body = struct.pack(">hhi", -1, acks, 30000) + struct.pack(">i", 0)
    return request(PRODUCE, version, corr, body)


def drain(rig: Rig) -> tuple:
    """Stop the session; it must hand over with nothing left in flight or unforwarded (every
    response seen to its end). Returns the engine's counters."""
    rig.engine.stop(rig.sid)
    state = rig.wait_handover()
    assert (state.reason, state.client, state.upstream, state.in_flight) == (
        "drain", b"", b"", [])
    return rig.engine.collect()


def handed_back(rigs, prefill: bytes = b"", frame_deadline_s: float = 60.0, **state) -> Rig:
    """A rig whose session Python took back and handed to the engine again, with `prefill`
    (bytes read but not forwarded) and the rest of the hand-over state as `register` takes it."""
    rig = rigs(table((FETCH, 12)))
    rig.engine.stop(rig.sid)
    rig.wait_handover()
    rig.sid += 10_000
    rig.engine.register(rig.sid, rig.client_end.fileno(), rig.upstream_end.fileno(),
                        table((FETCH, 12)), 1 << 20, 100, 64 * 1024, 600.0, frame_deadline_s,
                        prefill, **state)
    return rig


def test_frames_pass_byte_for_byte_and_are_counted(rigs) -> None:
    rig = rigs(table((API_VERSIONS, 3), (FETCH, 12)))
    requests = request(API_VERSIONS, 3, 1, b"\x00\x00", flexible=True) + request(
        FETCH, 12, 2, b"x" * 5000, flexible=True)
    for i in range(0, len(requests), 7):  # frames split across many small writes
        rig.app.sendall(requests[i:i + 7])
    assert rig.recv_exactly(rig.broker, len(requests)) == requests
    responses = response(1, b"v" * 100) + response(2, b"f" * 200_000)
    rig.broker.sendall(responses)
    assert rig.recv_exactly(rig.app, len(responses)) == responses
    counted, pairs = drain(rig)
    assert dict(zip(BYTE_DIRECTIONS, counted, strict=True)) == {
        CLIENT_TO_PROXY: len(requests), PROXY_TO_UPSTREAM: len(requests),
        UPSTREAM_TO_PROXY: len(responses), PROXY_TO_CLIENT: len(responses)}
    assert pairs[(API_VERSIONS, 3)][0] == 1 and pairs[(FETCH, 12)][0] == 1
    assert sum(pairs[(FETCH, 12)][1]) == 1  # one latency observation
    assert sum(pairs[(FETCH, 12)][3]) == 1  # one upstream latency observation
    assert rig.engine.collect() == ((0,) * len(BYTE_DIRECTIONS), {})  # reset when collected


@pytest.mark.parametrize("version", [7, 9])
def test_acks_zero_produce_keeps_no_entry(rigs, version: int) -> None:
    rig = rigs(table((PRODUCE, version), (API_VERSIONS, 3)))
    frames = produce(5, 0, version) + produce(6, 1, version)
    rig.app.sendall(frames)
    assert rig.recv_exactly(rig.broker, len(frames)) == frames
    rig.broker.sendall(response(6))  # only the acks=1 request is answered
    assert rig.recv_exactly(rig.app, len(response(6))) == response(6)
    rig.engine.stop(rig.sid)
    assert rig.wait_handover().in_flight == []


@pytest.mark.parametrize("limit", [1, 8, 9, 300])
def test_the_in_flight_table_grows_to_the_limit_and_keeps_the_order(rigs, limit: int) -> None:
    """The table starts small and doubles as requests pile up (a held connection keeps a few
    entries, not `max_in_flight`): up to the limit every request goes upstream, the next
    waits, answers come back in order, and a hand-over returns what is in flight, oldest
    first, across the growths."""
    rig = rigs(table((FETCH, 12)), max_in_flight=limit)
    frames = [request(FETCH, 12, corr, b"q" * 20, flexible=True) for corr in range(limit + 1)]
    rig.app.sendall(b"".join(frames))
    assert rig.recv_exactly(rig.broker, sum(map(len, frames[:limit]))) == b"".join(
        frames[:limit])
    assert rig.nothing_on(rig.broker)  # the one past the limit waits
    answered = min(3, limit)
    answers = b"".join(response(corr, b"a" * corr) for corr in range(answered))
    rig.broker.sendall(answers)
    assert rig.recv_exactly(rig.app, len(answers)) == answers
    waiting = b"".join(frames[limit:limit + answered])
    assert rig.recv_exactly(rig.broker, len(waiting)) == waiting  # room again
    rig.engine.stop(rig.sid)
    state = rig.wait_handover()
    assert [e[0] for e in state.in_flight] == list(range(answered, limit + 1))


def test_hand_over_mid_stream_returns_the_exact_state(rigs) -> None:
    rig = rigs(table((FETCH, 12), (API_VERSIONS, 3)))
    first = request(FETCH, 12, 1, b"a" * 10, flexible=True)
    rig.app.sendall(first)
    assert rig.recv_exactly(rig.broker, len(first)) == first
    partial_response = response(1, b"r" * 50)[:6]  # not even its correlation id yet
    rig.broker.sendall(partial_response)
    time.sleep(0.1)
    metadata = request(METADATA, 12, 2, b"\x01\x00\x00", flexible=True)  # not in the table
    after = request(FETCH, 12, 3, b"b" * 10, flexible=True)
    rig.app.sendall(metadata + after + after[:5])
    state = rig.wait_handover()
    assert state.reason == "request"
    assert state.client == metadata + after + after[:5]
    assert state.upstream == partial_response
    [(corr, api, version, received)] = state.in_flight
    assert (corr, api, version) == (1, FETCH, 12)
    assert 0 < time.monotonic() - received < 5
    assert rig.nothing_on(rig.broker)  # nothing after the first request went upstream


def test_partial_writes_to_a_slow_reader_lose_nothing(rigs) -> None:
    rig = rigs(table((FETCH, 12)), max_frame=8 << 20)
    rig.client_end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    rig.app.sendall(request(FETCH, 12, 1, flexible=True))
    rig.recv_exactly(rig.broker, len(request(FETCH, 12, 1, flexible=True)))
    big = response(1, bytes(range(256)) * 16_000)  # 4 MB, far above every buffer
    sender = threading.Thread(target=rig.broker.sendall, args=(big,), daemon=True)
    sender.start()
    sender.join(1.0)
    assert sender.is_alive()  # backpressure: the engine stopped reading the broker
    got = bytearray()
    while len(got) < len(big):
        got += rig.app.recv(1 << 16)
    sender.join(5)
    assert bytes(got) == big


def test_oversize_request_goes_to_python_oversize_response_closes(rigs) -> None:
    rig = rigs(table((FETCH, 12)), max_frame=1024)
    huge = struct.pack(">i", 4096) + b"\x00" * 20
    rig.app.sendall(huge)
    state = rig.wait_handover()
    assert (state.reason, state.client) == ("request", huge)

    rig = rigs(table((FETCH, 12)), max_frame=1024)
    rig.app.sendall(request(FETCH, 12, 9, flexible=True))
    rig.recv_exactly(rig.broker, len(request(FETCH, 12, 9, flexible=True)))
    rig.broker.sendall(struct.pack(">ii", 4096, 9))
    state = rig.wait_handover()
    assert state.reason == "upstream_bad" and "frame size 4096" in state.detail


def test_response_to_the_wrong_request_closes(rigs) -> None:
    rig = rigs(table((FETCH, 12)))
    rig.app.sendall(request(FETCH, 12, 1, flexible=True) + request(FETCH, 12, 2, flexible=True))
    rig.broker.sendall(response(2))
    state = rig.wait_handover()
    assert state.reason == "upstream_bad"
    assert state.detail == "upstream answered correlation id 2, expected 1"


def test_end_of_stream_on_each_side(rigs) -> None:
    rig = rigs(table((FETCH, 12)))
    rig.app.sendall(request(FETCH, 12, 1, flexible=True))
    rig.recv_exactly(rig.broker, len(request(FETCH, 12, 1, flexible=True)))
    rig.app.shutdown(socket.SHUT_WR)
    state = rig.wait_handover()
    assert state.reason == "client_eof"
    assert [e[0] for e in state.in_flight] == [1]  # its response is still owed

    rig = rigs(table((FETCH, 12)))
    rig.broker.shutdown(socket.SHUT_WR)
    assert rig.wait_handover().reason == "upstream_closed"

    rig = rigs(table((FETCH, 12)))
    rig.app.sendall(request(FETCH, 12, 1, b"x" * 100, flexible=True)[:30])
    rig.app.shutdown(socket.SHUT_WR)
    assert rig.wait_handover().reason == "client_closed"  # mid-frame: nothing to resume


def test_prefilled_bytes_are_forwarded_first(rigs) -> None:
    first = request(FETCH, 12, 1, flexible=True)
    rig = rigs(table((FETCH, 12)), prefill=first[:10])
    rig.app.sendall(first[10:])
    assert rig.recv_exactly(rig.broker, len(first)) == first


def test_in_flight_limit_holds_requests_back(rigs) -> None:
    rig = rigs(table((FETCH, 12)), max_in_flight=1)
    one, two = request(FETCH, 12, 1, flexible=True), request(FETCH, 12, 2, flexible=True)
    rig.app.sendall(one + two)
    assert rig.recv_exactly(rig.broker, len(one)) == one
    assert rig.nothing_on(rig.broker)
    rig.broker.sendall(response(1))
    assert rig.recv_exactly(rig.broker, len(two)) == two


def test_deadlines(rigs) -> None:
    rig = rigs(table((FETCH, 12)), idle=0.3)
    state = rig.wait_handover()
    assert state.reason == "idle_timeout" and "idle for 0.3 s" in state.detail

    rig = rigs(table((FETCH, 12)), frame=0.3)
    rig.app.sendall(request(FETCH, 12, 1, b"x" * 100, flexible=True)[:30])
    assert rig.wait_handover().reason == "frame_timeout"


def test_a_partial_request_keeps_its_frame_clock_across_hand_overs(rigs) -> None:
    partial = request(FETCH, 12, 1, b"x" * 100, flexible=True)[:30]
    # Python hands the session back with a partial request that began 1.5 s ago: with a
    # 2 s frame deadline, the engine ends the phase within about 0.5 s, not 2 s.
    started = time.monotonic()
    rig = handed_back(rigs, partial, frame_deadline_s=2.0, frame_age=1.5)
    state = rig.wait_handover()
    assert state.reason == "frame_timeout"
    assert time.monotonic() - started < 1.5

    # Taken back with a partial request unforwarded (too little of it to read its header),
    # the engine says how old it is.
    rig = rigs(table((FETCH, 12)))
    rig.app.sendall(partial[:3])
    time.sleep(0.3)
    state = native_relay.Handover(*rig.engine.take(rig.sid))
    assert state.client == partial[:3]
    assert 0.25 <= state.frame_age < 5


def test_a_due_reauthentication_hands_over_at_the_next_frame_boundary(rigs) -> None:
    """`handover_s`: Herald's own re-authentication falls due while a frame is under way. The
    engine finishes that frame (a frame is never cut), forwards nothing after it, and hands
    the session over with reason `reauth`, which Python resumes from."""
    one = request(FETCH, 12, 1, b"x" * 100, flexible=True)
    two = request(FETCH, 12, 2, flexible=True)
    # A frame begun (its header and part of its body handed over), then the deadline passes.
    rig = handed_back(rigs, one[:30], handover_s=0.3)
    assert rig.recv_exactly(rig.broker, 30) == one[:30]
    time.sleep(0.5)
    assert rig.nothing_on(rig.engine.notify_fd)  # not before the frame ends
    rig.app.sendall(one[30:] + two)
    state = rig.wait_handover()
    assert state.reason == "reauth"
    assert path_choice.CAPABILITIES.reasons[state.reason] == RESUME
    assert rig.recv_exactly(rig.broker, len(one) - 30) == one[30:]
    assert rig.nothing_on(rig.broker)
    assert state.client == two  # the next request was not forwarded
    assert [corr for corr, *_ in state.in_flight] == [1]

    # Due before the engine has read a byte, with whole requests there already (as when the
    # bytes arrive before the deadline scan runs on a loaded machine): the boundary is the
    # first frame's start, so nothing is forwarded, whatever the scan has seen.
    rig = handed_back(rigs, one + two, handover_s=1e-9)
    state = rig.wait_handover()
    assert state.reason == "reauth"
    assert rig.nothing_on(rig.broker)
    assert state.client == one + two and state.in_flight == []

    # Not due within the phase: the session stays on the engine.
    rig = handed_back(rigs, b"", handover_s=3600.0)
    rig.app.sendall(two)
    assert rig.recv_exactly(rig.broker, len(two)) == two
    assert rig.nothing_on(rig.engine.notify_fd)


def test_a_due_reauthentication_hands_over_an_idle_session(rigs) -> None:
    """With no frame under way the re-authentication falls due at a boundary already: the
    deadline scan hands the session over then, long before its idle deadline."""
    rig = handed_back(rigs, b"", handover_s=0.2)
    state = rig.wait_handover()
    assert state.reason == "reauth"
    assert state.client == b"" and state.in_flight == []


def test_take_detaches_a_running_session(rigs) -> None:
    rig = rigs(table((FETCH, 12)))
    state = native_relay.Handover(*rig.engine.take(rig.sid))
    assert state.reason == "detached"
    rig.app.sendall(request(FETCH, 12, 1, flexible=True))
    assert rig.nothing_on(rig.broker)  # the engine no longer touches the descriptors


def produce_response_v10(corr: int, tagged: bytes = b"\x00") -> bytes:
    partition = struct.pack(">ihqqq", 0, 0, 42, -1, 0) + b"\x01" + b"\x00" + b"\x00"
    topic = b"\x02" + b"t" + b"\x02" + partition + b"\x00"  # name "t", one partition
    body = b"\x00" + b"\x02" + topic + struct.pack(">i", 0) + tagged  # header tags, 1 topic
    return response(corr, body)


def fetch_response_v16(corr: int, records: bytes, tagged: bytes = b"\x00") -> bytes:
    partition = (struct.pack(">ihqqq", 0, 0, 10, 10, 0) + b"\x00" + struct.pack(">i", -1)
                 + uvarint(len(records) + 1) + records + b"\x00")
    topic = b"\x11" * 16 + b"\x02" + partition + b"\x00"
    body = b"\x00" + struct.pack(">ihi", 0, 0, 7) + b"\x02" + topic + tagged
    return response(corr, body)


LEADER_HINT = b"\x01\x07\x05" + b"hint!"  # one tagged field (tag 7), five bytes


def test_built_responses_are_what_the_python_codec_reads() -> None:
    for api, version, frame in ((PRODUCE, 10, produce_response_v10(1, LEADER_HINT)),
                                (FETCH, 16, fetch_response_v16(1, b"r" * 300, LEADER_HINT))):
        _, msg = wire.decode_response(api, version, frame[4:])
        assert msg.unknown_tagged_fields == {7: b"hint!"}


def test_responses_with_leader_hints_go_to_python(rigs) -> None:
    checked = bytearray(native_relay.MAX_API * MAX_VERSION)
    checked[PRODUCE * MAX_VERSION + 10] = path_choice.UNLESS_TAGGED
    checked[FETCH * MAX_VERSION + 16] = path_choice.UNLESS_TAGGED
    rig = rigs(bytes(checked), max_frame=8 << 20)
    one, two, three = produce(1, 1, 10), produce(2, 1, 10), request(FETCH, 16, 3, flexible=True)
    rig.app.sendall(one + two + three)
    rig.recv_exactly(rig.broker, len(one + two + three))
    plain = produce_response_v10(1)
    hinted = produce_response_v10(2, LEADER_HINT)
    rig.broker.sendall(plain + hinted)
    assert rig.recv_exactly(rig.app, len(plain)) == plain  # no tagged fields: passed
    state = rig.wait_handover()
    assert state.reason == "response"
    assert state.upstream == hinted  # whole, from its first byte, for Python to rewrite
    assert [e[0] for e in state.in_flight] == [2, 3]
    assert rig.nothing_on(rig.app)


def fetch_response_many(corr: int, tagged: bytes = b"\x00") -> bytes:
    """Two topics, three partitions, aborted transactions, partition tagged fields."""
    def partition(i: int, records: bytes, aborted: int) -> bytes:
        out = struct.pack(">ihqqq", i, 0, 10, 10, 0) + uvarint(aborted + 1)
        out += (struct.pack(">qq", 7, 3) + b"\x00") * aborted
        out += struct.pack(">i", -1) + uvarint(len(records) + 1) + records
        return out + b"\x01\x03\x02zz"  # one partition-level tagged field
    topic1 = b"\x01" * 16 + uvarint(3) + partition(0, b"a" * 70_000, 2) + partition(
        1, b"", 0) + b"\x00"
    topic2 = b"\x02" * 16 + uvarint(2) + partition(0, b"b" * 90_000, 1) + b"\x00"
    body = b"\x00" + struct.pack(">ihi", 0, 0, 7) + uvarint(3) + topic1 + topic2 + tagged
    return response(corr, body)


def test_fetch_responses_stream_through_the_walk(rigs) -> None:
    rig = rigs(checked_table(), max_frame=8 << 20)
    fetches(rig, 4, 5, 6)
    small = fetch_response_v16(4, b"r" * 1000)
    big = fetch_response_v16(5, b"R" * 300_000)  # far above the engine's buffer
    many = fetch_response_many(6)
    _, msg = wire.decode_response(FETCH, 16, many[4:])
    assert [len(t.partitions) for t in msg.responses] == [2, 1]
    send_behind(rig.broker, small + big + many)
    assert rig.recv_exactly(rig.app, len(small + big + many)) == small + big + many
    rig.engine.stop(rig.sid)
    state = rig.wait_handover()
    assert (state.reason, state.in_flight, state.tail) == ("drain", [], 0)


def test_a_streamed_fetch_with_leader_hints_ends_in_python(rigs) -> None:
    rig = rigs(checked_table(), max_frame=8 << 20)
    fetches(rig, 7, 8)
    hinted = fetch_response_many(7, LEADER_HINT)
    after = fetch_response_v16(8, b"x" * 10)
    send_behind(rig.broker, hinted + after)
    head = hinted[: len(hinted) - len(LEADER_HINT)]
    assert rig.recv_exactly(rig.app, len(head)) == head  # everything before the tail
    state = rig.wait_handover()
    assert (state.reason, state.tail) == ("response", len(LEADER_HINT))
    assert state.upstream[: state.tail] == LEADER_HINT
    assert after.startswith(state.upstream[state.tail:])
    assert [e[0] for e in state.in_flight] == [7, 8]
    assert rig.nothing_on(rig.app)


# ---- splicing: the bytes of a frame that pass unread never enter the engine's buffers ----


def spliced_frames(seed: int) -> tuple[list[bytes], list[bytes]]:
    """Requests and their responses, big and small mixed: whole passing frames (Fetch v12),
    walked ones (Fetch v16 with large records), and small ones between them."""
    rng = random.Random(seed)
    requests, responses = [], []
    for corr in range(1, 25):
        kind = rng.choice(("small", "big", "walked"))
        size = rng.choice((10, 40_000, 300_000, 1_500_000)) if kind != "small" else 10
        body = bytes(rng.getrandbits(8) for _ in range(64)) * (size // 64 + 1)
        if kind == "walked":
            requests.append(request(FETCH, 16, corr, flexible=True))
            responses.append(fetch_response_v16(corr, body[:size]))
        else:
            requests.append(request(FETCH, 12, corr, body[:size], flexible=True))
            responses.append(response(corr, body[: size // 2]))
    return requests, responses


def send_in_random_pieces(sock: socket.socket, data: bytes, seed: int) -> threading.Thread:
    """Send from a thread in pieces of random sizes, some tiny, some far above any buffer."""
    rng = random.Random(seed)

    def send() -> None:
        i = 0
        while i < len(data):
            n = rng.choice((1, 7, 4096, 70_000, 2_000_000))
            sock.sendall(data[i:i + n])
            i += n

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    return sender


@pytest.mark.parametrize("tcp", [False, True], ids=["unix", "tcp"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_spliced_frames_pass_byte_for_byte_in_order(rigs, tcp: bool, seed: int) -> None:
    table_ = bytearray(table((FETCH, 12)))
    table_[FETCH * MAX_VERSION + 16] = path_choice.UNLESS_TAGGED
    rig = rigs(bytes(table_), max_frame=8 << 20, tcp=tcp)
    requests, responses = spliced_frames(seed)
    up = b"".join(requests)
    down = b"".join(responses)
    send_in_random_pieces(rig.app, up, seed)
    assert rig.recv_exactly(rig.broker, len(up)) == up
    send_in_random_pieces(rig.broker, down, seed + 100)
    assert rig.recv_exactly(rig.app, len(down)) == down
    assert rig.engine.spliced > len(up + down) // 2  # most of the bytes went through pipes
    counted, pairs = drain(rig)
    assert counted == (len(up), len(up), len(down), len(down))
    assert sum(sum(p[1]) for p in pairs.values()) == len(requests)  # a latency each


def test_a_spliced_response_to_a_slow_reader_holds_the_broker_back(rigs) -> None:
    rig = rigs(table((FETCH, 12)), max_frame=16 << 20, tcp=True)
    for sock, option in ((rig.client_end, socket.SO_SNDBUF), (rig.app, socket.SO_RCVBUF),
                         (rig.broker, socket.SO_SNDBUF), (rig.upstream_end, socket.SO_RCVBUF)):
        sock.setsockopt(socket.SOL_SOCKET, option, 64 * 1024)  # socket buffers << 10 MB
    rig.app.sendall(request(FETCH, 12, 1, flexible=True))
    rig.recv_exactly(rig.broker, len(request(FETCH, 12, 1, flexible=True)))
    big = response(1, bytes(range(256)) * 40_000)  # 10 MB: more than the pipe and buffers
    sender = threading.Thread(target=rig.broker.sendall, args=(big,), daemon=True)
    sender.start()
    sender.join(1.0)
    assert sender.is_alive()  # the engine stopped reading while its pipe was full
    assert rig.recv_exactly(rig.app, len(big)) == big
    sender.join(5)
    assert rig.engine.spliced > len(big) // 2
    request_after = request(FETCH, 12, 2, flexible=True)
    rig.app.sendall(request_after)
    assert rig.recv_exactly(rig.broker, len(request_after)) == request_after


def test_a_hand_over_after_spliced_frames_returns_the_exact_state(rigs) -> None:
    rig = rigs(table((FETCH, 12)), max_frame=8 << 20, tcp=True)
    big = request(FETCH, 12, 1, b"q" * 500_000, flexible=True)
    metadata = request(METADATA, 12, 2, b"\x01\x00\x00", flexible=True)  # not in the table
    send_in_random_pieces(rig.app, big + metadata, 9)
    assert rig.recv_exactly(rig.broker, len(big)) == big
    state = rig.wait_handover()
    assert (state.reason, state.client) == ("request", metadata)
    assert [e[0] for e in state.in_flight] == [1]
    assert rig.engine.spliced > 0
    assert rig.nothing_on(rig.broker)


def test_a_client_that_closes_mid_splice_ends_the_session(rigs) -> None:
    rig = rigs(table((FETCH, 12)), max_frame=8 << 20, tcp=True)
    big = request(FETCH, 12, 1, b"q" * 500_000, flexible=True)
    rig.app.sendall(big[:200_000])
    assert rig.recv_exactly(rig.broker, 100_000) == big[:100_000]
    rig.app.close()
    state = rig.wait_handover()
    assert state.reason == "client_closed"


def test_held_idle_sessions_cost_a_turn_no_walk(rigs) -> None:
    """With 200 idle sessions held beside a busy one, the engine walks every session only when
    a deadline may be due (about once a second while a request is in flight) and never for TLS
    bytes (there are none): hundreds of turns, a handful of walks. A turn that walked every
    session each time would have as many walks as turns."""
    rig = rigs(table((FETCH, 12)))
    for _ in range(200):
        rig.hold(table((FETCH, 12)))
    time.sleep(0.2)  # the registrations' own walks are over
    turns0, deadlines0, tls0 = rig.engine.walks
    started = time.monotonic()
    for corr in range(1, 301):
        ask = request(FETCH, 12, corr, b"x" * 50, flexible=True)
        rig.app.sendall(ask)
        assert rig.recv_exactly(rig.broker, len(ask)) == ask
        answer = response(corr, b"f" * 100)
        rig.broker.sendall(answer)
        assert rig.recv_exactly(rig.app, len(answer)) == answer
    elapsed = time.monotonic() - started
    turns, deadlines, tls = rig.engine.walks
    assert turns - turns0 >= 300, (turns, turns0)
    assert deadlines - deadlines0 <= elapsed + 3, (deadlines - deadlines0, elapsed)
    assert tls == tls0 == 0
