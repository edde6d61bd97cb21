"""Kafka's size-prefixed framing, sans-I/O: bytes in, whole frames out.

Every Kafka request and response is an int32 size followed by that many bytes. The size is
checked against the configured limit before any buffer for the frame is grown, so a hostile
peer claiming 2 GiB costs nothing.
"""

from __future__ import annotations

import struct

from protocol.errors import CodecError

_SIZE = struct.Struct(">i")
DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024


class FrameTooLarge(CodecError):
    """A peer announced a frame above the limit."""


class FrameDecoder:
    """Accumulates received bytes and hands out complete frames (without the size prefix)."""

    __slots__ = ("_buf", "_max")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self._buf = bytearray()
        self._max = max_frame_bytes

    def feed(self, data: bytes) -> None:
        self._buf += data

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def head(self, n: int) -> bytes:
        """The first `n` bytes buffered (fewer when fewer are here), left buffered."""
        return bytes(self._buf[:n]) if self._buf else b""

    def frames(self) -> list[bytes]:
        """Every complete frame buffered so far, in order; partial data stays buffered."""
        raw, views = self.split(b"")
        return [bytes(v) for v in views]

    def split(self, data: bytes) -> tuple[bytes, list[memoryview]]:
        """Take `data` in; return the bytes of every complete frame, size prefixes included,
        and each frame's payload as a view into them. Partial data stays buffered.

        A proxy forwards most frames unchanged: when nothing was buffered before and `data`
        holds whole frames only (the usual case), `raw` is `data` itself, so the frames reach
        the other side without being copied here at all; otherwise the complete part is
        copied out of the buffer once.
        """
        buf = self._buf
        src: bytes | bytearray = data
        if buf:
            buf += data
            src = buf
        spans = self._scan(src)
        end = spans[-1][1] if spans else 0
        if src is data:
            raw = data if end == len(data) else data[:end]
            if end < len(data):
                buf += memoryview(data)[end:]
        else:
            with memoryview(buf) as view:
                raw = bytes(view[:end])
            if end == len(buf):
                buf.clear()
            elif end:
                del buf[:end]
        if not spans:
            return raw, []
        whole = memoryview(raw)
        return raw, [whole[a:b] for a, b in spans]

    def _scan(self, src: bytes | bytearray) -> list[tuple[int, int]]:
        """(start, end) of the payload of each complete frame at the front of `src`."""
        spans: list[tuple[int, int]] = []
        pos = 0
        end = len(src)
        while end - pos >= 4:
            (size,) = _SIZE.unpack_from(src, pos)
            if size < 0:
                raise CodecError(f"negative frame size {size}")
            if size > self._max:
                raise FrameTooLarge(f"frame of {size} bytes exceeds the limit of {self._max}")
            if end - pos - 4 < size:
                break
            pos += 4
            spans.append((pos, pos + size))
            pos += size
        return spans

    def peek(self, n: int) -> bytes:
        """The first `n` buffered bytes (fewer if fewer are in): after `frames()`, the start
        of the incomplete frame, size prefix included."""
        return bytes(self._buf[:n])

    def take(self) -> bytes:
        """Everything buffered, handed out and forgotten: the start of a frame that will be
        forwarded as it arrives instead of being assembled here."""
        data = bytes(self._buf)
        self._buf.clear()
        return data


def frame(payload: bytes) -> bytes:
    """Prefix `payload` with its int32 size."""
    return _SIZE.pack(len(payload)) + payload
