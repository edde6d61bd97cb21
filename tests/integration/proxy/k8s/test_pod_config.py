"""What a pod gives Herald: its identity from the downward API, ConfigMap updates that arrive
as a changed file with no signal, and causal links scoped as each shipped shape needs."""

from __future__ import annotations

import uuid

import yaml
from confluent_kafka import Producer

from proxy.devtools.embedded_kafka import KafkaCluster
from proxy.k8s import sidecar
from tests.support.clients import consume_all, create_topic
from tests.support.herald_process import HeraldProcess, herald_config, shipped_config

POD_ENV = {"POD_NAME": "web-5d9c7-x2x8q", "POD_NAMESPACE": "shop", "NODE_NAME": "node-a"}


def test_audit_names_the_pod_and_a_changed_file_is_reloaded_without_a_signal(
    kafka: KafkaCluster, topic_name: str
) -> None:
    def chains(*extra: dict) -> dict:
        return {"produce": [{"type": "audit", "fields": ["proxy"]}, *extra]}

    config = herald_config(
        kafka.bootstrap, interceptors=chains(),
        instance={"id": "${POD_NAMESPACE}/${POD_NAME}@${NODE_NAME}"},
        reload={"watch_s": 0.2},
    )
    with HeraldProcess(config, env=POD_ENV) as herald:
        producer = Producer({"bootstrap.servers": herald.bootstrap})
        producer.produce(topic_name, b"1")
        assert producer.flush(30) == 0
        changed = chains({"type": "insert_header", "header": "v", "value": "two"})
        herald.config_path.write_text(yaml.safe_dump({**config, "interceptors": changed}))
        herald.wait_for_log("event=config_reloaded", timeout=20)
        producer.produce(topic_name, b"2")
        assert producer.flush(30) == 0
        got = consume_all(herald.bootstrap, topic_name, 2)
        proxy = ("herald.proxy", b"shop/web-5d9c7-x2x8q@node-a")
        assert [(m.value(), m.headers()) for m in got] == [
            (b"1", [proxy]), (b"2", [proxy, ("v", b"two")]),
        ]
        assert "event=config_changed" in herald.logs()


def _parents_after_a_read_and_a_write(herald: HeraldProcess, broker: str, topic: str,
                                      reader: str, writer: str) -> tuple[str, list[bytes]]:
    """A traced record in `topic`; a consumer with client id `reader` fetches it through
    Herald, a producer with client id `writer` continues its trace through Herald: the
    record's own key, and the `herald.parent` values Herald wrote on the continuation."""
    create_topic(broker, topic, 1)
    create_topic(broker, f"{topic}-out", 1)
    trace = uuid.uuid4().hex
    origin = Producer({"bootstrap.servers": broker})
    origin.produce(topic, b"in", headers=[("traceparent", f"00-{trace}-{'1' * 16}-01")])
    assert origin.flush(30) == 0
    (read,) = consume_all(herald.bootstrap, topic, 1, conf={"client.id": reader})
    producer = Producer({"bootstrap.servers": herald.bootstrap, "client.id": writer})
    producer.produce(f"{topic}-out", b"out",
                     headers=[("traceparent", f"00-{trace}-{'2' * 16}-01")])
    assert producer.flush(30) == 0
    (written,) = consume_all(broker, f"{topic}-out", 1)
    return (f"{topic}:{read.partition()}:{read.offset()}",
            [v for k, v in written.headers() if k == "herald.parent"])


def test_the_shipped_configurations_link_a_service_s_writes_to_its_fetches(
    kafka: KafkaCluster, topic_name: str
) -> None:
    """The injected sidecar (`scope: host`) links a pod's write to its fetch whatever the
    client ids (here Java's default shapes, which differ); proxy.yaml (`scope: client_id`)
    links them when the service's consumer and producer share a client id, and otherwise
    writes no link rather than one it cannot know."""
    pod = sidecar.proxy_config(sidecar.SidecarSpec(upstream=kafka.bootstrap))
    local = herald_config(kafka.bootstrap)
    pod["listen"].update(local["listen"])
    pod["admin"]["bind"] = f"127.0.0.1:{local['listen']['broker_port_base'] + 15}"
    with HeraldProcess(pod, env=POD_ENV) as herald:
        key, parents = _parents_after_a_read_and_a_write(
            herald, kafka.bootstrap, f"{topic_name}-pod", "consumer-shop-1", "producer-1")
        assert parents == [key.encode()]
    with HeraldProcess(shipped_config(kafka.bootstrap)) as herald:
        key, parents = _parents_after_a_read_and_a_write(
            herald, kafka.bootstrap, f"{topic_name}-same", "svc-shop", "svc-shop")
        assert parents == [key.encode()]
        _, parents = _parents_after_a_read_and_a_write(
            herald, kafka.bootstrap, f"{topic_name}-apart", "consumer-shop-1", "producer-1")
        assert parents == []
