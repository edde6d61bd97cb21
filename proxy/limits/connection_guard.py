"""Limits on client connections: how many, from where, and how long they may sit idle or
take to send a frame.

A proxy holds two descriptors (and some memory) for every client connection, so a client
that opens connections and never uses them, or starts a frame and never finishes it
(slowloris), would otherwise hold them for ever. Each limit that trips logs one line and
counts one `herald_connection_limit_hits{limit=...}`.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Mapping
from typing import Protocol

from protocol.contracts import native_relay
from proxy.observability.logs import get_logger

log = get_logger("limits")

MAX_CONNECTIONS = "max_connections"
MAX_CONNECTIONS_PER_SOURCE = "max_connections_per_source"
# The deadlines' names are the native relay's hand-over reasons too: written once.
IDLE_TIMEOUT = native_relay.IDLE_TIMEOUT
FRAME_TIMEOUT = native_relay.FRAME_TIMEOUT
LIMITS = (MAX_CONNECTIONS, MAX_CONNECTIONS_PER_SOURCE, IDLE_TIMEOUT, FRAME_TIMEOUT)


class ConnectionGuard:
    """Admits client connections within the total and per-source-address caps."""

    def __init__(self, max_total: int, max_per_source: int, hit: Callable[[str], None]) -> None:
        self.max_total = max_total
        self.max_per_source = max_per_source
        self._hit = hit
        self.total = 0
        self.by_source: dict[str, int] = {}

    def admit(self, source: str) -> str | None:
        """Count a new connection from `source` in, or return the limit it would break."""
        if self.total >= self.max_total:
            return self._refuse(MAX_CONNECTIONS, source, self.max_total)
        held = self.by_source.get(source, 0)
        if held >= self.max_per_source:
            return self._refuse(MAX_CONNECTIONS_PER_SOURCE, source, self.max_per_source)
        self.total += 1
        self.by_source[source] = held + 1
        return None

    def release(self, source: str) -> None:
        self.total -= 1
        left = self.by_source[source] - 1
        if left:
            self.by_source[source] = left
        else:
            del self.by_source[source]

    def _refuse(self, limit: str, source: str, value: int) -> str:
        self._hit(limit)
        log.warning("connection_refused", reason=f"limits.{limit} reached", limit=value,
                    client=source)
        return limit


_PEER_GONE = (7, 8)  # TCP_INFO's tcpi_state: TCP_CLOSE (reset), TCP_CLOSE_WAIT (its FIN came)


class TcpSocket(Protocol):
    """A client's socket as `peer_closed` reads it: the standard library's and trio's alike
    (a TLS connection's `ssl.SSLSocket` too)."""

    def getsockopt(self, level: int, optname: int, buflen: int, /) -> bytes: ...


class Waiting(Protocol):
    """A request in flight as `awaiting_answer` reads it (the session's `InFlight`)."""

    @property
    def received(self) -> float: ...

    @property
    def sent(self) -> float: ...


def peer_closed(sock: TcpSocket) -> bool:
    """Whether the client at the other end of `sock` (a TCP socket, plain or TLS) has closed
    its side: it will send nothing more. The pumps may not be reading the client while they
    wait for answers, so its end of stream is read from the connection's state, not its
    bytes."""
    try:
        return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] in _PEER_GONE
    except (OSError, AttributeError):  # not TCP, or not Linux: it may still send
        return False


def awaiting_answer(in_flight: Mapping[int, Waiting], idle_s: float, client: TcpSocket
                    ) -> bool:
    """Whether the requests in flight (oldest first, each with the monotonic times it was
    `received` and `sent`) keep a session from being idle: while the broker may still
    answer them (the oldest was sent less than `idle_s` ago: a broker answers or the client
    times out well within that) and the client may still want the answers (`peer_closed`).
    So a broker that never answers cannot hold a session, nor the descriptors and memory
    budget it holds; the native relay applies the same rule (relay_engine.c)."""
    oldest = next(iter(in_flight.values()), None)
    if oldest is None:
        return False
    sent = oldest.sent or oldest.received
    return time.monotonic() - sent < idle_s and not peer_closed(client)

