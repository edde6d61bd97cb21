"""The native engine's lock and the GIL: what Python's calls wait for.

The engine thread takes its lock for one socket event at a time and lets go of it while it
stamps or scans a frame (relay_engine.c, Locking). A client cannot then stall the event loop,
whose calls into the engine (collecting counters, taking sessions back) would otherwise wait
for a whole batch of multi-megabyte scans; and a call that must wait (taking back the very
session whose frame is being scanned) waits without the GIL, so other Python threads run.

Both tests give the engine a Fetch response whose scan takes a while (a fetch plan watching
hundreds of keys, records with a thousand headers each) and look at what happens meanwhile.
Neither measures time: they check what has happened in what order.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest

from protocol import stamping
from protocol.contracts.native_relay import BYTE_COUNT, UPSTREAM_TO_PROXY
from protocol.messages.fetch_response import (
    FetchableTopicResponse,
    FetchResponse,
    PartitionData,
)
from protocol.records import Record, RecordBatch, build_batch
from proxy.native import path_choice
from proxy.native import relay as native_relay
from tests.support.native.engine import FETCH, MAX_VERSION, Rig, request
from tests.support.native.fetch import frame
from tests.support.native_parts import ENGINE, STAMPER, needs
from tests.support.records import read_varint

if stamping.NATIVE:
    from protocol import _stamp

pytestmark = needs(ENGINE)

KEYS = tuple(sorted(f"x{j:07d}".encode() for j in range(300)))
PLAN = ((), KEYS, (), 0, 0, -1, b"")  # drops 300 header names, none of them present


def slow_to_scan(corr: int) -> bytes:
    """A Fetch v12 response of about 3.6 MB: 360 records of 1,000 headers each, every header
    compared with every watched key."""
    headers = [(f"h{j:07d}", b"") for j in range(1000)]
    batch = build_batch([Record(b"k", b"v", headers, offset_delta=i) for i in range(40)])
    msg = FetchResponse(throttle_time_ms=0, session_id=0, responses=[FetchableTopicResponse(
        topic="t", topic_id=b"\x01" * 16, partitions=[PartitionData(
            partition_index=0, high_watermark=1, last_stable_offset=1, log_start_offset=0,
            records=batch * 9)])])
    return frame(12, msg, corr)


def scanning_rig() -> Rig:
    table = bytearray(native_relay.MAX_API * MAX_VERSION)
    table[FETCH * MAX_VERSION + 12] = path_choice.SCAN
    rig = Rig(bytes(table), max_frame=16 << 20)
    rig.engine.take(rig.sid)  # registered again, with the fetch plan
    rig.sid += 10_000
    rig.engine.register(rig.sid, rig.client_end.fileno(), rig.upstream_end.fileno(),
                        bytes(table), 16 << 20, 100, 64 * 1024, 600.0, 60.0, b"", None,
                        (PLAN, 7, 8 << 20))
    rig.app.sendall(request(FETCH, 12, 1, flexible=True))
    rig.recv_exactly(rig.broker, len(request(FETCH, 12, 1, flexible=True)))
    return rig


def read_whole(rig: Rig, size: int) -> None:
    """Wait until the engine has read all `size` bytes of the response from the broker: it is
    then scanning it (the scan begins in the same turn as the last read)."""
    read = 0
    deadline = time.monotonic() + 30
    while read < size:
        assert time.monotonic() < deadline, f"the engine read {read} of {size} bytes"
        read += rig.engine.collect()[0][BYTE_COUNT[UPSTREAM_TO_PROXY]]


def test_counters_are_read_while_a_frame_is_scanned() -> None:
    rig = scanning_rig()
    try:
        response = slow_to_scan(1)
        threading.Thread(target=rig.broker.sendall, args=(response,), daemon=True).start()
        read_whole(rig, len(response))
        # collect() returned during the scan: the response has not reached the client yet.
        # (When the engine held its lock through the scan, collect() waited for the scan and
        # the write that follows it.)
        rig.app.setblocking(False)
        with pytest.raises(BlockingIOError):
            rig.app.recv(1)
        rig.app.settimeout(30)
        assert rig.recv_exactly(rig.app, len(response)) == response  # then it passes whole
        assert rig.engine.collect_stamped() == {7: (9, 360, 0, 0, (0,) * 8, (0,) * 14)}
    finally:
        rig.close()


def test_taking_back_a_session_mid_scan_waits_without_the_gil() -> None:
    rig = scanning_rig()
    try:
        response = slow_to_scan(1)
        threading.Thread(target=rig.broker.sendall, args=(response,), daemon=True).start()
        read_whole(rig, len(response))
        ticks = [0]
        seen: dict[str, int] = {}

        def take() -> None:
            seen["before"] = ticks[0]
            seen["state"] = rig.engine.take(rig.sid)
            seen["after"] = ticks[0]

        taker = threading.Thread(target=take)
        taker.start()
        while taker.is_alive():  # runs only while take() lets go of the GIL
            ticks[0] += 1
        taker.join()
        assert seen["after"] > seen["before"]
        state = native_relay.Handover(*seen["state"])
        assert state.reason == "detached"
        # take() waited for the scan to end (it never reads a buffer mid-scan): the response
        # was scanned whole, counted, and approved, so none of it is handed back.
        assert state.upstream == b""
        assert rig.engine.collect_stamped() == {7: (9, 360, 0, 0, (0,) * 8, (0,) * 14)}
    finally:
        rig.close()


def test_many_sessions_handing_over_at_once_are_all_announced() -> None:
    """Every hand-over is announced: the slot for a session's event is reserved when it is
    registered, so announcing never allocates (it used to grow the list then, and a failed
    allocation left the session handed over but never announced)."""
    engine = native_relay._relay.Engine((0.1,))
    pairs = [(socket.socketpair(), socket.socketpair()) for _ in range(300)]
    try:
        table = bytes(native_relay.MAX_API * MAX_VERSION)  # nothing passes
        for i, ((_, client_end), (upstream_end, _)) in enumerate(pairs):
            client_end.setblocking(False)
            upstream_end.setblocking(False)
            engine.register(i + 1, client_end.fileno(), upstream_end.fileno(), table, 1 << 20,
                            10, 4096, 600.0, 60.0, b"")
        for (app, _), _ in pairs:
            app.sendall(request(FETCH, 12, 1, flexible=True))  # each one hands over
        announced: set[int] = set()
        deadline = time.monotonic() + 30
        while len(announced) < len(pairs) and time.monotonic() < deadline:
            time.sleep(0.05)
            announced.update(engine.events())
        assert announced == set(range(1, len(pairs) + 1))
        for i in range(len(pairs)):
            assert native_relay.Handover(*engine.take(i + 1)).reason == "request"
    finally:
        engine.close()
        for pair in pairs:
            for sock in (*pair[0], *pair[1]):
                sock.close()


def split_records(data: bytes) -> list[bytes]:
    """The records of a records section, each with its length varint."""
    out, pos = [], 0
    while pos < len(data):
        start = pos
        n, pos = read_varint(data, pos)
        pos += n >> 1  # zigzag, never negative here
        out.append(data[start:pos])
    assert pos == len(data)
    return out


@needs(STAMPER)
def test_append_copies_the_columns_as_they_were_while_they_change() -> None:
    """protocol._stamp.append copies records without the GIL. It used to read the columns'
    lists meanwhile: a thread that replaced their items (freeing the bytes they held) made it
    read freed memory and write records whose sizes do not match their bytes. It now copies
    a snapshot taken under the GIL: each record carries a whole piece, the one its list held
    when append began (the original, or a replacement made before that)."""
    n = 100_000
    batch = RecordBatch(build_batch([Record(b"k", b"v%d" % i, [("a", b"1")], offset_delta=i)
                                     for i in range(n)]))
    buf, start, end = batch.records_section()
    original = [b"\x02b" + b"\x06" + b"%03d" % (i % 1000) for i in range(n)]
    other = b"\x02b\x40" + b"z" * 32  # a longer piece
    keyed = (b"\x02d", [b"v%d" % i if i % 3 else None for i in range(n)])
    before = split_records(stamping._py_append(buf, start, end, n, 3,
                                               (b"\x02c\x00", original, keyed)))
    after = split_records(stamping._py_append(buf, start, end, n, 3,
                                              (b"\x02c\x00", [other] * n, keyed)))
    for _ in range(5):
        pieces = list(original)
        stop = threading.Event()

        def meddle(pieces: list[bytes] = pieces, stop: threading.Event = stop) -> None:
            i = 0
            while not stop.is_set():
                pieces[i % n] = other
                i += 7919
        meddler = threading.Thread(target=meddle)
        meddler.start()
        try:
            got = _stamp.append(buf, start, end, n, 3, (b"\x02c\x00", pieces, keyed))
        finally:
            stop.set()
            meddler.join()
        records = split_records(got)
        assert len(records) == n
        assert all(r in (before[i], after[i]) for i, r in enumerate(records))
