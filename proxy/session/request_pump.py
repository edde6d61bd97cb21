"""The client-to-broker pump: requests read, shown to the filters that asked, forwarded.

Every request's header is read (API, version, correlation id, client id); its body is decoded
only when a chain member asked for that API and version, and re-encoded only when one changed
it. A request that expects a response takes an entry in the correlation table before it goes
upstream, so the response pump knows what the answer will be.
"""

from __future__ import annotations

import time

import trio

from protocol.errors import CodecError
from protocol.frame_headers import encode_response_header
from protocol.framing import FrameTooLarge, frame
from protocol.message import Message
from protocol.primitives import Buffer
from proxy.filters.chain import AnswerAndClose, Exchange
from proxy.net import wire
from proxy.net.wire import RequestHead
from proxy.observability.metrics import bounded_api_labels
from proxy.session.core import (
    CLIENT_CLOSED,
    SHUTTING_DOWN,
    frame_too_large,
    malformed_frame,
    malformed_request,
    refused,
    unreadable_version,
)
from proxy.session.correlation import InFlight
from proxy.session.lanes import RECV
from proxy.session.native_phases import NativePhases
from proxy.session.outgoing import Outgoing
from proxy.session.wiring import Wiring


class _Unreadable(Exception):
    """A request chain members would read, in a version Herald's codec cannot decode."""

    def __init__(self, head: RequestHead, answer: tuple[Message, int] | None) -> None:
        super().__init__(head.api_key, head.api_version)
        self.head = head
        self.answer = answer


