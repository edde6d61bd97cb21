"""Reading from a socket within a memory budget: ask how much may be read, read at most that,
and book it before anything else runs (no scheduling point between the read and the booking),
so that the budget's total never goes past its limit. The budget itself
(`proxy/limits/memory_budget.py`) only counts; what it hands a connection is a `Booking`."""

from __future__ import annotations

import select
from typing import Protocol

import trio

from proxy.net.transport import Transport


class Booking(Protocol):
    """What one connection holds of a memory budget (`memory_budget.Holder`)."""

    held: int

    def room(self, want: int) -> int: ...
    def set(self, held: int) -> None: ...
    async def wait(self) -> None: ...


async def receive_booked(transport: Transport, booking: Booking, max_bytes: int,
                         drained: bool = False) -> tuple[bytes, bool]:
    """`Transport.receive`, reading only what `booking` may take and booking it at once."""
    fd = transport.sock.fileno()
    waited = False
    if drained and not transport.tls:  # see `sockio.receive`
        await transport.wait_receivable()
        waited = True
    while True:
        n = booking.room(max_bytes)
        if n == 0:
            # Not reading means not seeing the peer go away: look once a second.
            with trio.move_on_after(1.0):
                await booking.wait()
            if _peer_closed(fd):
                return b"", True
            waited = True
            continue
        data = transport.receive_nowait(n)
        if data is None:
            await transport.wait_receivable()
            waited = True
            continue
        booking.set(booking.held + len(data))
        return data, waited


_CLOSED = select.POLLRDHUP | select.POLLHUP | select.POLLERR


def _peer_closed(fd: int) -> bool:
    """Has the peer closed (or reset) the connection, even with unread data before the end?"""
    poller = select.poll()
    poller.register(fd, _CLOSED)
    return any(events & _CLOSED for _, events in poller.poll(0))
