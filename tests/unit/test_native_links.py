"""Causal links stamped by the native relay (proxy/native/relay_stamp.c with the C memory,
protocol/link_memory.c) against the Python chain, its reference: with the same memory
contents, a record that keeps its own traceparent gets the same ``herald.parent`` headers in
the same place, the request the same bytes, the members the same counters."""

from __future__ import annotations

import random
from typing import Any

import pytest

from interceptors import build_chains, ids
from interceptors.context import ProxyInfo
from interceptors.trace_links import NativeFetchedTraces
from protocol.records import split_batches
from proxy.filters.chain import FilterChain
from proxy.filters.interception import InterceptorFilter, connection_info
from proxy.native.fetch_plan import fetch_plan
from proxy.native.stamp_plan import stamp_plan
from proxy.upstream.topic_ids import TopicIds
from tests.unit.test_native_stamp import (
    CLUSTER,
    INSTANCE,
    NOW,
    draws_of,
    frame,
    python_output,
    request,
    session,
    topic_id,
)

_relay = pytest.importorskip("proxy.native._relay")

TRACE = {"type": "trace_context", "link": {"max_parents": 3}}
AUDIT = {"type": "audit"}
ORDERS = {"alone": [TRACE], "audit_before": [AUDIT, TRACE], "audit_after": [TRACE, AUDIT]}


def filters(order: str, mode: str) -> tuple[InterceptorFilter, InterceptorFilter]:
    """Two filters over one memory (`ProxyInfo.kept`): one for Python, one whose counters
    the engine's counts go to."""
    env = ProxyInfo(instance_id=INSTANCE, cluster_id=CLUSTER, clock=lambda: NOW / 1000)
    spec = [dict(m, mode=mode) if m is TRACE else m for m in ORDERS[order]]
    out = []
    for _ in range(2):
        topics = TopicIds()
        for t in range(4):
            topics.learn(topic_id(t), f"topic-{t}")
        out.append(InterceptorFilter(build_chains({"produce": spec}, env), topics))
    return out[0], out[1]


def memory_of(filt: InterceptorFilter) -> NativeFetchedTraces:
    member = next(m for m in filt.chains.produce.members if m.type == "trace_context")
    memory = member.interceptor._memory
    assert isinstance(memory, NativeFetchedTraces)
    return memory


def fill(rng: random.Random, memory: NativeFetchedTraces, msg: Any, client_id: str | None
         ) -> int:
    """Remember parents for some of the traces the request's records carry; how many
    traced records will find some."""
    scope = memory.scope(connection_info(session(client_id)))
    traces = [v[3:35] for t in msg.topic_data for p in t.partition_data
              for b in split_batches(p.records or b"") for r in b.records
              for k, v in r.headers if k == "traceparent"]
    chosen = {t for t in traces if rng.random() < 0.6}
    for t in chosen:
        for _ in range(rng.randrange(1, 5)):
            memory.remember(scope, t, (rng.choice(("in", "orders")), rng.randrange(3),
                                       rng.randrange(10**9)))
    return sum(t in chosen for t in traces)


@pytest.mark.parametrize("version", [3, 9, 13])
@pytest.mark.parametrize("order", sorted(ORDERS))
@pytest.mark.parametrize("mode", ["record", "batch"])
def test_native_links_equal_the_python_chain(version: int, order: str, mode: str) -> None:
    rng = random.Random(version * 7 + len(order) + len(mode))
    linked = 0
    for round_ in range(4):
        filt, engine = filters(order, mode)
        plan = stamp_plan(FilterChain([filt]), session())
        assert plan is not None and plan.wire[-1] is not None
        client_id = ("app-1", None, "", "app-1")[round_]
        msg = request(rng, topics=1 + round_ % 2, partitions=1 + round_ % 3,
                      batches=1 + round_ % 2, traced=(0.5, 1.0, 0.8, 1.0)[round_])
        hits = fill(rng, memory_of(filt), msg, client_id)
        plan = stamp_plan(FilterChain([filt]), session(client_id))
        data = frame(version, msg, client_id)
        seed = rng.randrange(1 << 30)
        trace_draws, msg_draws = draws_of(msg, seed, mode == "batch", True, order != "alone")
        got = _relay.stamp_produce(data, plan.wire, trace_draws, msg_draws, NOW)
        if order == "audit_after" and hits:
            assert got == (None, "a linked record a later member looks at")
            continue
        ids.seed(seed)
        expected = python_output(filt, session(client_id), data)
        assert got[0] is not None, got[1]
        assert got[0] == expected
        assert got[1][5][0] == hits
        linked += hits
        plan_of_engine = stamp_plan(FilterChain([engine]), session(client_id))
        plan_of_engine.count(*got[1])
        assert engine.chains.produce.stats.snapshot() == filt.chains.produce.stats.snapshot()
        assert engine.codec.reencoded == filt.codec.reencoded
    assert linked or order == "audit_after"  # not vacuous: records were linked natively


