"""Causal links made where they happen: a bounded memory of the traced records clients fetched.

Herald sees both sides of a service: the records its consumer fetches and the records its
producer then writes with the same trace id. `trace_context` with a ``link`` section uses that:
the fetch chain remembers, per client scope and trace id, which records were fetched
(`FetchedTraces.remember`, called by `RememberFetched`, the member the chains builder adds to
the fetch chain for it); on produce, a record that continues a trace the same scope fetched
gets one ``herald.parent`` header per remembered record (`FetchedTraces.parents`). The edge then
travels with the record, and the pipeline reads it as evidence instead of inferring it.

*Scope* is what a service's consumer and producer share, though they are different
connections: ``host``, the client's source address (one Herald per pod as a sidecar sees every
service of the pod on the loopback address, a gateway sees each pod by its address), or
``client_id``, the source address and the client id (for several services per host that give
their consumer and producer the same client id).

*Which records*: the records of the trace the scope fetched since it last produced one of that
trace. A service that reads one record and writes two (a payment and a fraud check) links both
to it; one that joins two inputs (fan-in) links to both; a service that reads the record it
wrote itself (a retry loop through its own topic) links the next write to that record only,
because its own write marked the older ones as spent and the next fetch replaced them. At most
`max_parents` records per trace are kept (the oldest goes first).

*No silent loss*: the records a (scope, trace) fetched since it last produced one of the trace
are its *round*. Every parent of the round Herald knew of but cannot name is counted by why:
``expired`` (the entry went unrefreshed for `ttl_s`: the older input of a join, or all of them
when the service writes later than that), ``evicted`` (the memory was full) and ``overflow``
(beyond `max_parents`); each produced traced record of the round says so in
``herald.parents_lost`` headers (`LOST_HEADER`, ``<reason>:<count>``), beside the parents it
names, also when it can name none. A fetch after a produce starts a new round with no losses.
The count of a dropped entry is kept with its key in the bounded set of keys gone, so a join
whose older input expired and was swept out declares it when the younger arrives. Only a
round whose key has left that set too (older than `capacity` other drops) is forgotten: its
next record counts as ``unseen``.

*Bound*: at most `capacity` (scope, trace) entries, the least recently fetched evicted first,
and an entry not refreshed for `ttl_s` is not believed (the time that counts runs from Herald
relaying the fetch to the produce: the record's wait in the client's prefetch queue and the
service's work on it, not how far behind its consumer is). The defaults (`LinkConfig`) are
sized by memory, not by a clock: an hour, so that joins and slow services of minutes to an
hour are linked, and 100,000 entries, about 45 MB for the C memory and 72 MB for this
reference when entries and dropped keys are both full (bench/bench_link_memory.py measures
the bytes per entry: in C about 280 with one parent, 180 per dropped key). A record that
continues a trace with no entry is counted by reason, ``unseen`` (never fetched through this
Herald: also the first hop of every trace whose producer started it itself), ``expired`` or
``evicted`` (a bounded set of recently evicted keys tells those apart from ``unseen``).

The memory is shared by a produce-chain member and a fetch-chain member that may run on the
event loop and in worker threads at once, so every access holds a lock (uncontended it costs
well under a microsecond; only traced records reach it).

`FetchedTraces` is the reference. When the record stamper's extension is built, the memory is
its C twin (protocol/link_memory.c, `NativeFetchedTraces` here, same methods and answers,
tests/unit/interceptors/test_link_memory.py holds them equal), which the native relay reads
and fills from its own thread for the sessions it carries, so that a client's Python and native
phases share one memory.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from configuration import InvalidConfig
from interceptors.api import FETCH, ColumnValue, Interceptor, Stamps
from interceptors.context import ConnectionInfo, ProxyInfo, RecordContext
from interceptors.headers import Headers
from interceptors.tracing import valid_traceparent
from protocol.contracts.headers import (
    PARENT,
    PARENTS_LOST,
    PARENTS_LOST_REASONS,
    RESERVED_PREFIX,
    TRACEPARENT,
)

# The links' counters by name, and why parents are missed, are written once, with the order the
# C memory (protocol/_stamp.c `counters`) and the native relay's counts give them in.
from protocol.contracts.native_relay import FETCH_COUNTERS, PRODUCE_COUNTERS, UNSEEN

if TYPE_CHECKING:
    from protocol._stamp import LinkMemory as CLinkMemory


def _built_link_memory() -> type[CLinkMemory] | None:
    """The C memory's class, or None when the extension is not built (the reference serves)."""
    try:
        from protocol._stamp import LinkMemory as built
    except ImportError:
        return None
    return built


