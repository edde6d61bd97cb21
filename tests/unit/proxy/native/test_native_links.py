"""Causal links stamped by the native relay (proxy/native/relay_stamp.c with the C memory,
protocol/link_memory.c) against the Python chain, its reference: with the same memory
contents, a record that keeps its own traceparent gets the same ``herald.parent`` headers in
the same place, the request the same bytes, the members the same counters, whichever side of
`trace_context` `audit` sits."""

from __future__ import annotations

import random
import re
import time
from typing import Any

import pytest

from interceptors import build_chains, ids
from interceptors.api import Interceptor, Stamps
from interceptors.chain import ChainMember, Chains, ProduceChain
from interceptors.context import ProxyInfo
from interceptors.trace_links import NativeFetchedTraces
from protocol.compression import GZIP, LZ4
from protocol.contracts.headers import PARENTS_LOST_VALUE_RE
from protocol.records import Record, build_batch, split_batches
from proxy.filters.chain import FilterChain, SessionContext
from proxy.filters.interception import InterceptorFilter, connection_info
from proxy.native.fetch_plan import fetch_plan
from proxy.native.stamp_plan import stamp_plan
from proxy.upstream.topic_ids import TopicIds
from tests.support.native.codecs import (
    SAME_BYTES,
    assert_same_batches,
    batches_of,
    compressed_request,
)
from tests.support.native.stamp import (
    CLUSTER,
    INSTANCE,
    NOW,
    draws_of,
    frame,
    one_partition,
    python_output,
    refused,
    refused_not,
    request,
    session,
    topic_id,
)
from tests.support.native_parts import native_module

_relay = native_module("proxy.native._relay")

TRACE = {"type": "trace_context", "link": {"max_parents": 3}}
AUDIT = {"type": "audit"}
ORDERS = {"alone": [TRACE], "audit_before": [AUDIT, TRACE], "audit_after": [TRACE, AUDIT]}


def filters(order: str, mode: str, audit: dict | None = None, link: dict | None = None
            ) -> tuple[InterceptorFilter, InterceptorFilter]:
    """Two filters over one memory (`ProxyInfo.kept`): one for Python, one whose counters
    the engine's counts go to. `audit`: audit's settings; `link`: the link's."""
    env = ProxyInfo(instance_id=INSTANCE, cluster_id=CLUSTER, clock=lambda: NOW / 1000)
    spec = [dict(m, mode=mode, **({"link": link} if link else {})) if m is TRACE
            else dict(m, **(audit or {})) for m in ORDERS[order]]
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
    assert linked  # not vacuous: records were linked natively


AUDITS = {"strip": {}, "reject": {"forged": "reject"},
          "trusted_principal": {"trusted": {"principals": ["User:mirror"]}},
          "trusted_client_id": {"trusted": {"client_ids": ["app-*"]}}}


def session_of(client_id: str | None, principal: str | None) -> SessionContext:
    return SessionContext("10.1.2.3:5555", "bootstrap", "127.0.0.1:9092", client_id=client_id,
                          principal=principal)


@pytest.mark.parametrize("codec", [0, LZ4, GZIP])
@pytest.mark.parametrize("audit", sorted(AUDITS))
def test_audit_after_trace_context_keeps_linked_records_native(codec: int, audit: str) -> None:
    """`audit` after `trace_context`: its forgery check keeps Herald's own links and finds
    nothing else to strip or refuse in a record whose client wrote nothing under ``herald.``
    (one that did goes to Python), so the engine stamps linked records itself, compressed ones
    included: Python's bytes, Python's counters (a trusted principal's linked records counted
    as passed). Trust by client id goes by each request's: with it, linked records go to
    Python."""
    rng = random.Random(codec * 10 + len(audit))
    principal = "User:mirror" if audit == "trusted_principal" else None
    linked = handed = 0
    for round_ in range(3):
        filt, engine = filters("audit_after", "record", AUDITS[audit])
        client_id = ("app-1", None, "app-1")[round_]
        msg = compressed_request(rng, codec, (0.5, 1.0, 0.8)[round_], partitions=1 + round_,
                                 batches=1 + round_ % 2)
        hits = fill(rng, memory_of(filt), msg, client_id)
        plan = stamp_plan(FilterChain([filt]), session_of(client_id, principal))
        assert plan is not None
        data = frame(9, msg, client_id)
        seed = rng.randrange(1 << 30)
        trace_draws, msg_draws = draws_of(msg, seed, False, True, True)
        got = _relay.stamp_produce(data, plan.wire, trace_draws, msg_draws, NOW)
        ids.seed(seed)
        expected = python_output(filt, session_of(client_id, principal), data)
        if audit == "trusted_client_id" and hits:
            assert got == (None, "a linked record a later member looks at")
            handed += 1
            continue
        assert got[0] is not None, got[1]
        if codec == 0 or codec in SAME_BYTES:
            assert got[0] == expected
        else:
            assert_same_batches(got[0], expected, codec)
        assert got[1][5][0] == hits
        linked += hits
        stamp_plan(FilterChain([engine]), session_of(client_id, principal)).count(*got[1])
        python = filt.chains.produce.stats.snapshot()
        assert engine.chains.produce.stats.snapshot() == python
        assert engine.codec.reencoded == filt.codec.reencoded
        (audited,) = [m["events"] for m in python["members"] if m["name"] == "audit"]
        assert audited == ({"trusted_passed": hits} if principal and hits else {})
    # Not vacuous: records were linked natively, or (trust by client id) handed over.
    assert (linked > 0, handed > 0) == ((False, True) if audit == "trusted_client_id" else
                                        (True, False))


