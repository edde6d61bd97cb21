"""The native relay's Fetch scan (proxy/native/relay_fetch.c) held to the Python fetch chain.

The engine may forward a Fetch response unchanged only when the Python chain would leave it
byte for byte as it came, and must then count what the chain would have counted. Responses
are built here (several versions, topics, partitions and batches, records with and without
the dropped headers, truncated trailing batches, aborted transactions, control, compressed
and legacy batches) and given to both; malformed ones must never crash the scan.
"""

from __future__ import annotations

import random
import struct

import pytest

from interceptors import build_chains
from protocol.compression import LZ4
from protocol.messages.fetch_response import (
    FetchableTopicResponse,
    FetchResponse,
    NodeEndpoint,
    PartitionData,
)
from protocol.records import Record, build_batch
from proxy.filters.address_rewrite import AddressRewriter
from proxy.filters.chain import FilterChain
from proxy.filters.interception import InterceptorFilter
from proxy.native.fetch_plan import fetch_plan
from proxy.native.path_choice import PASS, SCAN, SCAN_UNLESS_TAGGED, passable_table
from proxy.upstream.topic_ids import TopicIds
from tests.support.native.fetch import (
    frame,
    python_unchanged,
    response,
    scan,
    scan_agrees_with_python,
    setup,
)
from tests.support.native.stamp import mangled
from tests.support.native_parts import ENGINE, needs

pytestmark = needs(ENGINE)

VERSIONS = [4, 5, 7, 11, 12, 13, 15, 16, 18]


@pytest.mark.parametrize("version", VERSIONS)
def test_the_scan_agrees_with_the_python_chain(version: int) -> None:
    rng = random.Random(version)
    verdicts = set()
    for round_ in range(12):
        watched = (0.0, 0.0, 0.02, 0.3)[round_ % 4]
        msg = response(rng, version, topics=1 + round_ % 3, partitions=1 + round_ % 2,
                       batches=1 + round_ % 4, watched=watched, truncated=round_ % 3 == 1,
                       control=round_ % 5 == 2)
        verdicts.add(scan_agrees_with_python(version, msg))
    assert verdicts == {True, False}


def test_legacy_batches_and_unknown_topics_go_to_python() -> None:
    rng = random.Random(2)
    filt, plan = setup()
    lz4 = frame(12, response(rng, 12, 1, 1, 2, 0.0, compression=LZ4))
    assert scan(lz4, 12, plan)[0] is not None  # read decompressed, as Python reads it
    assert python_unchanged(filt, lz4, 12)
    legacy = bytearray(build_batch([Record(b"k", b"v")]))
    legacy[16] = 1  # magic 1
    msg = FetchResponse(responses=[FetchableTopicResponse(topic="topic-0", partitions=[
        PartitionData(partition_index=0, records=bytes(legacy))])])
    assert scan(frame(11, msg), 11, plan)[1] == "a batch of magic 0 or 1"
    # v13+: a topic id Herald has not learnt; Python answers UNKNOWN_TOPIC_ID for it
    msg = response(rng, 13, 1, 1, 1, 0.0)
    msg.responses[0].topic_id = b"\x77" * 16
    data = frame(13, msg)
    assert scan(data, 13, plan) == (None, "a topic id Herald has not learnt")
    assert not python_unchanged(filt, data, 13)
    # versions the scan does not walk
    assert scan(frame(3, response(rng, 3, 1, 1, 1, 0.0)), 3, plan)[0] is None


def test_leader_hints_go_to_python_only_when_a_filter_reads_them() -> None:
    rng = random.Random(3)
    _, plan = setup()
    msg = response(rng, 16, 1, 1, 1, 0.0)
    msg.node_endpoints = [NodeEndpoint(node_id=1, host="b1", port=9092, rack=None)]
    data = frame(16, msg)
    assert scan(data, 16, plan, check_tags=True) == (None,
                                                     "top-level tagged fields (leader hints)")
    assert scan(data, 16, plan, check_tags=False)[0] is not None


def test_malformed_responses_never_crash_or_pass_what_python_refuses() -> None:
    rng = random.Random(11)
    filt, plan = setup()
    for version in (5, 12, 13):
        base = frame(version, response(rng, version, 2, 2, 2, 0.0, truncated=True))
        assert scan(base, version, plan)[0] is not None
        passed = refused = 0
        for _ in range(300):
            data = mangled(rng, base, 8)
            got = scan(data, version, plan)
            if got[0] is not None:  # it passed: Python must have left it as it is
                assert python_unchanged(filt, data, version)
                passed += 1
            else:
                refused += 1
        # Both sides were reached: mangled bytes the scan passed, each checked against Python,
        # and some it sent to Python.
        assert passed and refused, (version, passed, refused)


