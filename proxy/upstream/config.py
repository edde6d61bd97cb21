"""`upstream`: the Kafka cluster Herald connects to; a named cluster under `clusters:` has the
same shape (`routing/config.py` reads those through `parse_upstream`)."""

from __future__ import annotations

from dataclasses import dataclass

from configuration import ConfigError, HostPort, Node, parse_host_port
from proxy.security.config import (
    ClientTlsConfig,
    SaslClientConfig,
    parse_client_tls,
    parse_sasl_client,
)


@dataclass(frozen=True)
class UpstreamConfig:
    """One Kafka cluster Herald connects to: where it is and how to authenticate to it."""

    bootstrap: list[HostPort]
    connect_timeout_s: float = 10.0
    tls: ClientTlsConfig | None = None
    sasl: SaslClientConfig | None = None  # credential injection; None: clients authenticate


def parse_upstream(node: Node) -> UpstreamConfig:
    """One cluster's section (`upstream`, or a named cluster of the same shape)."""
    config = UpstreamConfig(
        # None when it failed, its error recorded: a load with errors is refused.
        bootstrap=node.attempt(_bootstrap, node),  # type: ignore[arg-type]
        connect_timeout_s=node.number("connect_timeout_s", 10.0, float, 0.1),
        tls=node.attempt(parse_client_tls, node),
        sasl=node.attempt(parse_sasl_client, node),
    )
    node.done()
    return config


def _bootstrap(node: Node) -> list[HostPort]:
    raw = node.get("bootstrap", required=True)
    items = raw.split(",") if isinstance(raw, str) else raw
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{node.key_path('bootstrap')}: expected HOST:PORT or a list of them")
    return [parse_host_port(s.strip() if isinstance(s, str) else s, node.key_path("bootstrap"))
            for s in items]
