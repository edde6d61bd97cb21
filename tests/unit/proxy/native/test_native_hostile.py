"""Hostile bytes at the native engine's readers: regressions for what a review found.

Each test here failed on the engine before its fix (the signed-overflow ones under UBSan:
scripts/sanitize.sh runs this file against the extensions built with -fsanitize=undefined
and -fno-sanitize-recover, where the overflow aborts the run). The socket-level tests play
client and broker over socket pairs around a real engine (`Rig`).
"""

from __future__ import annotations

import socket
import struct
import time

import crc32c
import pytest

from interceptors import ids
from protocol.contracts.native_relay import BYTE_COUNT, CLIENT_TO_PROXY
from protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from protocol.records import Record, build_batch, split_batches
from proxy.filters.chain import FilterChain
from proxy.native import relay as native_relay
from proxy.native.path_choice import passable_table
from proxy.net.wire import decode_request, parse_request_header
from tests.support.native import stamp as stamp_tests
from tests.support.native.engine import (
    PRODUCE,
    checked_table,
    fetches,
    request,
    response,
    table,
    uvarint,
)
from tests.support.native_parts import ENGINE, needs
from tests.support.records import read_varint

pytestmark = needs(ENGINE)
_relay = native_relay._relay

TWO_63 = b"\x80" * 9 + b"\x01"  # the unsigned varint 2^63
"""A compact count or length of 2^63: cast to int64 and decremented, it overflowed."""


# ---- a malformed streamed Fetch v16+ response ends the session -----------------------------

HEAD = b"\x00"  # the response header's empty tagged fields, after the correlation id
FIXED = bytes(10)  # throttle time, error code, session id
PARTITION_FIXED = bytes(30)  # index, error, high watermark, last stable, log start offsets

MALFORMED_FETCH_V16 = {
    # the frame ends where the top-level tagged fields should begin: nothing left to hand on
    "no_top_level_tags": HEAD + FIXED + b"\x01",
    # the fixed fields run past the frame
    "short_fixed_fields": HEAD + bytes(5),
    # one topic, one partition, whose records say 1,000 bytes; three are there
    "records_past_the_end": HEAD + FIXED + b"\x02" + b"\x11" * 16 + b"\x02" + PARTITION_FIXED
    + b"\x01" + struct.pack(">i", -1) + uvarint(1001) + b"abc",
    # a partition's tagged field whose size runs past the frame
    "tag_past_the_end": HEAD + FIXED + b"\x02" + b"\x11" * 16 + b"\x02" + PARTITION_FIXED
    + b"\x01" + struct.pack(">i", -1) + b"\x01" + b"\x01\x07" + uvarint(500) + b"xyz",
    # the header's tagged fields run past the frame
    "header_tags_past_the_end": b"\x02\x01\x01\x00",
    # a count too large to be one
    "huge_topic_count": HEAD + FIXED + TWO_63,
}


@pytest.mark.parametrize("case", sorted(MALFORMED_FETCH_V16))
def test_a_malformed_streamed_fetch_response_ends_the_session(rigs, case: str) -> None:
    """The engine walks Fetch v16+ responses as they stream (address rewriting reads only
    their tail). A response whose structure does not fit its frame, received whole, ends the
    session at once: before the fix the walk waited for bytes that could never come, with a
    request in flight (so no idle deadline), and the session was never handed back."""
    rig = rigs(checked_table(), max_frame=8 << 20)
    fetches(rig, 9)
    bad = response(9, MALFORMED_FETCH_V16[case])
    rig.broker.sendall(bad)
    state = rig.wait_handover(timeout=5)
    assert state.reason == "upstream_bad"
    assert "Fetch response" in state.detail


def test_a_malformed_fetch_response_in_pieces_ends_the_session_too(rigs) -> None:
    rig = rigs(checked_table(), max_frame=8 << 20)
    fetches(rig, 9)
    bad = response(9, MALFORMED_FETCH_V16["records_past_the_end"])
    for i in range(len(bad)):
        rig.broker.sendall(bad[i:i + 1])
    assert rig.wait_handover(timeout=5).reason == "upstream_bad"


