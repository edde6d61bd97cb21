"""The trio side of the native passthrough relay (`proxy/native/relay_engine.c`, wrapped as the
module `proxy.native._relay` by `_relay.c`).

trio's per-wake-up machinery costs more than everything else a plaintext session does when no
filter reads its frames. With `performance.native_relay: auto`, such a session hands its two
descriptors to one engine thread that forwards the frames no filter wants (see
`proxy.native.path_choice`, which decides what runs where) without waking trio. The first
frame a filter wants (or one the engine cannot read) hands the session back to its Python
pumps with the exact state: the client bytes not forwarded, the response bytes not parsed, the
requests still waiting for an answer. The session returns to the engine once nothing Python
handles is in flight.

The engine counts bytes, requests and latencies in plain integers; they are folded into the
Prometheus metrics at every hand-over and before every scrape.
"""

from __future__ import annotations

import errno
import itertools
import socket
from dataclasses import dataclass

import trio

from protocol.contracts.native_relay import BYTE_DIRECTIONS
from proxy.filters.chain import FilterChain, SessionContext
from proxy.limits.memory_budget import Holder, MemoryBudget
from proxy.limits.session_limits import SessionLimits
from proxy.native import fetch_plan as native_fetch
from proxy.native import stamp_plan as native_stamp
from proxy.native.capabilities import CAPABILITIES
from proxy.native.path_choice import passable_table
from proxy.observability.logs import get_logger
from proxy.observability.metrics import LATENCY_BUCKETS, LatencySeries, Metrics

try:
    from proxy.native import _relay
except ImportError:  # built without a C compiler: the Python path serves every session
    _relay = None  # type: ignore[assignment]  # the stub's module, or None: `NativeRelay` checks

log = get_logger("native_relay")

BUFFER_SIZE = 128 * 1024
"""Bytes the engine buffers per direction and session, booked in the memory budget."""

STAMP_BUFFER_SIZE = 2 * 1024 * 1024
"""What a session whose Produce requests the engine stamps may buffer for one request, and
again for its stamped form (a request that would grow past it goes to Python), from the
engine's growth pool. Clients send requests of up to about 1 MiB."""

FETCH_BUFFER_SIZE = 4 * 1024 * 1024
"""What a session whose Fetch responses the engine scans may buffer for one response (a
larger one goes to Python), from the engine's growth pool. Consumers ask for up to 1 MiB per
partition by default (librdkafka, the Java client), and a response may hold several."""

GROWTH_SHARE = 4
"""The engine's buffers may grow past their base size, for large frames to stamp or scan, by
a quarter of the memory budget in all, counted in the budget as they grow: a held session
books its base buffers only, however large the frames it may one day carry."""

MAX_API = CAPABILITIES.max_api
MAX_VERSION = CAPABILITIES.max_version

_ids = itertools.count(1)


def available() -> bool:
    """Whether the engine is built (`performance.native_relay: auto` runs it then)."""
    return CAPABILITIES.available


def next_session_id() -> int:
    return next(_ids)


def carries_tls() -> bool:
    """Whether the engine can carry TLS sessions on (`relay_tls.c`): it is built with TLS and
    linked with the very OpenSSL Python's ssl module runs, whose connection state it adopts
    (the capability table says both: `proxy.native.capabilities`)."""
    return CAPABILITIES.tls


_TCP_ULP = 31  # linux/tcp.h; the socket module has no name for it


def kernel_tls() -> bool:
    """Whether this kernel has TLS sockets (the `tls` upper layer protocol, kTLS). The engine
    does not use them (it carries TLS in userspace, `relay_tls.c`); this says whether a host
    could. Setting the protocol on a socket not connected fails with ENOTCONN where the kernel
    has it (loading its module if it may) and ENOENT where it has not."""
    with socket.socket() as probe:
        try:
            probe.setsockopt(socket.IPPROTO_TCP, _TCP_ULP, b"tls")
        except OSError as exc:
            return exc.errno == errno.ENOTCONN
    return True


