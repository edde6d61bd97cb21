"""How every listening socket of the proxy accepts, and what it does when it cannot.

`accept(2)` fails while the process is out of descriptors (or the kernel out of socket
memory): the connection stays in the kernel's backlog and can be accepted once a descriptor is
free. trio's `serve_listeners` logs each failure with a traceback, ten times a second, on the
`trio` logger; here one episode of them is one `accept_paused` warning, the failures are
counted (`herald_accept_errors_total{reason}`), the retries back off from 0.1 s to 1 s, and
once a connection is accepted and no accept fails for a second after, `accept_resumed` says
how long accepting was paused. Every other error of `accept` is raised, as `serve_listeners`
does.
"""

from __future__ import annotations

import errno
import math
import resource
from collections.abc import Awaitable, Callable
from typing import NoReturn, NotRequired, TypedDict

import trio

from proxy.net.descriptors import CAPACITY_ERRNOS, descriptor_free
from proxy.observability.logs import get_logger

log = get_logger("server")

FIRST_DELAY_S = 0.1
MAX_DELAY_S = 1.0
QUIET_S = MAX_DELAY_S
"""An episode is over once a connection was accepted and no accept failed for this long: at
the limit, every closed connection lets one more in and the next accept fails again, which
is the same episode, not a new one each time."""


class _PausedFields(TypedDict):
    """The fields of `accept_paused` before the descriptor limits, spelled out so that
    passing them as keywords provably leaves the logger's own `exc_info` alone."""

    error: str
    target: str
    open_connections: NotRequired[int]


def next_delay(previous: float) -> float:
    """The wait before the next accept after a failure (`previous`: the last wait, 0 for none)."""
    return FIRST_DELAY_S if previous <= 0 else min(MAX_DELAY_S, previous * 2)


class PauseEpisode:
    """Failed accepts from the first one to a connection accepted with no failure for
    `QUIET_S` after it, across every listener: running out of descriptors is the process's
    state, not one port's. `now` is the caller's clock."""

    def __init__(self) -> None:
        self.since: float | None = None  # the episode's first failed accept
        self.failures = 0
        self._accepted_at: float | None = None  # the first accept after the last failure

    def failed(self, now: float) -> bool:
        """Count a failed accept; True when it begins an episode."""
        self.failures += 1
        self._accepted_at = None
        if self.since is not None:
            return False
        self.since = now
        return True

    def accepted(self, now: float) -> None:
        """A connection was accepted."""
        if self.since is not None and self._accepted_at is None:
            self._accepted_at = now

    def still_short(self) -> None:
        """Accepts would still fail (nothing was tried; nothing is counted): the episode
        ends only after another accept."""
        self._accepted_at = None

    def ends_at(self) -> float:
        """When the episode is over unless another accept fails (inf: not yet known)."""
        if self.since is None or self._accepted_at is None:
            return math.inf
        return self._accepted_at + QUIET_S

    def ended(self, now: float) -> tuple[float, int] | None:
        """(seconds from the first failure to the accept that ended the episode, failed
        accepts) when the episode is over by `now`; then the next failure begins another."""
        if self.since is None or self._accepted_at is None or now < self.ends_at():
            return None
        ended = (self._accepted_at - self.since, self.failures)
        self.since, self.failures, self._accepted_at = None, 0, None
        return ended


class Accepting:
    """Runs accept loops; `count(reason)` counts a failed accept (reason: the errno's name),
    `open_connections()` says how many client connections are open, for the log."""

    def __init__(self, count: Callable[[str], None],
                 open_connections: Callable[[], int] | None = None) -> None:
        self._count = count
        self._open_connections = open_connections
        self.episode = PauseEpisode()

    async def serve_all(self, listeners: list[trio.SocketListener], target: str,
                        handlers: trio.Nursery,
                        handle: Callable[[trio.SocketStream], Awaitable[object]]) -> None:
        """`serve` each of `listeners` (one port's: IPv4 and IPv6) in a task of its own."""
        async with trio.open_nursery() as nursery:
            for listener in listeners:
                nursery.start_soon(self.serve, listener, target, handlers, handle)

    async def serve(self, listener: trio.SocketListener, target: str, handlers: trio.Nursery,
                    handle: Callable[[trio.SocketStream], Awaitable[object]]) -> NoReturn:
        """Accept on `listener` until cancelled (which closes it), each connection handled by
        `handle` in `handlers` and closed when it returns."""
        episode = self.episode
        async with listener:
            delay = 0.0
            while True:
                stream: trio.SocketStream | None = None
                failed = False
                # While an episode may be ending, the accept waits only until it has ended.
                with trio.move_on_at(episode.ends_at()):
                    try:
                        stream = await listener.accept()
                    except OSError as exc:
                        if exc.errno not in CAPACITY_ERRNOS:
                            raise
                        self._failed(exc.errno, target)
                        failed = True
                if failed:
                    delay = next_delay(delay)
                    await trio.sleep(delay)
                    continue
                now = trio.current_time()
                if stream is not None:
                    delay = 0.0
                    episode.accepted(now)
                    handlers.start_soon(_handled, stream, handle)
                elif not descriptor_free(listener.socket.fileno()):
                    # The quiet second passed with nobody connecting, but an accept now
                    # would fail at once (trio tries accept(2) before waiting).
                    episode.still_short()
                ended = episode.ended(now)
                if ended is not None:
                    paused_s, failures = ended
                    log.warning("accept_resumed", target=target, paused_s=round(paused_s, 3),
                                failed_accepts=failures)

    def _failed(self, code: int, target: str) -> None:
        name = errno.errorcode[code]
        self._count(name)
        if not self.episode.failed(trio.current_time()):
            return
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        fields: _PausedFields = {"error": name, "target": target}
        if self._open_connections is not None:
            fields["open_connections"] = self._open_connections()
        log.warning("accept_paused", **fields, nofile_soft=soft, nofile_hard=hard)


async def _handled(stream: trio.SocketStream,
                   handle: Callable[[trio.SocketStream], Awaitable[object]]) -> None:
    try:
        await handle(stream)
    finally:
        await trio.aclose_forcefully(stream)