def test_a_drain_finishes_a_session_whose_fetch_response_is_malformed(rigs) -> None:
    """The same response while the proxy drains: its first bytes are through when the drain
    begins, so the engine finishes the response first, and must not wait for it forever."""
    rig = rigs(checked_table(), max_frame=8 << 20)
    fetches(rig, 9)
    bad = response(9, MALFORMED_FETCH_V16["no_top_level_tags"])
    rig.broker.sendall(bad[:10])
    assert rig.recv_exactly(rig.app, 8) == bad[:8]  # the response has begun
    rig.engine.stop(rig.sid)
    rig.broker.sendall(bad[10:])
    assert rig.wait_handover(timeout=5).reason == "upstream_bad"


# ---- a flexible Produce request whose header is only partly read ----------------------------


@pytest.mark.parametrize("cut", [20, 200, 314, 316])
def test_a_produce_request_read_in_part_waits_for_its_acks(rigs, cut: int) -> None:
    """Produce v9+ (header v2): the engine reads `acks` behind the client id, the header's
    tagged fields and the transactional id. When the first read ends inside one of them the
    engine must wait for more; before the fix its position ran past what had arrived, the
    varint reader's `limit - pos` underflowed, and the request was handed to Python as
    unreadable."""
    client_id = b"c" * 300
    body = b"\x00" + struct.pack(">hi", 1, 30000) + b"\x01\x00"  # null txn id, no topics
    frame = request(PRODUCE, 9, 4, body, client_id=client_id, flexible=True)
    rig = rigs(table((PRODUCE, 9)))
    rig.app.sendall(frame[:cut])
    read = 0
    deadline = time.monotonic() + 5
    while read < cut and time.monotonic() < deadline:  # the engine has read the first part
        read += rig.engine.collect()[0][BYTE_COUNT[CLIENT_TO_PROXY]]
        time.sleep(0.01)
    assert read == cut
    rig.app.sendall(frame[cut:])
    assert rig.recv_exactly(rig.broker, len(frame)) == frame  # passed natively, whole
    assert rig.sid not in rig.engine.events()


# ---- counts and lengths of 2^63 --------------------------------------------------------------

FETCH_PLAN = ((), (b"x-debug",), (), 0, 0, -1, b"")
STAMP_PLAN = (((0, b"\x06abc", b"v", False, False, False),), (b"abc",), (), 1000, 10000, -1,
              b"")


def fetch_v12(body: bytes) -> bytes:
    payload = struct.pack(">i", 7) + HEAD + FIXED + body
    return struct.pack(">i", len(payload)) + payload


FETCH_2_63 = {
    "topics": TWO_63,
    "topic_name": b"\x02" + TWO_63,
    "partitions": b"\x02\x02t" + TWO_63,
    "aborted_transactions": b"\x02\x02t\x02" + PARTITION_FIXED + TWO_63,
    "records": b"\x02\x02t\x02" + PARTITION_FIXED + b"\x01" + struct.pack(">i", -1) + TWO_63,
}


@pytest.mark.parametrize("field", sorted(FETCH_2_63))
def test_a_fetch_count_of_2_63_goes_to_python(field: str) -> None:
    batches, why = _relay.scan_fetch(fetch_v12(FETCH_2_63[field]), 1, 12, FETCH_PLAN, False)
    assert batches is None and why


def produce_v9(body: bytes) -> bytes:
    head = struct.pack(">hhih", PRODUCE, 9, 4, 3) + b"app" + b"\x00"
    payload = head + b"\x00" + struct.pack(">hi", 1, 30000) + body
    return struct.pack(">i", len(payload)) + payload


PRODUCE_2_63 = {
    "topics": TWO_63,
    "topic_name": b"\x02" + TWO_63,
    "partitions": b"\x02\x02t" + TWO_63,
    "records": b"\x02\x02t\x02" + bytes(4) + TWO_63,
}


@pytest.mark.parametrize("field", sorted(PRODUCE_2_63))
def test_a_produce_count_of_2_63_goes_to_python(field: str) -> None:
    out, why = _relay.stamp_produce(produce_v9(PRODUCE_2_63[field]), STAMP_PLAN, b"", b"", 0)
    assert out is None and why


