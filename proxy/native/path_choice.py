"""Which path runs each session and each request: the native engine, or Python. The one place
Herald decides it.

Facts about the engine (the versions it walks, what each hand-over reason means, what it
stamps and scans, whether it carries TLS) come from the engine itself
(`proxy/native/capabilities.py`, read from `_relay.capabilities()`); this module restates
none of them, so the engine and Python cannot disagree about them. What it adds is Herald's
policy: which filters need a frame, when a session goes back to the engine, what the memory
budget allows.

Every session or request that Python handles is counted with why, in
`herald_python_path_total{scope, reason, api}`; docs/performance.md lists each reason with what
an operator can change. The reasons are a fixed set (`SESSION_REASONS`, `FRAME_REASONS`), and
the API label is bounded like every API label of Herald's.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from prometheus_client import Counter

from protocol.contracts import native_relay
from proxy.filters.chain import Filter, FilterChain, SessionContext
from proxy.limits.memory_budget import Holder
from proxy.native import fetch_plan as native_fetch
from proxy.native import stamp_plan as native_stamp
from proxy.native.capabilities import CAPABILITIES, Capabilities
from proxy.native.config import NATIVE_RELAY_AUTO
from proxy.net.transport import TlsTransport, Transport
from proxy.observability.metrics import Metrics, bounded_api_labels

# Why a whole session is Python's (scope="session"; its requests are counted with the same
# reason, scope="frame").
NATIVE_RELAY_OFF = "native_relay_off"  # performance.native_relay: off
NATIVE_UNAVAILABLE = "native_unavailable"  # the extension is not built
TLS_CLIENT = "tls_client"  # the client speaks TLS and the engine does not carry it
TLS_UPSTREAM = "tls_upstream"  # the connection to the broker is TLS, likewise
SESSION_REASONS = (NATIVE_RELAY_OFF, NATIVE_UNAVAILABLE, TLS_CLIENT, TLS_UPSTREAM)

# Why one request of a session the engine serves is Python's (scope="frame").
FILTER = "filter"  # a filter reads requests or responses of this API (ApiVersions, Metadata,
# SASL, ...)
PRODUCE_CHAIN = "produce_chain"  # the produce chain reads it and the engine does not stamp it
# for this chain (or this version)
FETCH_CHAIN = "fetch_chain"  # the fetch chain reads its response, which the engine does not
# scan for this chain (or this version)
ENGINE_DECLINED = "engine_declined"  # the engine may serve this API but handed this frame over
# (a compressed, traced or oversized batch, a response it could not read, ...)
BETWEEN_PHASES = "between_phases"  # it arrived while the session waited in Python to go back
# (answers to Python's frames pending, or a session that keeps needing Python)
MEMORY_BUDGET = "memory_budget"  # the memory budget had no room for the engine's buffers
REAUTH = native_relay.REAUTH  # Herald's own re-authentication to the broker was due or
# under way (the engine's hand-over reason of the same name)
TLS_REFUSED = "tls_refused"  # the engine would not carry on the session's TLS connection when
# it was offered (or a TLS side had no connection left to give it): Python keeps the session
OWED = "owed"  # the session owed the broker something a filter adds to its next request (the
# acknowledgements of share-group records the fetch chain dropped): Python carries it
FRAME_REASONS = (FILTER, PRODUCE_CHAIN, FETCH_CHAIN, ENGINE_DECLINED, BETWEEN_PHASES,
                 MEMORY_BUDGET, REAUTH, TLS_REFUSED, OWED)

# The engine's hand-over reasons Python tells apart from the rest of their kind: a frame the
# engine would not serve (the next one Python handles is counted as declined), and the
# deadline of Herald's own re-authentication. tests/unit/proxy/native/test_path_choice.py
# holds them to the engine's list.
DECLINED_BY_ENGINE = native_relay.REQUEST
RESPONSE_BY_ENGINE = native_relay.RESPONSE  # the hand-over reason for a response Python must
# handle
ENGINE_REASONS_NAMED = (DECLINED_BY_ENGINE, RESPONSE_BY_ENGINE, REAUTH)

# The table's byte values, by the names the engine gives them (0, Python's, where it has none).
PYTHON = CAPABILITIES.value("python")
PASS = CAPABILITIES.value("pass")
UNLESS_TAGGED = CAPABILITIES.value("unless_tagged")
STAMP = CAPABILITIES.value("stamp")
STAMP_UNLESS_TAGGED = CAPABILITIES.value("stamp_unless_tagged")
SCAN = CAPABILITIES.value("scan")
SCAN_UNLESS_TAGGED = CAPABILITIES.value("scan_unless_tagged")

# A native phase that passed fewer requests than this before a Produce or Fetch (or its
# response) ended it means the client's data path mostly needs Python: each such phase doubles
# the reads Python keeps it for (up to the cap), so a session that alternates does not pay for
# a hand-over per request. A phase that a frame Python handles by design ended (the login,
# metadata, group coordination: frames filters read) says nothing about the data path: the
# session goes back as soon as that frame is answered, and the count stays where it was.
_API_VERSION = struct.Struct(">hh")  # a request's API key and version, after its size
_FEW_NATIVE = 8
_MAX_STAY_READS = 64


def engine_reason(mode: str, caps: Capabilities = CAPABILITIES) -> str | None:
    """Why the proxy runs no engine at all (None: it runs one), from
    `performance.native_relay` and whether the extension is built."""
    if mode != NATIVE_RELAY_AUTO:
        return NATIVE_RELAY_OFF
    if not caps.available:
        return NATIVE_UNAVAILABLE
    return None


def session_reason(engine: str | None, client_tls: bool, upstream_tls: bool,
                   caps: Capabilities = CAPABILITIES, client_refusal: str | None = None,
                   upstream_refusal: str | None = None) -> str | None:
    """Why a session stays on the Python path for its whole life (None: the engine may serve
    it). `engine`: why the proxy runs no engine (`engine_reason`), or None;
    `client_refusal`, `upstream_refusal`: why that side's TLS connection must stay in Python
    (`tls_refusal`), or None.

    Authentication is no reason: the SASL exchanges are frames filters read (Python's), the
    traffic after them the engine's, and Herald's own re-authentication takes the session
    back before it is due (`handover_s`)."""
    if engine is not None:
        return engine
    if client_tls and (not caps.tls or client_refusal is not None):
        return TLS_CLIENT
    if upstream_tls and (not caps.tls or upstream_refusal is not None):
        return TLS_UPSTREAM
    return None


def tls_refusal(transport: Transport, caps: Capabilities = CAPABILITIES) -> str | None:
    """Why a connection's TLS cannot move to the engine, or None when it can (or it has no
    TLS). The handshake stays in Python either way; what the engine would not do as Python
    does stays in Python: callbacks into Python on the connection (key logging, a message
    callback) would run on the engine's thread."""
    if not isinstance(transport, TlsTransport):
        return None
    if not caps.tls:
        return ("the engine is not built with TLS, or with another OpenSSL than the ssl "
                "module's")
    context = transport.context
    if context.keylog_filename or getattr(context, "_msg_callback", None) is not None:
        return "the TLS context logs keys or messages through Python"
    return None


