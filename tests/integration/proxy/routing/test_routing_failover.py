"""Routed traffic across broker failures: a destination's partition leader killed, the primary
broker restarted, Herald itself restarted, each in the middle of idempotent producers' runs.

Producers write in phases and the failure falls between them, so records are always in flight
when it happens; every record is then reconciled where the rules say it goes (key, value,
headers, order per source partition), and nowhere else.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from proxy.devtools.embedded_kafka import KafkaCluster
from proxy.routing.partitioner import key_partition
from tests.support.clients import create_topic
from tests.support.herald_process import HeraldProcess, free_port_block, herald_config
from tests.support.java_tools import CONSOLE_PRODUCER, tool_command
from tests.support.routing_runs import (
    assert_where_rules_say,
    is_eu,
    metric,
    mixed_records,
)

PHASES = 3


class Steps:
    """Between the phases of a run: writers say when they handed a phase over, and wait for
    the test to let them go on."""

    def __init__(self, writers: int) -> None:
        self.handed = [threading.Semaphore(0) for _ in range(PHASES)]
        self.resume = [threading.Event() for _ in range(PHASES)]
        self.writers = writers

    def wait_handed(self, phase: int, timeout: float = 120) -> None:
        for _ in range(self.writers):
            assert self.handed[phase].acquire(timeout=timeout), f"phase {phase} not handed"

    def go(self, phase: int) -> None:
        self.resume[phase].set()

    def between(self, phase: int, idle: Callable[[], None]) -> None:
        """Called by a writer after handing `phase` over: returns when the next may start."""
        self.handed[phase].release()
        if phase + 1 < PHASES:
            while not self.resume[phase + 1].wait(0.1):
                idle()


def phases(records: list[dict]) -> list[list[dict]]:
    size = -(-len(records) // PHASES)
    return [records[i:i + size] for i in range(0, len(records), size)]


def write_librdkafka(bootstrap: str, topic: str, records: list[dict], steps: Steps,
                     result: dict[str, Any], **conf: Any) -> None:
    """An idempotent librdkafka producer writing `records` phase by phase; the delivery
    errors land in result["errors"] (an exception in result["exception"])."""
    try:
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                             "acks": "all", "linger.ms": 20, **conf})
        errors: list[str] = []

        def report(err: Any, _msg: Any) -> None:
            if err is not None:
                errors.append(str(err))

        for n, part in enumerate(phases(records)):
            for r in part:
                producer.produce(topic, key=r["key"], value=r["value"],
                                 partition=r["partition"], headers=r["headers"],
                                 on_delivery=report)
                producer.poll(0)
            steps.between(n, lambda: producer.poll(0.1))
        left = producer.flush(240)
        result["errors"] = errors + ([f"{left} records not delivered"] if left else [])
    except Exception as exc:  # shown by the test's assertion
        result["exception"] = repr(exc)


def java_records(n: int, partitions: int) -> list[dict]:
    """Keyed records for the Java console producer, partitioned as the Java client does."""
    tag = uuid.uuid4().hex[:8]
    out = []
    for i in range(n):
        key = f"key-{i}".encode()
        out.append({"key": key, "value": f"value-{i}-{tag}".encode(),
                    "partition": key_partition(key, partitions),
                    "headers": [("region", b"eu" if i % 2 else b"us"),
                                ("seq", str(i).encode())]})
    return out


def write_java(bootstrap: str, topic: str, records: list[dict], steps: Steps,
               result: dict[str, Any]) -> None:
    """The Java console producer, configured as a Java application's producer is by default
    (idempotent, acks=all, retries until the delivery timeout), fed `records` phase by phase
    through its standard input; its stderr lands in result["stderr"]."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            tool_command(CONSOLE_PRODUCER, "--bootstrap-server", bootstrap, "--topic", topic,
                         "--reader-property", "parse.key=true",
                         "--reader-property", "parse.headers=true",
                         "--producer-property", "enable.idempotence=true",
                         "--producer-property", "acks=all",
                         "--producer-property", "linger.ms=20",
                         "--producer-property", "delivery.timeout.ms=240000",
                         # The tool retries 3 times unless told otherwise; a Java application
                         # retries until its delivery timeout, as here.
                         "--message-send-max-retries", "2147483647"),
            stdin=subprocess.PIPE, stdout=out, stderr=err)
        assert proc.stdin is not None
        try:
            for n, part in enumerate(phases(records)):
                for r in part:
                    heads = ",".join(f"{k}:{v.decode()}" for k, v in r["headers"])
                    proc.stdin.write(
                        f"{heads}\t{r['key'].decode()}\t{r['value'].decode()}\n".encode())
                proc.stdin.flush()
                steps.between(n, lambda: None)
            proc.stdin.close()
            result["returncode"] = proc.wait(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            err.seek(0)
            result["stderr"] = err.read().decode(errors="replace")


def leader_of(bootstrap: str, topic: str, partition: int) -> int:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return md.topics[topic].partitions[partition].leader


def kill_node(cluster: KafkaCluster, node_id: int) -> None:
    """SIGKILL: no controlled shutdown, the partitions it led wait for a new leader."""
    proc = cluster.node(node_id).process
    assert proc is not None
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def wait_for(check: Callable[[], bool], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def routed_topics(kafka: KafkaCluster, destination: KafkaCluster, topic_name: str,
                  replicas: int = -1) -> tuple[dict[str, str], dict]:
    """A librdkafka and a Java topic with two partitions on both clusters, and the Herald
    config whose rules move their eu records to `destination` (cluster "dest")."""
    topics = {"lib": f"{topic_name}-lib", "java": f"{topic_name}-java"}
    for name in topics.values():
        create_topic(kafka.bootstrap, name, 2)
        create_topic(destination.bootstrap, name, 2, replicas=replicas)
    rules = [{"name": f"eu-{kind}", "match": {"topics": [name],
                                              "headers": {"header": "region", "equals": "eu"}},
              "cluster": "dest"}
             for kind, name in topics.items()]
    config = herald_config(kafka.bootstrap, admin={"bind": f"127.0.0.1:{free_port_block(1)}"},
                           clusters={"dest": {"bootstrap": destination.bootstrap}},
                           routing={"rules": rules, "delivery_timeout_s": 120})
    return topics, config


def run_through(herald: HeraldProcess, topics: dict[str, str], records: dict[str, list[dict]],
                fail: Callable[[], None], recover: Callable[[], None]
                ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both producers write their first phase, which is delivered; `fail()`; they hand over the
    second phase; three seconds later `recover()`; they write the third and finish. The
    results of the librdkafka and of the Java writer."""
    steps = Steps(writers=2)
    lib: dict[str, Any] = {}
    java: dict[str, Any] = {}
    writers = [
        threading.Thread(target=write_librdkafka,
                         args=(herald.bootstrap, topics["lib"], records["lib"], steps, lib)),
        threading.Thread(target=write_java,
                         args=(herald.bootstrap, topics["java"], records["java"], steps, java)),
    ]
    for w in writers:
        w.start()
    try:
        steps.wait_handed(0)
        for kind, recs in records.items():  # both are flowing before the failure
            count = sum(map(is_eu, phases(recs)[0]))
            wait_for(lambda k=kind, c=count: metric(
                herald, "herald_routing_records_total", rule=f"eu-{k}",
                outcome="delivered") >= c, f"the first {kind} phase")
        fail()
        steps.go(1)
        steps.wait_handed(1)
        time.sleep(3.0)  # records of the second phase in flight meanwhile
    finally:
        recover()
        steps.go(2)
    for w in writers:
        w.join(timeout=420)
    assert not any(w.is_alive() for w in writers)
    return lib, java


def assert_clean(lib: dict[str, Any], java: dict[str, Any], herald: HeraldProcess) -> None:
    """Neither producer saw an error."""
    assert lib.get("errors") == [], (lib, herald.logs()[-3000:])
    assert java.get("returncode") == 0, java
    assert "Error when sending message" not in java["stderr"], java["stderr"]


def test_three_broker_destination_loses_a_partition_leader_mid_run(
    kafka: KafkaCluster, kafka_cluster: KafkaCluster, topic_name: str
) -> None:
    """eu records of an idempotent librdkafka producer and of the idempotent Java producer
    move to a 3-broker cluster (topics replicated three times); the leader of one destination
    partition is killed with records in flight and restarted later. Every record is where the
    rules say, once, in order per source partition, and neither producer saw an error."""
    topics, config = routed_topics(kafka, kafka_cluster, topic_name, replicas=3)
    records = {"lib": mixed_records(900, 2), "java": java_records(600, 2)}
    victim = leader_of(kafka_cluster.bootstrap, topics["lib"], 0)
    with HeraldProcess(config) as herald:
        lib, java = run_through(herald, topics, records,
                                fail=lambda: kill_node(kafka_cluster, victim),
                                recover=lambda: kafka_cluster.restart_node(victim))
        assert_clean(lib, java, herald)
        for kind, topic in topics.items():
            assert_where_rules_say(kafka.bootstrap, kafka_cluster.bootstrap, topic,
                                   records[kind], is_eu)
            assert metric(herald, "herald_routing_records_total", rule=f"eu-{kind}",
                          outcome="delivered") == sum(map(is_eu, records[kind]))


def test_primary_broker_restart_mid_run(
    kafka: KafkaCluster, kafka_cluster: KafkaCluster, topic_name: str
) -> None:
    """The primary (its only broker) is killed with routed batches in flight and restarted:
    the producers retry through Herald, which sends the kept records again under the same
    rewritten sequences (the broker deduplicates them) and does not route the moved ones
    twice. No sequence error, no duplicate, nothing lost."""
    topics, config = routed_topics(kafka, kafka_cluster, topic_name)
    records = {"lib": mixed_records(900, 2), "java": java_records(600, 2)}
    with HeraldProcess(config) as herald:
        lib, java = run_through(herald, topics, records,
                                fail=lambda: kill_node(kafka, 1),
                                recover=lambda: kafka.restart_node(1))
        assert_clean(lib, java, herald)
        for kind, topic in topics.items():
            assert_where_rules_say(kafka.bootstrap, kafka_cluster.bootstrap, topic,
                                   records[kind], is_eu)


@pytest.mark.parametrize("journal", ["auto", "off"])
def test_herald_restart_mid_run(
    kafka: KafkaCluster, kafka_cluster: KafkaCluster, topic_name: str, journal: str
) -> None:
    """Herald restarts between two batches of idempotent producers that had records moved.
    With its journal (the default) the new process knows how far their sequences were
    shifted and goes on numbering them. Without it, it refuses their next batch with
    UNKNOWN_PRODUCER_ID before writing anything; both clients bump their epoch and send it
    again, numbered afresh. Either way no error reaches the producers, nothing is lost,
    nothing is written twice."""
    topics, config = routed_topics(kafka, kafka_cluster, topic_name)
    config["routing"]["journal"] = journal
    records = {"lib": mixed_records(900, 2), "java": java_records(600, 2)}
    with HeraldProcess(config) as herald:
        lib, java = run_through(herald, topics, records, fail=herald.stop,
                                recover=herald.start)
        assert_clean(lib, java, herald)
        for kind, topic in topics.items():
            assert_where_rules_say(kafka.bootstrap, kafka_cluster.bootstrap, topic,
                                   records[kind], is_eu)
        refused = herald.logs().count("event=routing_sequence_unknown")
        if journal == "off":
            assert refused >= 4, herald.logs()[-3000:]  # each producer, each of its partitions
        else:
            assert refused == 0 and "event=routing_journal_open" in herald.logs(), (
                herald.logs()[-3000:])
