"""Zero-copy forwarding of bytes Herald does not need to see, with Linux splice(2).

Record data in a large Fetch response only passes through Herald. Reading it into Python and
writing it out again costs two copies of every byte and most of the proxy's CPU on the
consume path; splicing it socket -> pipe -> socket moves page references inside the kernel
instead. Where splice is missing (not Linux), `Splicer.create` returns None and callers copy.
"""

from __future__ import annotations

import fcntl
import os
from typing import Protocol

import trio

_FLAGS = getattr(os, "SPLICE_F_MOVE", 0) | getattr(os, "SPLICE_F_NONBLOCK", 0)
_PIPE_BYTES = 1024 * 1024  # one pipe's worth moves per splice; the kernel may give less


class Descriptor(Protocol):
    """A non-blocking socket of either kind (trio's, or the standard one a TLS connection
    wraps): splice works on the descriptor, and trio waits on it by its number."""

    def fileno(self) -> int: ...


class SpliceEOF(Exception):
    """The source closed before the announced bytes arrived."""


class Splicer:
    """One pipe, reused for every splice of a connection; close it with the connection."""

    __slots__ = ("_read", "_write", "_chunk")

    def __init__(self, read_fd: int, write_fd: int, chunk: int) -> None:
        self._read = read_fd
        self._write = write_fd
        self._chunk = chunk

    @classmethod
    def create(cls) -> Splicer | None:
        if not hasattr(os, "splice"):
            return None
        read_fd, write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        chunk = 64 * 1024
        setsize = getattr(fcntl, "F_SETPIPE_SZ", None)
        if setsize is not None:
            try:
                chunk = fcntl.fcntl(write_fd, setsize, _PIPE_BYTES)
            except OSError:  # above /proc/sys/fs/pipe-max-size: keep the default
                pass
        return cls(read_fd, write_fd, chunk)

    async def forward(self, src: Descriptor, dst: Descriptor, n: int) -> None:
        """Move exactly `n` bytes from `src` to `dst` (both non-blocking sockets)."""
        src_fd, dst_fd = src.fileno(), dst.fileno()
        busy = 0  # splices in a row that did not wait: yield now and then all the same
        while n:
            try:
                moved = os.splice(src_fd, self._write, min(n, self._chunk), flags=_FLAGS)
            except BlockingIOError:
                busy = 0
                await trio.lowlevel.wait_readable(src)
                continue
            if moved == 0:
                raise SpliceEOF()
            n -= moved
            while moved:
                try:
                    moved -= os.splice(self._read, dst_fd, moved, flags=_FLAGS)
                except BlockingIOError:
                    await trio.lowlevel.wait_writable(dst)
            busy += 1
            if busy == 16:
                busy = 0
                await trio.lowlevel.checkpoint()

    def close(self) -> None:
        os.close(self._read)
        os.close(self._write)
