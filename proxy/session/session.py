"""One client connection and its upstream connection: two pumps and a correlation table.

Each client connection gets its own upstream connection to the broker its listener stands for,
so correlation ids pass through unchanged (they are unique only per connection, and so they
stay). The table remembers, per correlation id, which API and version a response will answer,
because a Kafka response does not say; acks=0 Produce requests get no entry, as they get no
response. Kafka answers in order on a connection, so a response whose correlation id is not
the oldest outstanding one means the upstream is broken.
"""

from __future__ import annotations

import math
import struct
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import trio

from interceptors.config import ConfigError
from protocol.errors import CodecError
from protocol.fetch_tail import FetchTailFinder, decode_tail, fit_tail, tail_walkable
from protocol.framing import FrameDecoder, FrameTooLarge, frame
from protocol.headers import encode_response_header
from protocol.primitives import Buffer
from proxy.filters.chain import AnswerAndClose, Exchange, Filter, FilterChain, SessionContext
from proxy.limits.connection_guard import (
    FRAME_TIMEOUT,
    IDLE_TIMEOUT,
    ClientDeadlines,
    awaiting_answer,
)
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
from proxy.observability.metrics import ApiMetrics, Metrics
from proxy.security.sasl import SaslError
from proxy.session import wire
from proxy.session.splice import SpliceEOF, Splicer
from proxy.session.transport import Transport
from proxy.upstream.cluster import FrameIO, UpstreamAuthError

log = get_logger("session")

_RECV = 256 * 1024
# Responses from this size on are forwarded as they arrive (see `_stream_start`); smaller ones
# are assembled first, which costs little and lets every filter see them whole.
_STREAM_MIN_BYTES = 64 * 1024
_STREAM_FROM_HEAD = 8  # size prefix and correlation id
_SPLICE_MIN_BYTES = 16 * 1024  # below this, two syscalls and a pipe cost more than a copy
_HEAD = struct.Struct(">ii")
_REAUTH_AT = 0.8  # of the broker's session lifetime, as Kafka's clients do (85-95%)
STAMPING = BUFFER_SIZE + 2 * STAMP_BUFFER_SIZE
"""What a native phase that stamps Produce requests books in the memory budget."""

# A native phase that passed fewer requests than this before handing over means the client
# mostly needs Python: each such phase doubles the reads Python keeps it for (up to the cap),
# so a session that alternates does not pay for a hand-over per request.
_FEW_NATIVE = 8
_MAX_STAY_READS = 64


class _HandBack(Exception):
    """The Python pumps stop: the session goes back to the native relay."""


