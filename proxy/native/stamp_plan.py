"""Which sessions' Produce requests the native relay stamps itself, and the plan it follows.

With `performance.native_relay: auto`, a produce chain of stamping members the engine knows
(`Interceptor.native_columns`: `trace_context`, `audit`) no longer sends every Produce request
to Python. The engine walks the request, and when every batch is magic 2 and has no record
carrying a header a member watches, it appends the members' columns to every record itself
(proxy/native/relay_stamp.c). A compressed batch (gzip, snappy, lz4, zstd) is decompressed
within the limits Python keeps, stamped the same way and recompressed with its own codec
(proxy/native/relay_codec.c); one that would no longer fit its topic's size limit goes to
Python, which re-encodes it with a stronger codec or refuses it (interceptors/batch_fit.py).
A record that carries its own valid trace context is stamped too when the trace member
declares it keeps such a record's (`NativeColumn.keeps_valid`): that column appends nothing
to it. Any other request goes to Python at its
frame boundary, which runs the chain as always: the Python chain is the reference the engine
is tested against.

A session is eligible when one filter reads Produce requests, and declares the engine may
stamp them in its place (`Filter.native`, the interceptor filter's), tracing is off (spans
need Python), no per-topic counters are kept, and every produce-chain member applies to
every topic and client, is live (not shadow), stamps, and can give its columns natively for
this connection. Otherwise Produce goes to Python exactly as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from interceptors.api import NativeColumn
from interceptors.chain import ChainMember, ProduceChain
from interceptors.context import ConnectionInfo
from interceptors.stats import ChainStats, MemberStats
from interceptors.trace_links import LOST_HEADER
from protocol import stamping
from protocol.api_keys import ApiKey
from protocol.contracts.headers import TRACESTATE
from protocol.contracts.native_relay import LINK_COUNT, LINK_COUNTS, PRODUCE_LINK_EVENTS
from proxy.filters.chain import FilterChain, NativeWork, SessionContext
from proxy.native.capabilities import CAPABILITIES

if TYPE_CHECKING:
    from proxy.native._relay import ColumnWire, LinksWire, PlanWire

PRODUCE = int(ApiKey.PRODUCE)
VERSIONS = CAPABILITIES.stamp_versions
"""Produce versions the engine walks, as it says (v13+ name topics by id: the engine stamps
those Herald has learnt, and leaves the others to Python, which refuses them until it has)."""

_NO_LINKS = (0,) * len(LINK_COUNTS)
_PARENTS, _LINKED_BATCHES = LINK_COUNT["parents"], LINK_COUNT["linked_batches"]
_MARKED, _LOST_HEADERS = LINK_COUNT["marked"], LINK_COUNT["lost_headers"]



@dataclass(frozen=True, slots=True)
class _Member:
    member: ChainMember
    appends: int  # headers it appends to a record
    keeps: int  # of which those it does not append to a record that keeps its own (0 or 1)
    events: tuple[tuple[str, bool, bool], ...]  # (event, per batch, keeps) per value made
    links: bool = False  # its keeping column adds link headers (`NativeColumn.links`)
    linked: tuple[tuple[str, int], ...] = ()  # events it counts per record given them


@dataclass(frozen=True, slots=True)
class StampPlan:
    """What the engine stamps for one session (`wire`), and whose counters it adds to."""

    wire: PlanWire
    chain: ProduceChain
    work: NativeWork
    members: tuple[_Member, ...]

    def count(self, batches: int, records: int, kept: int = 0, kept_batches: int = 0,
              compressed: Sequence[int] = (), links: Sequence[int] = _NO_LINKS) -> None:
        """Add what the engine stamped to the counters the Python path keeps for the same
        work: the chain's and its members' (`ChainStats`), and the re-encoded batches.

        `kept` records kept their own traceparent (the keeping column appended nothing to
        them), and in `kept_batches` every record did: such a batch changed only if another
        column appended to it, or link headers were (`links`: the engine's link counts, in
        the order of `native_relay.LINK_COUNTS`; the linking member adds those it declares a
        counter for, `PRODUCE_LINK_EVENTS`). `compressed[codec]` of the changed batches
        were compressed and re-encoded with their codec, the others are counted as
        uncompressed. A member after the linking one counts its `Interceptor.native_links`
        events for each record given link headers."""
        fresh, fresh_batches = records - kept, batches - kept_batches
        parents, linked_batches = links[_PARENTS], links[_LINKED_BATCHES]
        marked, lost_headers = links[_MARKED], links[_LOST_HEADERS]
        only_keeps = all(m.appends == m.keeps for m in self.members)
        changed_batches = fresh_batches + linked_batches if only_keeps else batches
        run = ChainStats(self.chain.path, {}, batches, changed_batches, records)
        for m in self.members:
            others = m.appends - m.keeps
            own = marked if m.links else 0
            changed = records if others else (fresh + own if m.keeps else 0)
            st = MemberStats(m.member.name, m.member.type, records, changed,
                             others * records + m.keeps * fresh
                             + (parents + lost_headers if m.links else 0))
            for event, per_batch, keeps in m.events:
                made = (fresh_batches if per_batch else fresh) if keeps else (
                    batches if per_batch else records)
                if made:
                    st.count(event, made)
            if m.links:
                for at, event in PRODUCE_LINK_EVENTS:
                    if links[at]:
                        st.count(event, links[at])
            for event, each in m.linked:
                if each * marked:
                    st.count(event, each * marked)
            run.members[m.member.name] = st
        self.chain.add_run(run)
        work = self.work
        for codec, n in enumerate(compressed):
            if n and codec:
                work.count_reencoded(codec, n)
                changed_batches -= n
        work.count_reencoded(0, changed_batches)


def stamping_work(chain: FilterChain) -> NativeWork | None:
    """What the engine stamps for, when one filter alone reads the requests of every Produce
    version the engine stamps, and declares the engine may stamp them (`Filter.native`)."""
    found = None
    for version in VERSIONS:
        readers = chain.for_request(PRODUCE, version)
        if len(readers) != 1:
            return None
        takeover = readers[0].native
        if not takeover.stamp or takeover.work is None:
            return None
        if found is not None and takeover.work is not found:
            return None
        found = takeover.work
    return found


def stamp_plan(chain: FilterChain, ctx: SessionContext) -> StampPlan | None:
    """The session's plan, or None when its Produce requests stay in Python."""
    work = stamping_work(chain)
    if work is None or work.reports_spans or work.counts_topics:
        return None
    produce = work.chains.produce
    if not produce.members or not produce.fast_paths:
        return None
    conn = work.connection(ctx)
    columns: list[ColumnWire] = []
    members: list[_Member] = []
    keys: set[str] = set()
    prefixes: list[str] = []
    appended: list[str] = []
    natives = []
    for m in produce.members:
        icpt = m.interceptor
        stamps = icpt.stamps
        if (m.shadow or m.topics is not None or m.client_ids is not None or stamps is None
                or icpt.needs != "headers"):
            return None
        native = icpt.native_columns(conn)
        if native is None or len(native) != len(stamps.appends) or any(
                c.kind not in CAPABILITIES.columns for c in native):
            return None
        # A member that watches what an earlier one appends would look at every record.
        if any(stamps.watched(key) for key in appended):
            return None
        appended += stamps.appends
        keys |= stamps.watches
        prefixes += stamps.watch_prefixes
        natives.append(native)
    keeper = _keeper(produce.members, natives)
    links, linked = _wire_links(produce.members, natives, keeper, conn)
    for m, native, seen in zip(produce.members, natives, linked, strict=True):
        appends = m.interceptor.stamps.appends  # type: ignore[union-attr]
        keeps = [c.keeps_valid and (m, key) == keeper for key, c in zip(appends, native,
                                                                       strict=True)]
        columns += (_wire_column(key, c, k) for key, c, k in zip(appends, native, keeps,
                                                                 strict=True))
        linking = any(k and c.links for c, k in zip(native, keeps, strict=True))
        members.append(_Member(m, len(appends), sum(keeps), _events(native, keeps), linking,
                               seen))
    wire_keys = stamping.wire_keys(sorted(keys))
    wire_prefixes = stamping.wire_keys(prefixes)
    if wire_keys is None or wire_prefixes is None or not columns:
        return None
    wire = (tuple(columns), wire_keys, wire_prefixes, *work.record_limits(), work.batch_limit(),
            b"".join(sorted(work.topic_names())), *work.decompression_limits(), links)
    return StampPlan(wire, produce, work, tuple(members))