def test_eligibility() -> None:
    assert fetch_plan(FilterChain([])) is None
    for spec in (
        [{"type": "drop_headers", "headers": ["glob:x-*"]}],  # a pattern: Python matches it
        [{"type": "drop_headers", "headers": ["x-debug"], "topics": ["orders*"]}],
        [{"type": "drop_headers", "headers": ["x-debug"], "shadow": True}],
        [{"type": "drop_headers", "headers": ["x-debug"]},
         {"type": "insert_header", "header": "a", "value": "b"}],
    ):
        chains = build_chains({"fetch": spec})
        assert fetch_plan(FilterChain([InterceptorFilter(chains, TopicIds())])) is None, spec
    filt, plan = setup([{"type": "drop_headers", "headers": ["x-debug"]},
                        {"type": "drop_headers", "headers": ["prefix:x-t-"]}])
    assert plan.wire[1] == (b"x-debug",) and plan.wire[2] == (b"x-t-",)
    assert len(plan.wire[6]) == 16 * 4  # the topic ids Herald knows


def test_the_table_scans_fetch_v4_to_v18_only_with_a_plan() -> None:
    filt, _ = setup()
    chain = FilterChain([filt])
    plain = passable_table(chain)
    scanned = passable_table(chain, fetch=True)
    fetch = [scanned[32 + v] for v in range(32)]
    assert fetch[4:19] == [SCAN] * 15
    assert fetch[:4] == [0] * 4 and fetch[19:] == [0] * 13
    assert [plain[32 + v] for v in range(19)] == [0] * 19
    assert scanned[0 * 32 + 7] == plain[0 * 32 + 7] == PASS  # Produce passes either way
    assert SCAN_UNLESS_TAGGED not in fetch
    # Herald's address rewriting reads leader hints (top-level tagged fields) from v16 on.
    chain = FilterChain([AddressRewriter(None), filt])  # type: ignore[arg-type]
    assert fetch_plan(chain) is not None
    scanned = passable_table(chain, fetch=True)
    assert [scanned[32 + v] for v in range(4, 19)] == [SCAN] * 12 + [SCAN_UNLESS_TAGGED] * 3


def test_the_engine_scans_in_flight_and_hands_the_rest_to_python() -> None:
    """Over socket pairs: clean Fetch responses pass byte for byte and are counted; the one
    with a dropped header comes back to Python whole and unsent, with the requests after it
    still in flight."""
    from tests.support.native.engine import Rig, request

    filt, plan = setup()
    table = passable_table(FilterChain([filt]), fetch=True)
    rng = random.Random(21)
    clean = [frame(12, response(rng, 12, 2, 2, 3, 0.0), corr=i) for i in range(3)]
    dirty = frame(12, response(rng, 12, 1, 1, 2, 1.0), corr=3)
    rig = Rig(table)
    try:
        rig.replan(table, fetch=(plan.wire, 9, 1 << 20))
        for corr in range(5):
            rig.app.sendall(request(1, 12, corr, b"\x00" * 40, flexible=True))
        for corr in range(5):  # the requests pass as they are
            size = struct.unpack(">i", rig.recv_exactly(rig.broker, 4))[0]
            assert struct.unpack_from(">i", rig.recv_exactly(rig.broker, size), 4)[0] == corr
        sender = rig.send_in_pieces(rig.broker, b"".join(clean) + dirty)
        for original in clean:
            assert rig.recv_exactly(rig.app, len(original)) == original
        sender.join()
        state = rig.wait_handover()
        assert state.reason == "response"
        assert state.upstream == dirty and state.tail == 0
        assert [e[0] for e in state.in_flight] == [3, 4]
        assert rig.nothing_on(rig.app)
        counted = rig.engine.collect_stamped()[9]
        before = filt.chains.fetch.stats.snapshot()
        for original in clean:
            python_unchanged(filt, original, 12)
        after = filt.chains.fetch.stats.snapshot()
        assert counted[:4] == (after["batches_seen"] - before["batches_seen"],
                               after["records_seen"] - before["records_seen"], 0, 0)
        assert counted[0] == 3 * 2 * 2 * 3
    finally:
        rig.close()


