"""Which sessions' Produce requests the native relay stamps itself, and the plan it follows.

With `performance.native_relay: auto`, a produce chain of stamping members the engine knows
(`Interceptor.native_columns`: `trace_context`, `audit`) no longer sends every Produce request
to Python. The engine walks the request, and when every batch is uncompressed, magic 2 and
has no record carrying a header a member watches, it appends the members' columns to every
record itself (proxy/relay_stamp.c). Any other request goes to Python at its frame boundary,
which runs the chain as always: the Python chain is the reference the engine is tested
against.

A session is eligible when, apart from the interceptor filter, no filter reads Produce
requests, tracing is off (spans need Python), no per-topic counters are kept, and every
produce-chain member applies to every topic and client, is live (not shadow), stamps, and
can give its columns natively for this connection. Otherwise Produce goes to Python exactly
as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from interceptors.api import NATIVE_KINDS, NativeColumn
from interceptors.chain import ChainMember, ProduceChain
from interceptors.stats import ChainStats, MemberStats
from protocol import stamping
from proxy.filters import FilterChain, SessionContext
from proxy.interception import InterceptorFilter, connection_info
from proxy.topic_limits import BROKER_DEFAULT_MAX_MESSAGE_BYTES

PRODUCE = 0
VERSIONS = range(3, 14)
"""Produce versions the engine walks: v3-v13 (v13 names topics by id: the engine stamps those
Herald has learnt, and leaves the others to Python, which refuses them until it has)."""


@dataclass(frozen=True, slots=True)
class _Member:
    member: ChainMember
    appends: int  # headers it appends to a record
    events: tuple[tuple[str, bool], ...]  # (event, per batch) counted per value made


@dataclass(frozen=True, slots=True)
class StampPlan:
    """What the engine stamps for one session (`wire`), and whose counters it adds to."""

    wire: tuple
    chain: ProduceChain
    interceptors: InterceptorFilter
    members: tuple[_Member, ...]

    def count(self, batches: int, records: int) -> None:
        """Add what the engine stamped to the counters the Python path keeps for the same
        work: the chain's and its members' (`ChainStats`), and the re-encoded batches."""
        run = ChainStats(self.chain.path, {}, batches, batches, records)
        for m in self.members:
            st = MemberStats(m.member.name, m.member.type, records, records if m.appends else 0,
                             m.appends * records)
            for event, per_batch in m.events:
                st.count(event, batches if per_batch else records)
            run.members[m.member.name] = st
        self.chain.add_run(run)
        self.interceptors.codec.reencoded[0] += batches


def interceptor_filter(chain: FilterChain) -> InterceptorFilter | None:
    """The interceptor filter, when it is the only filter that reads Produce v3-v13
    requests."""
    found = None
    for version in VERSIONS:
        readers = chain.for_request(PRODUCE, version)
        if len(readers) != 1 or not isinstance(readers[0], InterceptorFilter):
            return None
        if found is not None and readers[0] is not found:
            return None
        found = readers[0]
    return found


def stamp_plan(chain: FilterChain, ctx: SessionContext) -> StampPlan | None:
    """The session's plan, or None when its Produce requests stay in Python."""
    filt = interceptor_filter(chain)
    if filt is None or filt.report_traces or filt.tally is not None:
        return None
    produce = filt.chains.produce
    if not produce.members or not produce.fast_paths:
        return None
    conn = connection_info(ctx)
    columns: list[tuple] = []
    members: list[_Member] = []
    keys: set[str] = set()
    prefixes: list[str] = []
    appended: list[str] = []
    for m in produce.members:
        icpt = m.interceptor
        stamps = icpt.stamps
        if (m.shadow or m.topics is not None or m.client_ids is not None or stamps is None
                or icpt.needs != "headers"):
            return None
        native = icpt.native_columns(conn)
        if native is None or len(native) != len(stamps.appends):
            return None
        # A member that watches what an earlier one appends would look at every record.
        if any(stamps.watched(key) for key in appended):
            return None
        appended += stamps.appends
        keys |= stamps.watches
        prefixes += stamps.watch_prefixes
        columns += (_wire_column(key, c) for key, c in zip(stamps.appends, native, strict=True))
        members.append(_Member(m, len(stamps.appends), _events(native)))
    wire_keys = stamping.wire_keys(sorted(keys))
    wire_prefixes = stamping.wire_keys(prefixes)
    if wire_keys is None or wire_prefixes is None or not columns:
        return None
    limits = filt.limits
    wire = (tuple(columns), wire_keys, wire_prefixes, limits.max_batch_records,
            limits.max_request_records, _batch_limit(filt), b"".join(sorted(filt.topics.names)))
    return StampPlan(wire, produce, filt, tuple(members))


def _batch_limit(filt: InterceptorFilter) -> int:
    """The smallest batch size limit a stamped batch must keep to (-1: none): above it,
    Python decides how the batch fits its topic."""
    if filt.topic_limits is None:
        return -1
    return min((BROKER_DEFAULT_MAX_MESSAGE_BYTES, *filt.topic_limits.known.values()))


def _wire_column(key: str, column: NativeColumn) -> tuple:
    key_wire = stamping.value_column(key, [])[0]
    return (NATIVE_KINDS.index(column.kind), key_wire, column.value, column.sampled,
            column.per_batch)


def _events(columns: Sequence[NativeColumn]) -> tuple[tuple[str, bool], ...]:
    return tuple((c.event, c.per_batch) for c in columns if c.event is not None)
