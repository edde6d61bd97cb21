"""The native relay's Produce stamping (proxy/native/relay_stamp.c) against its reference, the
Python produce chain: the same requests, the same random draws and the same time give the same
bytes, and whatever the engine does not stamp it refuses (the request goes to Python) unchanged."""

from __future__ import annotations

import random
import struct
from typing import Any

import crc32c
import pytest

from interceptors import build_chains, ids
from interceptors.api import TRACEPARENT, Interceptor, NativeColumn, Stamps
from interceptors.chain import ChainMember, Chains, ProduceChain
from interceptors.context import ProxyInfo
from protocol.compression import LZ4
from protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from protocol.records import Record, build_batch, split_batches
from proxy.filters.chain import FilterChain
from proxy.filters.interception import InterceptorFilter
from proxy.limits.config import LimitsConfig
from proxy.native.capabilities import CAPABILITIES
from proxy.native.path_choice import PASS, STAMP, STAMP_UNLESS_TAGGED, passable_table
from proxy.native.stamp_plan import stamp_plan
from proxy.net.wire import decode_request, parse_request_header
from proxy.upstream.topic_ids import TopicIds
from tests.support.native.stamp import (
    CLUSTER,
    NOW,
    assert_batches_valid,
    chains_for,
    draws_of,
    frame,
    mangled,
    one_partition,
    plan_of,
    python_output,
    refused,
    refused_not,
    request,
    session,
    setup,
)
from tests.support.native_parts import native_module

_relay = native_module("proxy.native._relay")

CASES = [
    ({"mode": "record"}, {}),
    ({"mode": "batch"}, {}),
    ({"mode": "record", "sampled": False}, {"fields": ["client_id", "msg_id", "time"]}),
    ({"mode": "batch", "b3_read": True}, {"fields": ["principal", "source", "proxy", "cluster",
                                                      "origin"], "forged": "reject"}),
    (None, {"prefix": "x-audit-", "trusted": {"client_ids": ["app-*"]}}),
    ({"mode": "record"}, None),
]


@pytest.mark.parametrize("version", [3, 7, 8, 9, 11, 12, 13])
@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("traced", [0.0, 0.5, 1.0])
def test_native_stamping_equals_the_python_chain(version: int, case: int, traced: float
                                                 ) -> None:
    """Records with and without their own valid trace context (some batches all one, some
    mixed): the same bytes, and the same chain and member counters."""
    trace, audit = CASES[case]
    rng = random.Random(version * 100 + case + int(traced * 10_000))
    for round_ in range(3):
        filt, plan = setup(trace, audit)
        msg = request(rng, topics=1 + round_ % 2, partitions=1 + round_, batches=1 + round_ % 3,
                      traced=traced)
        client_id = ("app-1", None, "")[round_]
        data = frame(version, msg, client_id)
        seed = rng.randrange(1 << 30)
        per_batch = trace is not None and trace.get("mode") == "batch"
        wants_uuid = audit is not None and "msg_id" in audit.get("fields", ["msg_id"])
        trace_draws, msg_draws = draws_of(msg, seed, per_batch, trace is not None, wants_uuid,
                                          keeps=trace is not None)
        ids.seed(seed)
        expected = python_output(filt, session(client_id), data)
        got = _relay.stamp_produce(data, plan.wire, trace_draws, msg_draws, NOW)
        assert got[0] is not None, got[1]
        assert got[0] == expected
        filled = [p.records for t in msg.topic_data for p in t.partition_data if p.records]
        batches = [b for r in filled for b in split_batches(r)]
        own = [sum(any(k == "traceparent" for k, _ in r.headers) for r in b.records)
               for b in batches] if trace is not None else [0] * len(batches)
        all_own = sum(n == b.record_count for n, b in zip(own, batches, strict=True))
        assert got[1] == (len(filled) * (1 + round_ % 3), sum(b.record_count for b in batches),
                          sum(own), all_own, (0,) * 8, (0,) * 14)
        engine, _ = setup(trace, audit)
        plan_of(engine).count(*got[1])
        assert engine.chains.produce.stats.snapshot() == filt.chains.produce.stats.snapshot()
        assert engine.codec.reencoded == filt.codec.reencoded


def test_the_counts_match_the_python_chains() -> None:
    rng = random.Random(5)
    trace, audit = {"mode": "batch"}, {}
    filt, plan = setup(trace, audit)
    msg = request(rng, topics=2, partitions=2, batches=3)
    data = frame(9, msg)
    trace_draws, msg_draws = draws_of(msg, 1, True, True, True)
    _, (batches, recs, kept, *_) = _relay.stamp_produce(data, plan.wire, trace_draws, msg_draws,
                                                       NOW)
    assert kept == 0
    python_output(filt, session(), data)
    python = filt.chains.produce.stats.snapshot()
    filt2, plan2 = setup(trace, audit)
    plan2.count(batches, recs)
    assert filt2.chains.produce.stats.snapshot() == python
    assert filt2.codec.reencoded == filt.codec.reencoded
    assert batches == 12
    assert python["members"][0]["events"] == {"trace_new_context": 12}