class SessionClosed(Exception):
    """Ends a session; `reason` is what gets logged, once."""

    def __init__(self, reason: str, level: str = "info", exc: BaseException | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.level = level
        self.exc = exc  # logged with its traceback (level "error": a bug, not bad input)


@dataclass(slots=True)
class InFlight:
    api_key: int
    api_version: int
    received: float
    metrics: ApiMetrics
    exchange: Exchange | None = None
    sent: float = 0.0


class Session:
    """Runs until either side closes, a frame is bad, or the proxy drains."""

    def __init__(
        self,
        client: Transport,
        upstream: Transport,
        ctx: SessionContext,
        chain: FilterChain,
        max_frame_bytes: int,
        max_in_flight: int,
        metrics: Metrics,
        reauthenticate: Callable[[FrameIO], Awaitable[int]] | None = None,
        session_lifetime_ms: int = 0,
        reauth_timeout_s: float = 10.0,
        deadlines: ClientDeadlines | None = None,
        memory: MemoryBudget | None = None,
        native: NativeRelay | None = None,
    ) -> None:
        self.client = client
        self.deadlines = deadlines
        # What this connection holds of the global memory budget: request bytes read and
        # not yet forwarded, response bytes read and not yet sent on.
        self._held_in = memory.holder() if memory is not None else None
        self._held_out = Holder(memory, always_small=True) if memory is not None else None
        self.metrics = metrics
        self._bytes_in = metrics.bytes.labels("client_to_proxy")
        self._bytes_up = metrics.bytes.labels("proxy_to_upstream")
        self._bytes_down = metrics.bytes.labels("upstream_to_proxy")
        self._bytes_out = metrics.bytes.labels("proxy_to_client")
        self.upstream = upstream
        self._client_sock = client.sock
        self._upstream_sock = upstream.sock
        self.ctx = ctx
        self.chain = chain
        self.max_frame_bytes = max_frame_bytes
        self.in_flight: OrderedDict[int, InFlight] = OrderedDict()
        self._slots = trio.Semaphore(max_in_flight)
        self._idle = trio.Event()
        self._idle.set()
        self._recv_scope = trio.CancelScope()
        self._draining = False
        self._reason: SessionClosed | None = None
        # False once splice(2) turned out to be missing, or when either side is TLS.
        self._splice = client.spliceable and upstream.spliceable
        self._splicer: Splicer | None = None  # made on the first splice: two fds per session
        self._reauthenticate = reauthenticate
        self._lifetime_ms = session_lifetime_ms
        self._reauth_timeout_s = reauth_timeout_s
        renew = reauthenticate is not None and session_lifetime_ms > 0
        self._turn: trio.Lock | None = trio.Lock() if renew else None
        self._own_replies: trio.MemorySendChannel[bytes] | None = None
        # Decoders outlive a run of the pumps: the native relay hands bytes back into them.
        self._requests = FrameDecoder(max_frame_bytes)
        self._responses = FrameDecoder(max_frame_bytes)
        self._max_in_flight = max_in_flight
        # The native relay serves plaintext sessions that Herald never speaks on itself.
        self._native = native if (
            native is not None and not client.tls and not upstream.tls and self._turn is None
        ) else None
        self._native_id = next_session_id()
        self._in_native = False
        self._hand_back = False
        self._held_native = Holder(memory) if memory is not None else None
        self._stay = 0  # reads the Python pumps keep the session for before offering it back
        self._tail: tuple[InFlight, bytes] | None = None  # see Handover.tail
        self._stay_left = 0

    async def run(self) -> None:
        try:
            while await self._run_pumps():
                await self._relay_natively()
        except SessionClosed as exc:
            self._close_reason(exc)
        finally:
            with trio.CancelScope(shield=True):
                await self.client.aclose()
                await self.upstream.aclose()
            if self._splicer is not None:
                self._splicer.close()
            if self._held_in is not None:
                self._held_in.release()
                self._held_out.release()
                self._held_native.release()
            self._abandon()
        reason = self._reason
        if reason is not None:
            fields = {
                "reason": reason.reason,
                "client": self.ctx.client_address,
                "client_id": self.ctx.client_id,
                "upstream": self.ctx.upstream_address,
            }
            if reason.level == "error":
                log.error("connection_closed", exc_info=reason.exc, **fields)
            elif reason.level == "warning":
                log.warning("connection_closed", **fields)
            else:
                log.info("connection_closed", **fields)

    async def _run_pumps(self) -> bool:
        """Run the Python pumps; True when they stopped to hand the session to the native
        relay, False when the session is over."""
        self._hand_back = False
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._guard, self._pump_requests, nursery)
            nursery.start_soon(self._guard, self._pump_responses, nursery)
            if self._turn is not None:
                nursery.start_soon(self._guard, self._renew_upstream_session, nursery)
            if self.deadlines is not None:
                nursery.start_soon(self._guard, self._watch_deadlines, nursery)
        return self._hand_back and self._reason is None

    async def _relay_natively(self) -> None:
        """Let the native relay move this session's frames until one needs Python, then take
        its state back. Returns at once when the memory budget has no room for its buffers."""
        native = self._native
        assert native is not None
        stamp = native.stamp_plan(self.chain, self.ctx)
        fetch = native.fetch_plan(self.chain)
        # Its two buffers; stamping, a larger request buffer and the stamped request's;
        # scanning Fetch responses, a larger response buffer (when the budget has no room for
        # those, Python does that work).
        booked = 2 * BUFFER_SIZE
        held = self._held_native
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
                return
            held.set(booked)
        deadlines = self.deadlines
        self._in_native = True
        try:
            state = await native.relay(
                self._native_id, self._client_sock.fileno(), self._upstream_sock.fileno(),
                native.table(self.chain, stamp is not None, fetch is not None),
                self.max_frame_bytes,
                self._max_in_flight,
                deadlines.idle_s if deadlines is not None else math.inf,
                deadlines.frame_s if deadlines is not None else math.inf,
                self._requests.take(), stamp, fetch,
                trio.current_time() - deadlines.frame_started
                if deadlines is not None and deadlines.frame_started != math.inf else 0.0,
            )
        finally:
            self._in_native = False
            if held is not None:
                held.release()
        self._resume(state)

    def _resume(self, state: Handover) -> None:
        """Carry on in Python from where the native relay stopped, or end as it says."""
        reason = state.reason
        if reason not in RESUME:
            if reason in (IDLE_TIMEOUT, FRAME_TIMEOUT):
                self.metrics.connection_limit_hits.labels(reason).inc()
                raise SessionClosed(state.detail, "info" if reason == IDLE_TIMEOUT else "warning")
            level = "warning" if reason.startswith("upstream") else "info"
            raise SessionClosed(state.detail, level)
        self._stay = 0 if state.forwarded >= _FEW_NATIVE else min(
            max(1, 2 * self._stay), _MAX_STAY_READS)
        self._stay_left = self._stay
        self._requests.feed(state.client)
        self._responses.feed(memoryview(state.upstream)[state.tail:])
        for corr, api_key, api_version, received in state.in_flight:
            entry = InFlight(api_key, api_version, received,
                             self.metrics.for_api(api_key, api_version), sent=received)
            if state.tail and self._tail is None:
                self._tail = (entry, state.upstream[:state.tail])  # its response has begun
                continue
            self._slots.acquire_nowait()
            self.in_flight[corr] = entry
        if self.in_flight or self._tail is not None:
            self._idle = trio.Event()
        if self.deadlines is not None:
            self.deadlines.frame_started = math.inf
            self.deadlines.received(0, self._requests.buffered)
            if state.frame_age >= 0 and self._requests.buffered:  # the same frame's clock
                self.deadlines.frame_started = trio.current_time() - state.frame_age
        if self._held_in is not None:
            self._held_in.set(self._requests.buffered)
            self._held_out.set(self._responses.buffered)

    def _abandon(self) -> None:
        """Responses that will never come: let the filters that waited for one finish."""
        for entry in self.in_flight.values():
            exchange = entry.exchange
            if exchange is None:
                continue
            for f in exchange.notes:
                try:
                    f.on_abandoned(self.ctx, exchange)
                except Exception as exc:
                    log.error("filter_error", filter=f.name, error=repr(exc))
        self.in_flight.clear()

    def drain(self) -> None:
        """Stop reading new requests; the session ends once every outstanding one is answered."""
        self._draining = True
        self._recv_scope.cancel()
        if self._in_native:
            self._native.stop(self._native_id)

    async def _guard(self, pump, nursery: trio.Nursery) -> None:  # noqa: ANN001
        """Turn any end of a pump into the end of the session, with one reason to log."""
        try:
            await pump()
        except _HandBack:
            self._hand_back = True
        except SessionClosed as exc:
            self._close_reason(exc)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self._close_reason(SessionClosed(f"socket error: {exc.__class__.__name__}: {exc}"))
        except CodecError as exc:
            self._close_reason(SessionClosed(f"malformed frame: {exc}", "warning"))
        except Exception as exc:  # a bug in a filter must not reach the listener
            self._close_reason(SessionClosed(f"internal error: {exc!r}", "error", exc))
        nursery.cancel_scope.cancel()

    def _close_reason(self, reason: SessionClosed) -> None:
        """Keep the first reason, unless a later one is a bug: that one must reach the log."""
        if self._reason is None or (reason.level == "error" and self._reason.level != "error"):
            self._reason = reason

    async def _pump_requests(self) -> None:
        decoder = self._requests
        drained = False  # the last read came back short
        prefilled = decoder.buffered > 0  # handed back by the native relay: frames first
        while True:
            data, waited = None, True
            handed = prefilled
            if prefilled:
                prefilled = False
                data = b""
            elif not self._draining:
                self._recv_scope = trio.CancelScope()
                with self._recv_scope:
                    if self._held_in is None:
                        data, waited = await self.client.receive(_RECV, drained)
                    else:
                        data, waited = await self._held_in.receive(self.client, _RECV, drained)
            if self._draining:
                await self._idle.wait()
                raise SessionClosed("proxy shutting down")
            if not data and not handed:
                if not self._idle.is_set():
                    # The client half-closed; let outstanding responses (one that is being
                    # streamed included) reach it.
                    await self._idle.wait()
                raise SessionClosed("client closed the connection")
            drained = len(data) < _RECV
            self._bytes_in.inc(len(data))
            try:
                raw, frames = decoder.split(data)
            except FrameTooLarge as exc:
                self.metrics.frames_refused.labels("too_large").inc()
                raise SessionClosed(f"frame too large: {exc}", "warning") from None
            except CodecError as exc:
                self.metrics.frames_refused.labels("malformed").inc()
                raise SessionClosed(f"malformed frame: {exc}", "warning") from None
            if self.deadlines is not None:
                self.deadlines.received(len(frames), decoder.buffered)
            if frames:
                turn = self._turn
                if turn is None:
                    await self._forward_requests(raw, frames)
                else:
                    # Herald's own re-authentication takes turns with the client's requests.
                    try:
                        turn.acquire_nowait()
                    except trio.WouldBlock:
                        await turn.acquire()
                    try:
                        await self._forward_requests(raw, frames)
                    finally:
                        turn.release()
            if self._held_in is not None:
                self._held_in.set(decoder.buffered)
            # A partial frame goes to the engine with the session (it reads the rest), so a
            # client that never pauses between requests still gets back to the engine.
            if self._native is not None and decoder.buffered <= BUFFER_SIZE:
                await self._offer_hand_back()
            if not waited:
                await trio.lowlevel.checkpoint()  # the one scheduling point of this pass

    async def _offer_hand_back(self) -> None:
        """After a read: once every request Python forwarded is answered, the native relay
        takes the session again (nothing Python-handled is in flight then), with the start of
        the next frame if part of it is here."""
        if self._stay_left:
            self._stay_left -= 1
            return
        await self._idle.wait()
        if not self._draining and not self._responses.buffered and not self.in_flight:
            raise _HandBack

    async def _forward_requests(self, raw: bytes, frames: list[memoryview]) -> None:
        """Forward the requests of one read; `frames` are views into `raw`, which holds them
        with their size prefixes. Runs of frames that go out unchanged are sent as the bytes
        that arrived (all of `raw`, usually), without being copied or joined."""
        out = _Outgoing(raw)
        entries: list[InFlight] = []
        for view in frames:
            if out and self._slots.value == 0:
                # About to wait for a free slot: what is queued must go out first, or
                # the responses that would free a slot are never asked for.
                await self._send_upstream(out.take(), entries)
            try:
                payload, entry = await self._request(view)
            except CodecError as exc:
                self.metrics.frames_refused.labels("malformed").inc()
                raise SessionClosed(f"malformed request: {exc}", "warning") from None
            except AnswerAndClose as answer:
                await self._answer_and_close(out.take(), entries, answer)
            out.add(view, payload)
            if entry is not None:
                entries.append(entry)
        if out:
            await self._send_upstream(out.take(), entries)

    async def _renew_upstream_session(self) -> None:
        """KIP-368 for Herald's own credentials: re-authenticate the upstream connection
        before the broker's session lifetime ends, between the client's requests."""
        assert self._reauthenticate is not None and self._turn is not None
        lifetime_ms = self._lifetime_ms
        while lifetime_ms > 0:
            await trio.sleep(lifetime_ms * _REAUTH_AT / 1000)
            async with self._turn:  # no client request goes upstream meanwhile
                await self._idle.wait()  # and every earlier one is answered
                send, receive = trio.open_memory_channel[bytes](16)
                self._own_replies = send
                try:
                    with trio.fail_after(self._reauth_timeout_s):
                        lifetime_ms = await self._reauthenticate(_OwnIO(self.upstream, receive))
                except trio.TooSlowError:
                    raise SessionClosed("re-authentication to the broker timed out",
                                        "warning") from None
                except (UpstreamAuthError, SaslError, ConfigError, CodecError, EOFError) as exc:
                    raise SessionClosed(f"re-authentication to the broker failed: {exc}",
                                        "warning") from None
                finally:
                    self._own_replies = None
            log.info("upstream_reauthenticated", client=self.ctx.client_address,
                      upstream=self.ctx.upstream_address, lifetime_ms=lifetime_ms)

    async def _answer_and_close(
        self, out: list[Buffer], entries: list[InFlight], answer: AnswerAndClose
    ) -> None:
        if out:
            await self._send_upstream(out, entries)
        await self._idle.wait()  # every earlier response goes first
        if answer.body is not None:
            head = answer.head
            payload = bytearray()
            encode_response_header(head.correlation_id, head.api_key, head.api_version, payload)
            payload += answer.body.encode(head.api_version)
            await self.client.send_all(frame(bytes(payload)))
        raise SessionClosed(answer.reason, "warning")

    async def _watch_deadlines(self) -> None:
        assert self.deadlines is not None
        deadlines = self.deadlines
        limit, reason = await deadlines.expired(
            lambda: awaiting_answer(self.in_flight, deadlines.idle_s, self._client_sock))
        self.metrics.connection_limit_hits.labels(limit).inc()
        raise SessionClosed(reason, "info" if limit == IDLE_TIMEOUT else "warning")

    async def _send_upstream(self, out: list[Buffer], entries: list[InFlight]) -> None:
        data = out[0] if len(out) == 1 else b"".join(out)
        # Stamped before sending: the response may be read while send_all is still yielding.
        now = time.monotonic()
        for entry in entries:
            entry.sent = now
        out.clear()
        entries.clear()
        await self.upstream.send_all(data)
        self._bytes_up.inc(len(data))

    async def _request(self, view: memoryview) -> tuple[Buffer, InFlight | None]:
        """Handle one request; return what to forward (`view` itself when unchanged)."""
        received = time.monotonic()
        head = wire.parse_request_header(view)
        if head.client_id is not None:
            self.ctx.client_id = head.client_id
        filters = self.chain.for_request(head.api_key, head.api_version)
        exchange = None
        payload: Buffer = view
        if filters:
            exchange = Exchange()
            payload = bytes(view)  # members keep what they decode: no views into `raw`
            offset, msg = wire.decode_request(head, payload)
            changed = False
            try:
                for f in filters:
                    changed |= await f.on_request(
                        self.ctx, exchange, head.api_key, head.api_version, msg
                    )
            except AnswerAndClose as answer:
                answer.head = head
                raise
            payload = wire.encode_request(head, payload, offset, msg) if changed else view
        api_metrics = self.metrics.for_api(head.api_key, head.api_version)
        api_metrics.requests.inc()
        entry = None
        if wire.expects_response(head, payload):
            corr = head.correlation_id
            if corr in self.in_flight:
                raise SessionClosed(f"correlation id {corr} reused while in flight", "warning")
            try:
                self._slots.acquire_nowait()
            except trio.WouldBlock:
                await self._slots.acquire()
            entry = InFlight(
                head.api_key, head.api_version, received, api_metrics,
                exchange if exchange is not None and exchange.notes else None,
            )
            self.in_flight[corr] = entry
            if self._idle.is_set():
                self._idle = trio.Event()
        return payload, entry

    async def _pump_responses(self) -> None:
        if self._tail is not None:  # a response the native relay began: its end goes first
            entry, tail = self._tail
            self._tail = None
            filters = self._response_filters(entry)
            await self._send_tail(entry, filters, entry.exchange or Exchange(), tail)
            entry.metrics.latency.observe(time.monotonic() - entry.received)
            if not self.in_flight:
                self._idle.set()
        decoder = self._responses
        drained = False  # the last read came back short
        prefilled = decoder.buffered > 0  # handed back by the native relay: frames first
        while True:
            if prefilled:
                prefilled = False
                data, waited = b"", True
            else:
                if self._held_out is None:
                    data, waited = await self.upstream.receive(_RECV, drained)
                else:
                    data, waited = await self._held_out.receive(self.upstream, _RECV, drained)
                if not data:
                    raise SessionClosed("upstream closed the connection", "warning")
                drained = len(data) < _RECV
                self._bytes_down.inc(len(data))
            first = True
            while data or first:
                first = False
                try:
                    raw, frames = decoder.split(data)
                except CodecError as exc:
                    raise SessionClosed(f"upstream sent a bad frame: {exc}", "warning") from None
                data = b""
                if frames:
                    own = self._own_replies
                    if own is None:
                        await self._forward_responses(raw, frames)
                    else:  # answers to Herald's own re-authentication
                        for reply in frames:
                            own.send_nowait(bytes(reply))
                if decoder.buffered >= _STREAM_FROM_HEAD:
                    stream = await self._stream_start(decoder)
                    if stream is not None:
                        data = await self._stream_rest(stream)
            if self._held_out is not None:
                self._held_out.set(decoder.buffered)
            if not self.in_flight:
                self._idle.set()
            if not waited:
                await trio.lowlevel.checkpoint()

    async def _forward_responses(self, raw: bytes, frames: list[memoryview]) -> None:
        out = _Outgoing(raw)
        answered: list[InFlight] = []
        for view in frames:
            payload, entry = await self._response(view)
            out.add(view, payload)
            answered.append(entry)
        pieces = out.take()
        data = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        await self.client.send_all(data)
        self._bytes_out.inc(len(data))
        now = time.monotonic()
        for entry in answered:
            entry.metrics.latency.observe(now - entry.received)

    async def _stream_start(self, decoder: FrameDecoder) -> _Stream | None:
        """Start forwarding a large response before it is complete, if nothing must see it whole.

        Fetch responses are most of a consumer's traffic and can be megabytes; assembling each
        one here before sending it would add its whole transfer time to every fetch.
        """
        head = decoder.peek(8)
        (size, corr) = _HEAD.unpack(head)
        if size < _STREAM_MIN_BYTES:
            return None
        entry = self._oldest(corr)
        filters = self._response_filters(entry)
        finder = None
        if filters:
            tail_only = all(f.tail_only(entry.api_key, entry.api_version) for f in filters)
            if not tail_only or not tail_walkable(entry.api_key, entry.api_version):
                return None
            finder = FetchTailFinder(size)
        self._retire(corr, entry)
        self.metrics.responses_streamed.inc()
        stream = _Stream(entry, size + 4, finder, filters, entry.exchange or Exchange())
        await self._stream_more(stream, decoder.take(), start=4)
        return stream

    async def _stream_rest(self, stream: _Stream) -> bytes:
        """Forward the rest of a streamed frame; return what arrived after it.

        Bytes the filters will not read (all of them, or a Fetch response's record data) are
        spliced from socket to socket when the platform can; the rest is received and fed.
        """
        finder = stream.finder
        while stream.left:
            n = stream.left if finder is None else min(stream.left, finder.skippable())
            if n >= _SPLICE_MIN_BYTES and self._splice:
                if self._splicer is None:
                    self._splicer = Splicer.create()
                    if self._splicer is None:
                        self._splice = False
                        continue
                try:
                    await self._splicer.forward(self._upstream_sock, self._client_sock, n)
                except SpliceEOF:
                    raise SessionClosed("upstream closed the connection", "warning") from None
                if finder is not None:
                    finder.skipped(n)
                stream.left -= n
                self._bytes_down.inc(n)
                self._bytes_out.inc(n)
                continue
            data, _ = await self.upstream.receive(_RECV)
            if not data:
                raise SessionClosed("upstream closed the connection", "warning")
            self._bytes_down.inc(len(data))
            used = await self._stream_more(stream, data)
            if used < len(data):
                rest = data[used:]
                break
        else:
            rest = b""
        if finder is not None:
            await self._stream_tail(stream)
        entry = stream.entry
        entry.metrics.latency.observe(time.monotonic() - entry.received)
        return rest

    async def _stream_more(self, stream: _Stream, data: bytes, start: int = 0) -> int:
        """Forward what of `data` belongs to the streamed frame; return how much that was.

        `start` bytes of `data` (the size prefix, in the first chunk) are not the finder's to
        see. Bytes from the top-level tagged fields on are held back until the frame is
        complete, then rewritten at the same length.
        """
        used = min(stream.left, len(data))
        part = data if used == len(data) else data[:used]
        stream.left -= used
        finder = stream.finder
        if finder is not None:
            cut = start + finder.feed(part[start:] if start else part)
            if cut < used:
                stream.tail += part[cut:]
                part = part[:cut]
        if part:
            await self.client.send_all(part)
            self._bytes_out.inc(len(part))
        return used

    async def _stream_tail(self, stream: _Stream) -> None:
        if not stream.finder.done:
            raise SessionClosed("upstream sent a Fetch response with no end", "warning")
        await self._send_tail(stream.entry, stream.filters, stream.exchange, bytes(stream.tail))

    async def _send_tail(self, entry: InFlight, filters: tuple[Filter, ...], exchange: Exchange,
                         tail: bytes) -> None:
        """The top-level tagged fields of a Fetch response whose earlier bytes went out as
        they arrived: the filters read them, and they leave at the same length."""
        msg = decode_tail(tail, entry.api_version)
        if await self._run_response_filters(filters, exchange, entry, msg):
            tail = fit_tail(msg, entry.api_version, len(tail))
        if tail:
            await self.client.send_all(tail)
            self._bytes_out.inc(len(tail))

    def _oldest(self, corr: int) -> InFlight:
        """The in-flight entry a response answers, which must be the oldest one."""
        oldest = next(iter(self.in_flight), None)
        if corr != oldest:
            raise SessionClosed(
                f"upstream answered correlation id {corr}, expected {oldest}", "warning"
            )
        return self.in_flight[corr]

    def _retire(self, corr: int, entry: InFlight) -> None:
        """The response to `entry` has begun: free its slot and time the broker."""
        del self.in_flight[corr]
        self._slots.release()
        entry.metrics.upstream_latency.observe(time.monotonic() - entry.sent)

    def _response_filters(self, entry: InFlight) -> tuple[Filter, ...]:
        """The members that see this response: those that want its API and version, and those
        that left a note on its request."""
        filters = self.chain.for_response(entry.api_key, entry.api_version)
        if entry.exchange is not None:
            filters += tuple(f for f in entry.exchange.notes if f not in filters)
        return filters

    async def _run_response_filters(
        self, filters: tuple[Filter, ...], exchange: Exchange, entry: InFlight, msg: object
    ) -> bool:
        changed = False
        for f in filters:
            changed |= await f.on_response(
                self.ctx, exchange, entry.api_key, entry.api_version, msg
            )
        return changed

    async def _response(self, payload: Buffer) -> tuple[Buffer, InFlight]:
        """Handle one response; return what to send on (`payload` itself when unchanged)."""
        corr = wire.response_correlation_id(payload)
        entry = self._oldest(corr)
        self._retire(corr, entry)
        filters = self._response_filters(entry)
        if filters:
            offset, msg = wire.decode_response(entry.api_key, entry.api_version, payload)
            if await self._run_response_filters(
                filters, entry.exchange or Exchange(), entry, msg
            ):
                payload = wire.encode_response(
                    entry.api_key, entry.api_version, payload, offset, msg
                )
        return payload, entry


