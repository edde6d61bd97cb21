"""What the parts of one session share, built once by `Session` and handed to each part.

The pumps, the streamer and the native phases all serve the same pair of connections with
the same core, lanes and correlation queue; passing these one by one made every constructor
long and the same. Each part binds what it uses per frame to its own attributes when it is
built, so sharing the value costs nothing per frame.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import trio

from proxy.filters.chain import FilterChain, SessionContext
from proxy.native.path_choice import SessionPath
from proxy.net.transport import Transport
from proxy.observability.metrics import Metrics
from proxy.session.core import Close, SessionCore
from proxy.session.correlation import CorrelationTable, InFlight
from proxy.session.lanes import Lane


class DeadlineWatch:
    """The trio side of the core's client deadlines: a task that sleeps until the next one,
    woken earlier when a read starts a frame whose deadline comes sooner."""

    __slots__ = ("_core", "_sleep")

    def __init__(self, core: SessionCore[Any]) -> None:  # what it queues is not its concern
        self._core = core
        self._sleep = trio.CancelScope()

    def client_read(self, frames: int, partial: int) -> None:
        """See `SessionCore.client_read`."""
        deadline = self._core.client_read(frames, partial, trio.current_time())
        if deadline is not None and deadline < self._sleep.deadline:
            self._sleep.deadline = deadline

    async def expired(self, busy: Callable[[], bool]) -> Close:
        """Return the deadline's close once one passes; `busy()` as `SessionCore.deadlines`
        takes it."""
        core = self._core
        while True:
            decided = core.deadlines(trio.current_time(), busy())
            if isinstance(decided, Close):
                return decided
            with trio.move_on_at(decided) as self._sleep:
                await trio.sleep_forever()


@dataclass(frozen=True, slots=True)
class Wiring:
    """One session's shared parts: its two connections and their context, its core and
    correlation queue, its two lanes, where it runs (`path`), the chain and the metrics, and
    the deadline watch (None: it keeps no deadline)."""

    client: Transport
    upstream: Transport
    ctx: SessionContext
    core: SessionCore[InFlight]
    calls: CorrelationTable
    requests: Lane
    responses: Lane
    path: SessionPath
    chain: FilterChain
    metrics: Metrics
    watch: DeadlineWatch | None