def test_batches_the_engine_does_not_stamp_go_to_python() -> None:
    _, plan = setup({"mode": "record"}, {})
    plain = [Record(b"k", b"v", [("a", b"1")])]
    assert "watched" in refused(one_partition(build_batch(
        [Record(b"k", b"v", [("traceparent", b"00-x")])])), plan)
    assert "watched" in refused(one_partition(build_batch(
        [*plain, Record(b"k", b"v", [("herald.time", b"1")])])), plan)
    assert "watched" in refused(one_partition(build_batch(
        [Record(b"k", b"v", [("tracestate", b"a=b")])])), plan)
    unknown_codec = bytearray(build_batch(plain, compression=LZ4))
    unknown_codec[22] |= 7  # codec 7: none
    assert "codec" in refused(one_partition(bytes(unknown_codec)), plan)
    assert "control" in refused(one_partition(build_batch(plain, is_control=True)), plan)
    legacy = bytearray(build_batch(plain))
    legacy[16] = 1
    assert "magic" in refused(one_partition(bytes(legacy)), plan)
    versions = CAPABILITIES.stamp_versions
    too_old = one_partition(build_batch(plain), version=versions[0] - 1)
    assert f"v{versions[0]}-v{versions[-1]}" in refused(too_old, plan)
    unknown = TopicProduceData(topic_id=b"\x09" * 16, partition_data=[
        PartitionProduceData(index=0, records=build_batch(plain))])
    assert "not learnt" in refused(frame(13, ProduceRequest(acks=1, topic_data=[unknown])), plan)
    assert "no records" in refused(frame(9, ProduceRequest(acks=1, topic_data=[])), plan)
    accented = TopicProduceData(name="tópico", partition_data=[
        PartitionProduceData(index=0, records=build_batch(plain))])
    assert "ASCII" in refused(frame(9, ProduceRequest(acks=1, topic_data=[accented])), plan)


OWN = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.mark.parametrize("mode", ["record", "batch"])
def test_records_whose_trace_context_python_must_handle_go_to_python(mode: str) -> None:
    """Only one valid traceparent with valid tracestates beside it stays native; anything
    else trace_context or audit looks at hands the request over, whole, as before."""
    _, plan = setup({"mode": mode, "b3_read": True}, {})
    plain = Record(b"k", b"v", [("a", b"1")])
    own = Record(b"k", b"v", [("traceparent", OWN)])
    for headers in (
        [("traceparent", OWN), ("traceparent", OWN)],  # collapsed by Python
        [("traceparent", OWN.upper())],  # invalid: a new context
        [("traceparent", None)],
        [("traceparent", OWN[:-1])],
        [("traceparent", b"ff" + OWN[2:])],
        [("traceparent", OWN), ("tracestate", b"a=1,a=2")],  # counted tracestate_invalid
        [("traceparent", OWN), ("tracestate", b"ok=1"), ("tracestate", None)],
        [("tracestate", b"a=1")],  # removed by Python
        [("traceparent", OWN), ("b3", b"1")],  # b3_read
        [("traceparent", OWN), ("herald.time", b"1")],  # forged
    ):
        chunk = build_batch([own, plain, Record(b"k", b"v", headers)])
        assert "watched" in refused(one_partition(chunk), plan), headers
    assert refused_not(one_partition(build_batch([own, plain])), plan)


def test_a_traceparent_another_member_watches_goes_to_python() -> None:
    """The column keeps a record's own traceparent only when its member alone looks at it:
    here audit's prefix covers it, and Python runs audit on such records."""
    chains = build_chains({"produce": [{"type": "audit", "prefix": "trace"},
                                       {"type": "trace_context"}]},
                          ProxyInfo(cluster_id=CLUSTER))
    plan = stamp_plan(FilterChain([InterceptorFilter(chains, TopicIds())]), session())
    assert plan is not None and not any(column[5] for column in plan.wire[0])
    chunk = build_batch([Record(b"k", b"v", [("traceparent", OWN)])])
    assert "watched" in refused(one_partition(chunk), plan)
    _, plan = setup({"mode": "record"}, {})
    assert [column[5] for column in plan.wire[0]] == [True] + [False] * 8
    assert refused_not(one_partition(chunk), plan)


class _Blind(Interceptor):
    """A plugin that appends a traceparent to every record and looks at none: it cannot keep
    a record's own (Python would append a second one), whatever its column says."""

    stamps = Stamps(("traceparent",))

    def native_columns(self, conn: Any) -> list[NativeColumn]:
        return [NativeColumn(TRACEPARENT, keeps_valid=True)]


