"""The frames of one read on their way to the other side, copied as little as possible.

A read usually holds whole frames that no filter changed: those leave as the very bytes that
arrived, with no copy and no join. Only a frame a filter re-encoded is sent as a new size
prefix and payload, between slices of the original bytes.
"""

from __future__ import annotations

import struct

from protocol.primitives import Buffer

_frame_size = struct.Struct(">i").pack
"""The size prefix of a frame, sent beside its payload so the two are joined in one copy."""


class Outgoing:
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
        """The next frame of the read: `view` as it arrived, `payload` what leaves for it
        (`view` itself when the frame is unchanged)."""
        end = self._pos + 4 + len(view)
        if payload is not view:
            self._flush()
            self._pieces += (_frame_size(len(payload)), payload)
            self._sent = end
        self._pos = end

    def skip(self, view: memoryview) -> None:
        """The next frame of the read leaves for nowhere (Herald answered it itself)."""
        self._flush()
        self._pos += 4 + len(view)
        self._sent = self._pos

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

