"""The native relay's Produce stamping (proxy/native/relay_stamp.c) against its reference, the
Python produce chain: the same requests, the same random draws and the same time give the same
bytes, and whatever the engine does not stamp it refuses (the request goes to Python) unchanged."""

from __future__ import annotations

import random
import struct
from typing import Any

import crc32c
import pytest
import trio

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
from proxy.filters.chain import Exchange, FilterChain, SessionContext
from proxy.filters.interception import InterceptorFilter
from proxy.limits.config import LimitsConfig
from proxy.native.path_choice import PASS, STAMP, STAMP_UNLESS_TAGGED, passable_table
from proxy.native.stamp_plan import stamp_plan
from proxy.net.wire import decode_request, encode_request, parse_request_header
from proxy.upstream.topic_ids import TopicIds

_relay = pytest.importorskip("proxy.native._relay")

NOW = 1_764_000_000_123
CLUSTER = "clu-ster-1"
INSTANCE = "herald-test-1"


def chains_for(trace: dict | None, audit: dict | None) -> tuple[Any, ProxyInfo]:
    env = ProxyInfo(instance_id=INSTANCE, cluster_id=CLUSTER, clock=lambda: NOW / 1000)
    spec = []
    if trace is not None:
        spec.append({"type": "trace_context", **trace})
    if audit is not None:
        spec.append({"type": "audit", **audit})
    return build_chains({"produce": spec}, env), env


def session(client_id: str | None = "app-1") -> SessionContext:
    return SessionContext("10.1.2.3:5555", "bootstrap", "127.0.0.1:9092", client_id=client_id)


def frame(version: int, msg: ProduceRequest, client_id: str | None = "app-1",
          corr: int = 7) -> bytes:
    cid = b"\xff\xff" if client_id is None else struct.pack(">h", len(client_id)) + \
        client_id.encode()
    head = struct.pack(">hhi", 0, version, corr) + cid + (b"\x00" if version >= 9 else b"")
    payload = head + msg.encode(version)
    return struct.pack(">i", len(payload)) + payload


STATES = (b"congo=t61rcWkgMzE,rojo=00f067aa0ba902b7", b"", b" a@b-c=1 ,, \tz=~ x")


def own_context(rng: random.Random) -> list[tuple[str, bytes]]:
    """A client's own valid trace context: a traceparent (now and then of a later version,
    which may go on after its flags) and zero to two valid tracestate headers."""
    version = rng.choice((b"00", b"00", b"01", b"fe"))
    tp = b"%s-%032x-%016x-%02x" % (version, rng.getrandbits(128) | 1, rng.getrandbits(64) | 1,
                                   rng.randrange(256))
    if version != b"00" and rng.random() < 0.5:
        tp += b"-future"
    return [("traceparent", tp)] + [("tracestate", rng.choice(STATES))
                                    for _ in range(rng.choice((0, 0, 1, 2)))]


def records(rng: random.Random, n: int, traced: float = 0.0) -> list[Record]:
    """`traced`: the share of records that carry their own trace context."""
    out = []
    for i in range(n):
        headers = [(f"h{j}", None if rng.random() < 0.2 else rng.randbytes(rng.randrange(0, 9)))
                   for j in range(rng.choice((0, 0, 1, 3)))]
        if rng.random() < traced:
            for header in own_context(rng):
                headers.insert(rng.randrange(len(headers) + 1), header)
        key = None if rng.random() < 0.3 else rng.randbytes(rng.randrange(0, 20))
        value = None if rng.random() < 0.1 else rng.randbytes(rng.choice((0, 5, 200, 3000)))
        out.append(Record(key, value, headers, offset_delta=i))
    return out


def request(rng: random.Random, topics: int = 2, partitions: int = 2, batches: int = 2,
            traced: float = 0.0) -> ProduceRequest:
    data = []
    for t in range(topics):
        parts = []
        for p in range(partitions):
            chunk = b"".join(
                build_batch(records(rng, rng.randrange(1, 40), traced),
                            producer_id=rng.choice((-1, 42)),
                            producer_epoch=1, base_sequence=rng.choice((-1, 100)),
                            is_transactional=rng.random() < 0.3, base_timestamp=NOW - 5)
                for _ in range(batches))
            parts.append(PartitionProduceData(index=p, records=chunk))
        parts.append(PartitionProduceData(index=partitions, records=None))
        data.append(TopicProduceData(name=f"topic-{t}", topic_id=topic_id(t),
                                     partition_data=parts))
    return ProduceRequest(transactional_id=rng.choice((None, "tx-1")), acks=-1,
                          timeout_ms=30_000, topic_data=data)


