"""The chains as the proxy builds them: with the services members may use
(`interceptors.services`).

Members are built with a `ProxyInfo`; the proxy's (`proxy.security.kafka_clients.proxy_info`)
carries what a member may ask for beyond records: Kafka clients towards a cluster of its own
(`KafkaClientFactory`, whose security sections are checked as `upstream`'s are, so a bad
`tls.ca_file` fails the chains, naming `interceptors.fetch[N].tls.ca_file`), and the consumer
groups clients read for (filled in by `ConsumerGroupLearner`, which takes the same
`ProxyInfo`). The running proxy builds its chains through here, at start and on reload; a
configuration being checked builds them with the same `proxy_info` (`proxy.config`).
"""

from __future__ import annotations

from typing import Any

from interceptors import Chains, ProxyInfo
from interceptors.chains_from_yaml import build_chains as build_member_chains
from proxy.security.kafka_clients import proxy_info


def build_chains(spec: Any, info: ProxyInfo | None = None) -> Chains:
    """Both chains from the ``interceptors`` section, their members given `info` (by default
    a fresh `proxy_info()`); raise `interceptors.ConfigError` naming the bad key."""
    return build_member_chains(spec, info if info is not None else proxy_info())
