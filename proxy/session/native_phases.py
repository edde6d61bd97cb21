"""A session's native phases: handing it to the native relay and taking it back.

A session that Herald never speaks on itself, plaintext or TLS, spends most of its life on the
native relay's engine thread (see `proxy.native.relay`), which forwards the frames no filter wants
without waking trio. The first frame that needs Python ends the phase: the engine hands back
the bytes it read and did not forward, and the requests it forwarded that wait for an answer,
and the Python pumps carry on from exactly there. Once nothing Python handles is in flight,
the request pump offers the session back (`offer_hand_back`), and the next phase begins.

A TLS side goes with its connection: the engine reads and writes through the same OpenSSL
state the handshake here made (`proxy/native/relay_tls.c`), and hands it back as it was. While
the engine holds it, nothing here touches that connection: the session waits in `relay`.
"""

from __future__ import annotations

import math

import trio

from proxy.filters.chain import FilterChain, SessionContext
from proxy.limits.connection_guard import FRAME_TIMEOUT, IDLE_TIMEOUT, ClientDeadlines
from proxy.limits.memory_budget import Holder, MemoryBudget
from proxy.native.relay import (
    BUFFER_SIZE,
    FETCH_BUFFER_SIZE,
    RESUME,
    STAMP_BUFFER_SIZE,
    Handover,
    NativeRelay,
    next_session_id,
)
from proxy.observability.logs import get_logger
from proxy.observability.metrics import Metrics
from proxy.session.closing import SessionClosed
from proxy.session.correlation import CorrelationTable, InFlight
from proxy.session.lanes import Lane
from proxy.session.transport import Transport

STAMPING = BUFFER_SIZE + 2 * STAMP_BUFFER_SIZE
"""What a native phase that stamps Produce requests books in the memory budget."""

# A native phase that passed fewer requests than this before handing over means the client
# mostly needs Python: each such phase doubles the reads Python keeps it for (up to the cap),
# so a session that alternates does not pay for a hand-over per request.
_FEW_NATIVE = 8
_MAX_STAY_READS = 64

log = get_logger("native_relay")


class HandBack(Exception):
    """The Python pumps stop: the session goes back to the native relay."""