def topic_id(t: int) -> bytes:
    return bytes([t + 1]) * 16


def python_output(filt: InterceptorFilter, ctx: SessionContext, data: bytes) -> bytes:
    """What the Python path sends for the request frame."""
    payload = data[4:]
    head = parse_request_header(payload)
    ctx.client_id = head.client_id
    offset, msg = decode_request(head, payload)
    changed = trio.run(filt.on_request, ctx, Exchange(), 0, head.api_version, msg)
    if not changed:  # every record kept its own traceparent and nothing else was appended
        return data
    out = encode_request(head, payload, offset, msg)
    return struct.pack(">i", len(out)) + out


def draws_of(msg: ProduceRequest, seed: int, per_batch: bool, traces: bool, uuids: bool,
             keeps: bool = True) -> tuple[bytes, bytes]:
    """The random bytes the Python chain draws for `msg` after `ids.seed(seed)`, batch by
    batch in the layout the engine takes. With `keeps`, records that carry their own
    traceparent get no new one: in record mode they draw nothing, in batch mode a batch all of
    whose records carry one draws nothing."""
    ids.seed(seed)
    trace, message = bytearray(), bytearray()
    for t in msg.topic_data:
        for p in t.partition_data:
            for batch in split_batches(p.records or b""):
                n = batch.record_count
                fresh = n - sum(keeps and any(k == "traceparent" for k, _ in r.headers)
                                for r in batch.records)
                if traces and fresh:
                    bits = 192 if per_batch else 192 * fresh
                    trace += ids._trace_random.getrandbits(bits).to_bytes(bits // 8, "big")
                if uuids:
                    message += ids._message_random.getrandbits(96 * n).to_bytes(12 * n, "big")
    return bytes(trace), bytes(message)


def setup(trace: dict | None, audit: dict | None) -> tuple[InterceptorFilter, Any]:
    chains, _ = chains_for(trace, audit)
    topics = TopicIds()
    for t in range(4):
        topics.learn(topic_id(t), f"topic-{t}")
    filt = InterceptorFilter(chains, topics)
    plan = stamp_plan(FilterChain([filt]), session())
    assert plan is not None
    return filt, plan


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


def plan_of(filt: InterceptorFilter) -> Any:
    plan = stamp_plan(FilterChain([filt]), session())
    assert plan is not None
    return plan


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


def refused(data: bytes, plan: Any) -> str:
    out = _relay.stamp_produce(data, plan.wire, bytes(24 * 4096), bytes(12 * 4096), NOW)
    assert out[0] is None
    return out[1]


def one_partition(chunk: bytes, version: int = 9) -> bytes:
    return frame(version, ProduceRequest(acks=1, topic_data=[TopicProduceData(
        name="t", partition_data=[PartitionProduceData(index=0, records=chunk)])]))


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
    assert "v3-v13" in refused(one_partition(build_batch(plain), version=2), plan)
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


def refused_not(data: bytes, plan: Any) -> bool:
    out = _relay.stamp_produce(data, plan.wire, bytes(24 * 4096), bytes(12 * 4096), NOW)
    return out[0] is not None


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


def mangled(rng: random.Random, base: bytes, head: int) -> bytes:
    """A frame made malformed one of three ways (its size prefix fixed up): cut short after
    `head` bytes or more, bits flipped, or a length field from `head` on made huge."""
    data = bytearray(base)
    how = rng.randrange(3)
    if how == 0:
        data = data[:rng.randrange(head, len(data))]
    elif how == 1:
        for _ in range(rng.randrange(1, 4)):
            data[rng.randrange(4, len(data))] ^= 1 << rng.randrange(8)
    else:
        at = rng.randrange(head, len(data) - 4)
        data[at:at + 4] = b"\x7f\xff\xff\xf0"
    struct.pack_into(">i", data, 0, len(data) - 4)
    return bytes(data)


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


def assert_batches_valid(data: bytes) -> None:
    payload = data[4:]
    head = parse_request_header(payload)
    _, msg = decode_request(head, payload)
    for t in msg.topic_data:
        for p in t.partition_data:
            pos = 0
            recs = bytes(p.records or b"")
            while pos < len(recs):
                size = 12 + struct.unpack_from(">i", recs, pos + 8)[0]
                crc = struct.unpack_from(">I", recs, pos + 17)[0]
                assert crc32c.crc32c(recs[pos + 21:pos + size]) == crc
                pos += size


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
    from tests.unit.proxy.native.test_native_relay_engine import Rig

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
    from tests.unit.proxy.native.test_native_relay_engine import Rig, send_behind

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
