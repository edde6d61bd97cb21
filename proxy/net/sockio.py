"""Socket reads and writes for the pumps, with one scheduling point where trio has three.

trio makes every socket operation a checkpoint: even a send or receive that completes at once
yields to the scheduler, and each yield is a pass of the run loop with its own epoll call.
A proxied request costs four such operations (read the request, write it upstream, read the
response, write it back), so on a busy proxy those passes were most of the Python time spent
per request. These helpers try the system call first and wait only when the socket is not
ready; the session's pumps yield once per pass of their loop themselves, so no connection can
starve the others.
"""

from __future__ import annotations

import os

import trio

from protocol.primitives import Buffer


async def receive(sock: trio.socket.SocketType, max_bytes: int, drained: bool = False
                  ) -> tuple[bytes, bool]:
    """Up to `max_bytes` (b"" at end of stream), and whether the call had to wait.

    `drained`: the previous read came back short, so the socket is most likely empty: wait
    for it first rather than make a read that fails (a system call and an exception saved
    per wake-up; if data came meanwhile, the wait returns at once)."""
    fd = sock.fileno()
    waited = False
    if drained:
        await trio.lowlevel.wait_readable(sock)
        waited = True
    while True:
        try:
            return os.read(fd, max_bytes), waited
        except BlockingIOError:
            await trio.lowlevel.wait_readable(sock)
            waited = True


async def send_all(sock: trio.socket.SocketType, data: Buffer) -> None:
    """Write all of `data`, waiting only while the socket's buffer is full."""
    fd = sock.fileno()
    view: memoryview | None = None
    remaining = len(data)
    while remaining:
        try:
            sent = os.write(fd, data if view is None else view)
        except BlockingIOError:
            await trio.lowlevel.wait_writable(sock)
            continue
        remaining -= sent
        if remaining:
            view = (memoryview(data) if view is None else view)[sent:]
