"""Keeps held connections out of the cyclic garbage collector's full passes.

CPython's collector walks every tracked object it has not frozen on each full pass, and runs
one whenever a quarter more objects have survived into its oldest generation than it held
after the last. A held connection keeps about a hundred tracked objects alive (its task and
coroutines, both sockets, its lanes and pumps), so a proxy holding thousands of idle
connections stalled its event loop for every one of those passes, longer the more it held:
the tail latency of every other connection paid for it.

Sessions end without reference cycles (a test guards that), so reference counting frees
them and the collector has nothing to find in them. So every `SETTLE_S` the keeper runs one
full pass over what is not frozen yet (what arrived since its last pass, which is little)
and freezes what survives: held sessions leave the passes, and the collector keeps collecting
everything newer as before. A closed session whose objects were frozen is still freed by
reference counting. Should something leave a cycle among frozen objects anyway, only a thaw
finds it: once as many sessions have closed as are open (and at least `THAW_MIN_CLOSED`), the
keeper thaws everything and collects once, then waits twice as long for the next thaw each
time a thaw finds nothing, and starts over when one does. Each pause, by generation and for
the keeper's own passes, is in `herald_gc_pause_seconds`.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

import trio
from prometheus_client import Counter, Histogram

from proxy.observability.logs import get_logger
from proxy.observability.metrics import Metrics

log = get_logger("collector")

SETTLE_S = 5.0
"""How often the keeper freezes what survived: a connection is in full passes this long at
most."""

THAW_MIN_CLOSED = 1000
"""Closed sessions before the first thaw, however few are open."""

MAX_THAW_BACKOFF = 64
"""At most this many times the open sessions close between thaws that find nothing."""

PAUSE_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                 0.5, 1.0, 2.5)


class CollectorKeeper:
    """Freezes what long-lived connections keep, thaws when enough of them closed, and times
    every pass of the collector."""

    def __init__(self, metrics: Metrics, sessions: Callable[[], tuple[int, int]]) -> None:
        """`sessions()`: (sessions open now, sessions closed so far)."""
        self._sessions = sessions
        r = metrics.registry
        self._pauses = Histogram(
            "herald_gc_pause_seconds",
            "Pauses of Python's cyclic garbage collector, by generation (0-2), and of the "
            "collector keeper's own passes (settle, thaw)",
            ["generation"], buckets=PAUSE_BUCKETS, registry=r)
        self._by_generation = [self._pauses.labels(str(g)) for g in range(3)]
        for own in ("settle", "thaw"):  # every series from the start: none appears later
            self._pauses.labels(own)
        self._settles = Counter("herald_gc_settles", "Passes that froze what survived",
                                registry=r)
        self._thaws = Counter("herald_gc_thaws", "Thaws of everything frozen", registry=r)
        self._thawed_garbage = Counter(
            "herald_gc_thaw_collected_objects",
            "Objects a thaw found unreachable: cycles that frozen objects had kept", registry=r)
        self._started = 0.0
        self._closed_at_thaw = 0
        self._backoff = 1
        self._installed = False
        self._own_pass = False

    def install(self) -> None:
        """Freeze what starting the proxy made, and time the collector's passes from now."""
        gc.collect()
        gc.freeze()
        if not self._installed:
            gc.callbacks.append(self._timed)
            self._installed = True

    def uninstall(self) -> None:
        """Stop timing, and give everything frozen back to the collector (a proxy run inside
        a longer-lived process, as tests do, leaves nothing frozen behind)."""
        if self._installed:
            gc.callbacks.remove(self._timed)
            self._installed = False
            gc.unfreeze()

    async def run(self) -> None:
        while True:
            await trio.sleep(SETTLE_S)
            self.settle()

    def settle(self) -> int:
        """One full pass over what is not frozen, then freeze its survivors (a thaw's one
        pass over everything instead, when one is due). Returns the objects the pass found
        unreachable."""
        open_now, closed = self._sessions()
        if closed - self._closed_at_thaw >= max(THAW_MIN_CLOSED, self._backoff * open_now):
            return self._thaw(closed)  # its one pass walks everything: no second one
        started = time.perf_counter()
        found = self._collect_quietly()
        gc.freeze()
        self._pauses.labels("settle").observe(time.perf_counter() - started)
        self._settles.inc()
        return found

    def _thaw(self, closed: int) -> int:
        started = time.perf_counter()
        gc.unfreeze()
        found = self._collect_quietly()
        gc.freeze()
        pause = time.perf_counter() - started
        self._pauses.labels("thaw").observe(pause)
        self._thaws.inc()
        self._thawed_garbage.inc(found)
        self._closed_at_thaw = closed
        self._backoff = 1 if found else min(2 * self._backoff, MAX_THAW_BACKOFF)
        log.info("gc_thaw", collected=found, pause_ms=round(pause * 1000, 1),
                 next_after_populations=self._backoff)
        return found

    def _collect_quietly(self) -> int:
        """A full collection the callbacks do not count as generation 2's: the keeper times
        it under its own label."""
        self._own_pass = True
        try:
            return gc.collect()
        finally:
            self._own_pass = False

    def _timed(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        elif not self._own_pass:
            self._by_generation[info["generation"]].observe(time.perf_counter() - self._started)
