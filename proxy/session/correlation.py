"""The correlation table: which request each response from the broker answers.

Each client connection gets its own upstream connection, so correlation ids pass through
unchanged (they are unique only per connection, and so they stay). The table remembers, per
correlation id, which API and version a response will answer, because a Kafka response does
not say; acks=0 Produce requests get no entry, as they get no response. Kafka answers in order
on a connection, so a response whose correlation id is not the oldest outstanding one means
the upstream is broken.

The table also bounds how many requests wait for an answer at once (`limits.max_in_flight`)
and says when none does: what a drain, Herald's own re-authentication and a hand-over to the
native relay each wait for. Those rules are the session core's (`core`), which never waits;
the table is what waits for them, on trio.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import trio

from protocol.primitives import Buffer
from proxy.filters.chain import Exchange, SessionContext
from proxy.observability.logs import get_logger
from proxy.observability.metrics import ApiMetrics
from proxy.session.core import SessionCore

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
    """The trio side of the core's correlation queue: waiting for a free slot, and for the
    connection to be idle. The rules (order, reuse, the limit) are the core's."""

    __slots__ = ("entries", "_core", "_freed", "_idle")

    def __init__(self, core: SessionCore[InFlight]) -> None:
        self._core = core
        self.entries = core.entries  # the very queue, oldest first
        self._freed: trio.Event | None = None  # set when a slot frees, while a request waits
        self._idle = trio.Event()
        self._idle.set()

    @property
    def full(self) -> bool:
        """Every slot is taken: the next request waits for a response first."""
        return self._core.full

    @property
    def idle(self) -> bool:
        """No response is outstanding (nor one being streamed)."""
        return self._idle.is_set()

    async def wait_idle(self) -> None:
        """Wait until no response is outstanding; at once when none is."""
        await self._idle.wait()

    async def add(self, corr: int, entry: InFlight) -> None:
        """Remember a request until its response, once a slot is free."""
        core = self._core
        while not core.expect(corr, entry):
            self._freed = freed = trio.Event()
            await freed.wait()
        if self._idle.is_set():
            self._idle = trio.Event()

    def restore(self, corr: int, entry: InFlight) -> None:
        """A request the native relay forwarded and handed back unanswered."""
        self._core.restore(corr, entry)

    def busy(self) -> None:
        """A response is outstanding that may have no entry: one the native relay began."""
        self._core.unlisted()
        if self._idle.is_set():
            self._idle = trio.Event()

    def settle(self) -> None:
        """Wake what waits for the connection to be idle, if it now is."""
        if self._core.settle():
            self._idle.set()

    def oldest(self, corr: int) -> InFlight:
        """The in-flight entry a response answers, which must be the oldest one."""
        return self._core.oldest(corr)

    def retire(self, corr: int, entry: InFlight) -> None:
        """The response to `entry` has begun: free its slot and time the broker."""
        self._core.retire(corr)
        self._retired(entry)

    def response(self, payload: Buffer) -> InFlight:
        """The entry a whole response answers, retired (see `SessionCore.response`)."""
        _, entry = self._core.response(payload)
        self._retired(entry)
        return entry

    def _retired(self, entry: InFlight) -> None:
        freed = self._freed
        if freed is not None:
            self._freed = None
            freed.set()
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
