"""The byte streams a session pumps between: plain sockets, or TLS over them.

A session only needs "receive what is there, else wait" and "send all of this", with the
scheduling rule of `sockio` (try the call first, yield only when the socket is not ready).
Plain connections do that with system calls on the descriptor and can splice; TLS connections
go through an `ssl.SSLSocket` in non-blocking mode, which says when it must wait for the socket
to become readable or writable, and cannot splice (the bytes are encrypted).
"""

from __future__ import annotations

import os
import socket
import ssl
from collections.abc import Callable
from typing import TypeVar, TypeVarTuple

import trio

from protocol.primitives import Buffer
from proxy.net import sockio

_T = TypeVar("_T")
_Args = TypeVarTuple("_Args")


class PlainTransport:
    __slots__ = ("stream", "sock")
    spliceable = True
    tls = False

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.sock = stream.socket

    async def receive(self, max_bytes: int, drained: bool = False) -> tuple[bytes, bool]:
        return await sockio.receive(self.sock, max_bytes, drained)

    def receive_nowait(self, max_bytes: int) -> bytes | None:
        """What has arrived (b"" at the end), or None when nothing has."""
        try:
            return os.read(self.sock.fileno(), max_bytes)
        except BlockingIOError:
            return None

    async def wait_receivable(self) -> None:
        await trio.lowlevel.wait_readable(self.sock)

    async def send_all(self, data: Buffer) -> None:
        await sockio.send_all(self.sock, data)

    def peer_certificate(self) -> bytes | None:
        return None

    def engine_tls(self) -> object | None:
        """What the native relay needs to carry this connection's TLS on: nothing."""
        return None

    async def aclose(self) -> None:
        try:
            await self.stream.aclose()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass


class TlsTransport:
    """TLS on a connected socket; `handshake` must finish before anything else."""

    __slots__ = ("sock", "_ssl", "_closed", "_wants_write")
    spliceable = False
    tls = True

    def __init__(self, stream: trio.SocketStream, context: ssl.SSLContext, server_side: bool,
                 server_hostname: str | None = None) -> None:
        # The descriptor moves from trio's socket to a standard one that the ssl module wraps;
        # trio still waits on it by its number.
        raw = socket.socket(fileno=stream.socket.detach())
        raw.setblocking(False)
        self._ssl = context.wrap_socket(
            raw, server_side=server_side, server_hostname=server_hostname,
            do_handshake_on_connect=False,
        )
        self.sock = self._ssl
        self._closed = False
        self._wants_write = False

    async def handshake(self) -> None:
        await self._retry(self._ssl.do_handshake)

    async def _retry(self, call: Callable[[*_Args], _T], *args: *_Args) -> _T:
        while True:
            try:
                return call(*args)
            except ssl.SSLWantReadError:
                await trio.lowlevel.wait_readable(self._ssl)
            except ssl.SSLWantWriteError:
                await trio.lowlevel.wait_writable(self._ssl)

    async def receive(self, max_bytes: int, drained: bool = False) -> tuple[bytes, bool]:
        # `drained` is not used: a short read may leave decrypted bytes inside the TLS layer
        # that no socket readiness would announce.
        waited = False
        while True:
            try:
                return self._ssl.recv(max_bytes), waited
            except ssl.SSLWantReadError:
                await trio.lowlevel.wait_readable(self._ssl)
            except ssl.SSLWantWriteError:
                await trio.lowlevel.wait_writable(self._ssl)
            except ssl.SSLZeroReturnError:
                return b"", waited
            waited = True

    def receive_nowait(self, max_bytes: int) -> bytes | None:
        """What has arrived and decrypted (b"" at the end), or None when nothing has."""
        try:
            return self._ssl.recv(max_bytes)
        except ssl.SSLWantReadError:
            self._wants_write = False
        except ssl.SSLWantWriteError:
            self._wants_write = True
        except ssl.SSLZeroReturnError:
            return b""
        return None

    async def wait_receivable(self) -> None:
        if self._wants_write:
            await trio.lowlevel.wait_writable(self._ssl)
        else:
            await trio.lowlevel.wait_readable(self._ssl)

    async def send_all(self, data: Buffer) -> None:
        view = memoryview(data)
        while view:
            sent = await self._retry(self._ssl.send, view)
            view = view[sent:]

    def peer_certificate(self) -> bytes | None:
        return self._ssl.getpeercert(binary_form=True)

    def engine_tls(self) -> object | None:
        """The ssl module's own connection object (`_ssl._SSLSocket`), whose OpenSSL state the
        native relay carries on while it holds the session (`proxy/native/relay_tls.c`): the
        handshake was made here, the records go on from where Python left them."""
        # Private to the ssl module, so typeshed does not declare it.
        sslobj: object = self._ssl._sslobj  # type: ignore[attr-defined]
        return sslobj

    @property
    def context(self) -> ssl.SSLContext:
        return self._ssl.context

    @property
    def version(self) -> str | None:
        return self._ssl.version()

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        trio.lowlevel.notify_closing(self._ssl)
        try:
            self._ssl.close()
        except OSError:
            pass
        await trio.lowlevel.checkpoint()


Transport = PlainTransport | TlsTransport