class NativePhases:
    """Moves one session between the native relay and its Python pumps.

    Shares with the pumps what a hand-over carries: both lanes (their buffered bytes and what
    those hold of the memory budget), the correlation table and the client's deadlines.
    """

    def __init__(
        self,
        relay: NativeRelay,
        client: Transport,
        upstream: Transport,
        ctx: SessionContext,
        chain: FilterChain,
        metrics: Metrics,
        requests: Lane,
        responses: Lane,
        calls: CorrelationTable,
        max_frame_bytes: int,
        max_in_flight: int,
        deadlines: ClientDeadlines | None,
        memory: MemoryBudget | None,
    ) -> None:
        self._relay = relay
        self._id = next_session_id()
        self._client_sock = client.sock
        self._upstream_sock = upstream.sock
        self._client_tls = client.engine_tls()
        self._upstream_tls = upstream.engine_tls()
        # The engine would not take the session's TLS: Python keeps it. A TLS side without its
        # connection object (closed) must never reach the engine, which would take it for a
        # plaintext one.
        self._refused = (client.tls and self._client_tls is None) or (
            upstream.tls and self._upstream_tls is None)
        self._ctx = ctx
        self._chain = chain
        self._metrics = metrics
        self._requests = requests
        self._responses = responses
        self._calls = calls
        self._max_frame_bytes = max_frame_bytes
        self._max_in_flight = max_in_flight
        self._deadlines = deadlines
        self._held = Holder(memory) if memory is not None else None  # the engine's buffers
        self._in_native = False
        self._draining = False
        self._stay = 0  # reads the Python pumps keep the session for before offering it back
        self._stay_left = 0

    async def relay(self) -> tuple[InFlight, bytes] | None:
        """Let the native relay move this session's frames until one needs Python, then take
        its state back. Returns at once when the memory budget has no room for its buffers.

        Returns the response the engine began and Python must end (see `Handover.tail`):
        its in-flight entry and the bytes that end it.
        """
        native = self._relay
        stamp = native.stamp_plan(self._chain, self._ctx)
        fetch = native.fetch_plan(self._chain)
        # Its two buffers; stamping, a larger request buffer and the stamped request's;
        # scanning Fetch responses, a larger response buffer (when the budget has no room for
        # those, Python does that work).
        booked = 2 * BUFFER_SIZE
        held = self._held
        if held is not None:
            if stamp is not None and held.room(STAMPING) >= STAMPING:
                booked = STAMPING
            else:
                stamp = None
            scanning = booked - BUFFER_SIZE + FETCH_BUFFER_SIZE
            if fetch is not None and held.room(scanning) >= scanning:
                booked = scanning
            else:
                fetch = None
            if held.room(booked) < booked:
                return None
            held.set(booked)
        deadlines = self._deadlines
        prefill = self._requests.decoder.take()
        self._in_native = True
        try:
            state = await native.relay(
                self._id, self._client_sock.fileno(), self._upstream_sock.fileno(),
                native.table(self._chain, stamp is not None, fetch is not None),
                self._max_frame_bytes,
                self._max_in_flight,
                deadlines.idle_s if deadlines is not None else math.inf,
                deadlines.frame_s if deadlines is not None else math.inf,
                prefill, stamp, fetch,
                trio.current_time() - deadlines.frame_started
                if deadlines is not None and deadlines.frame_started != math.inf else 0.0,
                client_tls=self._client_tls, upstream_tls=self._upstream_tls,
            )
        except (ValueError, TypeError) as exc:
            if self._client_tls is None and self._upstream_tls is None:
                raise
            # The engine would not carry this TLS connection on (relay_tls.c checks it before
            # anything moves): the session stays in Python, with the bytes it had.
            self._refused = True
            self._requests.decoder.feed(prefill)
            log.warning("native_relay_tls_refused", reason=str(exc),
                        client=self._ctx.client_address)
            return None
        finally:
            self._in_native = False
            if held is not None:
                held.release()
        return self._resume(state)

    def _resume(self, state: Handover) -> tuple[InFlight, bytes] | None:
        """Carry on in Python from where the native relay stopped, or end as it says."""
        reason = state.reason
        if reason not in RESUME:
            if reason in (IDLE_TIMEOUT, FRAME_TIMEOUT):
                self._metrics.connection_limit_hits.labels(reason).inc()
                raise SessionClosed(state.detail, "info" if reason == IDLE_TIMEOUT else "warning")
            level = "warning" if reason.startswith("upstream") else "info"
            raise SessionClosed(state.detail, level)
        self._stay = 0 if state.forwarded >= _FEW_NATIVE else min(
            max(1, 2 * self._stay), _MAX_STAY_READS)
        self._stay_left = self._stay
        self._requests.decoder.feed(state.client)
        self._responses.decoder.feed(memoryview(state.upstream)[state.tail:])
        begun = None
        for corr, api_key, api_version, received in state.in_flight:
            entry = InFlight(api_key, api_version, received,
                             self._metrics.for_api(api_key, api_version), sent=received)
            if state.tail and begun is None:
                begun = (entry, state.upstream[:state.tail])  # its response has begun
                continue
            self._calls.restore(corr, entry)
        if self._calls.entries or begun is not None:
            self._calls.busy()
        deadlines = self._deadlines
        if deadlines is not None:
            buffered = self._requests.decoder.buffered
            deadlines.frame_started = math.inf
            deadlines.received(0, buffered)
            if state.frame_age >= 0 and buffered:  # the same frame's clock
                deadlines.frame_started = trio.current_time() - state.frame_age
        self._requests.book()
        self._responses.book()
        return begun

    async def offer_hand_back(self) -> None:
        """After a read: once every request Python forwarded is answered, the native relay
        takes the session again (nothing Python-handled is in flight then), with the start of
        the next frame if part of it is here. Raises `HandBack` to stop the pumps for that."""
        # A partial frame goes to the engine with the session (it reads the rest), so a
        # client that never pauses between requests still gets back to the engine.
        if self._requests.decoder.buffered > BUFFER_SIZE or self._refused:
            return
        if self._stay_left:
            self._stay_left -= 1
            return
        await self._calls.wait_idle()
        if not self._draining and not self._responses.decoder.buffered and not self._calls.entries:
            raise HandBack

    def drain(self) -> None:
        """The proxy drains: the engine stops its phase at the next frame boundary, and the
        session is not offered to it again."""
        self._draining = True
        if self._in_native:
            self._relay.stop(self._id)

    def release(self) -> None:
        """The session is over: give back what the engine's buffers held of the budget."""
        if self._held is not None:
            self._held.release()
