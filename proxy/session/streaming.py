"""Large responses forwarded as they arrive, their record data spliced, Fetch tails rewritten.

Fetch responses are most of a consumer's traffic and can be megabytes; assembling each one
before sending it on would add its whole transfer time to every fetch. A response from
`STREAM_MIN_BYTES` on that no filter must see whole goes out as it arrives instead. Bytes no
filter reads move from socket to socket with splice(2) where the platform has it (see
`splice`); the top-level tagged fields that end a Fetch response (leader hints, which the
address rewriter reads) are held back until the frame is complete, and leave rewritten at the
same length.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass, field

from protocol.fetch_tail import FetchTailFinder, decode_tail, fit_tail, tail_walkable
from proxy.filters.chain import Exchange, Filter
from proxy.net.splice import SpliceEOF, Splicer
from proxy.session.core import NO_FETCH_END, UPSTREAM_CLOSED
from proxy.session.correlation import InFlight
from proxy.session.lanes import RECV
from proxy.session.response_filters import ResponseFilters
from proxy.session.wiring import Wiring

# Responses from this size on are forwarded as they arrive; smaller ones are assembled first,
# which costs little and lets every filter see them whole.
STREAM_MIN_BYTES = 64 * 1024
_STREAM_FROM_HEAD = 8  # size prefix and correlation id
_SPLICE_MIN_BYTES = 16 * 1024  # below this, two syscalls and a pipe cost more than a copy
_HEAD = struct.Struct(">ii")


@dataclass(slots=True)
class _Stream:
    """A response being forwarded as it arrives."""

    entry: InFlight
    left: int  # bytes of the frame (size prefix included) still to come
    finder: FetchTailFinder | None  # set when filters read the tail
    filters: tuple[Filter, ...]
    exchange: Exchange
    tail: bytearray = field(default_factory=bytearray)


class ResponseStreamer:
    """Streams the large responses of one session from its upstream to its client."""

    def __init__(self, wiring: Wiring, filters: ResponseFilters) -> None:
        client, upstream = wiring.client, wiring.upstream
        self._client = client
        self._upstream = upstream
        self._client_sock = client.sock
        self._upstream_sock = upstream.sock
        self._lane = wiring.responses
        self._calls = wiring.calls
        self._filters = filters
        self._streamed = wiring.metrics.responses_streamed
        # False once splice(2) turned out to be missing, or when either side is TLS.
        self._splice = client.spliceable and upstream.spliceable
        self.splicer: Splicer | None = None  # made on the first splice: two fds per session

    async def stream_next(self) -> bytes:
        """If the response that begins the lane's buffered bytes is one to stream, forward all
        of it now and return what arrived after it; b"" when there is none to stream."""
        decoder = self._lane.decoder
        if decoder.buffered < _STREAM_FROM_HEAD:
            return b""
        (size, corr) = _HEAD.unpack(decoder.peek(8))
        if size < STREAM_MIN_BYTES:
            return b""
        entry = self._calls.oldest(corr)
        filters = self._filters.for_entry(entry)
        finder = None
        if filters:
            tail_only = all(f.tail_only(entry.api_key, entry.api_version) for f in filters)
            if not tail_only or not tail_walkable(entry.api_key, entry.api_version):
                return b""
            finder = FetchTailFinder(size)
        self._calls.retire(corr, entry)
        self._streamed.inc()
        stream = _Stream(entry, size + 4, finder, filters, entry.exchange or Exchange())
        await self._more(stream, decoder.take(), start=4)
        return await self._rest(stream)

    async def finish_begun(self, entry: InFlight, tail: bytes) -> None:
        """The end of a Fetch response the native relay began streaming: its top-level tagged
        fields, which the filters read here."""
        filters = self._filters.for_entry(entry)
        await self._send_tail(entry, filters, entry.exchange or Exchange(), tail)
        entry.metrics.latency.observe(time.monotonic() - entry.received)

    def close(self) -> None:
        """The session is over: close the splice pipe, if one was made."""
        if self.splicer is not None:
            self.splicer.close()

    async def _rest(self, stream: _Stream) -> bytes:
        """Forward the rest of a streamed frame; return what arrived after it.

        Bytes the filters will not read (all of them, or a Fetch response's record data) are
        spliced from socket to socket when the platform can; the rest is received and fed.
        """
        lane = self._lane
        finder = stream.finder
        while stream.left:
            n = stream.left if finder is None else min(stream.left, finder.skippable())
            if n >= _SPLICE_MIN_BYTES and self._splice:
                if self.splicer is None:
                    self.splicer = Splicer.create()
                    if self.splicer is None:
                        self._splice = False
                        continue
                try:
                    await self.splicer.forward(self._upstream_sock, self._client_sock, n)
                except SpliceEOF:
                    raise UPSTREAM_CLOSED.error() from None
                if finder is not None:
                    finder.skipped(n)
                stream.left -= n
                lane.read.inc(n)
                lane.sent.inc(n)
                continue
            data, _ = await self._upstream.receive(RECV)
            if not data:
                raise UPSTREAM_CLOSED.error()
            lane.read.inc(len(data))
            used = await self._more(stream, data)
            if used < len(data):
                rest = data[used:]
                break
        else:
            rest = b""
        if finder is not None:
            await self._tail(stream, finder)
        entry = stream.entry
        entry.metrics.latency.observe(time.monotonic() - entry.received)
        return rest

    async def _more(self, stream: _Stream, data: bytes, start: int = 0) -> int:
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
            await self._client.send_all(part)
            self._lane.sent.inc(len(part))
        return used

    async def _tail(self, stream: _Stream, finder: FetchTailFinder) -> None:
        """`finder` is `stream.finder`, which the caller found set."""
        if not finder.done:
            raise NO_FETCH_END.error()
        await self._send_tail(stream.entry, stream.filters, stream.exchange, bytes(stream.tail))

    async def _send_tail(self, entry: InFlight, filters: tuple[Filter, ...], exchange: Exchange,
                         tail: bytes) -> None:
        """The top-level tagged fields of a Fetch response whose earlier bytes went out as
        they arrived: the filters read them, and they leave at the same length."""
        msg = decode_tail(tail, entry.api_version)
        if await self._filters.run(filters, exchange, entry, msg):
            tail = fit_tail(msg, entry.api_version, len(tail))
        if tail:
            await self._client.send_all(tail)
            self._lane.sent.inc(len(tail))