LinkMemory = _built_link_memory()

LOST_REASONS = EXPIRED, EVICTED, OVERFLOW = PARENTS_LOST_REASONS
"""Why a parent Herald knew of is not named, in the order the headers are written."""
LOST_HEADER = RESERVED_PREFIX + PARENTS_LOST
LOST_MAX = 4_294_967_295  # a count saturates there, as in C (10 digits: `PARENTS_LOST_VALUE_RE`)


LINKED_MEMO = "herald.links"
"""``RecordContext.memo`` key under which the linking member notes, for the record it is on,
``(headers, ((header key, count), ...))``: per key it wrote (the link header, `LOST_HEADER`),
the last `count` headers with that key in that very `Headers` object were made by Herald, so
`audit` (whatever its place in the chain) keeps them and treats any other header under its
prefix as forged. The object, not the record's index,
is what ties the note to the record: members of one record share it, and a shadow member runs
on a copy, so what a shadow `trace_context` would have written never shields a client's
header from a live `audit`."""

Key = tuple[str, int, int]  # (topic, partition, offset)
Scope = tuple[str] | tuple[str, str | None]  # (host,) or (host, client id): `LinkConfig.scope`
Lost = tuple[int, int, int]  # parents not named, by `LOST_REASONS`; None when there are none


@dataclass
class LinkConfig:
    scope: Literal["host", "client_id"] = "host"
    capacity: int = 100_000         # (scope, trace) entries: ~45 MB in C when full
    ttl_s: float = 3600.0           # an entry not refreshed for this long is not believed
    max_parents: int = 8            # records kept per (scope, trace): fan-in
    header: str = RESERVED_PREFIX + PARENT

    def __post_init__(self) -> None:
        if self.capacity < 1:
            raise InvalidConfig("capacity", "must be >= 1")
        if self.ttl_s <= 0:
            raise InvalidConfig("ttl_s", "must be > 0")
        if self.max_parents < 1:
            raise InvalidConfig("max_parents", "must be >= 1")
        if not self.header or self.header in (TRACEPARENT, LOST_HEADER):
            raise InvalidConfig("header", f"cannot use {self.header!r}")


def source_host(address: str) -> str:
    """``host`` of ``host:port`` (``[v6]`` of ``[v6]:port``): what a client's connections to
    different brokers, and a pod's different clients, have in common."""
    host, sep, _port = address.rpartition(":")
    return host if sep else address


class _Entry:
    """One (scope, trace): the records fetched, oldest first, whether the scope has
    produced a record of the trace since (then the next fetch replaces them: a new round),
    and the round's parents it cannot name, by `LOST_REASONS` (None: none)."""

    __slots__ = ("seen", "spent", "parents", "lost")

    def __init__(self, seen: float, first: Key) -> None:
        self.seen = seen
        self.spent = False
        self.parents: list[Key] = [first]  # a few at most (`max_parents`): a list is smallest
        self.lost: list[int] | None = None

    def lose(self, reason: int, n: int) -> None:
        if n:
            if self.lost is None:
                self.lost = [0, 0, 0]
            self.lost[reason] += n

    def lost_with(self, reason: int) -> Lost:
        """The round's losses should its parents be lost too, for `reason`."""
        lost = list(self.lost or (0, 0, 0))
        lost[reason] += len(self.parents)
        return lost[0], lost[1], lost[2]


_EXPIRED, _EVICTED, _OVERFLOW = range(3)  # indexes in `Lost`


