"""The C memory of fetched traces (protocol/link_memory.c, `NativeFetchedTraces`) against the
reference (`FetchedTraces`): the same operations give the same answers, counters and size."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interceptors import ConnectionInfo
from interceptors.trace_links import (
    FetchedTraces,
    LinkConfig,
    LinkMemory,
    NativeFetchedTraces,
)
from tests.support.native_parts import STAMPER, needs

pytestmark = needs(STAMPER)

TRACES = [bytes(f"{i:032x}", "ascii") for i in range(6)]
SCOPES = ["10.0.0.1", "10.0.0.2", "[::1]"]


class Clock:
    def __init__(self) -> None:
        self.now = 500.0

    def __call__(self) -> float:
        return self.now


remember = st.tuples(st.just("remember"), st.integers(0, 2), st.integers(0, 5),
                     st.sampled_from(["a", "orders", "ü"]), st.integers(0, 2),
                     st.integers(0, 4))
parents = st.tuples(st.just("parents"), st.integers(0, 2), st.integers(0, 5))
tick = st.tuples(st.just("tick"), st.sampled_from([0.0, 0.5, 1.0, 2.5, 4.0, 9.0]))


@settings(max_examples=300, deadline=None)
@given(capacity=st.integers(1, 5), ttl=st.sampled_from([1.0, 3.0, 10.0]),
       max_parents=st.integers(1, 3),
       ops=st.lists(st.one_of(remember, parents, tick), max_size=80))
def test_the_c_memory_answers_as_the_reference(capacity, ttl, max_parents, ops) -> None:
    config = LinkConfig(capacity=capacity, ttl_s=ttl, max_parents=max_parents)
    clock = Clock()
    ref, native = FetchedTraces(config, clock), NativeFetchedTraces(config, clock)
    totals = {"link_evicted": 0, "link_expired": 0, "link_remembered": 0}
    for op in ops:
        if op[0] == "tick":
            clock.now += op[1]
            continue
        conn = ConnectionInfo("c", SCOPES[op[1]] + ":9000")
        trace = TRACES[op[2]]
        if op[0] == "remember":
            key = (op[3], op[4], op[5])
            got = native.remember(native.scope(conn), trace, key)
            assert got == ref.remember(ref.scope(conn), trace, key)
            totals["link_evicted"] += got[0]
            totals["link_expired"] += got[1]
            totals["link_remembered"] += 1
        else:
            assert native.parents(native.scope(conn), trace) == ref.parents(ref.scope(conn),
                                                                             trace)
        assert len(native) == len(ref)
    counters = native.native_counters()
    assert {k: counters[k] for k in totals} == totals


def test_client_id_scopes_are_told_apart() -> None:
    native = NativeFetchedTraces(LinkConfig(scope="client_id"))
    a, b, none = (ConnectionInfo(cid, "10.0.0.1:1") for cid in ("svc", "other", None))
    native.remember(native.scope(a), TRACES[0], ("t", 0, 1))
    assert native.parents(native.scope(a), TRACES[0]) == ((("t", 0, 1),), None)
    assert native.parents(native.scope(b), TRACES[0]) == ("unseen", None)
    assert native.parents(native.scope(none), TRACES[0]) == ("unseen", None)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError):
        LinkMemory(0, 1.0, 1)
    with pytest.raises(ValueError):
        LinkMemory(1, 0.0, 1)
    mem = LinkMemory(4, 1.0, 2)
    with pytest.raises(ValueError):
        mem.remember(b"h", b"short", "t", 0, 0, 1.0)
    with pytest.raises(ValueError):
        mem.parents(b"h", b"short", 1.0)
    capsule = mem.capsule()
    del mem  # the capsule holds the memory on
    assert capsule is not None



@settings(max_examples=30, deadline=None)
@given(seed_topics=st.lists(st.integers(0, 400), min_size=200, max_size=600))
def test_many_topics_come_back_by_name(seed_topics) -> None:
    """The C memory keeps each topic name once however many parents name it, and frees the
    names no parent holds as it fills: with hundreds of topics passing through a small memory
    the parents it gives back still name their topics as the reference does."""
    config = LinkConfig(capacity=8, ttl_s=10.0, max_parents=3)
    clock = Clock()
    ref, native = FetchedTraces(config, clock), NativeFetchedTraces(config, clock)
    conn = ConnectionInfo("c", "10.0.0.1:9000")
    for i, t in enumerate(seed_topics):
        trace = TRACES[i % len(TRACES)] if t % 3 else bytes(f"{i:032x}", "ascii")
        key = (f"topic-{t}", t % 4, i)
        assert native.remember(native.scope(conn), trace, key) == ref.remember(
            ref.scope(conn), trace, key)
        if i % 5 == 0:
            assert native.parents(native.scope(conn), trace) == ref.parents(ref.scope(conn),
                                                                             trace)
    for trace in TRACES:
        assert native.parents(native.scope(conn), trace) == ref.parents(ref.scope(conn), trace)