class _OwnIO:
    """Herald's own exchange on a session's upstream connection: its replies arrive through
    the response pump, which owns the reading side."""

    def __init__(self, upstream: Transport, replies: trio.MemoryReceiveChannel[bytes]) -> None:
        self.upstream = upstream
        self.replies = replies

    async def send_all(self, data: bytes) -> None:
        await self.upstream.send_all(data)

    async def next_frame(self) -> bytes:
        return await self.replies.receive()


@dataclass(slots=True)
class _Stream:
    """A response being forwarded as it arrives."""

    entry: InFlight
    left: int  # bytes of the frame (size prefix included) still to come
    finder: FetchTailFinder | None  # set when filters read the tail
    filters: tuple[Filter, ...]
    exchange: Exchange
    tail: bytearray = field(default_factory=bytearray)


_frame_size = struct.Struct(">i").pack
"""The size prefix of a frame, sent beside its payload so the two are joined in one copy."""


class _Outgoing:
    """The frames of one read on their way out, in order: runs of unchanged frames as slices
    of the bytes that arrived (all of them, usually: then nothing is copied), changed ones as
    a new size prefix and payload."""

    __slots__ = ("_raw", "_pieces", "_sent", "_pos")

    def __init__(self, raw: bytes) -> None:
        self._raw = raw
        self._pieces: list[Buffer] = []
        self._sent = 0  # start in `raw` of the unchanged run not yet in `_pieces`
        self._pos = 0  # start in `raw` of the next frame's size prefix

    def add(self, view: memoryview, payload: Buffer) -> None:
        end = self._pos + 4 + len(view)
        if payload is not view:
            self._flush()
            self._pieces += (_frame_size(len(payload)), payload)
            self._sent = end
        self._pos = end

    def _flush(self) -> None:
        if self._sent < self._pos:
            raw = self._raw
            whole = self._sent == 0 and self._pos == len(raw)
            self._pieces.append(raw if whole else memoryview(raw)[self._sent:self._pos])
            self._sent = self._pos

    def __bool__(self) -> bool:
        return bool(self._pieces) or self._sent < self._pos

    def take(self) -> list[Buffer]:
        """What is queued, handed out and forgotten."""
        self._flush()
        pieces, self._pieces = self._pieces, []
        return pieces

