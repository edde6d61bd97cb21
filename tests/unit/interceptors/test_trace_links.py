"""Causal links made by `trace_context` with ``link``: the bounded memory of fetched traces, and
the chains that fill it on fetch and read it on produce (with `audit` before or after)."""

from __future__ import annotations

import os

import pytest

from interceptors import ConfigError, ConnectionInfo
from interceptors.chains_from_yaml import build_chains
from interceptors.testing import FakeRecord, make_batch
from interceptors.trace_links import (
    EVICTED,
    EXPIRED,
    UNSEEN,
    FetchedTraces,
    LinkConfig,
    LinkMemory,
    NativeFetchedTraces,
    RememberFetched,
)
from proxy.filters.chain import FilterChain
from proxy.filters.interception import InterceptorFilter
from proxy.native.fetch_plan import fetch_plan
from proxy.upstream.topic_ids import TopicIds
from tests.support.native_parts import STAMPER, require

PARENT = "herald.parent"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _trace() -> bytes:
    return os.urandom(16).hex().encode()


def _tp(trace: bytes) -> bytes:
    return b"00-" + trace + b"-" + os.urandom(8).hex().encode() + b"-01"


POD_A = ConnectionInfo("svc", "10.0.0.1:40000")
POD_A_PRODUCER = ConnectionInfo("svc-out", "10.0.0.1:40007")  # another client, same pod
POD_B = ConnectionInfo("svc", "10.0.0.2:40000")


# -- the memory -----------------------------------------------------------------------------

def test_a_scope_gets_back_what_it_fetched_and_nothing_of_another_scope() -> None:
    mem = FetchedTraces(LinkConfig())
    t = _trace()
    mem.remember(mem.scope(POD_A), t, ("orders", 1, 7))
    assert mem.parents(mem.scope(POD_A_PRODUCER), t) == ((("orders", 1, 7),), None)
    assert mem.parents(mem.scope(POD_B), t) == (UNSEEN, None)
    assert mem.parents(mem.scope(POD_A), _trace()) == (UNSEEN, None)


def test_client_id_scope_tells_the_clients_of_one_host_apart() -> None:
    mem = FetchedTraces(LinkConfig(scope="client_id"))
    t = _trace()
    mem.remember(mem.scope(POD_A), t, ("orders", 0, 1))
    assert mem.parents(mem.scope(POD_A_PRODUCER), t) == (UNSEEN, None)
    assert mem.parents(mem.scope(ConnectionInfo("svc", "10.0.0.1:5")), t) == (
        (("orders", 0, 1),), None)


def test_fan_in_keeps_every_record_fetched_up_to_the_cap_oldest_dropped() -> None:
    mem = FetchedTraces(LinkConfig(max_parents=2))
    scope, t = ("h",), _trace()
    mem.remember(scope, t, ("stock", 0, 3))
    mem.remember(scope, t, ("pay", 1, 4))
    assert mem.parents(scope, t) == ((("stock", 0, 3), ("pay", 1, 4)), None)
    mem2 = FetchedTraces(LinkConfig(max_parents=2))
    for key in (("a", 0, 1), ("b", 0, 1), ("c", 0, 1), ("b", 0, 1)):
        mem2.remember(scope, t, key)
    # ("a", 0, 1) went over the cap: declared, not silent
    assert mem2.parents(scope, t) == ((("c", 0, 1), ("b", 0, 1)), (0, 0, 1))


def test_a_write_spends_the_fetched_records_and_the_next_fetch_replaces_them() -> None:
    """A retry loop through the service's own topic: read payments@5, write payments@9 (link
    @5), read payments@9, write shipments: its link is @9 alone. Two writes after one read
    (fan-out by one service) both link to what was read."""
    mem = FetchedTraces(LinkConfig())
    scope, t = ("h",), _trace()
    mem.remember(scope, t, ("payments", 0, 5))
    assert mem.parents(scope, t) == ((("payments", 0, 5),), None)
    assert mem.parents(scope, t) == ((("payments", 0, 5),), None)  # a second write
    mem.remember(scope, t, ("payments", 1, 9))
    assert mem.parents(scope, t) == ((("payments", 1, 9),), None)