@pytest.mark.parametrize("pool", [0, 8 << 20])
def test_a_buffer_grows_from_the_engines_pool_or_the_frame_goes_to_python(pool: int) -> None:
    """Held sessions book their base buffers only; growing for a large response comes from
    the engine's pool (`relay.GROWTH_SHARE` of the memory budget). With the pool spent, the
    response goes to Python; with room, the engine scans it, and what the buffer grew by is
    the pool's again once the session is taken back."""
    from tests.support.native.engine import Rig, request, send_behind

    filt, plan = setup()
    table = passable_table(FilterChain([filt]), fetch=True)
    large = frame(12, response(random.Random(22), 12, 2, 2, 12, 0.0), corr=0)
    assert len(large) > 64 * 1024
    rig = Rig(table, grow_limit=pool)
    try:
        rig.replan(table, fetch=(plan.wire, 9, 4 << 20))  # may grow to 4 MiB
        rig.app.sendall(request(1, 12, 0, b"\x00" * 40, flexible=True))
        rig.recv_exactly(rig.broker, struct.unpack(">i", rig.recv_exactly(rig.broker, 4))[0])
        if pool == 0:  # its header tells its size: the engine reads no further
            rig.broker.sendall(large[:20_000])
            state = rig.wait_handover()
            assert state.reason == "response"
            assert [e[0] for e in state.in_flight] == [0]
        else:
            send_behind(rig.broker, large)
            assert rig.recv_exactly(rig.app, len(large)) == large
            assert 0 < rig.engine.grown <= pool
            rig.engine.stop(rig.sid)
            rig.wait_handover()
        assert rig.engine.grown == 0
    finally:
        rig.close()


@pytest.mark.parametrize("fits", [False, True])
def test_the_growth_pool_is_a_share_of_the_memory_budget_and_booked_in_it(fits: bool) -> None:
    """A proxy's engine (`NativeRelay`) may grow its buffers by `GROWTH_SHARE` of the memory
    budget, and what they have grown by is booked in the budget at every fold (every scrape):
    with a budget whose share is smaller than the growth a large response needs, the response
    goes to Python; with one whose share holds it, the growth is in the budget's `used` while
    the session holds it, and out of it once the session is taken back."""
    from proxy.limits.memory_budget import MemoryBudget
    from proxy.native.relay import GROWTH_SHARE, NativeRelay
    from proxy.observability.metrics import Metrics
    from tests.support.native.engine import Rig, request, send_behind

    filt, plan = setup()
    table = passable_table(FilterChain([filt]), fetch=True)
    large = frame(12, response(random.Random(22), 12, 2, 2, 12, 0.0), corr=0)
    needed = len(large) - 64 * 1024  # past the rig's 64 KiB base buffer
    assert needed > GROWTH_SHARE * 1000  # so a pool of the whole budget would hold it
    limit = GROWTH_SHARE * (64 << 20) if fits else GROWTH_SHARE * 1000  # a 1,000-byte share
    memory = MemoryBudget(limit)
    relay = NativeRelay(Metrics(), memory)
    rig = Rig(table, engine=relay._engine)
    planned = relay.fetch_plan(FilterChain([filt]))
    assert planned is not None and planned[0].wire == plan.wire
    try:
        rig.replan(table, fetch=(plan.wire, planned[1], 4 << 20))  # counted as the relay's
        rig.app.sendall(request(1, 12, 0, b"\x00" * 40, flexible=True))
        rig.recv_exactly(rig.broker, struct.unpack(">i", rig.recv_exactly(rig.broker, 4))[0])
        if not fits:
            rig.broker.sendall(large[:20_000])
            assert rig.wait_handover().reason == "response"
            relay.fold()
            assert memory.used == 0
        else:
            send_behind(rig.broker, large)
            assert rig.recv_exactly(rig.app, len(large)) == large
            relay.fold()
            assert memory.used == rig.engine.grown >= needed
            assert memory.used <= limit // GROWTH_SHARE
            rig.engine.stop(rig.sid)
            rig.wait_handover()
            relay.fold()
            assert memory.used == 0
    finally:
        rig.close()


def test_a_response_larger_than_the_scan_buffer_goes_to_python() -> None:
    from tests.support.native.engine import Rig, request

    filt, plan = setup()
    table = passable_table(FilterChain([filt]), fetch=True)
    rng = random.Random(22)
    small = frame(12, response(rng, 12, 1, 1, 2, 0.0), corr=0)
    large = frame(12, response(rng, 12, 2, 2, 12, 0.0), corr=1)
    assert len(small) < 64 * 1024 < len(large)
    assert scan(large, 12, plan)[0] is not None  # clean: only its size sends it to Python
    rig = Rig(table)
    try:
        rig.replan(table, fetch=(plan.wire, 9, 64 * 1024))  # no larger than the buffer
        for corr in range(2):
            rig.app.sendall(request(1, 12, corr, b"\x00" * 40, flexible=True))
        for _ in range(2):
            rig.recv_exactly(rig.broker, struct.unpack(">i", rig.recv_exactly(rig.broker, 4))[0])
        # Its header tells its size: the engine hands it over without reading it all.
        rig.broker.sendall(small + large[:20_000])
        assert rig.recv_exactly(rig.app, len(small)) == small
        state = rig.wait_handover()
        assert state.reason == "response"
        assert 8 <= len(state.upstream) <= 20_000
        assert state.upstream == large[:len(state.upstream)]
        assert [e[0] for e in state.in_flight] == [1]
        assert rig.nothing_on(rig.app)
    finally:
        rig.close()
