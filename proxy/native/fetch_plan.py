"""Which sessions' Fetch responses the native relay scans itself, and the plan it follows.

With `performance.native_relay: auto`, a fetch chain whose members only watch header keys
(`Stamps` with no appends: `drop_headers` with names and prefixes) no longer sends every
Fetch response to Python, nor a share group's ShareFetch response (KIP-932), scanned with the
same plan. The engine buffers the response whole, walks it, and when no batch
holds a record carrying a watched key (and every batch is magic 2, every topic id one Herald
knows) it forwards the response unchanged, which is what the Python chain would have sent
(proxy/native/relay_fetch.c). Compressed batches (gzip, snappy, lz4, zstd) are decompressed
to be read, within the limits Python keeps (proxy/native/relay_codec.c). Any other response
goes to Python at its frame boundary, which runs the chain as always: the Python chain is the
reference the engine is tested against.

A session is eligible when one filter that declares the engine may scan them in its place
(`Filter.native`, the interceptor filter's) reads Fetch responses, no other reads them (or
only their top-level tagged fields), no per-topic counters are kept, and every
fetch-chain member applies to every topic and client, is live (not shadow), declares what it
watches and appends nothing, has no batch hook, and needs headers or less.

With `trace_context`'s ``link``, the member that remembers fetched traces (`RememberFetched`)
watches ``traceparent``; when its memory is the C one (`NativeFetchedTraces`) and no other
member watches that key, the plan gives the engine the memory and the session's scope
instead (and the names of the topic ids), and the scan remembers each traced record itself:
a response with traced records passes natively too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from interceptors.api import Interceptor
from interceptors.chain import ChainMember, FetchChain
from interceptors.stats import ChainStats, MemberStats
from interceptors.trace_links import NativeFetchedTraces, RememberFetched
from protocol import stamping
from protocol.api_keys import ApiKey
from protocol.contracts.headers import TRACEPARENT
from protocol.contracts.native_relay import FETCH_LINK_EVENTS, LINK_COUNTS
from proxy.filters.chain import FilterChain, NativeWork, SessionContext
from proxy.native.capabilities import CAPABILITIES

if TYPE_CHECKING:
    from proxy.native._relay import LinksWire, PlanWire

FETCH = int(ApiKey.FETCH)
VERSIONS = CAPABILITIES.scan_versions
"""Fetch versions the engine scans, as it says (v13+ name topics by id: one Herald has not
learnt goes to Python)."""
SHARE_FETCH = int(ApiKey.SHARE_FETCH)
SHARE_VERSIONS = CAPABILITIES.share_versions
"""ShareFetch versions the engine scans with the same plan (`path_choice.passable_table`
marks them where the chain allows)."""

_NO_LINKS = (0,) * len(LINK_COUNTS)


@dataclass(frozen=True, slots=True)
class FetchPlan:
    """What the engine checks for one session (`wire`), and whose counters it adds to."""

    wire: PlanWire
    chain: FetchChain
    members: tuple[ChainMember, ...]

    def count(self, batches: int, records: int, kept: int = 0, kept_batches: int = 0,
              compressed: Sequence[int] = (), links: Sequence[int] = _NO_LINKS) -> None:
        """Add what the engine scanned to the counters the Python path keeps for a chain run
        that changes nothing: batches and records seen, by the chain and by each member.
        (`kept`, `kept_batches`: what stamping counts besides, always 0 for a scan;
        `compressed`: the compressed batches read, by codec, which change no counter;
        `links`: the engine's link counts, of which the remembering member adds those it
        declares a counter for, `FETCH_LINK_EVENTS`.)"""
        run = ChainStats(self.chain.path, {}, batches, 0, records)
        for m in self.members:
            st = run.members[m.name] = MemberStats(m.name, m.type, records)
            if isinstance(m.interceptor, RememberFetched):
                for at, event in FETCH_LINK_EVENTS:
                    if links[at]:
                        st.count(event, links[at])
        self.chain.add_run(run)


def scanning_work(chain: FilterChain) -> NativeWork | None:
    """What the engine scans for, when one filter that declares the engine may scan in its
    place (`Filter.native`) reads the responses of every Fetch version the engine scans and
    no filter reads their requests (whether other filters read the responses is
    `path_choice.passable_table`'s to say)."""
    found = None
    for version in VERSIONS:
        if chain.for_request(FETCH, version):
            return None
        works = [f.native.work for f in chain.for_response(FETCH, version)
                 if f.native.scan and f.native.work is not None]
        if len(works) != 1 or (found is not None and works[0] is not found):
            return None
        found = works[0]
    return found


def _watch_only(m: ChainMember) -> bool:
    icpt = m.interceptor
    stamps = icpt.stamps
    return (not m.shadow and m.topics is None and m.client_ids is None and stamps is not None
            and stamps.appends == () and icpt.needs in ("headers", "read")
            and type(icpt).on_batch is Interceptor.on_batch)


def fetch_plan(chain: FilterChain, ctx: SessionContext | None = None) -> FetchPlan | None:
    """The session's plan, or None when its Fetch responses stay in Python (`ctx`, the
    session, gives the scope of links: without it traced responses go to Python)."""
    work = scanning_work(chain)
    if work is None or work.counts_topics:
        return None
    fetch = work.chains.fetch
    if not fetch.members or not all(_watch_only(m) for m in fetch.members):
        return None
    keys: set[str] = set()
    prefixes: list[str] = []
    for m in fetch.members:
        stamps = m.interceptor.stamps
        assert stamps is not None  # `_watch_only` holds for every member
        keys |= stamps.watches
        prefixes += stamps.watch_prefixes
    links = _links(fetch.members, work, ctx)
    if links is not None:
        keys.discard(TRACEPARENT)
    wire_keys = stamping.wire_keys(sorted(keys))
    wire_prefixes = stamping.wire_keys(prefixes)
    if wire_keys is None or wire_prefixes is None:
        return None
    wire = ((), wire_keys, wire_prefixes, 0, 0, -1, b"".join(sorted(work.topic_names())),
            *work.decompression_limits(), links)
    return FetchPlan(wire, fetch, fetch.members)


def _links(members: Sequence[ChainMember], work: NativeWork,
           ctx: SessionContext | None) -> LinksWire | None:
    """The engine's form of the links the scan fills: (memory, the session's scope, no
    header, False, the name of each topic id the plan knows, in their order), when one
    member remembers traces in the C memory and no other watches ``traceparent``."""
    remembering = [(m, m.interceptor) for m in members
                   if isinstance(m.interceptor, RememberFetched)]
    if ctx is None or len(remembering) != 1:
        return None
    member, remembers = remembering[0]
    memory = remembers.memory
    if not isinstance(memory, NativeFetchedTraces) or any(
            m.interceptor.stamps.watched(TRACEPARENT)  # type: ignore[union-attr]
            for m in members if m is not member):
        return None
    names = work.topic_names()
    blob = b"".join(len(n).to_bytes(2, "big") + n
                    for n in (names[i].encode() for i in sorted(names)))
    capsule = memory.native.capsule()
    return (capsule, memory.scope(work.connection(ctx)), b"", False, blob)
