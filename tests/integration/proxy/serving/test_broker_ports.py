"""A broker's port that another socket holds when Herald learns the broker: Herald is not
ready and says which port and why, clients cannot be served through that port yet, and once
the port is free the next metadata refresh binds it, Herald is ready, and records go through.
"""

from __future__ import annotations

import re
import socket
import time
import uuid

from confluent_kafka import Producer

from proxy.devtools.embedded_kafka import KafkaCluster, free_port
from tests.support.clients import consume_all, create_topic
from tests.support.herald_process import HeraldProcess, herald_config
from tests.support.metrics import http_get


def _wait_readyz(herald: HeraldProcess, status: int, timeout: float = 15) -> str:
    deadline = time.monotonic() + timeout
    while (got := http_get(herald.admin_url + "/readyz"))[0] != status:
        assert time.monotonic() < deadline, (got, herald.logs())
        time.sleep(0.1)
    return got[1]


def test_a_held_broker_port_is_not_ready_until_it_is_bound(kafka: KafkaCluster) -> None:
    topic = f"ports-{uuid.uuid4().hex[:8]}"
    create_topic(kafka.bootstrap, topic)
    config = herald_config(kafka.bootstrap, admin={"bind": f"127.0.0.1:{free_port()}"})
    node_id = kafka.nodes[0].node_id
    port = config["listen"]["broker_port_base"] + node_id
    holder = socket.socket()
    holder.bind(("127.0.0.1", port))
    holder.listen()
    try:
        with HeraldProcess(config) as herald:
            reason = _wait_readyz(herald, 503)
            assert reason == (f"cannot listen on port {port} for broker {node_id}: "
                              "Address already in use\n")
            time.sleep(2.5)  # metadata refreshes (every 2 s) try the port again meanwhile
            failed = [line for line in herald.logs().splitlines() if "event=listen_failed" in line]
            assert len(failed) == 1, failed  # one line for the episode, not one per retry
            assert re.search(rf"\bport={port}\b", failed[0])

            holder.close()
            assert _wait_readyz(herald, 200) == "ready\n"
            assert "event=listen_recovered" in herald.logs()
            producer = Producer({"bootstrap.servers": herald.bootstrap})
            producer.produce(topic, b"through the freed port")
            assert producer.flush(30) == 0
            got = consume_all(herald.bootstrap, topic, 1)
            assert [m.value() for m in got] == [b"through the freed port"]
    finally:
        holder.close()
