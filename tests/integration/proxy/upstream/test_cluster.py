"""Three brokers behind Herald: each broker has its own Herald port; clients use only those."""

from __future__ import annotations

import time
import urllib.request

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from protocol.api_keys import ApiKey
from protocol.fetch_tail import PAD_TAG
from protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from proxy.devtools.embedded_kafka import KafkaCluster, free_port
from proxy.net.wire import decode_response
from tests.support.clients import consume_all
from tests.support.connections import remote_ports_of_this_process
from tests.support.herald_process import HeraldProcess, herald_config
from tests.support.raw_client import SocketRawClient, metadata, request_frame


def test_partitions_on_every_broker_flow_through_herald_ports(
    kafka_cluster: KafkaCluster, herald_cluster: HeraldProcess, topic_name: str
) -> None:
    admin = AdminClient({"bootstrap.servers": herald_cluster.bootstrap})
    admin.create_topics([NewTopic(topic_name, num_partitions=6)])[topic_name].result(30)
    deadline = time.monotonic() + 30
    while True:
        md = admin.list_topics(timeout=10)
        parts = md.topics.get(topic_name)
        if parts and parts.error is None and all(p.leader > 0 for p in parts.partitions.values()):
            break
        assert time.monotonic() < deadline, "no leaders"
        time.sleep(0.2)

    # The metadata clients see names Herald's ports only, one per broker.
    base = herald_cluster.port_base
    assert {b.id: b.port for b in md.brokers.values()} == {1: base + 1, 2: base + 2, 3: base + 3}
    assert {b.host for b in md.brokers.values()} == {"127.0.0.1"}
    leaders = {p.leader for p in md.topics[topic_name].partitions.values()}
    assert len(leaders) >= 2, f"partitions should be led by several brokers: {leaders}"

    producer = Producer({"bootstrap.servers": herald_cluster.bootstrap, "acks": "all"})
    for i in range(600):
        producer.produce(topic_name, str(i).encode(), partition=i % 6)
    producer.poll(0)
    broker_ports = {n.port for n in kafka_cluster.nodes}
    assert not remote_ports_of_this_process() & broker_ports
    assert producer.flush(30) == 0

    got = consume_all(herald_cluster.bootstrap, topic_name, 600)
    assert sorted(int(m.value()) for m in got) == list(range(600))
    assert {m.partition() for m in got} == set(range(6))
    # Checked while clients are connected: none of them talks to a broker directly.
    assert not remote_ports_of_this_process() & broker_ports


@pytest.mark.parametrize(
    "advertised_host",
    ["127.0.0.1", "h.test", "herald-proxy.example.test"],
    ids=["same-length", "shorter", "longer"],
)
def test_a_streamed_fetch_response_gets_its_node_endpoints_rewritten(
    kafka_cluster: KafkaCluster, topic_name: str, advertised_host: str
) -> None:
    """KIP-951 node endpoints sit at the end of a Fetch response Herald forwards as it arrives.

    One broker is asked, in a single Fetch v16, for a partition it leads (200 KiB of records,
    so the response is streamed) and one it does not (answered NOT_LEADER_OR_FOLLOWER with the
    current leader and its endpoint). The endpoint must name Herald, at the same frame length,
    whatever the length of Herald's advertised host.
    """
    config = herald_config(
        kafka_cluster.nodes[0].address,
        listen={"advertised_host": advertised_host},
        admin={"bind": f"127.0.0.1:{free_port()}"},
    )
    with HeraldProcess(config) as herald:
        admin = AdminClient({"bootstrap.servers": kafka_cluster.nodes[0].address})
        admin.create_topics([NewTopic(topic_name, num_partitions=6)])[topic_name].result(30)
        client = SocketRawClient(herald.bootstrap)
        try:
            leaders, topic_id = _leaders_and_id(client, topic_name)
        finally:
            client.close()
        here = leaders[0]
        other = next(p for p, node in leaders.items() if node != here)
        producer = Producer({"bootstrap.servers": kafka_cluster.nodes[0].address})
        for i in range(200):
            producer.produce(topic_name, i.to_bytes(4, "big") * 256, partition=0)
        assert producer.flush(30) == 0

        streamed_before = _streamed(herald)
        client = SocketRawClient(f"127.0.0.1:{herald.port_base + here}")
        try:
            body = FetchRequest(max_wait_ms=100, min_bytes=1, max_bytes=1 << 22, topics=[
                FetchTopic(topic_id=topic_id, partitions=[
                    FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 21),
                    FetchPartition(partition=other, fetch_offset=0, partition_max_bytes=1 << 21),
                ])])
            client.send(request_frame(ApiKey.FETCH, 16, 7, body))
            payload = client.recv()
        finally:
            client.close()
        assert payload is not None
        _, msg = decode_response(ApiKey.FETCH, 16, payload)
        parts = {p.partition_index: p for p in msg.responses[0].partitions}
        assert parts[0].error_code == 0
        assert len(parts[0].records) > 200 * 1024
        assert parts[other].error_code == 6  # NOT_LEADER_OR_FOLLOWER
        assert parts[other].current_leader.leader_id == leaders[other]
        assert _streamed(herald) > streamed_before
        # No endpoint names a broker; one that could not be written at the broker's length
        # is left out (the client then asks Metadata, which Herald rewrites).
        pads = set(msg.unknown_tagged_fields or ())
        if advertised_host == "herald-proxy.example.test":
            assert msg.node_endpoints == [] and pads == {PAD_TAG}
        else:
            assert [(e.node_id, e.host, e.port) for e in msg.node_endpoints] == [
                (leaders[other], advertised_host, herald.port_base + leaders[other])
            ]
            assert pads == (set() if advertised_host == "127.0.0.1" else {PAD_TAG})


