"""The correlation table: which request each response from the broker answers.

Each client connection gets its own upstream connection, so correlation ids pass through
unchanged (they are unique only per connection, and so they stay). The table remembers, per
correlation id, which API and version a response will answer, because a Kafka response does
not say; acks=0 Produce requests get no entry, as they get no response. Kafka answers in order
on a connection, so a response whose correlation id is not the oldest outstanding one means
the upstream is broken.

The table also bounds how many requests wait for an answer at once (`limits.max_in_flight`)
and says when none does: what a drain, Herald's own re-authentication and a hand-over to the
native relay each wait for.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass

import trio

from proxy.filters.chain import Exchange, SessionContext
from proxy.observability.logs import get_logger
from proxy.observability.metrics import ApiMetrics
from proxy.session.closing import SessionClosed

log = get_logger("session")


@dataclass(slots=True)
class InFlight:
    """A forwarded request whose response has not begun: what that response will be, the
    exchange of the filters that wait for it, and when the request came and went."""

    api_key: int
    api_version: int
    received: float
    metrics: ApiMetrics
    exchange: Exchange | None = None
    sent: float = 0.0


class CorrelationTable:
    """The requests awaiting a response on one connection, oldest first."""

    __slots__ = ("entries", "_slots", "_idle")

    def __init__(self, max_in_flight: int) -> None:
        self.entries: OrderedDict[int, InFlight] = OrderedDict()
        self._slots = trio.Semaphore(max_in_flight)
        self._idle = trio.Event()
        self._idle.set()

    @property
    def full(self) -> bool:
        """Every slot is taken: the next request waits for a response first."""
        return self._slots.value == 0

    @property
    def idle(self) -> bool:
        """No response is outstanding (nor one being streamed)."""
        return self._idle.is_set()

    async def wait_idle(self) -> None:
        """Wait until no response is outstanding; at once when none is."""
        await self._idle.wait()

    async def add(self, corr: int, entry: InFlight) -> None:
        """Remember a request until its response, once a slot is free: a client cannot make
        Herald hold more than `max_in_flight` unanswered requests for it."""
        if corr in self.entries:
            raise SessionClosed(f"correlation id {corr} reused while in flight", "warning")
        try:
            self._slots.acquire_nowait()
        except trio.WouldBlock:
            await self._slots.acquire()
        self.entries[corr] = entry
        if self._idle.is_set():
            self._idle = trio.Event()

    def restore(self, corr: int, entry: InFlight) -> None:
        """A request the native relay forwarded and handed back unanswered (the engine kept
        to the same bound, so its slot is free)."""
        self._slots.acquire_nowait()
        self.entries[corr] = entry

    def busy(self) -> None:
        """A response is outstanding that may have no entry: one the native relay began."""
        self._idle = trio.Event()

    def settle(self) -> None:
        """Wake what waits for the connection to be idle, if it now is."""
        if not self.entries:
            self._idle.set()

    def oldest(self, corr: int) -> InFlight:
        """The in-flight entry a response answers, which must be the oldest one."""
        oldest = next(iter(self.entries), None)
        if corr != oldest:
            raise SessionClosed(
                f"upstream answered correlation id {corr}, expected {oldest}", "warning"
            )
        return self.entries[corr]

    def retire(self, corr: int, entry: InFlight) -> None:
        """The response to `entry` has begun: free its slot and time the broker."""
        del self.entries[corr]
        self._slots.release()
        entry.metrics.upstream_latency.observe(time.monotonic() - entry.sent)

    def abandon(self, ctx: SessionContext) -> None:
        """Responses that will never come: let the filters that waited for one finish."""
        for entry in self.entries.values():
            exchange = entry.exchange
            if exchange is None:
                continue
            for f in exchange.notes:
                try:
                    f.on_abandoned(ctx, exchange)
                except Exception as exc:
                    log.error("filter_error", filter=f.name, error=repr(exc))
        self.entries.clear()