def passable_table(chain: FilterChain, stamp: bool = False, fetch: bool = False,
                   caps: Capabilities = CAPABILITIES) -> bytes:
    """One byte per (api key, version): what the engine may do with that pair's requests.
    With `stamp`, Produce requests the one filter that declares the engine may stamp them
    (`Filter.native`) alone reads are stamped; with `fetch`, Fetch responses the filters that
    declare the engine may scan them read (and others at most for their tagged fields) are
    scanned (Fetch and ShareFetch; the requests of those the filters that declare it read
    pass too, as they read them only for what a session owes, `Filter.owes`, and a session
    that owes something gets no phase). A response some filter reads only for its leader
    hints passes unless it has some, where the engine reads them (`caps.tags`; ShareFetch's,
    a field, the scan reads itself)."""
    max_version = caps.max_version
    table = bytearray(caps.max_api * max_version)
    for api in range(caps.max_api):
        tagged = caps.tags.get(api, range(0))
        for version in range(max_version):
            stamped = stamp and api == caps.stamp_api and version in caps.stamp_versions
            scanned = fetch and caps.scans(api, version)
            requests = chain.for_request(api, version)
            if scanned:
                requests = tuple(f for f in requests if not f.native.scan)
            if (requests and not stamped) or chain.unreadable(api, version):
                continue
            readers: Sequence[Filter] = chain.for_response(api, version)
            if scanned:
                readers = [f for f in readers if not f.native.scan]
                hinted = version in tagged or api == caps.share_api
                if not readers:
                    table[api * max_version + version] = SCAN
                elif hinted and all(f.tagged_only(api, version) for f in readers):
                    table[api * max_version + version] = SCAN_UNLESS_TAGGED
                continue
            if not readers:
                table[api * max_version + version] = STAMP if stamped else PASS
            elif version in tagged and all(f.tagged_only(api, version) for f in readers):
                table[api * max_version + version] = (STAMP_UNLESS_TAGGED if stamped
                                                      else UNLESS_TAGGED)
    return bytes(table)