def test_entries_expire_and_are_evicted_and_the_misses_say_which() -> None:
    clock = Clock()
    mem = FetchedTraces(LinkConfig(capacity=2, ttl_s=10), clock)
    scope = ("h",)
    t1, t2, t3 = _trace(), _trace(), _trace()
    mem.remember(scope, t1, ("a", 0, 1))
    clock.now += 11
    # still held, no longer believed: its parent is declared lost
    assert mem.parents(scope, t1) == (EXPIRED, (1, 0, 0))
    assert mem.remember(scope, t2, ("a", 0, 2)) == (0, 1)  # the stale one is dropped
    assert len(mem) == 1 and mem.parents(scope, t1) == (EXPIRED, (1, 0, 0))
    mem.remember(scope, t3, ("a", 0, 3))
    assert mem.remember(scope, _trace(), ("a", 0, 4)) == (1, 0)
    assert len(mem) == 2 and mem.parents(scope, t2) == (EVICTED, (0, 1, 0))
    mem.remember(scope, t2, ("a", 0, 5))  # fetched again: known again, its round goes on
    assert mem.parents(scope, t2) == ((("a", 0, 5),), (0, 1, 0))


def test_the_tombstones_are_bounded_too() -> None:
    mem = FetchedTraces(LinkConfig(capacity=3))
    for i in range(50):
        mem.remember(("h",), _trace(), ("a", 0, i))
    assert len(mem) == 3 and len(mem._gone) == 3


@pytest.mark.parametrize(("key", "value", "message"), [
    ("capacity", 0, "must be >= 1"), ("ttl_s", 0, "must be > 0"),
    ("max_parents", 0, "must be >= 1"), ("scope", "pod", "expected one of host, client_id"),
    ("header", "traceparent", "cannot use"),
])
def test_link_settings_errors_name_their_path(key: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=rf"interceptors\.produce\[0\]\.link\.{key}: "
                                          rf".*{message}"):
        build_chains({"produce": [{"type": "trace_context", "link": {key: value}}]})


# -- the chains -----------------------------------------------------------------------------

def _chains(order: tuple[str, ...] = ("trace_context", "audit"), **audit: object):
    members = [{"type": "trace_context", "link": {}} if m == "trace_context"
               else {"type": "audit", **audit} for m in order]
    return build_chains({"produce": members})


def _fetch(chains, conn: ConnectionInfo, topic: str, partition: int, base: int,
           headers: list[list[tuple[str, bytes]]]) -> None:
    batch = make_batch([(None, b"v", h) for h in headers], base_offset=base)
    chains.fetch.process(topic, partition, [batch], conn)


def _produce(chains, conn: ConnectionInfo, headers: list[list[tuple[str, bytes]]]):
    batch = make_batch([(None, b"v", h) for h in headers])
    outcome = chains.produce.process("out", 0, [batch], conn)
    return outcome, [r.headers for r in batch.records]


def _values(headers: list[tuple[str, bytes | None]], key: str = PARENT) -> list[bytes | None]:
    return [v for k, v in headers if k == key]


def test_the_fetch_chain_gets_the_remembering_member_after_the_configured_ones() -> None:
    chains = build_chains({"produce": [{"type": "trace_context", "link": {}}],
                           "fetch": [{"type": "drop_headers", "headers": ["x"]}]})
    assert [m.name for m in chains.fetch.members] == ["drop_headers", "trace_context.fetched"]
    member = chains.fetch.members[1].interceptor
    assert isinstance(member, RememberFetched)
    assert member.memory is chains.produce.members[0].interceptor._memory
    assert not build_chains({"produce": [{"type": "trace_context"}]}).fetch.members


def test_a_fetch_member_named_like_the_added_one_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"^interceptors\.fetch: the name "
                                          r"'trace_context\.fetched'"):
        build_chains({"produce": [{"type": "trace_context", "link": {}}],
                      "fetch": [{"type": "drop_headers", "headers": ["x"],
                                 "name": "trace_context.fetched"}]})


def test_the_native_fetch_scan_still_serves_sessions_with_links() -> None:
    """The added member only watches traceparent: the engine forwards Fetch responses with
    no traced record itself and hands the others to Python, where they are remembered."""
    chains = build_chains({"produce": [{"type": "trace_context", "link": {}}]})
    plan = fetch_plan(FilterChain([InterceptorFilter(chains, TopicIds())]))
    assert plan is not None and plan.wire[1] == (b"traceparent",) and plan.wire[2] == ()


