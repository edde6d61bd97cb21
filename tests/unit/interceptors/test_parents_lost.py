"""No silent loss: parents Herald knew of but cannot name are declared on the record
(``herald.parents_lost``), through the real chains (`trace_context` with ``link``, `audit`),
with an injected clock, for the Python reference memory and the C one."""

from __future__ import annotations

import os
import re

import pytest

from interceptors import ConnectionInfo, ProxyInfo
from interceptors.chains_from_yaml import build_chains
from interceptors.testing import make_batch
from interceptors.trace_links import FetchedTraces, LinkConfig, NativeFetchedTraces
from protocol.contracts.headers import PARENTS_LOST_VALUE_RE
from tests.support.native_parts import STAMPER, needs

PARENT, LOST = "herald.parent", "herald.parents_lost"
MINUTE = 60.0
SERVICE = ConnectionInfo("ledger", "10.0.0.7:40000")
SERVICE_OUT = ConnectionInfo("ledger-out", "10.0.0.7:40001")  # its producer: same pod

MEMORIES = [False, pytest.param(True, marks=needs(STAMPER))]


class Clock:
    def __init__(self) -> None:
        self.now = 10_000.0

    def __call__(self) -> float:
        return self.now


class Service:
    """A service behind Herald: its consumer fetches through the fetch chain, its producer
    writes through the produce chain (`trace_context` with `link`, then `audit`)."""

    def __init__(self, native: bool, forged: str = "strip", order: str = "trace_first",
                 **link: object) -> None:
        self.clock = Clock()
        config = LinkConfig(**link)  # type: ignore[arg-type]
        memory = (NativeFetchedTraces if native else FetchedTraces)(config, self.clock)
        info = ProxyInfo()
        info.kept[("trace_links", config.scope, config.capacity, config.ttl_s,
                   config.max_parents)] = memory
        members = [{"type": "trace_context", "link": link}, {"type": "audit", "forged": forged}]
        if order == "audit_first":
            members.reverse()
        self.chains = build_chains({"produce": members}, info)
        self.memory = memory
        self.offsets: dict[str, int] = {}

    def read(self, topic: str, trace: bytes) -> str:
        """Fetch one record of `trace` from `topic`: its parent value."""
        offset = self.offsets.get(topic, 0)
        self.offsets[topic] = offset + 1
        batch = make_batch([(None, b"v", [("traceparent", _tp(trace))])], base_offset=offset)
        self.chains.fetch.process(topic, 0, [batch], SERVICE)
        return f"{topic}:0:{offset}"

    def write(self, trace: bytes, *extra: tuple[str, bytes]) -> tuple[list[str], list[str]]:
        """Produce one record of `trace`: its parent and lost parents header values."""
        batch = make_batch([(None, b"v", [("traceparent", _tp(trace)), *extra])])
        outcome = self.chains.produce.process("out", 0, [batch], SERVICE_OUT)
        assert outcome.ok, outcome.error_message
        headers = batch.records[0].headers
        return ([v.decode() for k, v in headers if k == PARENT],
                [v.decode() for k, v in headers if k == LOST])

    def events(self) -> dict[str, int]:
        return self.chains.produce.stats.members["trace_context"].events


def _trace() -> bytes:
    return os.urandom(16).hex().encode()


def _tp(trace: bytes) -> bytes:
    return b"00-" + trace + b"-" + os.urandom(8).hex().encode() + b"-01"


@pytest.mark.parametrize("native", MEMORIES)
def test_a_join_whose_inputs_arrive_minutes_apart_links_both_by_default(native: bool) -> None:
    """A refund arrives 7 minutes after its payment: with the defaults (an hour) the ledger's
    record names both."""
    svc = Service(native)
    t = _trace()
    payment = svc.read("payments", t)
    svc.clock.now += 7 * MINUTE
    refund = svc.read("refunds", t)
    svc.clock.now += 0.2
    assert svc.write(t) == ([payment, refund], [])
    assert "link_lost_expired" not in svc.events()


@pytest.mark.parametrize("native", MEMORIES)
@pytest.mark.parametrize("swept", [False, True])
def test_a_join_older_than_the_ttl_declares_the_older_input_expired(native: bool,
                                                                    swept: bool) -> None:
    """With a one-minute ttl the payment is no longer believed when the refund comes: the
    record names the refund and declares one parent expired, whether the payment's entry
    was still held or already swept out by other traffic (its count kept with its key)."""
    svc = Service(native, ttl_s=MINUTE)
    t = _trace()
    svc.read("payments", t)
    svc.clock.now += 70
    if swept:
        svc.read("other", _trace())  # sweeps the stale entry into the dropped keys
        assert len(svc.memory) == 1
    refund = svc.read("refunds", t)
    assert svc.write(t) == ([refund], ["expired:1"])
    assert svc.write(t) == ([refund], ["expired:1"])  # every record of the round says so
    assert svc.events()["link_lost_expired"] == 2 and svc.events()["link_made"] == 2
    again = svc.read("refunds", t)  # a fetch after a produce: a new round, no loss
    assert svc.write(t) == ([again], [])


