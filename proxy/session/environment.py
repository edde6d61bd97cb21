"""What every session of a proxy shares, as one value built once.

`server.Proxy` builds the parts (the filter chain, the metrics, the limits, the memory budget,
the upstream cluster and its broker directory, the client TLS context, the native engine) in
the order they depend on each other, then this value from them; `serving.connections` admits
and connects each client with it and every `Session` runs with it. What belongs to one
connection (its sockets, its peer, its principal, its upstream session lifetime) stays a
parameter of its own.

Frozen: no field is ever replaced, so a session can bind what it uses per frame to its own
attributes when it starts. A config reload does not rebuild it either: the chain it holds is
the same `FilterChain` for the proxy's lifetime, and the reload swaps what lives inside it
(the interceptor chains and the routing table, each one attribute assignment of its member,
then `FilterChain.reset`), exactly as it did before this value existed. Sessions keep seeing
one chain object, and each request sees either the old or the new member state, never a mix.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from proxy.filters.chain import FilterChain
from proxy.limits.connection_guard import ConnectionGuard
from proxy.limits.memory_budget import MemoryBudget
from proxy.limits.session_limits import SessionLimits
from proxy.native.relay import NativeRelay
from proxy.observability.metrics import Metrics
from proxy.security.tls import ReloadingContext
from proxy.upstream.brokers import BrokerDirectory
from proxy.upstream.cluster import FrameIO, UpstreamCluster


@dataclass(frozen=True, slots=True)
class SessionEnvironment:
    """The proxy's shared parts, as sessions and the connections that start them see them.

    `native` is the engine, or None, and then `no_engine` says why
    (`path_choice.engine_reason`; performance.native_relay: off when not given). `memory`
    None: no budget (tests that do not measure it). `guard`, `directory` and `listen_tls`
    serve admission and connection (`serving.connections`); a session does not use them.
    """

    chain: FilterChain
    metrics: Metrics
    limits: SessionLimits
    cluster: UpstreamCluster
    directory: BrokerDirectory
    guard: ConnectionGuard
    memory: MemoryBudget | None = None
    listen_tls: ReloadingContext | None = None
    native: NativeRelay | None = None
    no_engine: str | None = None

    @property
    def reauthenticate(self) -> Callable[[FrameIO], Awaitable[int]]:
        """How Herald renews its own authentication on an upstream connection."""
        return self.cluster.authenticate

    @property
    def reauth_timeout_s(self) -> float:
        """How long a renewal may take."""
        return self.cluster.config.connect_timeout_s