def _keeper(members: Sequence[ChainMember], natives: Sequence[Sequence[NativeColumn]]
            ) -> tuple[ChainMember, str] | None:
    """The (member, key) of the one column that keeps a record's own valid traceparent, when
    exactly one declares it (`NativeColumn.keeps_valid`), its member looks at records carrying
    that key (else Python would append to them) and no other member watches that key or
    ``tracestate`` (it would look at such a record too: Python's then)."""
    found = [(m, key) for m, native in zip(members, natives, strict=True)
             for key, c in zip(m.interceptor.stamps.appends, native,  # type: ignore[union-attr]
                               strict=True) if c.keeps_valid]
    if len(found) != 1:
        return None
    keeper, key = found[0]
    if not keeper.interceptor.stamps.watched(key):  # type: ignore[union-attr]
        return None
    for m in members:
        if m is not keeper and any(m.interceptor.stamps.watched(k)  # type: ignore[union-attr]
                                   for k in (key, TRACESTATE)):
            return None
    return found[0]


def _wire_links(members: Sequence[ChainMember], natives: Sequence[Sequence[NativeColumn]],
                keeper: tuple[ChainMember, str] | None, conn: ConnectionInfo
                ) -> tuple[LinksWire | None, list[tuple[tuple[str, int], ...]]]:
    """The engine's form of the keeper column's links (None: it has none): the memory, the
    scope, the link header's wire form, whether a record given link headers goes to Python,
    no topic names, and the lost parents header's wire form (`LOST_HEADER`); and per
    member, the events it counts for each such record.

    A later member that watches the link header or the lost parents header looks at every
    record given one in Python. It may declare what it does with one whose only watched
    headers are Herald's links (`Interceptor.native_links`: `audit`, whose forgery check keeps
    them, appends its columns as to any record); then the engine stamps such records. One that
    does not declare it sends them to Python. A client's own header under either key is one
    that member watches: its record goes to Python, which strips or refuses it."""
    seen: list[tuple[tuple[str, int], ...]] = [()] * len(members)
    if keeper is None:
        return None, seen
    at = next(i for i, m in enumerate(members) if m is keeper[0])
    appends = keeper[0].interceptor.stamps.appends  # type: ignore[union-attr]
    links = natives[at][appends.index(keeper[1])].links
    if links is None:
        return None, seen
    memory, scope, key = links
    python = False
    for j in range(at + 1, len(members)):
        icpt = members[j].interceptor
        events: dict[str, int] = {}
        for watched in (key, LOST_HEADER):
            if icpt.stamps.watched(watched):  # type: ignore[union-attr]
                declared = icpt.native_links(conn, watched)
                if declared is None:
                    python = True
                else:
                    events.update(declared)  # one record, one `on_record`: once each
        seen[j] = tuple(events.items())
    return (memory.capsule(), scope, stamping.value_column(key, [])[0], python, None,
            stamping.value_column(LOST_HEADER, [])[0]), seen


def _wire_column(key: str, column: NativeColumn, keeps: bool) -> ColumnWire:
    key_wire = stamping.value_column(key, [])[0]
    return (CAPABILITIES.columns.index(column.kind), key_wire, column.value, column.sampled,
            column.per_batch, keeps)


def _events(columns: Sequence[NativeColumn], keeps: Sequence[bool]
            ) -> tuple[tuple[str, bool, bool], ...]:
    return tuple((c.event, c.per_batch, k) for c, k in zip(columns, keeps, strict=True)
                 if c.event is not None)
