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

import trio

from protocol.contracts import native_relay
from protocol.frame_headers import peek_request_header
from proxy.limits.memory_budget import Holder
from proxy.native.path_choice import DECLINED_BY_ENGINE, RESPONSE_BY_ENGINE
from proxy.native.relay import (
    BUFFER_SIZE,
    Handover,
    next_session_id,
)
from proxy.observability.logs import get_logger
from proxy.session.core import SessionCore, engine_ended
from proxy.session.correlation import InFlight
from proxy.session.environment import SessionEnvironment
from proxy.session.reauth import UpstreamReauth
from proxy.session.wiring import Wiring

log = get_logger("native_relay")


def _ending_api(state: Handover) -> int | None:
    """The API key of the frame that ended a phase: the request the engine handed over (the
    first of the client's bytes), or the request whose response it did (the oldest in
    flight); None when neither is known."""
    if state.reason == RESPONSE_BY_ENGINE:
        return state.in_flight[0][1] if state.in_flight else None
    if state.reason == DECLINED_BY_ENGINE and len(state.client) >= 8:
        return peek_request_header(state.client, 4)[0]  # after the size prefix
    return None


class HandBack(Exception):
    """The Python pumps stop: the session goes back to the native relay."""


class NativePhases:
    """Moves one session between the native relay and its Python pumps.

    Shares with the pumps what a hand-over carries: both lanes (their buffered bytes and what
    those hold of the memory budget) and the core (its correlation queue, the client's
    deadlines, and the state that says when the session may go and what it comes back as).
    """

    def __init__(self, env: SessionEnvironment, wiring: Wiring,
                 reauth: UpstreamReauth | None = None) -> None:
        """`env.native` is the engine the session moves to (an environment without one has
        no native phases)."""
        relay = env.native
        if relay is None:
            raise ValueError("native phases need the proxy's native relay")
        self._relay = relay
        path = wiring.path
        self._path = path
        self._reauth = reauth
        self._id = next_session_id()
        client, upstream = wiring.client, wiring.upstream
        self._client_sock = client.sock
        self._upstream_sock = upstream.sock
        self._client_tls, self._upstream_tls = path.engine_tls(client, upstream)
        self._ctx = wiring.ctx
        self._chain = env.chain
        self._metrics = env.metrics
        self._limits = env.limits
        self._requests = wiring.requests
        self._responses = wiring.responses
        self._calls = wiring.calls
        self._core = wiring.core
        memory = env.memory
        self._held = Holder(memory) if memory is not None else None  # the engine's buffers

    async def relay(self) -> tuple[InFlight, bytes] | None:
        """Let the native relay move this session's frames until one needs Python, then take
        its state back. Returns at once when the memory budget has no room for its buffers, or
        Herald's own re-authentication is due.

        Returns the response the engine began and Python must end (see `Handover.tail`):
        its in-flight entry and the bytes that end it.
        """
        core = self._core
        if not core.begin_native():
            return None  # drained meanwhile: the pumps end the session
        try:
            return await self._phase(core)
        finally:
            core.native_returned()

    async def _phase(self, core: SessionCore[InFlight]) -> tuple[InFlight, bytes] | None:
        native = self._relay
        handover_s = 0.0
        if self._reauth is not None:
            left = self._path.handover_s(self._reauth.due, trio.current_time())
            if left is None:
                return None
            handover_s = left
        held = self._held
        phase = self._path.phase(native, self._chain, self._ctx, held, BUFFER_SIZE)
        if phase is None:
            return None
        if held is not None:
            held.set(phase.booked)
        prefill = self._requests.decoder.take()
        try:
            # The limits hold the deadlines this session keeps (infinite when it keeps none).
            relaying = native.relay(
                self._id, self._client_sock.fileno(), self._upstream_sock.fileno(),
                self._limits, phase.table, prefill=prefill, stamp=phase.stamp,
                fetch=phase.fetch,
                frame_age=core.frame_age(trio.current_time()),
                handover_s=handover_s, client_tls=self._client_tls,
                upstream_tls=self._upstream_tls,
            )
            # The plans live on in the engine's counters, not in every session it holds.
            del phase
            state = await relaying
        except (ValueError, TypeError) as exc:
            if self._client_tls is None and self._upstream_tls is None:
                raise
            # The engine would not carry this TLS connection on (relay_tls.c checks it before
            # anything moves): the session stays in Python, with the bytes it had.
            self._path.tls_refused()
            self._requests.decoder.feed(prefill)
            log.warning("native_relay_tls_refused", reason=str(exc),
                        client=self._ctx.client_address)
            return None
        finally:
            if held is not None:
                held.release()
        return self._resume(state)

    def _resume(self, state: Handover) -> tuple[InFlight, bytes] | None:
        """Carry on in Python from where the native relay stopped, or end as it says."""
        reason = state.reason
        kind = self._path.ended(reason, state.forwarded, _ending_api(state))
        if kind != native_relay.RESUME:
            close = engine_ended(state.detail, reason if kind == native_relay.DEADLINE else None,
                                 kind == native_relay.UPSTREAM)
            if close.limit is not None:
                self._metrics.connection_limit_hits.labels(close.limit).inc()
            raise close.error()
        if reason == RESPONSE_BY_ENGINE and state.in_flight:  # the oldest request's answer
            _, api_key, api_version, _ = state.in_flight[0]
            self._path.response_declined(api_key, api_version)
        self._requests.decoder.feed(state.client)
        # `feed` appends to a bytearray, which takes any buffer, though it is annotated with
        # bytes only: the view saves copying the rest of what the engine read.
        unread = memoryview(state.upstream)[state.tail:]
        self._responses.decoder.feed(unread)  # type: ignore[arg-type]
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
        # The same frame's clock carries on (it only counts when the deadlines are watched).
        self._core.resume_frame(self._requests.decoder.buffered, state.frame_age,
                                trio.current_time())
        self._requests.book()
        self._responses.book()
        return begun

    async def offer_hand_back(self) -> None:
        """After a read: once every request Python forwarded is answered, the native relay
        takes the session again (nothing Python-handled is in flight then), with the start of
        the next frame if part of it is here. Raises `HandBack` to stop the pumps for that."""
        # A partial frame goes to the engine with the session (it reads the rest), so a
        # client that never pauses between requests still gets back to the engine.
        decoder = self._requests.decoder
        if not self._path.may_offer(decoder.buffered, BUFFER_SIZE, decoder.head(8)):
            return
        await self._calls.wait_idle()
        reauth = self._reauth
        if reauth is not None and reauth.busy(trio.current_time()):
            self._path.reauth_due()
            return  # the session comes back after it, at a later read
        if self._core.hand_over(self._responses.decoder.buffered):
            raise HandBack

    def stop(self) -> None:
        """The proxy drains while the engine holds the session: it stops its phase at the next
        frame boundary (the core sees to it that the session is not offered to it again)."""
        self._relay.stop(self._id)

    def release(self) -> None:
        """The session is over: give back what the engine's buffers held of the budget."""
        if self._held is not None:
            self._held.release()