def _leaders_and_id(client: SocketRawClient, topic: str) -> tuple[dict[int, int], bytes]:
    """Partition -> leader node id, and the topic id, from Metadata through Herald."""
    deadline = time.monotonic() + 30
    while True:
        client.send(metadata(1, [topic]))
        payload = client.recv()
        assert payload is not None
        _, msg = decode_response(ApiKey.METADATA, 12, payload)
        t = msg.topics[0]
        leaders = {p.partition_index: p.leader_id for p in t.partitions}
        if t.error_code == 0 and leaders and min(leaders.values()) >= 0:
            if len(set(leaders.values())) >= 2:
                return leaders, t.topic_id
        assert time.monotonic() < deadline, f"no leaders on several brokers: {leaders}"
        time.sleep(0.2)


def _streamed(herald: HeraldProcess) -> float:
    with urllib.request.urlopen(herald.admin_url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "herald_responses_streamed_total"
    )


def test_the_node_a_client_names_is_the_broker_behind_the_herald_port_it_reached(
    kafka_cluster: KafkaCluster, herald_cluster: HeraldProcess
) -> None:
    """KIP-1242 (ApiVersions v5): a client names the cluster and node it believes it reached,
    from what Metadata told it, and the broker answers REBOOTSTRAP_REQUIRED when it is another.
    Through Herald, each broker's Herald port leads to that very broker, so the check holds:
    the node's own id passes, another node's id or another cluster's id is refused."""
    from protocol.contracts.kafka_errors import REBOOTSTRAP_REQUIRED
    from protocol.messages.api_versions_request import ApiVersionsRequest
    from protocol.messages.api_versions_response import ApiVersionsResponse
    from proxy.filters.api_versions import codec_range

    version = (codec_range(ApiKey.API_VERSIONS) or (0, 0))[1]
    assert version >= 5
    client = SocketRawClient(herald_cluster.bootstrap)
    client.send(metadata(1, []))
    payload = client.recv()
    client.close()
    assert payload is not None
    told = decode_response(ApiKey.METADATA, 12, payload)[1]
    nodes = {b.node_id: f"{b.host}:{b.port}" for b in told.brokers}
    assert len(nodes) == 3 and told.cluster_id

    def check(address: str, cluster_id: str, node_id: int) -> int:
        conn = SocketRawClient(address)
        conn.send(request_frame(ApiKey.API_VERSIONS, version, 3, ApiVersionsRequest(
            client_software_name="raw", client_software_version="1",
            cluster_id=cluster_id, node_id=node_id)))
        answer = conn.recv()
        conn.close()
        assert answer is not None, f"{address} closed on ApiVersions v{version}"
        return ApiVersionsResponse.decode(answer, version, 4).error_code

    for node_id, address in nodes.items():
        assert not address.endswith(f":{kafka_cluster.node(node_id).port}")
        assert check(address, told.cluster_id, node_id) == 0
        other = next(n for n in nodes if n != node_id)
        assert check(address, told.cluster_id, other) == REBOOTSTRAP_REQUIRED
        assert check(address, "AAAAAAAAAAAAAAAAAAAAAA", node_id) == REBOOTSTRAP_REQUIRED