def test_a_refused_produce_request_always_says_why() -> None:
    """A request whose first partition stamps and whose second topic is cut short goes to
    Python with a reason: the stamp of the first partition used to clear it (found by
    fuzz/native/fuzz_stamp.c)."""
    batch = build_batch([Record(b"k", b"v", [])])
    first = b"\x02t" + b"\x02" + struct.pack(">i", 0) + uvarint(len(batch) + 1) + batch + b"\x00"
    body = b"\x03" + first + b"\x00" + b"\x02u" + b"\x80"  # two topics; the second cut short
    out, why = _relay.stamp_produce(produce_v9(body), STAMP_PLAN, bytes(4096), bytes(4096), 0)
    assert out is None and why == "a malformed Produce request"


# ---- stamping holds to the Python path on requests no real client writes ------------------

TRACEPARENT = b"00-" + b"ab" * 16 + b"-" + b"cd" * 8 + b"-01"


def longer_varints(batch: bytes) -> bytes:
    """The batch with every record's length varint one byte longer than it need be (a valid
    encoding), its length and CRC32C made right."""
    head, body = bytearray(batch[:61]), batch[61:]
    out, pos = bytearray(), 0
    while pos < len(body):
        start = pos
        value, pos = read_varint(body, pos)
        varint = bytearray(body[start:pos])
        varint[-1] |= 0x80
        out += varint + b"\x00" + body[pos:pos + (value >> 1)]
        pos += value >> 1
    data = head + out
    struct.pack_into(">i", data, 8, len(data) - 12)
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    return bytes(data)


def kept_records(n: int) -> list[Record]:
    return [Record(b"k", b"v%d" % i, [("traceparent", TRACEPARENT)], offset_delta=i)
            for i in range(n)]


def produce_of(*fields: bytes, corr: int = 7) -> bytes:
    return stamp_tests.frame(9, ProduceRequest(acks=1, topic_data=[TopicProduceData(
        name="t", partition_data=[PartitionProduceData(index=i, records=f)
                                  for i, f in enumerate(fields)])]), corr=corr)


@pytest.mark.parametrize("case", ["kept_only", "kept_and_stamped"])
def test_batches_stamping_leaves_alone_stay_byte_for_byte(case: str) -> None:
    """A batch whose records all keep their own traceparent, with nothing else to append,
    leaves the Python path byte for byte as it came, and a request where nothing changes is
    forwarded as it came. The engine used to write such a batch again, every varint in its
    shortest form: not the bytes Python sends when the client wrote longer ones."""
    filt, plan = stamp_tests.setup({"mode": "record"}, None)
    fields = [longer_varints(build_batch(kept_records(3)))]
    if case == "kept_and_stamped":
        fields.append(build_batch([Record(b"k", b"v", [])]))
    data = produce_of(*fields)
    msg = decode_request(parse_request_header(data[4:]), data[4:])[1]
    trace_draws, msg_draws = stamp_tests.draws_of(msg, 5, False, True, False)
    ids.seed(5)
    expected = stamp_tests.python_output(filt, stamp_tests.session(), data)
    got, counts = _relay.stamp_produce(data, plan.wire, trace_draws, msg_draws,
                                       stamp_tests.NOW)
    assert got == expected
    assert (got == data) == (case == "kept_only")


def test_a_batch_with_a_wrong_crc_goes_to_python() -> None:
    """Python checks a batch's CRC32C before it reads a record, and refuses the request when
    it is wrong; the engine used to stamp such a batch and seal it with a fresh CRC, so the
    broker took bytes the client never sent whole."""
    _, plan = stamp_tests.setup({"mode": "record"}, None)
    batch = bytearray(build_batch([Record(b"k", b"value", [])]))
    batch[bytes(batch).rindex(b"value")] = ord("V")  # the CRC no longer matches
    out, why = _relay.stamp_produce(produce_of(bytes(batch)), plan.wire, bytes(4096), b"",
                                    stamp_tests.NOW)
    assert out is None and why == "a record batch CRC mismatch"


def test_a_request_python_would_write_shorter_goes_to_python() -> None:
    """Python re-encodes a request it changes, every varint in its shortest form; the engine
    copies what is around the records as the client wrote it. A client that writes a longer
    varint there (here the topic name's length) gets Python's answer."""
    _, plan = stamp_tests.setup({"mode": "record"}, None)
    data = produce_of(build_batch([Record(b"k", b"v", [])]))
    at = data.index(b"\x02t\x02")  # the topic name "t", compact: its length is 2 in one byte
    longer = data[:at] + b"\x82\x00" + data[at + 1:]
    longer = struct.pack(">i", len(longer) - 4) + longer[4:]
    out, why = _relay.stamp_produce(longer, plan.wire, bytes(4096), b"", stamp_tests.NOW)
    assert out is None and why == "a varint longer than it need be"