@pytest.mark.parametrize("order", [("trace_context", "audit"), ("audit", "trace_context")])
def test_a_continued_trace_links_to_the_fetched_record_whatever_the_order(order) -> None:
    chains = _chains(order)
    t, other = _trace(), _trace()
    _fetch(chains, POD_A, "orders", 2, 40, [[("a", b"1")], [("traceparent", _tp(t))]])
    outcome, out = _produce(chains, POD_A_PRODUCER, [
        [("traceparent", _tp(t))],          # continues the fetched record (orders:2:41)
        [("traceparent", _tp(other))],      # a trace nobody fetched: no link
        [],                                  # no trace context: a new one, no link
    ])
    assert outcome.ok
    assert _values(out[0]) == [b"orders:2:41"]
    assert _values(out[1]) == [] and _values(out[2]) == []
    assert all(_values(h, "herald.client_id") == [b"svc-out"] for h in out)
    events = chains.produce.stats.members["trace_context"].events
    assert events["link_made"] == 1 and events["link_missed_unseen"] == 1
    fetched = chains.fetch.stats.members["trace_context.fetched"].events
    assert fetched == {"link_remembered": 1}
    assert chains.fetch.members[0].interceptor.gauges() == {"link_memory_entries": 1}


@pytest.mark.parametrize("order", [("trace_context", "audit"), ("audit", "trace_context")])
def test_a_forged_parent_is_stripped_and_herald_s_own_kept(order) -> None:
    chains = _chains(order)
    t = _trace()
    _fetch(chains, POD_A, "orders", 0, 0, [[("traceparent", _tp(t))]])
    _, out = _produce(chains, POD_A, [
        [("traceparent", _tp(t)), (PARENT, b"forged:0:1"), ("herald.time", b"1")],
        [(PARENT, b"forged:0:2")],  # untraced, forged
    ])
    assert _values(out[0]) == [b"orders:0:0"]
    assert _values(out[0], "herald.time") != [b"1"]
    assert _values(out[1]) == []
    assert chains.produce.stats.members["audit"].events["forged_stripped"] == 3


@pytest.mark.parametrize("order", [("trace_context", "audit"), ("audit", "trace_context")])
def test_a_forged_parent_is_rejected_under_forged_reject_but_herald_s_own_is_not(order) -> None:
    chains = _chains(order, forged="reject")
    t = _trace()
    _fetch(chains, POD_A, "orders", 0, 0, [[("traceparent", _tp(t))]])
    outcome, out = _produce(chains, POD_A, [[("traceparent", _tp(t))]])
    assert outcome.ok and _values(out[0]) == [b"orders:0:0"]
    outcome, _ = _produce(chains, POD_A, [[("traceparent", _tp(t)), (PARENT, b"x:0:1")]])
    assert not outcome.ok and "herald.parent" in outcome.error_message


def test_links_on_a_gapped_batch_name_the_real_offsets() -> None:
    chains = _chains()
    t = _trace()
    batch = make_batch([], base_offset=100)
    batch._records = [FakeRecord(None, b"v", [("traceparent", _tp(t))], offset_delta=5)]
    batch.record_count = 1
    chains.fetch.process("compacted", 3, [batch], POD_A)
    _, out = _produce(chains, POD_A, [[("traceparent", _tp(t))]])
    assert _values(out[0]) == [b"compacted:3:105"]


def test_a_valid_trace_context_is_kept_natively_and_linked_from_the_c_memory() -> None:
    """The engine keeps a record's own traceparent without links, and with links when the
    memory is the C one it reads itself (its scope: the connection's); with the Python
    memory (no extension) records carrying a traceparent go to Python."""
    plain = build_chains({"produce": [{"type": "trace_context"}]}).produce.members[0]
    linked = _chains(("trace_context",)).produce.members[0]
    assert plain.interceptor.native_columns(POD_A)[0].keeps_valid
    column = linked.interceptor.native_columns(POD_A)[0]
    if LinkMemory is None:
        assert not column.keeps_valid and column.links is None
    else:
        assert column.keeps_valid and column.links[1:] == (b"10.0.0.1", PARENT)
    linked.interceptor._memory = FetchedTraces(LinkConfig())
    assert not linked.interceptor.native_columns(POD_A)[0].keeps_valid


def test_a_shadow_trace_context_never_shields_a_forged_parent() -> None:
    chains = build_chains({"produce": [{"type": "trace_context", "link": {}, "shadow": True},
                                       {"type": "audit"}]})
    t = _trace()
    _fetch(chains, POD_A, "orders", 0, 0, [[("traceparent", _tp(t))]])
    _, out = _produce(chains, POD_A, [[("traceparent", _tp(t)), (PARENT, b"forged:0:1")]])
    assert _values(out[0]) == []