@dataclass(slots=True)
class Handover:
    """What the engine gives back when a session's native phase ends."""

    reason: str  # one of the engine's reasons (`_relay.capabilities()["reasons"]`)
    detail: str  # the message to log for a closing reason
    client: bytes  # bytes read from the client and not forwarded, from a frame boundary on
    upstream: bytes  # bytes read from the upstream and not forwarded, from a frame boundary on
    in_flight: list[tuple[int, int, int, float]]  # (corr id, api key, version, received)
    forwarded: int  # requests the engine passed in this phase
    tail: int  # > 0: the first `tail` bytes of `upstream` end the response to the first
    # in-flight entry, whose earlier bytes the engine sent (a Fetch response with leader
    # hints in its top-level tagged fields, which Python rewrites at the same length)
    frame_age: float = -1.0  # >= 0: seconds since the partial request in `client` began,
    # so its frame deadline does not start over in Python


class NativeRelay:
    """One engine for a proxy: a thread of its own, and a trio task that wakes the sessions
    the engine handed back."""

    def __init__(self, metrics: Metrics, memory: MemoryBudget | None = None) -> None:
        """`memory`: the budget the engine's growth is bounded by and counted in (None:
        unbounded, as the sessions' buffers are)."""
        if _relay is None:
            raise RuntimeError("the native relay is not built (no C compiler at install?)")
        if memory is None:
            self._engine = _relay.Engine(LATENCY_BUCKETS)
            self._growth = None
        else:
            self._engine = _relay.Engine(LATENCY_BUCKETS, memory.limit // GROWTH_SHARE)
            self._growth = Holder(memory, always_small=True)
        self._metrics = metrics
        self._waiting: dict[int, trio.Event] = {}
        self._tables: dict[tuple[int, bool, bool], tuple[FilterChain, bytes]] = {}
        # Stamp and fetch plans by the key the engine counts them under: one per chain.
        self._plan_keys: dict[int, int] = {}
        self._plans: dict[int, native_stamp.StampPlan | native_fetch.FetchPlan] = {}
        self._spliced = 0  # the engine's count at the last fold
        # and its counts of bytes through TLS sides, by direction
        self._tls: tuple[int, ...] = (0,) * len(BYTE_DIRECTIONS)
        log.info("native_relay_tls", engine=carries_tls(), kernel_tls=kernel_tls())
        metrics.before_scrape.append(self.fold)

    def table(self, chain: FilterChain, stamp: bool = False, fetch: bool = False) -> bytes:
        """`passable_table(chain, stamp, fetch)`, computed once per chain until
        `forget_tables`."""
        key = (id(chain), stamp, fetch)
        found = self._tables.get(key)
        if found is None or found[0] is not chain:
            found = self._tables[key] = (chain, passable_table(chain, stamp, fetch))
        return found[1]

    def _key(self, plan: native_stamp.StampPlan | native_fetch.FetchPlan) -> int:
        """The key the engine counts a plan's work under: one per chain, as long as it
        lives."""
        key = self._plan_keys.get(id(plan.chain))
        if key is None or self._plans[key].chain is not plan.chain:
            key = self._plan_keys[id(plan.chain)] = len(self._plans) + 1
        self._plans[key] = plan
        return key

    def stamp_plan(self, chain: FilterChain, ctx: SessionContext
                   ) -> tuple[native_stamp.StampPlan, int] | None:
        """The session's stamp plan (see proxy/native/stamp_plan.py) and the key the engine counts
        its work under, or None when its Produce requests go to Python."""
        plan = native_stamp.stamp_plan(chain, ctx)
        if plan is None:
            return None
        return plan, self._key(plan)

    def fetch_plan(self, chain: FilterChain, ctx: SessionContext | None = None
                   ) -> tuple[native_fetch.FetchPlan, int] | None:
        """The session's fetch plan (see proxy/native/fetch_plan.py) and the key the engine counts
        its scans under, or None when its Fetch responses go to Python."""
        plan = native_fetch.fetch_plan(chain, ctx)
        if plan is None:
            return None
        return plan, self._key(plan)

    def forget_tables(self) -> None:
        """The chain's members changed (a reload): every native session comes back to Python
        at its next frame boundary, and returns with a table of what passes now."""
        self._tables.clear()
        for session_id in self._waiting:
            self._engine.stop(session_id)

    async def run(self) -> None:
        """Wake the sessions the engine hands back; runs for the proxy's lifetime."""
        engine = self._engine
        fd = engine.notify_fd
        while True:
            await trio.lowlevel.wait_readable(fd)
            for session_id in engine.events():
                event = self._waiting.get(session_id)
                if event is not None:
                    event.set()

    def close(self) -> None:
        """Stop the engine's thread (once no session is left on it)."""
        self._engine.close()

    async def relay(self, session_id: int, client_fd: int, upstream_fd: int,
                    limits: SessionLimits, table: bytes, *, prefill: bytes = b"",
                    stamp: tuple[native_stamp.StampPlan, int] | None = None,
                    fetch: tuple[native_fetch.FetchPlan, int] | None = None,
                    frame_age: float = 0.0, handover_s: float = 0.0,
                    client_tls: object | None = None,
                    upstream_tls: object | None = None) -> Handover:
        """Run a session natively until the engine hands it back. Cancelled, the session is
        taken back at once (reason "detached"), so its descriptors can be closed safely.
        The engine keeps the session's `limits` as its Python pumps do. With `stamp` (from
        `stamp_plan`) the engine stamps the Produce requests the table marks STAMP; with
        `fetch` (from `fetch_plan`) it scans the Fetch responses the table marks SCAN.
        `frame_age`: seconds since a partial request in `prefill` began (its frame deadline
        runs from then). `handover_s` > 0: the engine hands the session back
        (reason "reauth") at the first frame boundary after that many seconds. `client_tls`,
        `upstream_tls`: a TLS side's `Transport.engine_tls()`; the engine carries its TLS on
        and hands it back as it was (ValueError or TypeError, before anything moved, when it
        cannot: see relay_tls.c)."""
        event = self._waiting[session_id] = trio.Event()
        try:
            self._engine.register(
                session_id, client_fd, upstream_fd, table, limits.max_frame_bytes,
                limits.max_in_flight, BUFFER_SIZE, limits.idle_timeout_s,
                limits.frame_timeout_s, prefill,
                None if stamp is None else (stamp[0].wire, stamp[1], STAMP_BUFFER_SIZE),
                None if fetch is None else (fetch[0].wire, fetch[1], FETCH_BUFFER_SIZE),
                frame_age, handover_s, client_tls, upstream_tls)
            # The engine has what it needs of the plans (their keys count its work): a held
            # session does not keep their objects for the collector to walk.
            del stamp, fetch
            try:
                await event.wait()
            finally:
                state = self._engine.take(session_id)
        finally:
            del self._waiting[session_id]
        self.fold()
        handover = Handover(*state)
        self._metrics.native_handovers.labels(handover.reason).inc()
        return handover

    def stop(self, session_id: int) -> None:
        """Ask a session to come back at its next frame boundary (the proxy drains)."""
        self._engine.stop(session_id)

    def fold(self) -> None:
        """Add what the engine counted since the last fold to the Prometheus metrics."""
        counted, pairs = self._engine.collect()
        m = self._metrics
        for label, n in zip(BYTE_DIRECTIONS, counted, strict=True):
            if n:
                m.bytes.labels(label).inc(n)
        for (api, version), (requests, lat, lat_sum, up, up_sum) in pairs.items():
            metrics = m.for_api(api, version)
            if requests:
                metrics.requests.inc(requests)
            _add(metrics.latency, lat, lat_sum)
            _add(metrics.upstream_latency, up, up_sum)
        for key, counts in self._engine.collect_stamped().items():
            self._plans[key].count(*counts)
        spliced = self._engine.spliced
        if spliced > self._spliced:
            m.native_spliced.inc(spliced - self._spliced)
            self._spliced = spliced
        tls = self._engine.tls_bytes
        for label, n, before in zip(BYTE_DIRECTIONS, tls, self._tls, strict=True):
            if n > before:
                m.native_tls_bytes.labels(label).inc(n - before)
        self._tls = tls
        if self._growth is not None:
            self._growth.set(self._engine.grown)


def _add(series: LatencySeries, counts: tuple[int, ...], total: float) -> None:
    mine = series.counts
    for i, n in enumerate(counts):
        mine[i] += n
    series.sum += total