@pytest.mark.parametrize("native", MEMORIES)
def test_a_service_that_writes_long_after_it_read(native: bool) -> None:
    """A slow service writes 45 minutes after its read: linked with the defaults. With a
    one-minute ttl its record names nothing and says why: one parent expired."""
    svc = Service(native)
    t = _trace()
    parent = svc.read("orders", t)
    svc.clock.now += 45 * MINUTE
    assert svc.write(t) == ([parent], [])

    short = Service(native, ttl_s=MINUTE)
    t = _trace()
    short.read("orders", t)
    short.read("orders", t)
    short.clock.now += 10 * MINUTE
    assert short.write(t) == ([], ["expired:2"])
    events = short.events()
    assert events["link_missed_expired"] == 1 and events["link_lost_expired"] == 2
    assert "link_made" not in events


@pytest.mark.parametrize("native", MEMORIES)
@pytest.mark.parametrize("order", ["trace_first", "audit_first"])
def test_a_memory_too_small_for_the_traffic_declares_what_it_evicted(native: bool,
                                                                     order: str) -> None:
    """Capacity 2 and a consumer that reads three traces, two records each, before it writes
    one record of each: the first trace's entry is evicted. Its record names nothing and
    declares both parents evicted; the others are linked. Over many rounds every parent
    fetched is either named or declared on the record, never silently dropped."""
    svc = Service(native, order=order, capacity=2)
    named = declared = 0
    for _ in range(20):
        traces = [_trace() for _ in range(3)]
        fetched = {t: [svc.read("in", t), svc.read("in", t)] for t in traces}
        for i, t in enumerate(traces):
            parents, lost = svc.write(t)
            if i == 0:
                assert (parents, lost) == ([], ["evicted:2"])
            else:
                assert (parents, lost) == (fetched[t], [])
            named += len(parents)
            declared += sum(int(v.split(":")[1]) for v in lost)
    assert named + declared == 20 * 3 * 2
    events = svc.events()
    assert events["link_lost_evicted"] == 40 and events["link_missed_evicted"] == 20
    assert "link_missed_unseen" not in events


@pytest.mark.parametrize("native", MEMORIES)
def test_parents_over_max_parents_are_declared_overflow(native: bool) -> None:
    """A fan-in of five inputs with room for two: the newest two are named, three declared;
    the header values are the contract's."""
    svc = Service(native, max_parents=2)
    t = _trace()
    inputs = [svc.read(topic, t) for topic in ("a", "b", "c", "d", "e")]
    parents, lost = svc.write(t)
    assert (parents, lost) == (inputs[-2:], ["overflow:3"])
    assert all(re.fullmatch(PARENTS_LOST_VALUE_RE, v) for v in lost)
    assert svc.events()["link_lost_overflow"] == 3


@pytest.mark.parametrize("native", MEMORIES)
def test_every_reason_in_order_on_one_record(native: bool) -> None:
    """Expired, evicted and overflow in one round, declared in that order: an input expired
    in place, then the round evicted with its overflow, then fetched again."""
    svc = Service(native, ttl_s=MINUTE, capacity=1, max_parents=1)
    t = _trace()
    svc.read("a", t)
    svc.clock.now += 2 * MINUTE
    svc.read("b", t)  # a expired in place
    svc.read("c", t)  # b over max_parents
    svc.read("x", _trace())  # the round's entry evicted: c lost with it
    last = svc.read("d", t)
    assert svc.write(t) == ([last], ["expired:1", "evicted:1", "overflow:1"])


@pytest.mark.parametrize("native", MEMORIES)
@pytest.mark.parametrize("order", ["trace_first", "audit_first"])
def test_a_forged_lost_header_is_stripped_and_herald_s_own_kept(native: bool,
                                                                order: str) -> None:
    svc = Service(native, order=order, max_parents=1)
    t = _trace()
    svc.read("a", t)
    b = svc.read("b", t)
    assert svc.write(t, (LOST, b"evicted:9")) == ([b], ["overflow:1"])
    assert svc.chains.produce.stats.members["audit"].events["forged_stripped"] == 1
    # a client's own header on a record Herald declares nothing for: stripped too
    assert svc.write(_trace(), (LOST, b"expired:1")) == ([], [])


@pytest.mark.parametrize("native", MEMORIES)
def test_a_forged_lost_header_is_rejected_under_forged_reject(native: bool) -> None:
    svc = Service(native, forged="reject", max_parents=1)
    t = _trace()
    svc.read("a", t)
    svc.read("b", t)
    batch = make_batch([(None, b"v", [("traceparent", _tp(t)), (LOST, b"overflow:1")])])
    outcome = svc.chains.produce.process("out", 0, [batch], SERVICE_OUT)
    assert not outcome.ok and LOST in outcome.error_message
