"""A `SessionEnvironment` for tests that run a `Session` between socket pairs they drive.

The parts are real (the test's chain and metrics, an upstream cluster and broker directory
parsed from a minimal config); nothing here connects anywhere: a session between socket pairs
never asks its cluster for anything unless its upstream authentication expires, which these
sessions never say.
"""

from __future__ import annotations

from proxy.config.proxy_yaml import parse_config
from proxy.filters.chain import FilterChain
from proxy.limits.connection_guard import ConnectionGuard
from proxy.limits.memory_budget import MemoryBudget
from proxy.limits.session_limits import SessionLimits
from proxy.native.relay import NativeRelay
from proxy.observability.metrics import Metrics
from proxy.session.environment import SessionEnvironment
from proxy.upstream.brokers import BrokerDirectory
from proxy.upstream.cluster import UpstreamCluster

CONFIG = parse_config({"upstream": {"bootstrap": "127.0.0.1:9092"},
                       "listen": {"bootstrap": "127.0.0.1:0", "advertised_host": "herald",
                                  "broker_port_base": 30000}})
"""Where the environment's cluster and directory point: nothing listens there."""

LIMITS = SessionLimits(max_frame_bytes=8 << 20, max_in_flight=100)
"""Frames up to 8 MiB, 100 requests in flight, no client deadlines."""


def session_environment(
    chain: FilterChain,
    metrics: Metrics,
    native: NativeRelay | None = None,
    limits: SessionLimits = LIMITS,
    memory: MemoryBudget | None = None,
) -> SessionEnvironment:
    """An environment for sessions over `chain`, counted in `metrics`, on `native` (None:
    performance.native_relay off)."""
    return SessionEnvironment(
        chain=chain, metrics=metrics, limits=limits,
        cluster=UpstreamCluster(CONFIG.upstream), directory=BrokerDirectory(CONFIG.listen),
        guard=ConnectionGuard(1000, 1000, lambda limit: None),
        memory=memory, native=native,
    )
