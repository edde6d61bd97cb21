"""The engine's scan of share groups' ShareFetch responses (KIP-932), held to the Python fetch
chain: the same verdict on every response (pass byte for byte, or Python), the same counts, the
same traces remembered, and nothing a scanned response leaves for Herald to settle."""

from __future__ import annotations

import random
import struct

import pytest

from interceptors import build_chains
from interceptors.context import ProxyInfo
from protocol.compression import LZ4, ZSTD
from protocol.messages.share_fetch_response import (
    AcquiredRecords,
    LeaderIdAndEpoch,
    NodeEndpoint,
    PartitionData,
    ShareFetchableTopicResponse,
    ShareFetchResponse,
)
from protocol.records import build_batch
from proxy.filters import share_drops
from proxy.filters.chain import FilterChain
from proxy.filters.interception import InterceptorFilter, connection_info
from proxy.native.fetch_plan import fetch_plan
from proxy.upstream.topic_ids import TopicIds
from tests.support.native.fetch import (
    SHARE_FETCH,
    chunk,
    frame,
    python_unchanged,
    records,
    scan,
    session,
    setup,
    topic_id,
)
from tests.support.native_parts import ENGINE, needs

pytestmark = needs(ENGINE)

VERSIONS = (1, 2)


def share_response(rng: random.Random, watched: float, topics: int = 2, partitions: int = 2,
                   endpoints: bool = False, **kw: object) -> ShareFetchResponse:
    """A response as a broker writes one: per partition its records and the ranges the member
    acquired, some partitions with errors and no records."""
    data = []
    for t in range(topics):
        parts = []
        for p in range(partitions):
            records_field = chunk(rng, rng.randrange(1, 4), watched, **kw)
            parts.append(PartitionData(
                partition_index=p, error_code=0, error_message=None, acknowledge_error_code=0,
                acknowledge_error_message=rng.choice((None, "", "late")),
                current_leader=LeaderIdAndEpoch(leader_id=1, leader_epoch=rng.randrange(5)),
                records=records_field,
                acquired_records=[AcquiredRecords(first_offset=0, last_offset=40,
                                                  delivery_count=1)]))
        parts.append(PartitionData(partition_index=partitions, error_code=6,
                                   error_message="NOT_LEADER_OR_FOLLOWER",
                                   current_leader=LeaderIdAndEpoch(leader_id=-1,
                                                                   leader_epoch=-1),
                                   records=b"", acquired_records=[]))
        data.append(ShareFetchableTopicResponse(topic_id=topic_id(t), partitions=parts))
    nodes = [NodeEndpoint(node_id=2, host="10.0.0.2", port=9092, rack=None)] if endpoints else []
    return ShareFetchResponse(throttle_time_ms=0, error_code=0, error_message=None,
                              acquisition_lock_timeout_ms=30_000, responses=data,
                              node_endpoints=nodes)


def share_frame(version: int, msg: ShareFetchResponse) -> bytes:
    return frame(version, msg, api=SHARE_FETCH)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("shape", ["plain", "compressed", "truncated", "control"])
def test_share_fetch_verdicts_and_counts_equal_the_python_chain(version: int, shape: str
                                                                ) -> None:
    rng = random.Random(f"{version}-{shape}")
    kw = {"plain": {}, "compressed": {"compression": rng.choice((LZ4, ZSTD))},
          "truncated": {"truncated": True}, "control": {"control": True}}[shape]
    passed = held = 0
    for i in range(24):
        filt, plan = setup()
        data = share_frame(version, share_response(rng, 0.0 if i % 3 else 0.02, **kw))
        got = scan(data, version, plan, api=SHARE_FETCH)
        ctx = session()
        before = filt.chains.fetch.stats.snapshot()
        unchanged = python_unchanged(filt, data, version, SHARE_FETCH, ctx)
        assert (got[0] is not None) == unchanged, got
        if got[0] is None:
            assert got[1] == "a record with a watched header", got
            held += 1
            continue
        passed += 1
        python = filt.chains.fetch.stats.snapshot()
        assert python != before
        counted, plan2 = setup()
        plan2.count(*got)
        assert counted.chains.fetch.stats.snapshot() == python
        # What the engine passes, Python would have settled nothing for.
        assert not share_drops.owed(ctx.attributes)
    assert passed and held, (passed, held)