TRACED = b"00-%032x-%016x-01" % (5, 7)


def linked_one(forged: str = "strip") -> tuple[InterceptorFilter, Any]:
    """`audit` after `trace_context`, with a parent remembered for TRACED's trace: the Python
    filter and its plan."""
    filt, _ = filters("audit_after", "record", {"forged": forged})
    memory = memory_of(filt)
    memory.remember(memory.scope(connection_info(session())), TRACED[3:35], ("in", 0, 7))
    plan = stamp_plan(FilterChain([filt]), session())
    assert plan is not None
    return filt, plan


@pytest.mark.parametrize("forged", ["strip", "reject"])
def test_a_client_s_own_parent_header_goes_to_python_which_forges_it(forged: str) -> None:
    """A linked record stays native; one whose client wrote its own ``herald.parent`` goes to
    Python (audit watches its prefix), which strips that header and keeps Herald's, or
    refuses the partition with `forged: reject`."""
    filt, plan = linked_one(forged)
    own = Record(b"k", b"v", [("traceparent", TRACED)])
    assert refused_not(one_partition(build_batch([own])), plan)
    forged_one = Record(b"k", b"v", [("traceparent", TRACED), ("herald.parent", b"x:0:1")])
    data = one_partition(build_batch([own, forged_one]))
    assert "watched" in refused(data, plan)
    out = python_output(filt, session(), data)
    audit = filt.chains.produce.stats.members["audit"]
    if forged == "reject":
        assert filt.chains.produce.stats.partitions_rejected == 1
        assert "forged_header" in audit.records_rejected
        return
    assert audit.events == {"forged_stripped": 1}
    (batch,) = batches_of(out)
    for record in batch.records:
        assert [v for k, v in record.headers if k == "herald.parent"] == [b"in:0:7"]


class _Watcher(Interceptor):
    """A plugin after `trace_context` that watches the link header and does not say what it
    does with Herald's own: Python must run it on linked records."""

    stamps = Stamps((), frozenset({"herald.parent"}))

    def native_columns(self, conn: Any) -> list:
        return []

    def on_record(self, ctx: Any, headers: Any) -> None:
        return None


def test_a_member_that_does_not_declare_what_it_does_with_links_gets_them_in_python() -> None:
    filt, _ = linked_one()
    watcher = ChainMember("watcher", _Watcher(None, ProxyInfo()))
    members = [*filt.chains.produce.members, watcher]
    filt = InterceptorFilter(Chains(produce=ProduceChain(members)), filt.topics)
    plan = stamp_plan(FilterChain([filt]), session())
    assert plan is not None and plan.wire[-1][3] is True
    linked = build_batch([Record(b"k", b"v", [("traceparent", TRACED)])])
    assert refused(one_partition(linked), plan) == "a linked record a later member looks at"
    unseen = b"00-%032x-%016x-01" % (6, 7)
    assert refused_not(one_partition(build_batch([Record(b"k", b"v", [("traceparent",
                                                                        unseen)])])), plan)


LOSSY = {"max_parents": 2, "capacity": 6, "ttl_s": 3600}


def fill_lossy(rng: random.Random, memory: NativeFetchedTraces, msg: Any,
               client_id: str | None) -> None:
    """Remember parents for the request's traces so that their rounds lose some: fetched two
    hours ago (expired), over `max_parents` (overflow), and with other traces between (the
    capacity is small: evicted, their losses kept with their keys)."""
    scope = memory.scope(connection_info(session(client_id)))
    traces = list(dict.fromkeys(v[3:35] for t in msg.topic_data for p in t.partition_data
                                for b in split_batches(p.records or b"") for r in b.records
                                for k, v in r.headers if k == "traceparent"))
    now = time.monotonic
    for t in traces:
        roll = rng.random()
        if roll < 0.2:
            continue  # unseen
        memory.clock = (lambda: now() - 7200) if roll < 0.4 else now  # type: ignore[assignment]
        for _ in range(rng.randrange(1, 5)):
            memory.remember(scope, t, (rng.choice(("in", "orders")), rng.randrange(3),
                                       rng.randrange(10**9)))
        memory.clock = now  # type: ignore[assignment]
        if roll > 0.6:  # a younger input after the older one expired: the round goes on
            memory.remember(scope, t, ("late", 0, rng.randrange(10**9)))
    memory.clock = now  # type: ignore[assignment]


