"""What a member may ask the proxy for besides records, and the interfaces it gets them through.

Some members need more than the records: `fetch_log` needs the consumer group a client reads
for, and a Kafka producer towards a cluster of its own. They do not reach into the proxy for
it (the interceptor layer imports only `protocol`, so that members stay testable without a
proxy, and a plugin can do whatever a built-in does). A member declares the services it uses
in `Interceptor.uses`; the proxy supplies them through the `ProxyInfo` every member is built
with, and does the work behind a service only while a member of the current chains uses it
(`Chains.uses`):

* `CONSUMER_GROUPS`: `ProxyInfo.groups`, a `GroupDirectory`, the group each client reads for
  as the proxy learned it from the group requests clients send. The proxy decodes those
  requests only while a member uses this.
* `KAFKA_CLIENTS`: `ProxyInfo.kafka`, a `KafkaClients`: the member names a cluster (its
  bootstrap and the `tls` / `sasl` sections, with the keys of `upstream.tls` /
  `upstream.sasl`), and the proxy checks those sections as it checks its own and gives the
  librdkafka settings to reach it. Security stays the proxy's: one parser, one mapping.

Where there is no proxy (unit tests, tools that build chains to check a configuration), the
fields are None and a member does without: no group known, a plaintext cluster only.
"""

from __future__ import annotations

from typing import Any, Protocol

CONSUMER_GROUPS = "consumer_groups"
KAFKA_CLIENTS = "kafka_clients"
SERVICES = frozenset({CONSUMER_GROUPS, KAFKA_CLIENTS})


class GroupDirectory(Protocol):
    """Which consumer group a client reads for (`CONSUMER_GROUPS`)."""

    def group_of(self, address: str, client_id: str | None) -> str | None:
        """The group `client_id` at `address` (``host:port``) reads for; None when it reads
        without a group or the proxy does not know."""
        ...


class KafkaClient(Protocol):
    """A cluster a member writes to itself, as the proxy checked it (`KafkaClients.client`).

    Equal for equal settings and hashable, so a member can keep one producer per cluster
    across reloads; its `repr` shows no secret."""

    def librdkafka(self) -> dict[str, Any]:
        """The librdkafka settings to reach the cluster (``bootstrap.servers`` and security);
        secrets are read now, so a rotated one is picked up by the next client made."""
        ...


class KafkaClients(Protocol):
    """The proxy's service behind `KAFKA_CLIENTS`."""

    def client(self, bootstrap: str, tls: Any = None, sasl: Any = None) -> KafkaClient:
        """The cluster at `bootstrap`, with `tls` and `sasl` as the YAML gave them (the keys
        of `upstream.tls` / `upstream.sasl`), checked now: a bad key raises
        `configuration.InvalidConfig` naming it below the member (``tls.ca_file``)."""
        ...
