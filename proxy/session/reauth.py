"""KIP-368 for Herald's own credentials: re-authenticating a session's upstream connection.

When Herald authenticates to the broker itself (upstream SASL), the broker may give the
session a lifetime, after which it closes the connection. Like Kafka's own clients, Herald
authenticates again at 80% of that lifetime, on the same connection and between the client's
requests: while it does, no client request goes upstream, every earlier one has been answered,
and the broker's replies reach Herald instead of the client.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable

import trio

from configuration import ConfigError
from protocol.errors import CodecError
from proxy.filters.chain import SessionContext
from proxy.net.transport import Transport
from proxy.observability.logs import get_logger
from proxy.security.sasl import SaslError
from proxy.session.core import REAUTH_TIMED_OUT, reauth_failed
from proxy.session.correlation import CorrelationTable
from proxy.upstream.cluster import FrameIO, UpstreamAuthError

log = get_logger("session")

_REAUTH_AT = 0.8  # of the broker's session lifetime, as Kafka's clients do (85-95%)


class _OwnIO:
    """Herald's own exchange on a session's upstream connection: its replies arrive through
    the response pump, which owns the reading side."""

    def __init__(self, upstream: Transport, replies: trio.MemoryReceiveChannel[bytes]) -> None:
        self.upstream = upstream
        self.replies = replies

    async def send_all(self, data: bytes) -> None:
        await self.upstream.send_all(data)

    async def next_frame(self) -> bytes:
        return await self.replies.receive()


class UpstreamReauth:
    """Renews one upstream connection's session before the broker ends it.

    The request pump forwards only while it holds `turn`; the response pump offers every
    response to `claim` first.
    """

    def __init__(self, upstream: Transport, ctx: SessionContext, calls: CorrelationTable,
                 reauthenticate: Callable[[FrameIO], Awaitable[int]], lifetime_ms: int,
                 timeout_s: float) -> None:
        self._upstream = upstream
        self._ctx = ctx
        self._calls = calls
        self._reauthenticate = reauthenticate
        self._lifetime_ms = lifetime_ms
        self._timeout_s = timeout_s
        self.turn = trio.Lock()
        """Held by whoever sends upstream: the client's requests, or this exchange."""
        self._replies: trio.MemorySendChannel[bytes] | None = None
        self._due: float | None = None  # on trio's clock; set when `run` first starts
        self._exchanging = False

    @property
    def due(self) -> float:
        """When the next re-authentication is due, on trio's clock (math.inf: never)."""
        return math.inf if self._due is None else self._due

    def busy(self, now: float) -> bool:
        """Whether the re-authentication is due or under way at `now`: the session must stay
        in Python for it."""
        return self._exchanging or now >= self.due

    def claim(self, frames: list[memoryview]) -> bool:
        """Take `frames` as answers to Herald's own re-authentication, if it is underway."""
        replies = self._replies
        if replies is None:
            return False
        for reply in frames:
            replies.send_nowait(bytes(reply))
        return True

    async def run(self) -> None:
        """Re-authenticate before each lifetime the broker gives ends, for as long as the
        session lasts; raises `SessionClosed` when the broker refuses or does not answer."""
        if self._due is None:
            self._due = self._next_due(self._lifetime_ms)
        while self._due != math.inf:
            # Absolute, so a session that went to the native engine and back keeps its time.
            await trio.sleep_until(self._due)
            async with self.turn:  # no client request goes upstream meanwhile
                await self._calls.wait_idle()  # and every earlier one is answered
                send, receive = trio.open_memory_channel[bytes](16)
                self._replies = send
                self._exchanging = True
                try:
                    with trio.fail_after(self._timeout_s):
                        lifetime_ms = await self._reauthenticate(_OwnIO(self._upstream, receive))
                except trio.TooSlowError:
                    raise REAUTH_TIMED_OUT.error() from None
                except (UpstreamAuthError, SaslError, ConfigError, CodecError, EOFError) as exc:
                    raise reauth_failed(exc).error() from None
                finally:
                    self._replies = None
                    self._exchanging = False
            self._due = self._next_due(lifetime_ms)
            log.info("upstream_reauthenticated", client=self._ctx.client_address,
                      upstream=self._ctx.upstream_address, lifetime_ms=lifetime_ms)

    @staticmethod
    def _next_due(lifetime_ms: int) -> float:
        if lifetime_ms <= 0:
            return math.inf
        return trio.current_time() + lifetime_ms * _REAUTH_AT / 1000