def test_a_frame_shorter_once_stamped_passes_with_what_follows(rigs) -> None:
    """A stamped frame may be shorter than the client's: the records the engine writes again
    get their varints in the shortest form, here more bytes than the traceparent it appends.
    The engine moves what follows it back by that much (it computed how much it grew as an
    unsigned size, which held only by wrap-around)."""
    filt, plan = stamp_tests.setup({"mode": "record"}, None)
    chain = FilterChain([filt])
    batch = longer_varints(build_batch([Record(b"k", b"plain", [])] + kept_records(100)))
    first = produce_of(batch, corr=1)
    second = produce_of(build_batch([Record(b"k", b"next", [])]), corr=2)
    rig = rigs(passable_table(chain, stamp=True))
    rig.replan(passable_table(chain, stamp=True), stamp=(plan.wire, 5, 1 << 20))
    rig.app.sendall(first + second)
    frames = []
    for _ in range(2):
        size = struct.unpack(">i", rig.recv_exactly(rig.broker, 4))[0]
        frames.append(struct.pack(">i", size) + rig.recv_exactly(rig.broker, size))
    assert len(frames[0]) < len(first)
    for got in frames:
        stamp_tests.assert_batches_valid(got)
    records = [r for t in decode_request(parse_request_header(frames[0][4:]),
                                         frames[0][4:])[1].topic_data
               for p in t.partition_data for b in split_batches(p.records) for r in b.records]
    assert [v for k, v in records[0].headers if k == "traceparent"] != [TRACEPARENT]
    assert all(r.headers == [("traceparent", TRACEPARENT)] for r in records[1:])
    assert len(frames[1]) > len(second)  # the next request, whole, stamped too
    assert rig.engine.collect_stamped()[5][:2] == (2, 102)


# ---- a broker that stops answering cannot hold a session whose client left -----------------


@pytest.mark.parametrize("python_frame_waiting", [False, True])
def test_a_silent_broker_cannot_hold_a_session_whose_client_left(rigs,
                                                                 python_frame_waiting: bool
                                                                 ) -> None:
    """A broker that begins a response and then sends nothing more: while the client may
    still want it, the request keeps the session busy (no idle deadline). Once the client has
    left, the idle deadline runs, also when the engine no longer reads the client because a
    request for Python waits there (it sees the end of stream by EPOLLRDHUP). Before, such a
    session was never handed back until the broker closed."""
    rig = rigs(table((1, 12)), idle=1.0)
    fetch = request(1, 12, 1, b"x" * 10, flexible=True)
    rig.app.sendall(fetch)
    assert rig.recv_exactly(rig.broker, len(fetch)) == fetch
    rig.broker.sendall(response(1, b"r" * 100)[:20])  # its first bytes, then nothing
    assert rig.recv_exactly(rig.app, 20)
    later = request(3, 12, 2, b"\x01\x00\x00", flexible=True) if python_frame_waiting else b""
    rig.app.sendall(later)  # Metadata: the engine stops reading the client at it
    time.sleep(0.5)
    assert rig.sid not in rig.engine.events()  # busy: the client may still want it
    rig.app.shutdown(socket.SHUT_WR)
    state = rig.wait_handover(timeout=5)
    assert state.reason == "idle_timeout"
    assert state.client == later


def test_a_broker_that_never_answers_cannot_hold_a_session(rigs) -> None:
    """The client stays and waits, the broker never answers: the request keeps the session
    busy only while the broker may still answer it (the idle deadline from when it was sent),
    then the idle deadline runs. A client whose further requests fill the socket while the
    engine waits cannot show that it left (its FIN waits behind them): this ends it too."""
    rig = rigs(table((1, 12)), idle=0.5, max_in_flight=1)
    fetch = request(1, 12, 1, b"x" * 10, flexible=True)
    rig.app.sendall(fetch + request(1, 12, 2, flexible=True))  # the second waits for a slot
    assert rig.recv_exactly(rig.broker, len(fetch)) == fetch
    started = time.monotonic()
    state = rig.wait_handover(timeout=5)
    assert state.reason == "idle_timeout"
    assert time.monotonic() - started >= 0.5
    assert [e[0] for e in state.in_flight] == [1]