class FetchedTraces:
    """The bounded memory (scope, trace id) → records fetched; see the module docstring.

    About 0.41 KB an entry with one record (the key, the trace id, the entry, its record and
    the ordered dict's links) and 0.32 KB for the key of a dropped one with its losses: about
    72 MB at the default capacity when both are full (measured with tracemalloc,
    bench/bench_link_memory.py)."""

    def __init__(self, config: LinkConfig, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        self.capacity = config.capacity
        self.ttl_s = config.ttl_s
        self.max_parents = config.max_parents
        self.clock = clock
        self._by_host = config.scope == "host"
        self._entries: OrderedDict[tuple[Scope, bytes], _Entry] = OrderedDict()
        # Evicted or expired: (why, whether spent, *the round's losses, its parents included),
        # one flat tuple: the smallest.
        self._gone: OrderedDict[tuple[Scope, bytes], tuple[str, bool, int, int, int]] = (
            OrderedDict())
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def scope(self, conn: ConnectionInfo) -> Scope:
        """The key a client's consumer and producer share (see `LinkConfig.scope`)."""
        host = source_host(conn.address)
        return (host,) if self._by_host else (host, conn.client_id)

    def remember(self, scope: Scope, trace: bytes, key: Key) -> tuple[int, int]:
        """`scope` fetched record `key` of `trace` just now; (entries evicted for room,
        entries found expired) on the way."""
        now = self.clock()
        evicted = expired = 0
        with self._lock:
            entries = self._entries
            k = (scope, trace)
            entry = entries.get(k)
            if entry is None:
                entry = entries[k] = _Entry(now, key)
                if self._gone:
                    gone = self._gone.pop(k, None)
                    if gone is not None and not gone[1]:  # the round goes on, its losses too
                        entry.lost = list(gone[2:])
            else:
                entries.move_to_end(k)
                parents = entry.parents
                if entry.spent:  # a new round
                    parents.clear()
                    entry.spent = False
                    entry.lost = None
                elif now - entry.seen > self.ttl_s:
                    entry.lose(_EXPIRED, len(parents))
                    parents.clear()
                elif key in parents:
                    parents.remove(key)  # fetched again: it becomes the newest
                elif len(parents) >= self.max_parents:
                    del parents[0]
                    entry.lose(_OVERFLOW, 1)
                parents.append(key)
                entry.seen = now
            # The oldest entries first: expired ones, then any beyond the capacity.
            limit = now - self.ttl_s
            while entries:
                oldest_key = next(iter(entries))
                oldest = entries[oldest_key]
                if oldest.seen < limit:
                    reason, lost = EXPIRED, oldest.lost_with(_EXPIRED)
                    expired += 1
                elif len(entries) > self.capacity:
                    reason, lost = EVICTED, oldest.lost_with(_EVICTED)
                    evicted += 1
                else:
                    break
                del entries[oldest_key]
                gone_keys = self._gone
                gone_keys[oldest_key] = (reason, oldest.spent, *lost)
                if len(gone_keys) > self.capacity:
                    gone_keys.popitem(last=False)
        return evicted, expired

    def parents(self, scope: Scope, trace: bytes) -> tuple[tuple[Key, ...] | str, Lost | None]:
        """The records `scope` fetched of `trace` that a record it produces now continues,
        or why there are none (`MISS_REASONS`); and the round's parents it cannot name (None:
        none). Marks them spent: the scope's next fetch of the trace replaces them, while
        further records produced before it link to them too."""
        k = (scope, trace)
        with self._lock:
            entry = self._entries.get(k)
            if entry is None:
                gone = self._gone.get(k)
                return (UNSEEN, None) if gone is None else (gone[0], gone[2:])
            if self.clock() - entry.seen > self.ttl_s:
                return EXPIRED, entry.lost_with(_EXPIRED)
            entry.spent = True
            lost = entry.lost
            return tuple(entry.parents), None if lost is None else (lost[0], lost[1], lost[2])


class NativeFetchedTraces(FetchedTraces):
    """`FetchedTraces` kept in C (protocol/link_memory.c): the same methods and answers; the
    scope is bytes (the native relay is given it with a session's plans), and what the relay
    counts for the sessions it carries is in `native_counters`."""

    def __init__(self, config: LinkConfig, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        super().__init__(config, clock)  # the bounds; its own tables stay empty
        if LinkMemory is None:
            raise RuntimeError("the C link memory needs the record stamper's extension built")
        self.native = LinkMemory(config.capacity, config.ttl_s, config.max_parents)

    def __len__(self) -> int:
        return len(self.native)

    def scope(self, conn: ConnectionInfo) -> bytes:  # type: ignore[override]
        host = source_host(conn.address).encode()
        if self._by_host:
            return host
        cid = conn.client_id
        return host + (b"\0\1" if cid is None else b"\0\2" + cid.encode())

    def remember(self, scope: bytes, trace: bytes, key: Key  # type: ignore[override]
                 ) -> tuple[int, int]:
        return self.native.remember(scope, trace, key[0], key[1], key[2], self.clock())

    def parents(self, scope: bytes, trace: bytes  # type: ignore[override]
                ) -> tuple[tuple[Key, ...] | str, Lost | None]:
        return self.native.parents(scope, trace, self.clock())

    def native_counters(self) -> dict[str, int]:
        return dict(zip(FETCH_COUNTERS + PRODUCE_COUNTERS, self.native.counters(), strict=True))


def fetched_traces(config: LinkConfig) -> FetchedTraces | NativeFetchedTraces:
    """The memory for `config`: the C one when the extension is built."""
    return FetchedTraces(config) if LinkMemory is None else NativeFetchedTraces(config)


def parent_value(key: Key) -> bytes:
    """The header value naming `key` (`protocol.contracts.headers.PARENT`)."""
    return f"{key[0]}:{key[1]}:{key[2]}".encode()


def lost_values(lost: Lost) -> list[tuple[str, int, bytes]]:
    """(reason, count, header value) per reason with parents lost, in `LOST_REASONS` order
    (`protocol.contracts.headers.PARENTS_LOST`)."""
    return [(reason, n, b"%s:%d" % (reason.encode(), n))
            for reason, n in zip(LOST_REASONS, (min(n, LOST_MAX) for n in lost), strict=True)
            if n]


_NO_COLUMNS: tuple[ColumnValue, ...] = ()


class RememberFetched(Interceptor):
    """The fetch-chain side of the links: remembers the traced records a client fetched.

    Not configured by itself: `trace_context` with ``link`` makes it (`Interceptor.
    fetch_member`), sharing its memory, and the chains builder appends it to the fetch chain,
    after the configured members, so what it remembers is what the client really received.
    It watches ``traceparent`` and appends nothing (`Stamps`), so a batch without trace
    context costs one native scan, and the native relay keeps forwarding Fetch responses
    that carry none (proxy/native/fetch_plan.py) without Python."""

    paths = frozenset({FETCH})
    needs = "read"
    concurrent = True

    def __init__(self, memory: FetchedTraces | NativeFetchedTraces, env: ProxyInfo) -> None:
        super().__init__(None, env)
        self.memory = memory
        self.stamps = Stamps((), frozenset({TRACEPARENT}))

    def columns(self, ctx: RecordContext) -> tuple[ColumnValue, ...]:
        return _NO_COLUMNS

    def _offset(self, ctx: RecordContext) -> int:
        """The record's offset. It reads headers only (no record object, whose fields would
        cost more to load than the rest of the work), so the offset is the base offset plus
        the record's index whenever the deltas run 0..n-1, which the last delta being n-1
        says; a batch with gaps (compacted) has its deltas read once."""
        batch = ctx.batch
        assert batch is not None  # the engine sets it before it runs members on records
        if batch.last_offset_delta == batch.record_count - 1:
            return batch.base_offset + ctx.index
        known = ctx.memo.get(self)
        if known is None or known[0] is not batch:
            known = ctx.memo[self] = (batch, [r.offset_delta for r in batch.records])
        return batch.base_offset + known[1][ctx.index]

    def on_record(self, ctx: RecordContext, headers: Headers) -> None:
        tp = headers.first(TRACEPARENT)
        if not valid_traceparent(tp):
            return
        memory = self.memory
        # The scope is the memory's own (a tuple, or bytes for the C one), so it fits; the
        # checker sees the two memories' scope types as one union.
        evicted, expired = memory.remember(memory.scope(ctx.conn),  # type: ignore[arg-type]
                                           tp[3:35], (ctx.topic, ctx.partition, self._offset(ctx)))
        stats = self.stats
        remembered, evicted_name, expired_name = FETCH_COUNTERS
        stats.count(remembered)
        if evicted:
            stats.count(evicted_name, evicted)
        if expired:
            stats.count(expired_name, expired)

    def gauges(self) -> dict[str, float]:
        return {"link_memory_entries": len(self.memory)}
