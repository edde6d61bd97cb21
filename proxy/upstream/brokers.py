"""Which upstream broker each Herald port stands for, and the ports clients are told to use.

The broker with node id N is reached at `broker_port_base + N` on Herald. The directory learns
upstream addresses from the responses that carry them (Metadata, FindCoordinator,
DescribeCluster, KIP-951 node endpoints) and asks the server to open a listener for every
broker it has not seen before, before the client can learn the new address (and again each
time it learns a broker whose port could not be bound).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from configuration import HostPort
from protocol.errors import CodecError
from proxy.observability.logs import get_logger

if TYPE_CHECKING:  # the `listen` section is the serving layer's; read here, never built
    from proxy.serving.config import ListenConfig

log = get_logger("brokers")


class BrokerOutOfRange(CodecError):
    """A broker node id whose Herald port would be outside 1-65535: a response naming it
    cannot be rewritten (a broker that sends one is misconfigured or hostile), so the session
    it came on closes with that reason, as for any response Herald cannot read."""


class BrokerDirectory:
    def __init__(
        self,
        listen: ListenConfig,
        open_listener: Callable[[int], Awaitable[None]] | None = None,
    ) -> None:
        self.listen = listen
        self.upstream: dict[int, HostPort] = {}
        self._open_listener = open_listener

    def advertised_port(self, node_id: int) -> int:
        port = self.listen.broker_port_base + node_id
        if not 0 < port <= 65535:
            raise BrokerOutOfRange(
                f"broker node id {node_id} does not fit listen.broker_port_base "
                f"{self.listen.broker_port_base}"
            )
        return port

    async def learn(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        """Record where broker `node_id` really is; return the address clients must use."""
        address = HostPort(host, port)
        advertised = self.advertised_port(node_id)  # before anything is recorded
        known = self.upstream.get(node_id)
        if known != address:
            self.upstream[node_id] = address
            log.info("broker_learned", node_id=node_id, upstream=address, port=advertised)
        if self._open_listener is not None:  # a no-op once open; retries a failed bind
            await self._open_listener(node_id)
        return self.listen.advertised_host, advertised
