"""Each accepted client connection, from admission to the end of its session.

A connection is admitted by the connection guard (limits per proxy and per source), gets its
TLS handshake when the listener has TLS, and its own connection to the upstream broker its
listener stands for; then it runs as a `Session` in its own task, so that whatever goes wrong
in one is logged and closes only that one. At shutdown the sessions drain within a grace
period.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable

import trio

from configuration import HostPort
from proxy.filters.chain import SessionContext
from proxy.net.descriptors import OUT_OF_DESCRIPTORS, OutOfDescriptors
from proxy.net.transport import PlainTransport, Transport
from proxy.observability.logs import get_logger
from proxy.serving.client_tls import tls_handshake
from proxy.serving.listeners import BOOTSTRAP
from proxy.session.environment import SessionEnvironment
from proxy.session.session import Session

log = get_logger("server")


class Connections:
    """Serves the connections the listeners accept; `sessions` are those running now."""

    def __init__(
        self,
        env: SessionEnvironment,
        refresh_brokers: Callable[[], Awaitable[bool]],
    ) -> None:
        """`refresh_brokers`: ask the upstream cluster for its brokers again (a listener
        stands for a broker the directory does not know yet)."""
        self._env = env
        self._cluster = env.cluster
        self._directory = env.directory
        self._refresh_brokers = refresh_brokers
        self._metrics = env.metrics
        self._guard = env.guard
        self._listen_tls = env.listen_tls
        self.sessions: set[Session] = set()
        self._closed = 0

    def counts(self) -> tuple[int, int]:
        """(sessions running now, sessions that ended so far)."""
        return len(self.sessions), self._closed

    async def handle(self, client: trio.SocketStream, target: str) -> None:
        """Serve one accepted connection for the listener `target` until it closes."""
        m = self._metrics
        source = _peer(client).rpartition(":")[0]
        if self._guard.admit(source) is not None:
            await client.aclose()
            return
        m.connections_total.labels("client").inc()
        m.connections_active.labels("client").inc()
        try:
            await self._serve(client, target)
        finally:
            m.connections_active.labels("client").dec()
            self._guard.release(source)

    async def drain(self, grace_s: float) -> None:
        """Let every session finish what it has begun, for up to `grace_s` seconds."""
        with trio.move_on_after(grace_s):
            for s in list(self.sessions):
                s.drain()
            while self.sessions:
                await trio.sleep(0.05)
        if self.sessions:
            log.warning("shutdown_grace_expired", open_sessions=len(self.sessions))

    async def _serve(self, client: trio.SocketStream, target: str) -> None:
        peer = _peer(client)
        accepted = await self._accept(client, peer)
        if accepted is None:
            return
        transport, principal = accepted
        upstream_addrs = await self._upstream_for(target)
        m = self._metrics
        try:
            upstream = await self._cluster.connect(upstream_addrs)
        except OutOfDescriptors as exc:
            # Herald's own shortage, not the broker's: said so, with the limit to raise.
            m.upstream_connect_failures.labels("out_of_descriptors").inc()
            log.warning("connection_closed", reason=OUT_OF_DESCRIPTORS, error=exc.name,
                        client=peer, client_id=None, target=target,
                        upstream=",".join(map(str, upstream_addrs)))
            await transport.aclose()
            return
        if upstream is None:
            # client_id is unknown: nothing was read from the client yet.
            m.upstream_connect_failures.labels("unreachable").inc()
            log.warning("connection_closed", reason="upstream unreachable", client=peer,
                        client_id=None, target=target,
                        upstream=",".join(map(str, upstream_addrs)))
            await transport.aclose()
            return
        address = upstream.address
        m.connections_total.labels("upstream").inc()
        m.connections_active.labels("upstream").inc()
        ctx = SessionContext(client_address=peer, listener=target, upstream_address=address,
                             principal=principal or self._cluster.identity())
        session = Session(transport, upstream.transport, ctx, self._env,
                          session_lifetime_ms=upstream.session_lifetime_ms)
        self.sessions.add(session)
        log.debug("connection_opened", client=peer, target=target, upstream=address)
        try:
            await session.run()
        finally:
            self.sessions.discard(session)
            self._closed += 1
            m.connections_active.labels("upstream").dec()

    async def _accept(
        self, client: trio.SocketStream, peer: str
    ) -> tuple[Transport, str | None] | None:
        """The client's transport and its certificate's principal, once TLS is up (None: the
        handshake failed, which is logged and costs this connection only)."""
        if self._listen_tls is None:
            return PlainTransport(client), None
        return await tls_handshake(client, peer, self._listen_tls, self._metrics.tls_handshakes)

    async def _upstream_for(self, target: str) -> list[HostPort]:
        """Where the listener `target` leads: any bootstrap server (in random order), or the
        one broker it stands for (none while that broker is unknown)."""
        if target == BOOTSTRAP:
            addrs = list(self._cluster.bootstrap)
            random.shuffle(addrs)
            return addrs
        node_id = int(target.split("-", 1)[1])
        if node_id not in self._directory.upstream:
            await self._refresh_brokers()
        known = self._directory.upstream.get(node_id)
        return [known] if known is not None else []


def _peer(stream: trio.SocketStream) -> str:
    try:
        host, port = stream.socket.getpeername()[:2]
        return f"{host}:{port}"
    except OSError:
        return "unknown"
