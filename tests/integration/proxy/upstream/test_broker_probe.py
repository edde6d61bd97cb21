"""Herald's own Metadata probe (readiness, broker addresses) keeps its connection to the broker.

It runs every two seconds: a new connection each time cost the broker and Herald a TCP
handshake, an ApiVersions exchange and, with credentials, a SASL exchange.
"""

from __future__ import annotations

from proxy.config.proxy_yaml import parse_config
from proxy.devtools.embedded_kafka import KafkaCluster
from proxy.upstream.cluster import UpstreamCluster
from tests.support.herald_process import herald_config


def _probe_port(cluster: UpstreamCluster) -> int:
    assert cluster._probe is not None
    return cluster._probe.io.transport.sock.getsockname()[1]


async def test_the_probe_connection_is_kept_and_replaced_when_it_breaks(
        kafka: KafkaCluster) -> None:
    cluster = UpstreamCluster(parse_config(herald_config(kafka.bootstrap)).upstream)
    first = await cluster.fetch_brokers()
    assert [port for _, _, port in first] == [int(kafka.bootstrap.rsplit(":", 1)[1])]
    port = _probe_port(cluster)
    for _ in range(3):
        assert await cluster.fetch_brokers() == first
        assert _probe_port(cluster) == port
    # The connection goes away under the probe (a broker restart, an idle timeout): the next
    # call answers from a fresh one, and the caller never sees the broken one.
    await cluster._probe.io.transport.aclose()
    assert await cluster.fetch_brokers() == first
    assert _probe_port(cluster) != port