def test_only_a_member_that_looks_at_the_traceparent_keeps_it() -> None:
    chains = Chains(produce=ProduceChain([ChainMember("blind", _Blind(None, ProxyInfo()))]))
    plan = stamp_plan(FilterChain([InterceptorFilter(chains, TopicIds())]), session())
    assert plan is not None and plan.wire[0][0][5] is False
    with pytest.raises(ValueError, match="traceparent"):
        NativeColumn("uuid7", keeps_valid=True)


def test_the_limits_send_requests_to_python() -> None:
    chains, _ = chains_for({"mode": "record"}, None)
    filt = InterceptorFilter(chains, TopicIds(), limits=LimitsConfig(max_batch_records=3))
    plan = stamp_plan(FilterChain([filt]), session())
    recs = [Record(b"k", b"v") for _ in range(4)]
    assert "max_batch_records" in refused(one_partition(build_batch(recs)), plan)
    filt = InterceptorFilter(chains, TopicIds(), limits=LimitsConfig(max_batch_records=10,
                                                                     max_request_records=5))
    plan = stamp_plan(FilterChain([filt]), session())
    two = build_batch(recs[:3]) + build_batch(recs[:3])
    assert "max_request_records" in refused(one_partition(two), plan)


def test_malformed_requests_are_refused_never_mangled() -> None:
    rng = random.Random(11)
    _, plan = setup({"mode": "record"}, {})
    good = frame(9, request(rng, 1, 1, 2))
    good3 = frame(3, request(rng, 1, 2, 1))
    for base in (good, good3):
        for _ in range(400):
            data = mangled(rng, base, 12)
            out = _relay.stamp_produce(data, plan.wire, bytes(24 * 4096),
                                       bytes(12 * 4096), NOW)
            if out[0] is not None:  # still a well-formed request: its CRCs must hold
                assert_batches_valid(out[0])


def test_the_crc32c_is_castagnolis() -> None:
    rng = random.Random(3)
    # the lengths around the three interleaved 1 KiB streams of the instruction's loop too
    for n in (0, 1, 7, 8, 9, 15, 16, 17, 1000, 3071, 3072, 3073, 3080, 6149, 16_391, 65_537):
        data = rng.randbytes(n)
        assert _relay.crc32c(data) == _relay.crc32c(data, True) == crc32c.crc32c(data)
        # from an odd address
        assert _relay.crc32c(memoryview(b"x" + data)[1:]) == crc32c.crc32c(data)
    _, plan = setup(None, {"fields": ["proxy"]})
    for n in (1, 7, 8, 9, 64, 1000):
        chunk = build_batch([Record(None, rng.randbytes(n))])
        out = _relay.stamp_produce(one_partition(chunk), plan.wire, b"", b"", NOW)
        assert out[0] is not None
        assert_batches_valid(out[0])


def test_eligibility() -> None:
    chains, env = chains_for({"mode": "record"}, {})
    filt = InterceptorFilter(chains, TopicIds())
    assert stamp_plan(FilterChain([filt]), session()) is not None
    filt.report_traces = True  # spans need Python
    assert stamp_plan(FilterChain([filt]), session()) is None
    filt.report_traces = False
    env.cluster_id = None  # not learnt yet
    assert stamp_plan(FilterChain([filt]), session()) is None
    env.cluster_id = CLUSTER
    for spec in ({"mode": "record", "b3_write": True}, {"trace_id_headers": ["x-trace"]}):
        chains, _ = chains_for(spec, None)
        assert stamp_plan(FilterChain([InterceptorFilter(chains, TopicIds())]), session()) is None
    chains, _ = chains_for(None, None)
    chains = build_chains({"produce": [{"type": "audit", "topics": ["a*"]}]},
                          ProxyInfo(cluster_id=CLUSTER))
    assert stamp_plan(FilterChain([InterceptorFilter(chains, TopicIds())]), session()) is None
    chains = build_chains({"produce": [{"type": "insert_header", "header": "a", "value": "b"}]})
    assert stamp_plan(FilterChain([InterceptorFilter(chains, TopicIds())]), session()) is None


def test_the_table_stamps_produce_v3_to_v13_only_with_a_plan() -> None:
    chains, _ = chains_for({"mode": "record"}, {})
    chain = FilterChain([InterceptorFilter(chains, TopicIds())])
    plain = passable_table(chain)
    stamped = passable_table(chain, stamp=True)
    produce = [stamped[v] for v in range(32)]
    assert produce[3:14] == [STAMP] * 11
    assert produce[:3] == [0, 0, 0] and produce[14:] == [0] * 18
    assert [plain[v] for v in range(14)] == [0] * 14
    assert stamped[1 * 32 + 4] == plain[1 * 32 + 4] == PASS  # Fetch passes either way
    assert STAMP_UNLESS_TAGGED not in produce[3:14]