def table_reason(chain: FilterChain, api: int, version: int) -> str:
    """Why a table marks (api, version) Python's: a filter reads it, or only filters that
    declare the engine may stamp or scan in their place (`Filter.native`) do, for a chain
    (or version) the engine does not stamp or scan."""
    requests = chain.for_request(api, version)
    responses = chain.for_response(api, version)
    if requests and api == native_stamp.PRODUCE and all(f.native.stamp for f in requests):
        return PRODUCE_CHAIN
    if all(f.native.scan for f in requests) and any(f.native.scan for f in responses) and all(
            f.native.scan or f.tagged_only(api, version) for f in responses):
        return FETCH_CHAIN
    return FILTER


class Plans(Protocol):
    """What a phase is planned from: the engine's plans and tables for a chain
    (`relay.NativeRelay`, which keeps them per chain)."""

    def stamp_plan(self, chain: FilterChain, ctx: SessionContext
                   ) -> tuple[native_stamp.StampPlan, int] | None: ...

    def fetch_plan(self, chain: FilterChain, ctx: SessionContext | None = None
                   ) -> tuple[native_fetch.FetchPlan, int] | None: ...

    def table(self, chain: FilterChain, stamp: bool = False, fetch: bool = False) -> bytes: ...


@dataclass(frozen=True, slots=True)
class Phase:
    """What a native phase does: its table, its plans (with the keys the engine counts them
    under) and what it books of the memory budget."""

    table: bytes
    stamp: tuple[native_stamp.StampPlan, int] | None
    fetch: tuple[native_fetch.FetchPlan, int] | None
    booked: int


