"""The proxy process: its entry point, and the `Proxy` that composes what it runs.

`run` is the process: it tunes the allocator, sets up tracing, and runs a `Proxy` until
SIGTERM/SIGINT. A `Proxy` builds the filter chain and the parts that serve with it (see
`proxy.serving`: listeners, connections, reloads), starts them in order, answers readiness,
and drains the sessions on the way out.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

import trio

from proxy.config.proxy_yaml import ProxyConfig, load_config
from proxy.filters.address_rewrite import AddressRewriter
from proxy.filters.api_versions import ApiVersionsNegotiator
from proxy.filters.chain import Filter, FilterChain
from proxy.filters.group_learner import ConsumerGroupLearner
from proxy.filters.interception import InterceptorFilter
from proxy.filters.member_services import build_chains
from proxy.filters.sasl import SaslPrincipalLearner, SaslRefusal
from proxy.filters.share_drops import ShareDrops
from proxy.filters.topic_ids import TopicIdLearner
from proxy.filters.tracing import TracingFilter
from proxy.limits import allocator
from proxy.limits.config import (
    FDS_KEPT,
    FDS_PER_CONNECTION,
    connections_within,
    raise_descriptor_limit,
)
from proxy.limits.connection_guard import ConnectionGuard
from proxy.limits.memory_budget import MemoryBudget
from proxy.limits.session_limits import SessionLimits
from proxy.limits.stats import LimitMetrics
from proxy.native.path_choice import NATIVE_UNAVAILABLE, engine_reason
from proxy.native.relay import NativeRelay
from proxy.net.config import ListenError
from proxy.net.descriptors import OUT_OF_DESCRIPTORS, OutOfDescriptors
from proxy.observability.logs import get_logger
from proxy.observability.metrics import Metrics
from proxy.observability.tracing import Tracing, tracing_from_env
from proxy.routing.config import journal_path
from proxy.routing.destinations import Destination
from proxy.routing.produce_filter import RoutingFilter
from proxy.routing.rules import PRIMARY, RoutingTable
from proxy.routing.stats import RoutingStats
from proxy.security.kafka_clients import proxy_info
from proxy.security.tls import ReloadingContext
from proxy.serving.accepting import Accepting
from proxy.serving.admin import AdminServer
from proxy.serving.collector import CollectorKeeper
from proxy.serving.connections import Connections
from proxy.serving.listeners import BOOTSTRAP, Listeners
from proxy.serving.reload import ConfigReload
from proxy.serving.watch import watch_file
from proxy.session.environment import SessionEnvironment
from proxy.session.session import Session
from proxy.upstream.brokers import BrokerDirectory, BrokerOutOfRange
from proxy.upstream.cluster import AuthRequired, UpstreamCluster
from proxy.upstream.topic_ids import TopicIds
from proxy.upstream.topic_limits import TopicLimits

log = get_logger("server")

UNREACHABLE = "upstream unreachable"
"""Not ready: the cluster did not answer (OUT_OF_DESCRIPTORS: Herald could not ask)."""

CERTIFICATE_CHECK_S = 5.0
"""How often certificate files are checked for a rotation (SIGHUP checks at once)."""


class Proxy:
    """The proxy: its filter chain, its listeners and the sessions they accept, from start
    to drain."""

    def __init__(
        self,
        config: ProxyConfig,
        tracing: Tracing | None = None,
    ) -> None:
        self.config = config
        limits = config.limits
        self.memory = MemoryBudget(limits.memory_budget_bytes)
        self.metrics = Metrics(frozenset(config.admin.topic_labels))
        self.limit_metrics = LimitMetrics(self.metrics, self.memory)
        self.upstream_reachable = False
        self.unreachable_reason = UNREACHABLE
        self.cluster = UpstreamCluster(config.upstream)
        self.listen_tls = ReloadingContext(config.listen.tls) if config.listen.tls else None
        self.admin_tls = ReloadingContext(config.admin.tls) if config.admin.tls else None
        self.directory = BrokerDirectory(config.listen, self._open_broker_listener)
        self.proxy_info = proxy_info(config.instance_id)
        self.topic_ids = TopicIds(on_cluster_id=self._set_cluster_id)
        self.topic_limits = TopicLimits(self.cluster.request_once)
        self.interceptors = InterceptorFilter(
            build_chains(config.interceptors, self.proxy_info), self.topic_ids,
            self.metrics.codec, self.metrics.topics,
            limits, self.topic_limits, self.limit_metrics.stats,
            memory=self.memory, report_traces=tracing is not None,
            share=ShareDrops(self.metrics.share_dropped, self.metrics.share_redelivered),
        )
        self.metrics.watch_interceptors(lambda: self.interceptors.chains)
        # Tracing is a chain member only when it is on: off, it costs nothing per request.
        traced: list[Filter] = []
        if tracing is not None:
            traced.append(TracingFilter(tracing, self.topic_ids, self.metrics.spans_skipped.inc))
        self.routing_stats = RoutingStats(self.metrics.registry)
        self.destinations = self._destinations(config)
        self.routing = RoutingFilter(
            RoutingTable(config.routing), self.topic_ids, self.destinations, self.routing_stats,
            origin=lambda: (self.proxy_info.cluster_id or PRIMARY).encode(), tracing=tracing,
            journal=journal_path(config.routing.journal, config.source,
                                 config.listen.bootstrap.port if config.listen.bootstrap else 0,
                                 os.environ),
            cluster_id=lambda: self.proxy_info.cluster_id,
        )
        self.chain = FilterChain([
            ApiVersionsNegotiator(),
            self._sasl_member(),
            AddressRewriter(self.directory),
            TopicIdLearner(self.topic_ids),
            ConsumerGroupLearner(lambda: self.interceptors.chains, self.proxy_info),
            self.routing.arrivals,  # before the chains: origin marks as records arrived
            self.interceptors,
            self.routing,  # after the chains: routed records carry what enrichment added
            *traced,
        ])
        self.guard = ConnectionGuard(
            limits.max_connections, limits.max_connections_per_source,
            lambda limit: self.metrics.connection_limit_hits.labels(limit).inc(),
        )
        self.admin_port: int | None = None
        self._nursery: trio.Nursery | None = None
        self._stopping = False
        self.ready = trio.Event()
        no_engine = engine_reason(config.native_relay)
        self.native = NativeRelay(self.metrics, self.memory) if no_engine is None else None
        if no_engine == NATIVE_UNAVAILABLE:
            log.warning("native_relay_unavailable",
                        note="performance.native_relay is auto but proxy.native._relay is not "
                        "built; every session uses the Python path")
        # Built once, from the parts above, and never changed: see SessionEnvironment for how
        # a reload changes the chain without replacing it.
        self.environment = SessionEnvironment(
            chain=self.chain, metrics=self.metrics, limits=SessionLimits.of(limits),
            cluster=self.cluster, directory=self.directory, guard=self.guard,
            memory=self.memory, listen_tls=self.listen_tls, native=self.native,
            no_engine=no_engine,
        )
        self.connections = Connections(self.environment, self.refresh_brokers)
        self.collector = CollectorKeeper(self.metrics, self.connections.counts)
        self.sessions: set[Session] = self.connections.sessions
        # One for every port: running out of descriptors is one episode of the process's.
        self.accepting = Accepting(lambda reason: self.metrics.accept_errors.labels(reason).inc(),
                                   lambda: len(self.sessions))
        self.listeners = Listeners(config.listen.bootstrap.host, self.connections.handle,
                                   self.accepting)
        self._reload = ConfigReload(self.environment, self.proxy_info, self.destinations,
                                    self.interceptors, self.routing, load_config)

    def _destinations(self, config: ProxyConfig) -> dict[str, Destination]:
        """A producer per named cluster, and one for the primary when a rule writes there."""
        timeout = config.routing.delivery_timeout_s
        gauge = self.routing_stats.cluster_up
        on_state = lambda name, up: gauge.labels(name).set(1 if up else 0)  # noqa: E731
        out = {name: Destination(name, c, timeout, on_state)
               for name, c in config.clusters.items()}
        if PRIMARY in config.routing.clusters():
            out[PRIMARY] = Destination(PRIMARY, config.upstream, timeout)
        return out

    def _sasl_member(self) -> Filter:
        if self.config.upstream.sasl is not None:
            return SaslRefusal()
        counter = self.metrics.sasl_authentications
        return SaslPrincipalLearner(
            self.config.listen.sasl.oauthbearer_principal_claim,
            lambda mechanism, outcome: counter.labels(mechanism, outcome).inc(),
        )

    # ---- lifecycle -------------------------------------------------------------------------

    async def serve(self, on_ready: Callable[[Proxy], None] | None = None) -> None:
        """Run until `stop()` (or SIGTERM/SIGINT when `handle_signals` runs beside it)."""
        try:
            await self._serve(on_ready)
        finally:
            self.collector.uninstall()
            if self.native is not None:
                self.native.close()

    async def _serve(self, on_ready: Callable[[Proxy], None] | None) -> None:
        async with trio.open_nursery() as sessions:
            if self.native is not None:
                sessions.start_soon(self.native.run)
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self.listeners.start(nursery, sessions)
                try:
                    await self.listeners.listen(BOOTSTRAP, self.config.listen.bootstrap.port)
                except OSError as exc:
                    where = self.config.listen.bootstrap
                    raise ListenError(f"listen.bootstrap {where}: {exc.strerror or exc}") from exc
                if self.config.admin.bind is not None:
                    # In the outer nursery: while sessions drain, /readyz keeps answering
                    # 503 "draining" instead of refusing connections.
                    admin = AdminServer(self.config.admin.bind, self.metrics, self.readiness,
                                        self.admin_tls, self.config.admin.token,
                                        self.accepting)
                    self.admin_port = await sessions.start(admin.serve)
                self.upstream_reachable = await self.refresh_brokers()
                nursery.start_soon(self._watch_upstream)
                async with trio.open_nursery() as first_probes:
                    for destination in self.destinations.values():
                        destination.start()
                        if destination.name != PRIMARY:
                            first_probes.start_soon(nursery.start, destination.watch)
                if self._tls_contexts():
                    nursery.start_soon(self._watch_certificates)
                nursery.start_soon(self.topic_limits.run)
                # What starting made (modules, the generated codec, config, chains) lives as
                # long as the process; what sessions keep is frozen as they settle.
                self.collector.install()
                nursery.start_soon(self.collector.run)
                self.ready.set()
                if on_ready is not None:
                    on_ready(self)
                await trio.sleep_forever()
            # Listeners are closed; the sessions drain within the grace period.
            await self.connections.drain(self.config.shutdown_grace_s)
            sessions.cancel_scope.cancel()
        for destination in self.destinations.values():
            await destination.close()

    def readiness(self) -> tuple[bool, str]:
        """Ready: listeners bound (a learned broker's too), the upstream cluster answered
        lately, and not draining."""
        if self._stopping:
            return False, "draining"
        if not self.ready.is_set():
            return False, "starting"
        if not self.upstream_reachable:
            return False, self.unreachable_reason
        if self.listeners.unbound:
            return False, "; ".join(sorted(self.listeners.unbound.values()))
        states = [f"{d.name}={'up' if d.reachable else 'down'}"
                  for d in self.destinations.values() if d.name != PRIMARY]
        return True, f"ready (clusters: {', '.join(states)})" if states else "ready"

    async def _watch_upstream(self, period: float = 2.0) -> None:
        while True:
            await trio.sleep(period)
            ok = await self.refresh_brokers()
            if ok != self.upstream_reachable:
                log.warning("upstream_state", reachable=ok,
                            reason=None if ok else self.unreachable_reason)
            self.upstream_reachable = ok

    def _tls_contexts(self) -> list[ReloadingContext]:
        return [c for c in (self.listen_tls, self.cluster.tls, self.admin_tls) if c is not None]

    def check_certificates(self) -> None:
        """Re-read certificate files that changed: new connections use them, established
        ones keep theirs."""
        for context in self._tls_contexts():
            outcome = context.check()
            if outcome is not None:
                self.metrics.tls_reloads.labels(outcome).inc()

    async def _watch_certificates(self) -> None:
        while True:
            await trio.sleep(CERTIFICATE_CHECK_S)
            self.check_certificates()

    def _set_cluster_id(self, cluster_id: str) -> None:
        self.proxy_info.cluster_id = cluster_id

    def reload(self) -> bool:
        """Re-read the config file: new requests use the new interceptor chains.

        Only `interceptors` and `routing` are reloaded; listeners, upstream, clusters and
        limits need a restart, and a change to them is logged. An invalid file changes nothing.
        """
        config = self._reload.apply(self.config)
        if config is None:
            return False
        self.config = config
        return True

    def stop(self) -> None:
        """Stop accepting connections and begin draining (idempotent)."""
        if self._stopping:
            return
        self._stopping = True
        log.info("shutdown_started", grace_s=self.config.shutdown_grace_s)
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    async def handle_signals(self) -> None:
        """SIGHUP reloads; the first SIGTERM/SIGINT drains, later ones are absorbed."""
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            async for signum in signals:
                if signum == signal.SIGHUP:
                    self.reload()
                    self.check_certificates()
                else:
                    self.stop()

    # ---- brokers ----------------------------------------------------------------------------

    async def _open_broker_listener(self, node_id: int) -> None:
        """A broker was learned: open its port, unless the proxy is stopping."""
        port = self.directory.advertised_port(node_id)
        if not self._stopping:
            await self.listeners.open_broker(node_id, port)

    async def refresh_brokers(self) -> bool:
        """Ask the upstream cluster for its brokers (Metadata with no topics).

        A cluster that wants clients to authenticate first (SASL passthrough) still counts as
        reachable when it answers ApiVersions; its brokers are then learned from the clients'
        own Metadata responses.
        """
        try:
            brokers = await self.cluster.fetch_brokers()
        except AuthRequired:
            return True
        except OutOfDescriptors as exc:
            self.unreachable_reason = OUT_OF_DESCRIPTORS
            log.info("metadata_refresh_failed", reason=OUT_OF_DESCRIPTORS, error=exc.name)
            return False
        except ConnectionError as exc:
            self.unreachable_reason = UNREACHABLE
            log.info("metadata_refresh_failed", error=str(exc))
            return False
        ports = []
        for node_id, host, port in brokers:
            try:
                _, advertised = await self.directory.learn(node_id, host, port)
            except BrokerOutOfRange as exc:  # the others are still reachable
                log.warning("broker_not_advertised", node_id=node_id, error=str(exc))
            else:
                ports.append(advertised)
        self.listeners.keep_unbound(ports)
        return True


def run(config: ProxyConfig, on_ready: Callable[[Proxy], None] | None = None) -> None:
    """Run the proxy in the foreground until SIGTERM/SIGINT, then drain and return.

    Tracing is configured from the OTEL_* environment variables; the spans still buffered
    are exported before returning.
    """
    check_descriptor_limit(config.limits.max_connections)
    tracing = tracing_from_env()
    allocator.tune(allocator.keep_bytes_for(config.limits.memory_budget_bytes))

    async def main() -> None:
        proxy = Proxy(config, tracing=tracing)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(proxy.handle_signals)
            if config.reload_watch_s > 0 and config.source is not None:
                nursery.start_soon(watch_file, config.source, config.reload_watch_s, proxy.reload)
            await proxy.serve(on_ready)
            nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    finally:
        if tracing is not None:
            tracing.shutdown()


def check_descriptor_limit(max_connections: int) -> None:
    """Raise the open-files limit to the hard one and say whether `limits.max_connections`
    fits in it. A configuration that does not is served as far as it fits (accepting
    pauses at the limit, see `proxy.serving.accepting`), not refused: the limit may be
    raised without restarting the process (`prlimit`)."""
    limit = raise_descriptor_limit()
    log.info("fd_limit", before=limit.inherited, after=limit.soft, hard=limit.hard)
    served = connections_within(limit.soft)
    if max_connections > served:
        log.warning("fd_limit_low", key="limits.max_connections", max_connections=max_connections,
                    nofile=limit.soft, connections_served=served,
                    note=f"each connection takes up to {FDS_PER_CONNECTION} descriptors and "
                    f"{FDS_KEPT} are kept for Herald: raise the open-files limit (ulimit -n, "
                    "LimitNOFILE, the container's nofile) or lower limits.max_connections")
