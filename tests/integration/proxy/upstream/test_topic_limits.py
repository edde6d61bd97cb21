"""Enrichment never turns a batch the broker would accept into one it refuses.

The scenario: an idempotent librdkafka producer sends small keyed records through
`[trace_context, audit]`; the broker is killed and restarted part-way, so the producer's
queue fills its batches up to its size limit meanwhile; the headers Herald adds push those
batches past the broker's limit unless Herald makes them fit again.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.request
from collections.abc import Iterator

import pytest
import trio
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
)

from proxy.config.proxy_yaml import parse_config
from proxy.devtools.embedded_kafka import KafkaCluster, free_port
from proxy.upstream.cluster import UpstreamCluster
from proxy.upstream.topic_limits import BROKER_DEFAULT_MAX_MESSAGE_BYTES, TopicLimits
from tests.support.clients import consume_all, create_topic
from tests.support.herald_process import HeraldProcess, herald_config

CHAINS = {"produce": [{"type": "trace_context"}, {"type": "audit"}], "fetch": []}
RECORDS = 30_000
RATE = 2_500  # records per second
KILL_AT = 0.4


@pytest.fixture(scope="module")
def restartable() -> Iterator[KafkaCluster]:
    """A broker of this module's own: it is killed and restarted."""
    with KafkaCluster(size=1, heap="512m") as cluster:
        yield cluster


def metric(proc: HeraldProcess, prefix: str) -> float:
    with urllib.request.urlopen(proc.admin_url + "/metrics", timeout=10) as resp:
        return sum(float(line.rsplit(" ", 1)[1]) for line in resp.read().decode().splitlines()
                   if line.startswith(prefix))


def value_of(i: int) -> bytes:
    """A small record like an application's: a short JSON document."""
    return json.dumps({"order": i, "sku": f"sku-{i % 977}", "qty": 1 + i % 5,
                       "status": "created"}).encode()


def kill_and_restart(cluster: KafkaCluster) -> None:
    node = cluster.node(1)
    assert node.process is not None
    os.killpg(node.process.pid, signal.SIGKILL)
    node.process.wait(timeout=30)
    time.sleep(3)  # the producer's queue keeps filling while the broker is away
    cluster.restart_node(1)


def produce_through_a_restart(cluster: KafkaCluster, bootstrap: str, topic: str,
                              conf: dict[str, object]) -> tuple[int, list[str]]:
    """Produce in a thread at RATE; kill and restart the broker from this thread (its
    parent: the broker dies with the thread that started it) once KILL_AT were sent."""
    producer = Producer({
        "bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", **conf,
    })
    errors: list[str] = []
    delivered = 0
    sent = 0

    def report(err: object, _msg: object) -> None:
        nonlocal delivered
        if err is None:
            delivered += 1
        else:
            errors.append(str(err))

    def send_all() -> None:
        nonlocal sent
        started = time.monotonic()
        for i in range(RECORDS):
            producer.produce(topic, key=b"k-%06d" % i, value=value_of(i), on_delivery=report)
            sent += 1
            producer.poll(0)
            delay = started + (i + 1) / RATE - time.monotonic()
            if delay > 0:
                time.sleep(delay)

    sender = threading.Thread(target=send_all)
    sender.start()
    while sent < RECORDS * KILL_AT:
        time.sleep(0.01)
    kill_and_restart(cluster)
    sender.join(timeout=180)
    left = producer.flush(180)
    assert left == 0, f"{left} records still queued"
    return delivered, errors


@pytest.mark.parametrize(
    "conf",
    [
        pytest.param({}, id="librdkafka-defaults"),
        pytest.param({"batch.num.messages": 1_000_000, "batch.size": 1_048_576,
                      "message.max.bytes": 1_048_576, "linger.ms": 100},
                     id="largest-batches"),
    ],
)
def test_broker_restart_with_enrichment_delivers_every_record_once(
    restartable: KafkaCluster, topic_name: str, conf: dict[str, object],
) -> None:
    create_topic(restartable.bootstrap, topic_name)
    config = herald_config(restartable.bootstrap, interceptors=CHAINS,
                           admin={"bind": f"127.0.0.1:{free_port()}"})
    with HeraldProcess(config) as herald:
        delivered, errors = produce_through_a_restart(
            restartable, herald.bootstrap, topic_name, conf)
        fitted = metric(herald, "herald_batches_fitted_total")
        refused = metric(herald, "herald_partitions_refused_by_limit_total")
    assert errors == [], errors[:5]
    assert delivered == RECORDS
    records = consume_all(restartable.bootstrap, topic_name, RECORDS, timeout=120)
    keys = [m.key() for m in records]
    assert len(keys) == RECORDS and len(set(keys)) == RECORDS  # nothing lost or duplicated
    assert all(dict(m.headers() or ())  # every record was enriched
               .keys() >= {"traceparent", "herald.msg_id"} for m in records)
    # The restart did produce batches that only fit once re-encoded.
    assert fitted > 0
    assert refused == 0


async def test_topic_limits_are_learned_from_the_broker(kafka: KafkaCluster) -> None:
    small = f"t-limits-small-{free_port()}"
    plain = f"t-limits-plain-{free_port()}"
    # Known to the broker before it is asked: it applies a new topic a moment after the
    # controller answered (KRaft), and until then describes none.
    create_topic(kafka.bootstrap, small, config={"max.message.bytes": "200000"})
    create_topic(kafka.bootstrap, plain)
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    cluster = UpstreamCluster(parse_config(herald_config(kafka.bootstrap)).upstream)
    limits = TopicLimits(cluster.request_once)
    # Unknown until asked: the broker default, and the question is queued.
    assert limits.limit(small) == BROKER_DEFAULT_MAX_MESSAGE_BYTES
    assert await limits.learn([small, plain, "t-no-such-topic"])
    assert limits.limit(small) == 200_000
    assert limits.limit(plain) == BROKER_DEFAULT_MAX_MESSAGE_BYTES
    assert "t-no-such-topic" not in limits.known
    # A changed topic config is followed by the next refresh.
    entry = ConfigEntry("max.message.bytes", "300000",
                        incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource("topic", small, incremental_configs=[entry])
    for f in admin.incremental_alter_configs([resource]).values():
        f.result(timeout=30)
    # The broker applies the change a moment after the controller answered (KRaft): ask
    # again, as the refresh would, until it shows.
    with trio.fail_after(15):
        while limits.limit(small) != 300_000:
            await trio.sleep(0.1)
            assert await limits.learn(sorted(limits.known))
