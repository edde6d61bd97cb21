"""What a pod gives Herald: its identity from the downward API, and ConfigMap updates that
arrive as a changed file with no signal."""

from __future__ import annotations

import time

import yaml
from confluent_kafka import Producer

from proxy.devtools.embedded_kafka import KafkaCluster
from tests.support.clients import consume_all
from tests.support.herald_process import HeraldProcess, herald_config

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
        deadline = time.monotonic() + 20
        while "event=config_reloaded" not in herald.logs() and time.monotonic() < deadline:
            time.sleep(0.1)
        producer.produce(topic_name, b"2")
        assert producer.flush(30) == 0
        got = consume_all(herald.bootstrap, topic_name, 2)
        proxy = ("herald.proxy", b"shop/web-5d9c7-x2x8q@node-a")
        assert [(m.value(), m.headers()) for m in got] == [
            (b"1", [proxy]), (b"2", [proxy, ("v", b"two")]),
        ]
        assert "event=config_changed" in herald.logs()
