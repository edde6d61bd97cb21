"""The proxy's listening ports: one for the bootstrap servers, one per broker once learned.

One listener stands for the bootstrap servers; one more per broker (at
`broker_port_base + node id`) is opened as soon as a broker is learned, before any client can
be told its address. Every accepted connection is handled in a task of its own; what happens
when the process is out of descriptors is `accepting.py`'s.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection

import trio

from proxy.observability.logs import get_logger
from proxy.serving.accepting import Accepting

log = get_logger("server")

BOOTSTRAP = "bootstrap"
"""The target of the bootstrap listener (broker listeners are `broker-<node id>`)."""


class Listeners:
    """Opens the listeners and runs their accept loops; `handle(stream, target)` serves each
    accepted connection."""

    def __init__(self, host: str,
                 handle: Callable[[trio.SocketStream, str], Awaitable[None]],
                 accepting: Accepting) -> None:
        self._host = host
        self._handle = handle
        self._accepting = accepting
        self._broker_ports: set[int] = set()
        self.unbound: dict[int, str] = {}
        """Broker ports that could not be bound: port -> why. Retried at every open_broker
        (each metadata refresh and each Metadata response), and Herald is not ready while
        one is left: clients are told these ports."""
        self._nursery: trio.Nursery | None = None
        self._handlers: trio.Nursery | None = None

    def start(self, nursery: trio.Nursery, handlers: trio.Nursery) -> None:
        """Accept loops run in `nursery` (cancelling it closes every listener); connections
        are handled in `handlers`, which outlives it so that sessions can drain."""
        self._nursery = nursery
        self._handlers = handlers

    async def listen(self, target: str, port: int) -> None:
        """Listen on `port` for `target`; raises `OSError` when the port cannot be bound."""
        host = self._host
        listeners = await trio.open_tcp_listeners(port, host=host)
        assert self._nursery is not None
        self._nursery.start_soon(self._accept_loop, listeners, target)
        log.info("listening", target=target, address=f"{host}:{port}")

    async def open_broker(self, node_id: int, port: int) -> None:
        """Listen for broker `node_id` on `port`, unless that port is open already (or the
        proxy has not started).

        A port that cannot be bound (another process holds it, or an outgoing connection
        took it as its local port) is logged once and tried again at the next call, so a
        port that comes free is served without a restart."""
        if port in self._broker_ports or self._nursery is None:
            return
        self._broker_ports.add(port)
        try:
            await self.listen(f"broker-{node_id}", port)
        except OSError as exc:
            self._broker_ports.discard(port)
            why = exc.strerror or str(exc)
            if port not in self.unbound:
                log.error("listen_failed", node_id=node_id, port=port, error=why)
            self.unbound[port] = f"cannot listen on port {port} for broker {node_id}: {why}"
            return
        if self.unbound.pop(port, None) is not None:
            log.info("listen_recovered", node_id=node_id, port=port)

    def keep_unbound(self, ports: Collection[int]) -> None:
        """Stop waiting for unbound ports that are not in `ports` (the ports of the brokers
        the cluster has now): a broker that left is no reason to stay not ready."""
        for port in [p for p in self.unbound if p not in ports]:
            del self.unbound[port]
            log.info("listen_abandoned", port=port, reason="broker left the cluster")

    async def _accept_loop(self, listeners: list[trio.SocketListener], target: str) -> None:
        handlers = self._handlers
        assert handlers is not None
        await self._accepting.serve_all(listeners, target, handlers,
                                        lambda stream: self._handle(stream, target))