class SessionPath:
    """Decides, for one session, where each stretch of it runs, and counts what Python
    handles.

    `python_reason`: why the whole session is Python's (`session_reason`), or None when the
    engine may serve it; then the session alternates between native phases and stretches in
    Python, and each request Python handles is counted with why (`frame`).
    """

    def __init__(self, metrics: Metrics, python_reason: str | None, chain: FilterChain,
                 caps: Capabilities = CAPABILITIES) -> None:
        self._metrics = metrics
        self.python_reason = python_reason
        self._caps = caps
        self._counters: dict[tuple[str, str], Counter] = {}
        self._table: bytes | None = None  # of the last phase
        self._chain = chain
        self._why = BETWEEN_PHASES  # of a passable frame Python handles now
        self._declined = False  # the next passable frame is the one the engine handed over
        self._stay = 0  # reads Python keeps the session for before offering it back
        self._stay_left = 0
        self.refused = False  # the engine refused the session's TLS: never offered again
        if python_reason is not None:
            metrics.python_path.labels("session", python_reason, "").inc()

    def frame(self, api: int, version: int) -> None:
        """A request Python handles: count it with why."""
        reason = self.python_reason
        if reason is None:
            table, caps = self._table, self._caps
            if table is None:  # before the first phase: nothing the chain reads could pass
                chain = self._chain
                passable = not (chain.for_request(api, version)
                                or chain.for_response(api, version)
                                or chain.unreadable(api, version))
            else:
                passable = (0 <= api < caps.max_api and 0 <= version < caps.max_version
                            and table[api * caps.max_version + version] != PYTHON)
            if not passable:
                reason = table_reason(self._chain, api, version)
            elif self._declined:
                reason = ENGINE_DECLINED
            else:
                reason = self._why
            self._declined = False
        self._count(reason, api, version)

    def response_declined(self, api: int, version: int) -> None:
        """The engine handed over a response to a request it forwarded (one the fetch chain
        changes, or one it cannot read): Python handles that response, counted as a frame of
        its API."""
        self._count(ENGINE_DECLINED, api, version)

    def _count(self, reason: str, api: int, version: int) -> None:
        key = (reason, bounded_api_labels(api, version)[0])
        counter = self._counters.get(key)
        if counter is None:
            counter = self._counters[key] = self._metrics.python_path.labels("frame", *key)
        counter.inc()

    def phase(self, relay: Plans, chain: FilterChain, ctx: SessionContext,
              held: Holder | None, buffer: int) -> Phase | None:
        """The next native phase, or None when the memory budget has no room for the
        engine's buffers of `buffer` bytes each way. What they grow by for a large frame to
        stamp or scan comes from the engine's growth pool, booked as it grows
        (`relay.GROWTH_SHARE`), not by every session that might one day need it. None too
        while the session owes the broker something a filter adds to a request
        (`Filter.owes`): Python carries it first."""
        if any(f.owes(ctx) for f in chain.filters):
            self._why = OWED
            return None
        booked = 2 * buffer
        if held is not None and held.room(booked) < booked:
            self._why = MEMORY_BUDGET
            return None
        stamp = relay.stamp_plan(chain, ctx)
        fetch = relay.fetch_plan(chain, ctx)
        table = relay.table(chain, stamp is not None, fetch is not None)
        self._table = table
        return Phase(table, stamp, fetch, booked)

    def ended(self, reason: str, forwarded: int, api: int | None = None) -> str:
        """A native phase ended for `reason` after passing `forwarded` requests: what that
        reason means (its kind: `native_relay.RESUME`, `DEADLINE`, `UPSTREAM` or `CLOSE`, as
        the engine says; `CLOSE` for a reason it does not name).
        `api`: the API key of the frame that ended it (the request the engine handed over,
        or the one whose response it did), None when it is not known.

        Only a short phase that the data path ended (a Produce or Fetch, or its response,
        Python must handle) keeps the session in Python for a while (`may_offer`)."""
        kind = self._caps.reasons.get(reason, native_relay.CLOSE)
        data_path = self._data_path_ended(reason, api)
        if forwarded >= _FEW_NATIVE:
            self._stay = 0
        elif data_path:
            self._stay = min(max(1, 2 * self._stay), _MAX_STAY_READS)
        self._stay_left = self._stay if data_path else 0
        self._declined = reason == DECLINED_BY_ENGINE
        self._why = REAUTH if reason == REAUTH else BETWEEN_PHASES
        return kind

    def _data_path_ended(self, reason: str, api: int | None) -> bool:
        """Whether a phase that ended for `reason` on a frame of `api` (None: not known) ended
        because the data path needed Python: a Produce or Fetch request the engine handed
        over, or the response to one. Any other ending (a frame filters read by design, the
        client's end of input, Herald's own re-authentication) is not the data path's."""
        if reason not in (DECLINED_BY_ENGINE, RESPONSE_BY_ENGINE):
            return False
        caps = self._caps
        return api is None or api in (caps.stamp_api, caps.scan_api, caps.share_api)

    def engine_tls(self, client: Transport, upstream: Transport
                   ) -> tuple[object | None, object | None]:
        """What the engine carries each side's TLS on (None: plaintext), from
        `Transport.engine_tls`. A TLS side without its connection object (closed) must never
        reach the engine, which would take it for a plaintext one: the session stays in
        Python (`tls_refused`)."""
        client_tls, upstream_tls = client.engine_tls(), upstream.engine_tls()
        if (client.tls and client_tls is None) or (upstream.tls and upstream_tls is None):
            self.tls_refused()
        return client_tls, upstream_tls

    def tls_refused(self) -> None:
        """The engine would not carry on the session's TLS (relay_tls.c checks it before
        anything moves): the session stays in Python from now on, and what Python handles is
        counted as `tls_refused`."""
        self.refused = True
        self._why = TLS_REFUSED

    def reauth_due(self) -> None:
        """Herald's own re-authentication is due: what Python handles meanwhile is for it."""
        self._why = REAUTH

    def may_offer(self, buffered: int, buffer: int, head: bytes = b"") -> bool:
        """After a read: whether the session may be offered back to the engine now (the rest
        of the wait, for answers to what Python forwarded, is the caller's). A partial frame
        goes with the session when the engine's buffer holds it and the engine would not
        hand it straight back (`head`: its first bytes, size prefix included, when they are
        here), and a session that keeps needing Python stays for a few reads (`ended`); one
        whose TLS the engine refused stays for good."""
        if self.refused or buffered > buffer or not self._passes(head):
            return False
        if self._stay_left:
            self._stay_left -= 1
            return False
        return True

    def _passes(self, head: bytes) -> bool:
        """Whether the engine would carry on the partial frame beginning with `head` (True
        when too little of it is here to tell)."""
        table = self._table
        if table is None or len(head) < 8:
            return True
        api: int
        version: int
        api, version = _API_VERSION.unpack_from(head, 4)
        caps = self._caps
        return (0 <= api < caps.max_api and 0 <= version < caps.max_version
                and table[api * caps.max_version + version] != PYTHON)

    def handover_s(self, due: float, now: float) -> float | None:
        """Seconds the next native phase may last before Herald's own re-authentication, due
        at `due` (math.inf: never), or None when it is due already and the phase must not
        begin."""
        if due == math.inf:
            return 0.0  # no deadline
        left = due - now
        if left <= 0:
            self._why = REAUTH
            return None
        return left