@pytest.mark.parametrize("codec", [0, LZ4, GZIP])
@pytest.mark.parametrize("order", sorted(ORDERS))
def test_records_with_lost_parents_stay_native_and_equal_python(codec: int, order: str
                                                                ) -> None:
    """A round that lost parents (expired, evicted, over max_parents) gives its records
    ``herald.parents_lost`` headers: the engine writes them itself, in the same place and
    bytes as Python, plain and compressed batches, audit on either side, and counts the
    same `link_lost_*` (and a trusted principal's records given only lost headers are
    passed as Python passes them)."""
    rng = random.Random(codec * 13 + len(order))
    lost = [0, 0, 0]
    only_lost = 0
    for round_ in range(4):
        filt, engine = filters(order, "record", {"trusted": {"principals": ["User:mirror"]}},
                               LOSSY)
        client_id = ("app-1", None, "app-1", "svc")[round_]
        principal = "User:mirror" if round_ == 3 else None
        msg = (compressed_request(rng, codec, (0.9, 1.0, 0.8, 1.0)[round_],
                                  partitions=1 + round_ % 3, batches=1 + round_ % 2)
               if codec else request(rng, topics=1 + round_ % 2, partitions=1 + round_ % 2,
                                     batches=1 + round_ % 2, traced=(0.9, 1.0, 0.8, 1.0)[round_]))
        fill_lossy(rng, memory_of(filt), msg, client_id)
        plan = stamp_plan(FilterChain([filt]), session_of(client_id, principal))
        assert plan is not None and plan.wire[-1] is not None
        data = frame(9, msg, client_id)
        seed = rng.randrange(1 << 30)
        trace_draws, msg_draws = draws_of(msg, seed, False, True, order != "alone")
        got = _relay.stamp_produce(data, plan.wire, trace_draws, msg_draws, NOW)
        ids.seed(seed)
        expected = python_output(filt, session_of(client_id, principal), data)
        assert got[0] is not None, got[1]
        if codec == 0 or codec in SAME_BYTES:
            assert got[0] == expected
        else:
            assert_same_batches(got[0], expected, codec)
        for i in range(3):
            lost[i] += got[1][5][9 + i]
        only_lost += got[1][5][12] - got[1][5][0]
        stamp_plan(FilterChain([engine]), session_of(client_id, principal)).count(*got[1])
        assert engine.chains.produce.stats.snapshot() == filt.chains.produce.stats.snapshot()
        assert engine.codec.reencoded == filt.codec.reencoded
    # Not vacuous: every reason was declared natively, and records with no parent but lost
    # ones were stamped too.
    assert all(lost) and only_lost > 0, (lost, only_lost)
    (batch, *_) = batches_of(got[0])
    values = [v for r in batch.records for k, v in r.headers if k == "herald.parents_lost"]
    assert all(re.fullmatch(PARENTS_LOST_VALUE_RE.encode(), v) for v in values)


def test_a_client_s_own_lost_header_goes_to_python() -> None:
    """`herald.parents_lost` is under audit's prefix: a client's own sends its record to
    Python, which strips it and keeps Herald's."""
    filt, plan = linked_one()
    forged = Record(b"k", b"v", [("traceparent", TRACED), ("herald.parents_lost", b"expired:3")])
    data = one_partition(build_batch([forged]))
    assert "watched" in refused(data, plan)
    (batch,) = batches_of(python_output(filt, session(), data))
    assert [v for k, v in batch.records[0].headers if k == "herald.parents_lost"] == []
    assert filt.chains.produce.stats.members["audit"].events == {"forged_stripped": 1}


def test_records_without_trace_context_never_look_up() -> None:
    """An untraced producer's records cost what they did: no lookup, no miss counted."""
    filt, _ = filters("alone", "record")
    plan = stamp_plan(FilterChain([filt]), session())
    msg = request(random.Random(3), traced=0.0)
    data = frame(9, msg)
    trace_draws, msg_draws = draws_of(msg, 1, False, True, False)
    got = _relay.stamp_produce(data, plan.wire, trace_draws, msg_draws, NOW)
    assert got[0] is not None and got[1][5] == (0,) * 14
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
    from tests.support.native.fetch import frame as fetch_frame
    from tests.support.native.fetch import python_unchanged

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
        got = _relay.scan_fetch(raw, 1, version, plan.wire, False)
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
