"""How every listening socket of the proxy accepts, and what it does when it cannot.

`accept(2)` fails while the process is out of descriptors (or the kernel out of socket
memory): the connection stays in the kernel's backlog and can be accepted once a descriptor is
free. trio's `serve_listeners` logs each failure with a traceback, ten times a second, on the
`trio` logger; here one episode of them is one `accept_paused` warning, the failures are
counted (`herald_accept_errors_total{reason}`), the retries back off from 0.1 s to 1 s, and the
first accept that works logs `accept_resumed` with how long accepting was paused. Every other
error of `accept` is raised, as `serve_listeners` does.
"""

from __future__ import annotations

import errno
import resource
import time
from collections.abc import Awaitable, Callable
from typing import NoReturn

import trio

from proxy.net.descriptors import CAPACITY_ERRNOS
from proxy.observability.logs import get_logger

log = get_logger("server")

FIRST_DELAY_S = 0.1
MAX_DELAY_S = 1.0


def next_delay(previous: float) -> float:
    """The wait before the next accept after a failure (`previous`: the last wait, 0 for none)."""
    return FIRST_DELAY_S if previous <= 0 else min(MAX_DELAY_S, previous * 2)


class PauseEpisode:
    """Failed accepts from the first to the next accept that works, across every listener:
    running out of descriptors is the process's state, not one port's."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.since: float | None = None
        self.failures = 0

    def failed(self) -> bool:
        """Count a failed accept; True when it begins an episode."""
        self.failures += 1
        if self.since is not None:
            return False
        self.since = self._clock()
        return True

    def succeeded(self) -> tuple[float, int] | None:
        """An accept worked: (seconds paused, failed accepts) when it ends an episode."""
        if self.since is None:
            return None
        ended = (self._clock() - self.since, self.failures)
        self.since, self.failures = None, 0
        return ended


class Accepting:
    """Runs accept loops; `count(reason)` counts a failed accept (reason: the errno's name),
    `open_connections()` says how many client connections are open, for the log."""

    def __init__(self, count: Callable[[str], None],
                 open_connections: Callable[[], int] | None = None) -> None:
        self._count = count
        self._open_connections = open_connections
        self.episode = PauseEpisode()

    async def serve(self, listener: trio.SocketListener, target: str, handlers: trio.Nursery,
                    handle: Callable[[trio.SocketStream], Awaitable[object]]) -> NoReturn:
        """Accept on `listener` until cancelled (which closes it), each connection handled by
        `handle` in `handlers` and closed when it returns."""
        async with listener:
            delay = 0.0
            while True:
                try:
                    stream = await listener.accept()
                except OSError as exc:
                    if exc.errno not in CAPACITY_ERRNOS:
                        raise
                    self._failed(exc.errno, target)
                    delay = next_delay(delay)
                    await trio.sleep(delay)
                    continue
                delay = 0.0
                ended = self.episode.succeeded()
                if ended is not None:
                    paused_s, failures = ended
                    log.warning("accept_resumed", target=target, paused_s=round(paused_s, 3),
                                failed_accepts=failures)
                handlers.start_soon(_handled, stream, handle)

    def _failed(self, code: int, target: str) -> None:
        name = errno.errorcode[code]
        self._count(name)
        if not self.episode.failed():
            return
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        fields: dict[str, object] = {"error": name, "target": target}
        if self._open_connections is not None:
            fields["open_connections"] = self._open_connections()
        log.warning("accept_paused", **fields, nofile_soft=soft, nofile_hard=hard)


async def _handled(stream: trio.SocketStream,
                   handle: Callable[[trio.SocketStream], Awaitable[object]]) -> None:
    try:
        await handle(stream)
    finally:
        await trio.aclose_forcefully(stream)