def test_untraced_fetched_batches_cost_one_scan_and_traced_ones_no_record_objects() -> None:
    """The remembering member only reads and only watches: a batch without trace context is
    passed over after the native scan, a traced one is read header by header (its records are
    never built as objects), and offsets come from the batch."""
    from protocol.records import Record, build_batch, split_batches

    chains = _chains(("trace_context",))
    t = _trace()
    plain = split_batches(build_batch([Record(value=b"v", headers=[("a", b"1")])] * 3,
                                      base_offset=10))[0]
    chains.fetch.process("orders", 0, [plain], POD_A)
    assert not plain.parsed and len(chains.fetch.members[0].interceptor.memory) == 0
    traced = split_batches(build_batch(
        [Record(value=b"v"), Record(value=b"v", headers=[("traceparent", _tp(t))])],
        base_offset=20))[0]
    chains.fetch.process("orders", 1, [traced], POD_A)
    assert not traced.parsed  # headers were scanned, no record object was made
    _, out = _produce(chains, POD_A, [[("traceparent", _tp(t))]])
    assert _values(out[0]) == [b"orders:1:21"]
    assert chains.fetch.stats.records_seen == 5


@pytest.mark.parametrize("native", [False, True])
def test_the_memory_holds_its_bound_under_threads(native: bool) -> None:
    """The fetch chain may run in worker threads while the produce chain runs on the loop
    (and the native relay in its own): concurrent remembering and looking up never breaks
    the bound or the entries, in the reference or the C memory."""
    import threading

    if native and LinkMemory is None:
        require(STAMPER)
    mem = (NativeFetchedTraces if native else FetchedTraces)(
        LinkConfig(capacity=50, max_parents=2))
    traces = [_trace() for _ in range(200)]
    failures: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(3000):
                t = traces[(i * 7 + n) % len(traces)]
                scope = mem.scope(ConnectionInfo("c", f"10.0.0.{n % 2}:1"))
                mem.remember(scope, t, ("a", n, i))
                found, _lost = mem.parents(scope, t)
                assert type(found) is str or 1 <= len(found) <= 2
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert failures == [] and len(mem) == 50 and len(mem._gone) <= 50


def test_a_reload_keeps_the_memory_unless_the_settings_change() -> None:
    """The proxy builds reloaded chains with the same ProxyInfo: what a client fetched before
    a SIGHUP still links what it produces after it."""
    from interceptors import ProxyInfo

    info = ProxyInfo()
    spec = {"produce": [{"type": "trace_context", "link": {}}, {"type": "audit"}]}
    before = build_chains(spec, info)
    t = _trace()
    _fetch(before, POD_A, "orders", 0, 4, [[("traceparent", _tp(t))]])
    after = build_chains(spec, info)
    _, out = _produce(after, POD_A, [[("traceparent", _tp(t))]])
    assert _values(out[0]) == [b"orders:0:4"]
    changed = build_chains({"produce": [{"type": "trace_context", "link": {"ttl_s": 5}}]}, info)
    _, out = _produce(changed, POD_A, [[("traceparent", _tp(t))]])
    assert _values(out[0]) == []


def test_the_shipped_memory_holds_a_hundred_thousand_traces_for_an_hour() -> None:
    """proxy.yaml's link memory, as Herald builds it: an entry is believed for 3600 s and
    not after, and the 100,001st trace evicts the least recently fetched one; the documented
    defaults are these."""
    import re
    from pathlib import Path

    import yaml

    repo = Path(__file__).resolve().parents[3]
    shipped = yaml.safe_load((repo / "proxy.yaml").read_text())["interceptors"]
    (member,) = [m for m in build_chains(shipped).fetch.members
                 if m.name == "trace_context.fetched"]
    memory = member.interceptor.memory
    now = [0.0]
    memory.clock = lambda: now[0]
    scope = memory.scope(POD_A)
    memory.remember(scope, b"a" * 32, ("in", 0, 1))
    memory.remember(scope, b"b" * 32, ("in", 0, 2))
    now[0] = 3599.0
    assert memory.parents(scope, b"a" * 32) == ((("in", 0, 1),), None)
    now[0] = 3600.5
    assert memory.parents(scope, b"b" * 32)[0] == "expired"
    for i in range(100_001):
        memory.remember(scope, b"%032x" % i, ("in", 0, i))
    assert len(memory) == 100_000
    assert memory.parents(scope, b"%032x" % 0)[0] == "evicted"
    assert memory.parents(scope, b"%032x" % 1) == ((("in", 0, 1),), None)
    docs = (repo / "docs" / "interceptors.md").read_text()
    for key, value in (("capacity", "100000"), ("ttl_s", "3600")):
        row = re.search(rf"^\| `link\.{key}` \|.*\| `([^`]+)` \|$", docs, re.M)
        assert row is not None and row.group(1) == value, key
