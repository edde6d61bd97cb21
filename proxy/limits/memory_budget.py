"""One memory budget for what Herald buffers on behalf of clients, across all connections.

Counted: bytes of frames received from clients and not yet forwarded (partial frames
included), bytes of responses received from brokers and not yet sent on, and the
decompressed records of partitions processed in worker threads. Every read from a socket
asks the budget first how much it may read, and books what it read before anything else
runs, so the total never goes past `limit`. The budget only books: the reading is
`proxy/net/booked.py`'s.

When little is left, the connections holding the most are the ones that wait: the last
`reserve` bytes of the budget are only for holders of less than `SMALL` bytes, and each of
them may take from it only up to `SMALL` (a client between requests, or sending a small
one: Metadata, a heartbeat, a fetch). Responses from brokers may always use it: sending them
on is what frees memory. Waiting means not reading: that client's socket buffer fills and
TCP pushes back on it alone.
"""

from __future__ import annotations

import trio

SMALL = 16 * 1024
"""Holders below this may use the reserve, up to this: they are not the ones filling it."""


class MemoryBudget:
    def __init__(self, limit: int, reserve: int | None = None) -> None:
        self.limit = limit
        self.reserve = reserve if reserve is not None else max(limit // 8, 256 * SMALL)
        self.used = 0
        self.peak = 0
        self.waits = 0  # times a holder had to wait for room
        self._freed = trio.Event()

    def holder(self) -> Holder:
        return Holder(self)

    def _take(self, n: int) -> None:
        self.used += n
        if self.used > self.peak:
            self.peak = self.used

    def _give(self, n: int) -> None:
        self.used -= n
        if n:
            self._freed.set()

    async def _wait(self) -> None:
        self.waits += 1
        self._freed = event = trio.Event() if self._freed.is_set() else self._freed
        await event.wait()


class Holder:
    """What one connection (or one piece of work) holds of the budget."""

    __slots__ = ("budget", "held", "always_small")

    def __init__(self, budget: MemoryBudget, always_small: bool = False) -> None:
        self.budget = budget
        self.held = 0
        self.always_small = always_small  # responses: they free memory once sent

    def room(self, want: int) -> int:
        """How many of `want` bytes this holder may take right now."""
        budget = self.budget
        free = budget.limit - budget.used
        if not self.always_small:
            free = max(free - budget.reserve, min(free, SMALL - self.held))
        return max(0, min(want, free))

    def set(self, held: int) -> None:
        """The holder now holds `held` bytes (never more than it took)."""
        delta = held - self.held
        self.held = held
        if delta > 0:
            self.budget._take(delta)
        else:
            self.budget._give(-delta)

    def release(self) -> None:
        self.set(0)

    async def take(self, n: int) -> None:
        """Wait until `n` bytes are free for this holder, and take them."""
        while self.room(n) < n:
            await self.budget._wait()
        self.set(self.held + n)

    async def wait(self) -> None:
        """Until the budget frees something (not necessarily enough for this holder)."""
        await self.budget._wait()
