"""The broker-to-client pump: responses matched to their requests, filtered, sent on.

Each response is matched to the oldest entry of the correlation table (Kafka answers in
order), which says what API and version it answers; it is decoded only when a chain member
reads that API and version (or left a note on its request). Large responses that no filter
must see whole go to the streamer instead, which forwards them as they arrive.
"""

from __future__ import annotations

import time

import trio

from protocol.errors import CodecError
from protocol.primitives import Buffer
from proxy.filters.chain import Exchange
from proxy.net import wire
from proxy.session.core import UPSTREAM_CLOSED, bad_upstream_frame
from proxy.session.correlation import InFlight
from proxy.session.lanes import RECV
from proxy.session.outgoing import Outgoing
from proxy.session.reauth import UpstreamReauth
from proxy.session.response_filters import ResponseFilters
from proxy.session.streaming import ResponseStreamer
from proxy.session.wiring import Wiring


class ResponsePump:
    """Moves one session's responses from its upstream to its client until the session ends.

    `begun`: a response the native relay began sending, set before the pump runs again; its
    end goes first. `reauth`: gets the responses to Herald's own re-authentication.
    """

    def __init__(self, wiring: Wiring, filters: ResponseFilters, streamer: ResponseStreamer,
                 reauth: UpstreamReauth | None) -> None:
        self._client = wiring.client
        self._upstream = wiring.upstream
        self._lane = wiring.responses
        self._calls = wiring.calls
        self._filters = filters
        self._streamer = streamer
        self._reauth = reauth
        self.begun: tuple[InFlight, bytes] | None = None  # see Handover.tail

    async def run(self) -> None:
        """Pump until the session ends (`SessionClosed`); frames the native relay handed back
        are sent on before any read."""
        if self.begun is not None:  # a response the native relay began: its end goes first
            entry, tail = self.begun
            self.begun = None
            await self._streamer.finish_begun(entry, tail)
            self._calls.settle()
        lane = self._lane
        decoder = lane.decoder
        drained = False  # the last read came back short
        prefilled = decoder.buffered > 0  # handed back by the native relay: frames first
        while True:
            if prefilled:
                prefilled = False
                data, waited = b"", True
            else:
                data, waited = await lane.receive(self._upstream, drained)
                if not data:
                    raise UPSTREAM_CLOSED.error()
                drained = len(data) < RECV
                lane.read.inc(len(data))
            first = True
            while data or first:
                first = False
                try:
                    raw, frames = decoder.split(data)
                except CodecError as exc:
                    raise bad_upstream_frame(exc).error() from None
                # Answers to Herald's own re-authentication are not the client's.
                if frames and (self._reauth is None or not self._reauth.claim(frames)):
                    await self._forward(raw, frames)
                data = await self._streamer.stream_next()
            lane.book()
            self._calls.settle()
            if not waited:
                await trio.lowlevel.checkpoint()

    async def _forward(self, raw: bytes, frames: list[memoryview]) -> None:
        """Send on the responses of one read, as `RequestPump._forward` does requests."""
        out = Outgoing(raw)
        answered: list[InFlight] = []
        for view in frames:
            payload, entry = await self._response(view)
            out.add(view, payload)
            answered.append(entry)
        pieces = out.take()
        data = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        await self._client.send_all(data)
        self._lane.sent.inc(len(data))
        now = time.monotonic()
        for entry in answered:
            entry.metrics.latency.observe(now - entry.received)

    async def _response(self, payload: Buffer) -> tuple[Buffer, InFlight]:
        """Handle one response; return what to send on (`payload` itself when unchanged)."""
        entry = self._calls.response(payload)
        filters = self._filters.for_entry(entry)
        if filters:
            offset, msg = wire.decode_response(entry.api_key, entry.api_version, payload)
            if await self._filters.run(filters, entry.exchange or Exchange(), entry, msg):
                payload = wire.encode_response(
                    entry.api_key, entry.api_version, payload, offset, msg
                )
        return payload, entry
