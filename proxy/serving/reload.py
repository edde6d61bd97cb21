"""Re-reading the config file while the proxy runs: new requests use the new chains.

Only `interceptors` and `routing` (but its `journal` and `delivery_timeout_s`, which the
destinations' producers and the journal took at start) are reloaded; listeners, upstream,
clusters and limits need a restart, and a change to them is logged with the keys it names.
An invalid file changes nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from interceptors import ConfigError, ProxyInfo
from proxy.filters.interception import InterceptorFilter
from proxy.filters.member_services import build_chains
from proxy.observability.logs import get_logger
from proxy.routing.destinations import Destination
from proxy.routing.produce_filter import RoutingFilter
from proxy.routing.rules import RoutingTable
from proxy.session.environment import SessionEnvironment

if TYPE_CHECKING:  # the assembled config is a layer above; the proxy hands over its loader
    from proxy.config.proxy_yaml import ProxyConfig

log = get_logger("server")


class ConfigReload:
    """Applies a re-read config file to the chain members that can change while running."""

    def __init__(
        self,
        env: SessionEnvironment,
        proxy_info: ProxyInfo,
        destinations: dict[str, Destination],
        interceptors: InterceptorFilter,
        routing: RoutingFilter,
        load: Callable[[Path], ProxyConfig],
    ) -> None:
        """`interceptors` and `routing` are members of `env.chain`: a reload swaps their
        chains and table, each in one assignment, and resets the chain's plans, so the
        environment's chain stays the same object (see `SessionEnvironment`). `load` reads
        and checks the whole file, as at start."""
        self._load = load
        self._proxy_info = proxy_info
        self._destinations = destinations
        self._chain = env.chain
        self._interceptors = interceptors
        self._routing = routing
        self._native = env.native
        self._metrics = env.metrics

    def apply(self, config: ProxyConfig) -> ProxyConfig | None:
        """Re-read the file `config` was loaded from; return the config the proxy runs with
        from now on, or None when nothing changed (no file, or an invalid one)."""
        source = config.source
        if source is None:
            return None
        try:
            fresh = self._load(source)
            chains = build_chains(fresh.interceptors, self._proxy_info)
            missing = fresh.routing.clusters() - set(self._destinations)
            if missing:
                raise ConfigError(f"routing.rules: no rule wrote to cluster "
                                  f"{sorted(missing)[0]!r} at start, so Herald has no producer "
                                  "for it; routing there needs a restart")
        except ConfigError as exc:
            self._metrics.config_reloads.labels("rejected").inc()
            log.error("config_reload_rejected", path=str(source), error=str(exc))
            return None
        # The journal and the destinations' producers were made at start and stay as they
        # are: those two routing keys keep their running values, like the other sections.
        routing = dataclasses.replace(fresh.routing, journal=config.routing.journal,
                                      delivery_timeout_s=config.routing.delivery_timeout_s)
        changed = [*_changed(config, fresh, "", skip=("interceptors", "routing", "source")),
                   *_changed(config.routing, fresh.routing, "routing.",
                             skip=("rules", "seal"))]
        if changed:
            log.warning("config_reload_partial", path=str(source), keys=",".join(changed),
                        note="only interceptors and routing rules are reloaded; restart for "
                        "the other changes")
        self._metrics.retire_chains(self._interceptors.chains)
        self._interceptors.chains = chains
        self._routing.table = RoutingTable(fresh.routing)
        self._chain.reset()
        if self._native is not None:
            self._native.forget_tables()  # and every native session comes back to Python
        running = dataclasses.replace(config, interceptors=fresh.interceptors,
                                      routing=routing)
        self._metrics.config_reloads.labels("applied").inc()
        log.info("config_reloaded", path=str(source))
        return running


# Config fields by their YAML path, where the two differ.
_SECTIONS = {"shutdown_grace_s": "shutdown.grace_s", "instance_id": "instance.id",
             "native_relay": "performance.native_relay", "reload_watch_s": "reload.watch_s"}


def _changed(old: object, new: object, prefix: str, skip: tuple[str, ...]) -> list[str]:
    """Where two config dataclasses differ, as YAML paths, but the fields in `skip`: what a
    user changed that the running proxy does not take."""
    return [prefix + _SECTIONS.get(f.name, f.name)
            for f in dataclasses.fields(old)  # type: ignore[arg-type]
            if f.name not in skip and getattr(old, f.name) != getattr(new, f.name)]