@pytest.mark.parametrize("version", VERSIONS)
def test_node_endpoints_send_a_share_fetch_to_python_which_rewrites_them(version: int) -> None:
    _, plan = setup()
    data = share_frame(version, share_response(random.Random(1), 0.0, endpoints=True))
    assert scan(data, version, plan, api=SHARE_FETCH) == (None, "leader hints (node endpoints)")


def test_the_early_access_version_and_unknown_topic_ids_go_to_python() -> None:
    _, plan = setup()
    rng = random.Random(2)
    msg = share_response(rng, 0.0)
    msg.acquisition_lock_timeout_ms = 0  # not a field of v0
    assert scan(share_frame(0, msg), 0, plan, api=SHARE_FETCH) == (
        None, "a ShareFetch version the scan does not read")
    msg.responses[0].topic_id = b"\x77" * 16
    assert scan(share_frame(1, msg), 1, plan, api=SHARE_FETCH) == (
        None, "a topic id Herald has not learnt")


def test_every_cut_of_a_share_fetch_goes_to_python_as_malformed() -> None:
    """A response cut anywhere (its size prefix made to fit) is not one: Python's codec says
    what it is, and the scan reads nothing past it (the fuzz target holds that for any
    bytes)."""
    _, plan = setup()
    data = share_frame(1, share_response(random.Random(3), 0.0, topics=1, partitions=1))
    assert scan(data, 1, plan, api=SHARE_FETCH)[0] is not None
    for cut in range(8, len(data)):
        piece = struct.pack(">i", cut - 4) + data[4:cut]
        assert scan(piece, 1, plan, api=SHARE_FETCH) == (
            None, "a malformed ShareFetch response"), cut


def _linked() -> InterceptorFilter:
    topics = TopicIds()
    for t in range(4):
        topics.learn(topic_id(t), f"topic-{t}")
    spec = {"produce": [{"type": "trace_context", "link": {}}]}
    return InterceptorFilter(build_chains(spec, ProxyInfo()), topics)


def test_the_share_scan_remembers_the_traces_python_remembers() -> None:
    """A share group's consumer is a service like a classic group's: the link memory learns
    the traces of the records it was given, natively as in Python."""
    rng = random.Random(4)
    traces = [b"%032x" % rng.getrandbits(128) for _ in range(8)]
    python, engine = _linked(), _linked()
    remembered = 0
    for _ in range(3):
        msg = share_response(rng, 0.0)
        for t in msg.responses:
            for p in t.partitions:
                if p.records:
                    recs = records(rng, 10, 0.0)
                    for r in recs:
                        tp = b"00-" + rng.choice(traces) + b"-%016x-01" % (rng.getrandbits(64)
                                                                            | 1)
                        r.headers.insert(0, ("traceparent", tp))
                    p.records = build_batch(recs, base_offset=rng.randrange(100))
        data = share_frame(2, msg)
        plan = fetch_plan(FilterChain([engine]), session())
        assert plan is not None and plan.wire[-1] is not None
        got = scan(data, 2, plan, api=SHARE_FETCH)
        assert got[0] is not None, got
        assert python_unchanged(python, data, 2, SHARE_FETCH)
        remembered += got[5][6]
    assert remembered > 0
    mem_py, mem_c = (next(m for m in f.chains.fetch.members
                          if m.name == "trace_context.fetched").interceptor.memory
                     for f in (python, engine))
    assert len(mem_py) == len(mem_c) > 0
    scope = mem_c.scope(connection_info(session()))
    for t in traces:
        assert mem_c.parents(scope, t) == mem_py.parents(scope, t)