def test_the_engine_stamps_in_flight_and_hands_the_rest_to_python() -> None:
    """Over socket pairs: stamped requests (one with records that carry their own trace
    context, which they keep) pipelined with one the engine must not stamp (it carries an
    invalid traceparent), which comes back to Python unchanged, with the frames before it
    forwarded stamped and counted."""
    from tests.support.native.engine import Rig

    filt, plan = setup({"mode": "batch"}, {})
    chain = FilterChain([filt])
    rng = random.Random(21)
    stamped = [frame(v, request(rng, 1, 2, 2, traced=0.5 * (i == 1)), corr=i)
               for i, v in enumerate((9, 3, 12))]
    traced = frame(9, ProduceRequest(acks=-1, topic_data=[TopicProduceData(
        name="t", partition_data=[PartitionProduceData(index=0, records=build_batch(
            [Record(b"k", b"v", [("traceparent", b"00-1-2-01")])]))])]), corr=9)
    rig = Rig(passable_table(chain, stamp=True))
    try:
        rig.replan(passable_table(chain, stamp=True), stamp=(plan.wire, 5, 1 << 20))
        sender = rig.send_in_pieces(rig.app, b"".join(stamped) + traced)
        for original in stamped:
            size = struct.unpack(">i", rig.recv_exactly(rig.broker, 4))[0]
            got = struct.pack(">i", size) + rig.recv_exactly(rig.broker, size)
            assert len(got) > len(original)
            assert_batches_valid(got)
            head = parse_request_header(got[4:])
            _, msg = decode_request(head, got[4:])
            for t in msg.topic_data:
                for p in t.partition_data:
                    for b in split_batches(p.records or b""):
                        for rec in b.records:
                            keys = [k for k, _ in rec.headers]
                            assert keys.count("traceparent") == 1
                            assert keys[-8:] == ["herald.client_id",
                                                 "herald.principal", "herald.source",
                                                 "herald.proxy", "herald.cluster",
                                                 "herald.time", "herald.msg_id",
                                                 "herald.origin"]
        sender.join()
        state = rig.wait_handover()
        assert state.reason == "request"
        assert state.client == traced
        assert [e[0] for e in state.in_flight] == [0, 1, 2]
        stamped_counts = rig.engine.collect_stamped()
        batches = sum(len(split_batches(p.records)) for f in stamped
                      for t in decode_request(parse_request_header(f[4:]), f[4:])[1].topic_data
                      for p in t.partition_data if p.records)
        assert stamped_counts[5][0] == batches
        own = sum(any(k == "traceparent" for k, _ in rec.headers) for f in stamped
                  for t in decode_request(parse_request_header(f[4:]), f[4:])[1].topic_data
                  for p in t.partition_data for b in split_batches(p.records or b"")
                  for rec in b.records)
        assert stamped_counts[5][2] == own > 0  # records that kept their own traceparent
        assert rig.engine.collect_stamped() == {}
    finally:
        rig.close()


def test_pipelined_large_requests_are_all_stamped() -> None:
    """Requests over half the stamping buffer's size, sent back to back at once: reading on
    past a request to stamp would fill the room it grows into when stamped (it went to Python
    then). Each is read up to its end, stamped once, and placed once what precedes it went
    out."""
    from tests.support.native.engine import Rig, send_behind

    filt, plan = setup({"mode": "record"}, {})
    chain = FilterChain([filt])
    value = bytes(range(256)) * 4
    frames = [frame(9, ProduceRequest(acks=-1, timeout_ms=30_000, topic_data=[
        TopicProduceData(name="topic-0", partition_data=[PartitionProduceData(
            index=p, records=build_batch([Record(b"k%d" % i, value, []) for i in range(300)]))
            for p in range(2)])]), corr=i) for i in range(8)]
    rig = Rig(passable_table(chain, stamp=True), tcp=True)  # socket buffers of megabytes
    try:
        rig.replan(passable_table(chain, stamp=True), stamp=(plan.wire, 5, 1 << 20))
        send_behind(rig.app, b"".join(frames))
        for i, original in enumerate(frames):
            size = struct.unpack(">i", rig.recv_exactly(rig.broker, 4))[0]
            got = struct.pack(">i", size) + rig.recv_exactly(rig.broker, size)
            assert len(got) > len(original), f"request {i} was not stamped"
            assert_batches_valid(got)
            assert struct.unpack(">i", got[8:12])[0] == i  # in order
        assert rig.sid not in rig.engine.events()  # no request went to Python
        assert rig.engine.collect_stamped()[5][:2] == (2 * len(frames), 600 * len(frames))
    finally:
        rig.close()