class RequestPump:
    """Moves one session's requests from its client to its upstream until the session ends.

    `turn`: held while forwarding, when Herald re-authenticates on the upstream connection
    itself (see `reauth`). `native`: offered the session after every read, when the native
    relay may serve it. The wiring's `path` counts each request handled here, with why it is
    Python's.
    """

    def __init__(self, wiring: Wiring, turn: trio.Lock | None, native: NativePhases | None
                 ) -> None:
        self._client = wiring.client
        self._upstream = wiring.upstream
        self._lane = wiring.requests
        self._calls = wiring.calls
        self._core = wiring.core
        self._ctx = wiring.ctx
        self._chain = wiring.chain
        self._metrics = wiring.metrics
        self._watch = wiring.watch
        self._turn = turn
        self._native = native
        self._path = wiring.path
        self._recv_scope = trio.CancelScope()

    def drain(self) -> None:
        """Stop reading new requests (the core drains already); the pump ends once every
        outstanding one is answered."""
        self._recv_scope.cancel()

    async def run(self) -> None:
        """Pump until the session ends (`SessionClosed`) or goes back to the native relay
        (`HandBack`). Frames the native relay handed back are forwarded before any read."""
        lane = self._lane
        decoder = lane.decoder
        core = self._core
        watch = self._watch
        drained = False  # the last read came back short
        prefilled = decoder.buffered > 0  # handed back by the native relay: frames first
        while True:
            data, waited = b"", True  # stays b"" when handed back, or when draining
            handed = prefilled
            if prefilled:
                prefilled = False
            elif not core.draining:
                self._recv_scope = trio.CancelScope()
                with self._recv_scope:
                    data, waited = await lane.receive(self._client, drained)
            if core.draining:
                await self._calls.wait_idle()
                raise SHUTTING_DOWN.error()
            if not data and not handed:
                if not self._calls.idle:
                    # The client half-closed; let outstanding responses (one that is being
                    # streamed included) reach it.
                    await self._calls.wait_idle()
                raise CLIENT_CLOSED.error()
            drained = len(data) < RECV
            lane.read.inc(len(data))
            try:
                raw, frames = decoder.split(data)
            except FrameTooLarge as exc:
                self._metrics.frames_refused.labels("too_large").inc()
                raise frame_too_large(exc).error() from None
            except CodecError as exc:
                self._metrics.frames_refused.labels("malformed").inc()
                raise malformed_frame(exc).error() from None
            if watch is not None:
                watch.client_read(len(frames), decoder.buffered)
            if frames:
                turn = self._turn
                if turn is None:
                    await self._forward(raw, frames)
                else:
                    # Herald's own re-authentication takes turns with the client's requests.
                    try:
                        turn.acquire_nowait()
                    except trio.WouldBlock:
                        await turn.acquire()
                    try:
                        await self._forward(raw, frames)
                    finally:
                        turn.release()
            lane.book()
            if self._native is not None:
                await self._native.offer_hand_back()
            if not waited:
                await trio.lowlevel.checkpoint()  # the one scheduling point of this pass

    async def _forward(self, raw: bytes, frames: list[memoryview]) -> None:
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
                self._metrics.frames_refused.labels("malformed").inc()
                raise malformed_request(exc).error() from None
            except AnswerAndClose as answer:
                await self._answer_and_close(out.take(), entries, answer)
            except _Unreadable as unreadable:
                out.skip(view)
                await self._answer_instead(out.take(), entries, unreadable)
                continue
            out.add(view, payload)
            if entry is not None:
                entries.append(entry)
        if out:
            await self._send_upstream(out.take(), entries)

    async def _answer_and_close(
        self, out: list[Buffer], entries: list[InFlight], answer: AnswerAndClose
    ) -> None:
        """A member refused the request: what came before it still goes upstream and is
        answered, then the client gets the member's answer (if any) and the session ends."""
        if out:
            await self._send_upstream(out, entries)
        await self._calls.wait_idle()  # every earlier response goes first
        if answer.body is not None:
            head = answer.head
            payload = bytearray()
            encode_response_header(head.correlation_id, head.api_key, head.api_version, payload)
            payload += answer.body.encode(head.api_version)
            await self._client.send_all(frame(bytes(payload)))
        raise refused(answer.reason).error()

    async def _answer_instead(
        self, out: list[Buffer], entries: list[InFlight], unreadable: _Unreadable
    ) -> None:
        """Answer a request Herald cannot read in the version it came in, instead of
        forwarding it (after every earlier request is answered, as Kafka answers in order),
        so the client asks again in a version Herald reads. Without an answer to give, the
        session ends as a broker ends one that sends a version it does not know."""
        head = unreadable.head
        name, _ = bounded_api_labels(head.api_key, head.api_version)
        if unreadable.answer is None:
            self._metrics.frames_refused.labels("unreadable_version").inc()
            raise unreadable_version(name, head.api_version).error()
        if out:
            await self._send_upstream(out, entries)
        await self._calls.wait_idle()
        body, version = unreadable.answer
        payload = bytearray()  # the header as the client reads it for the version it sent
        encode_response_header(head.correlation_id, head.api_key, head.api_version, payload)
        payload += body.encode(version)
        self._metrics.versions_answered.labels(name).inc()
        await self._client.send_all(frame(bytes(payload)))

    async def _send_upstream(self, out: list[Buffer], entries: list[InFlight]) -> None:
        data = out[0] if len(out) == 1 else b"".join(out)
        # Stamped before sending: the response may be read while send_all is still yielding.
        now = time.monotonic()
        for entry in entries:
            entry.sent = now
        out.clear()
        entries.clear()
        await self._upstream.send_all(data)
        self._lane.sent.inc(len(data))

    async def _request(self, view: memoryview) -> tuple[Buffer, InFlight | None]:
        """Handle one request; return what to forward (`view` itself when unchanged)."""
        received = time.monotonic()
        head = wire.parse_request_header(view)
        self._path.frame(head.api_key, head.api_version)
        if head.client_id is not None:
            self._ctx.client_id = head.client_id
        filters, _, unreadable = self._chain.members(head.api_key, head.api_version)
        if unreadable:
            self._metrics.for_api(head.api_key, head.api_version).requests.inc()
            raise _Unreadable(head, self._chain.answer_unreadable(head.api_key, head.api_version))
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
                        self._ctx, exchange, head.api_key, head.api_version, msg
                    )
            except AnswerAndClose as answer:
                answer.head = head
                raise
            payload = wire.encode_request(head, payload, offset, msg) if changed else view
        api_metrics = self._metrics.for_api(head.api_key, head.api_version)
        api_metrics.requests.inc()
        entry = None
        if wire.expects_response(head, payload):
            entry = InFlight(
                head.api_key, head.api_version, received, api_metrics,
                exchange if exchange is not None and exchange.notes else None,
            )
            await self._calls.add(head.correlation_id, entry)
        return payload, entry