def test_records_without_trace_context_never_look_up() -> None:
    """An untraced producer's records cost what they did: no lookup, no miss counted."""
    filt, _ = filters("alone", "record")
    plan = stamp_plan(FilterChain([filt]), session())
    msg = request(random.Random(3), traced=0.0)
    data = frame(9, msg)
    trace_draws, msg_draws = draws_of(msg, 1, False, True, False)
    got = _relay.stamp_produce(data, plan.wire, trace_draws, msg_draws, NOW)
    assert got[0] is not None and got[1][5] == (0,) * 9
    assert memory_of(filt).native_counters()["link_made"] == 0


# -- the Fetch side: the scan remembers what the fetch chain would ------------------------

def fetch_filter(drop: bool) -> InterceptorFilter:
    """A fetch chain with the member `trace_context`'s link adds (and `drop_headers`), over
    a memory of its own."""
    spec: dict = {"produce": [TRACE]}
    if drop:
        spec["fetch"] = [{"type": "drop_headers", "headers": ["x-debug"]}]
    topics = TopicIds()
    for t in range(4):
        topics.learn(topic_id(t), f"topic-{t}")
    return InterceptorFilter(build_chains(spec, ProxyInfo()), topics)


def fetched_records(rng: random.Random, n: int, traces: list[bytes], gaps: bool) -> list:
    from protocol.records import Record

    out = []
    for i in range(n):
        headers = [("h", b"v")] if rng.random() < 0.3 else []
        roll = rng.random()
        if roll < 0.6:
            tp = b"00-" + rng.choice(traces) + b"-%016x-01" % (rng.getrandbits(64) | 1)
            headers.insert(rng.randrange(len(headers) + 1), ("traceparent", tp))
            if rng.random() < 0.2:  # a second one: the first counts
                headers.append(("traceparent", b"00-" + rng.choice(traces) + b"-" + b"1" * 16
                                + b"-01"))
        elif roll < 0.7:
            headers.append(("traceparent", rng.choice((b"garbage", None))))
        out.append(Record(None, b"v", headers, offset_delta=2 * i if gaps else i))
    return out


@pytest.mark.parametrize("version", [4, 11, 12, 13, 16])
@pytest.mark.parametrize("drop", [False, True])
def test_the_scan_remembers_what_the_python_chain_remembers(version: int, drop: bool) -> None:
    from protocol.compression import LZ4
    from protocol.messages.fetch_response import (
        FetchableTopicResponse,
        FetchResponse,
        PartitionData,
    )
    from protocol.records import build_batch
    from tests.unit.test_native_fetch import frame as fetch_frame
    from tests.unit.test_native_fetch import python_unchanged

    rng = random.Random(version * 3 + drop)
    traces = [b"%032x" % rng.getrandbits(128) for _ in range(12)]
    python, engine, counted = (fetch_filter(drop) for _ in range(3))
    remembered = 0
    for _ in range(3):
        data = []
        for t in range(2):
            parts = []
            for p in range(2):
                chunk, offset = b"", rng.randrange(1000)
                for _ in range(rng.randrange(1, 4)):
                    recs = fetched_records(rng, rng.randrange(1, 12), traces,
                                           gaps=rng.random() < 0.3)
                    chunk += build_batch(recs, base_offset=offset,
                                         compression=rng.choice((0, 0, LZ4)))
                    offset += 50
                parts.append(PartitionData(partition_index=p, high_watermark=10_000,
                                           last_stable_offset=10_000, log_start_offset=0,
                                           preferred_read_replica=-1, records=chunk))
            data.append(FetchableTopicResponse(topic=f"topic-{t}", topic_id=topic_id(t),
                                               partitions=parts))
        msg = FetchResponse(throttle_time_ms=0, session_id=0, responses=data)
        raw = fetch_frame(version, msg)
        plan = fetch_plan(FilterChain([engine]), session())
        assert plan is not None and plan.wire[-1] is not None
        got = _relay.scan_fetch(raw, version, plan.wire, False)
        assert got[0] is not None, got
        assert python_unchanged(python, raw, version)
        fetch_plan(FilterChain([counted]), session()).count(*got)
        assert counted.chains.fetch.stats.snapshot() == python.chains.fetch.stats.snapshot()
        remembered += got[5][6]
    assert remembered > 0
    mem_py, mem_c = (next(m for m in f.chains.fetch.members
                          if m.name == "trace_context.fetched").interceptor.memory
                     for f in (python, engine))
    assert len(mem_py) == len(mem_c)
    scope = mem_c.scope(connection_info(session()))
    for t in traces:
        assert mem_c.parents(scope, t) == mem_py.parents(scope, t)


def test_without_the_session_traced_responses_go_to_python() -> None:
    filt = fetch_filter(False)
    plan = fetch_plan(FilterChain([filt]))
    assert plan is not None and plan.wire[-1] is None
