"""The Kafka clients the proxy gives chain members towards clusters of their own
(`interceptors.services.KAFKA_CLIENTS`).

A member such as `fetch_log` writes to a cluster itself and names it in its own settings:
a bootstrap, and `tls` / `sasl` sections with the keys of `upstream.tls` / `upstream.sasl`.
Those sections are the proxy's to read: they go through the very parsers of `upstream`
(`parse_client_tls`, `parse_sasl_client`), so the same mistakes are refused with the same
messages, and map to librdkafka settings through `librdkafka_security`, as the routing
destinations' producers do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from configuration import ConfigError, InvalidConfig, Node
from interceptors import ProxyInfo
from proxy.security.config import (
    ClientTlsConfig,
    SaslClientConfig,
    librdkafka_security,
    parse_client_tls,
    parse_sasl_client,
)


@dataclass(frozen=True)
class MemberCluster:
    """A cluster a member writes to, its security sections parsed (secrets are references:
    equal settings compare equal, and nothing secret is in the `repr`)."""

    bootstrap: str
    tls: ClientTlsConfig | None = None
    sasl: SaslClientConfig | None = None

    def librdkafka(self) -> dict[str, Any]:
        """``bootstrap.servers`` and the security settings; secrets are read now."""
        return {"bootstrap.servers": self.bootstrap, **librdkafka_security(self.tls, self.sasl)}


class KafkaClientFactory:
    """`interceptors.services.KafkaClients` as the proxy supplies it (`ProxyInfo.kafka`)."""

    def client(self, bootstrap: str, tls: Any = None, sasl: Any = None) -> MemberCluster:
        """The cluster with `tls` and `sasl` checked now, as `upstream.tls` / `upstream.sasl`
        are; an error names the key below the member (``tls.ca_file: ...``), which the chain
        builder prefixes with the member's own path."""
        node = Node({"tls": tls, "sasl": sasl}, "")
        try:
            return MemberCluster(bootstrap, parse_client_tls(node, "tls"),
                                 parse_sasl_client(node, "sasl"))
        except ConfigError as exc:
            where, _, message = str(exc).partition(": ")
            raise InvalidConfig(where, message) from None


def proxy_info(instance_id: str | None = None) -> ProxyInfo:
    """A `ProxyInfo` with the Kafka clients service in place (`instance_id` None: a fresh
    one): what the chains are built with wherever the proxy's checks should hold, at start, on
    reload, when a configuration is checked. The consumer groups service is put in by
    `ConsumerGroupLearner` when the proxy runs."""
    info = ProxyInfo() if instance_id is None else ProxyInfo(instance_id)
    info.kafka = KafkaClientFactory()
    return info
