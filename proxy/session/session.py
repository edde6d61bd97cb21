"""One client connection and its upstream connection: two pumps and a correlation table.

Each client connection gets its own upstream connection to the broker its listener stands for,
so correlation ids pass through unchanged (they are unique only per connection, and so they
stay). The table remembers, per correlation id, which API and version a response will answer,
because a Kafka response does not say; acks=0 Produce requests get no entry, as they get no
response. Kafka answers in order on a connection, so a response whose correlation id is not
the oldest outstanding one means the upstream is broken.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable

import trio

from protocol.errors import CodecError
from protocol.framing import FrameDecoder, FrameTooLarge, frame
from protocol.headers import encode_response_header
from protocol.primitives import Buffer
from proxy.filters.chain import AnswerAndClose, Exchange, FilterChain, SessionContext
from proxy.limits.connection_guard import IDLE_TIMEOUT, ClientDeadlines
from proxy.limits.memory_budget import Holder, MemoryBudget
from proxy.native.relay import (
    NativeRelay,
)
from proxy.observability.logs import get_logger
from proxy.observability.metrics import Metrics
from proxy.session import wire
from proxy.session.closing import SessionClosed
from proxy.session.correlation import CorrelationTable, InFlight
from proxy.session.lanes import RECV, Lane
from proxy.session.native_phases import HandBack, NativePhases
from proxy.session.outgoing import Outgoing
from proxy.session.reauth import UpstreamReauth
from proxy.session.response_filters import ResponseFilters
from proxy.session.splice import Splicer
from proxy.session.streaming import ResponseStreamer
from proxy.session.transport import Transport
from proxy.upstream.cluster import FrameIO

log = get_logger("session")

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
        self.metrics = metrics
        # What this connection holds of the global memory budget: request bytes read and
        # not yet forwarded, response bytes read and not yet sent on.
        self._requests = Lane(
            FrameDecoder(max_frame_bytes), memory.holder() if memory is not None else None,
            metrics.bytes.labels("client_to_proxy"), metrics.bytes.labels("proxy_to_upstream"),
        )
        self._responses = Lane(
            FrameDecoder(max_frame_bytes),
            Holder(memory, always_small=True) if memory is not None else None,
            metrics.bytes.labels("upstream_to_proxy"), metrics.bytes.labels("proxy_to_client"),
        )
        self.upstream = upstream
        self.ctx = ctx
        self.chain = chain
        self._calls = CorrelationTable(max_in_flight)
        self._recv_scope = trio.CancelScope()
        self._draining = False
        self._reason: SessionClosed | None = None
        self._filters = ResponseFilters(chain, ctx)
        self._streamer = ResponseStreamer(client, upstream, self._responses, self._calls,
                                          self._filters, metrics.responses_streamed)
        self._reauth = UpstreamReauth(
            upstream, ctx, self._calls, reauthenticate, session_lifetime_ms, reauth_timeout_s,
        ) if reauthenticate is not None and session_lifetime_ms > 0 else None
        # The native relay serves plaintext sessions that Herald never speaks on itself.
        self._native = NativePhases(
            native, client, upstream, ctx, chain, metrics, self._requests, self._responses,
            self._calls, max_frame_bytes, max_in_flight, deadlines, memory,
        ) if (
            native is not None and not client.tls and not upstream.tls and self._reauth is None
        ) else None
        self._hand_back = False
        self._tail: tuple[InFlight, bytes] | None = None  # see Handover.tail

    @property
    def in_flight(self) -> OrderedDict[int, InFlight]:
        """The requests awaiting a response, oldest first."""
        return self._calls.entries

    @property
    def _splicer(self) -> Splicer | None:
        """The pipe large responses are spliced through, once one was."""
        return self._streamer.splicer

    async def run(self) -> None:
        try:
            while await self._run_pumps():
                assert self._native is not None  # only its offer stops the pumps to hand back
                self._tail = await self._native.relay()
        except SessionClosed as exc:
            self._close_reason(exc)
        finally:
            with trio.CancelScope(shield=True):
                await self.client.aclose()
                await self.upstream.aclose()
            self._streamer.close()
            self._requests.release()
            self._responses.release()
            if self._native is not None:
                self._native.release()
            self._calls.abandon(self.ctx)
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
            if self._reauth is not None:
                nursery.start_soon(self._guard, self._reauth.run, nursery)
            if self.deadlines is not None:
                nursery.start_soon(self._guard, self._watch_deadlines, nursery)
        return self._hand_back and self._reason is None

    def drain(self) -> None:
        """Stop reading new requests; the session ends once every outstanding one is answered."""
        self._draining = True
        self._recv_scope.cancel()
        if self._native is not None:
            self._native.drain()

    async def _guard(self, pump, nursery: trio.Nursery) -> None:  # noqa: ANN001
        """Turn any end of a pump into the end of the session, with one reason to log."""
        try:
            await pump()
        except HandBack:
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
        lane = self._requests
        decoder = lane.decoder
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
                    data, waited = await lane.receive(self.client, drained)
            if self._draining:
                await self._calls.wait_idle()
                raise SessionClosed("proxy shutting down")
            if not data and not handed:
                if not self._calls.idle:
                    # The client half-closed; let outstanding responses (one that is being
                    # streamed included) reach it.
                    await self._calls.wait_idle()
                raise SessionClosed("client closed the connection")
            drained = len(data) < RECV
            lane.read.inc(len(data))
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
                turn = self._reauth.turn if self._reauth is not None else None
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
            lane.book()
            if self._native is not None:
                await self._native.offer_hand_back()
            if not waited:
                await trio.lowlevel.checkpoint()  # the one scheduling point of this pass

    async def _forward_requests(self, raw: bytes, frames: list[memoryview]) -> None:
        """Forward the requests of one read; `frames` are views into `raw`, which holds them
        with their size prefixes. Runs of frames that go out unchanged are sent as the bytes
        that arrived (all of `raw`, usually), without being copied or joined."""
        out = Outgoing(raw)
        entries: list[InFlight] = []
        for view in frames:
            if out and self._calls.full:
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

    async def _answer_and_close(
        self, out: list[Buffer], entries: list[InFlight], answer: AnswerAndClose
    ) -> None:
        if out:
            await self._send_upstream(out, entries)
        await self._calls.wait_idle()  # every earlier response goes first
        if answer.body is not None:
            head = answer.head
            payload = bytearray()
            encode_response_header(head.correlation_id, head.api_key, head.api_version, payload)
            payload += answer.body.encode(head.api_version)
            await self.client.send_all(frame(bytes(payload)))
        raise SessionClosed(answer.reason, "warning")

    async def _watch_deadlines(self) -> None:
        assert self.deadlines is not None
        limit, reason = await self.deadlines.expired(lambda: bool(self._calls.entries))
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
        self._requests.sent.inc(len(data))

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
            entry = InFlight(
                head.api_key, head.api_version, received, api_metrics,
                exchange if exchange is not None and exchange.notes else None,
            )
            await self._calls.add(head.correlation_id, entry)
        return payload, entry

    async def _pump_responses(self) -> None:
        if self._tail is not None:  # a response the native relay began: its end goes first
            entry, tail = self._tail
            self._tail = None
            await self._streamer.finish_begun(entry, tail)
            self._calls.settle()
        lane = self._responses
        decoder = lane.decoder
        drained = False  # the last read came back short
        prefilled = decoder.buffered > 0  # handed back by the native relay: frames first
        while True:
            if prefilled:
                prefilled = False
                data, waited = b"", True
            else:
                data, waited = await lane.receive(self.upstream, drained)
                if not data:
                    raise SessionClosed("upstream closed the connection", "warning")
                drained = len(data) < RECV
                lane.read.inc(len(data))
            first = True
            while data or first:
                first = False
                try:
                    raw, frames = decoder.split(data)
                except CodecError as exc:
                    raise SessionClosed(f"upstream sent a bad frame: {exc}", "warning") from None
                # Answers to Herald's own re-authentication are not the client's.
                if frames and (self._reauth is None or not self._reauth.claim(frames)):
                    await self._forward_responses(raw, frames)
                data = await self._streamer.stream_next()
            lane.book()
            self._calls.settle()
            if not waited:
                await trio.lowlevel.checkpoint()

    async def _forward_responses(self, raw: bytes, frames: list[memoryview]) -> None:
        out = Outgoing(raw)
        answered: list[InFlight] = []
        for view in frames:
            payload, entry = await self._response(view)
            out.add(view, payload)
            answered.append(entry)
        pieces = out.take()
        data = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        await self.client.send_all(data)
        self._responses.sent.inc(len(data))
        now = time.monotonic()
        for entry in answered:
            entry.metrics.latency.observe(now - entry.received)

    async def _response(self, payload: Buffer) -> tuple[Buffer, InFlight]:
        """Handle one response; return what to send on (`payload` itself when unchanged)."""
        corr = wire.response_correlation_id(payload)
        entry = self._calls.oldest(corr)
        self._calls.retire(corr, entry)
        filters = self._filters.for_entry(entry)
        if filters:
            offset, msg = wire.decode_response(entry.api_key, entry.api_version, payload)
            if await self._filters.run(filters, entry.exchange or Exchange(), entry, msg):
                payload = wire.encode_response(
                    entry.api_key, entry.api_version, payload, offset, msg
                )
        return payload, entry
