"""`fetch_log` through Herald, with a real broker and real clients: every record a consumer
fetches is published once to the observations topic, with its trace id, offset, client id and
fetch time."""

from __future__ import annotations

import json
import socket
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer

from configuration import ConfigError
from interceptors.builtin.fetch_log import FetchLogConfig, Publisher
from proxy.devtools.embedded_kafka import KafkaCluster, free_port
from proxy.filters.member_services import build_chains
from tests.support.clients import consume_all, create_topic
from tests.support.herald_process import HeraldProcess, herald_config
from tests.support.metrics import scrape, total, wait_for


def test_fetched_records_are_published_as_observations(kafka: KafkaCluster,
                                                       topic_name: str) -> None:
    observations = f"fetches-{uuid.uuid4().hex[:8]}"
    create_topic(kafka.bootstrap, topic_name, 2)
    create_topic(kafka.bootstrap, observations, 1)
    chains = {"produce": [{"type": "trace_context"}, {"type": "audit"}],
              "fetch": [{"type": "fetch_log", "bootstrap": kafka.bootstrap,
                         "topic": observations, "group": "billing"}]}
    with HeraldProcess(herald_config(kafka.bootstrap, interceptors=chains)) as herald:
        producer = Producer({"bootstrap.servers": herald.bootstrap, "client.id": "writer"})
        for i in range(20):
            producer.produce(topic_name, f"r{i}".encode(), f"k{i}".encode())
        assert producer.flush(30) == 0
        before = int(time.time() * 1000)
        got = consume_all(herald.bootstrap, topic_name, 20, conf={"client.id": "reader"})
        after = int(time.time() * 1000)
        seen = consume_all(kafka.bootstrap, observations, 20)
    fetched = {(m.topic(), m.partition(), m.offset()): m for m in got}
    obs = [json.loads(m.value()) for m in seen]
    assert {(o["t"], o["p"], o["o"]) for o in obs} == set(fetched)
    for o, m in zip(obs, seen, strict=True):
        record = fetched[(o["t"], o["p"], o["o"])]
        tp = dict(record.headers())["traceparent"].decode()
        assert o["tr"] == tp.split("-")[1] and m.key() == o["tr"].encode()
        assert o["c"] == "reader" and o["g"] == "billing"
        assert o["s"] == "127.0.0.1"  # the consumer's host, as Herald saw its address
        assert before - 1000 <= o["f"] <= after
        assert o["f"] >= int(dict(record.headers())["herald.time"])
        assert o["h"] == int(dict(record.headers())["herald.time"])  # the record's own time


def test_an_unreachable_observations_cluster_is_one_logged_episode_and_counted(
        kafka: KafkaCluster, topic_name: str) -> None:
    """Observations that cannot be delivered (nothing listens at `bootstrap`) fail after
    `delivery_timeout_s`: one structured event with the cluster's reason, the failures
    counted, `fetch_log_failing` set while it lasts, and none of librdkafka's own prose
    lines (a line per reconnect attempt) in Herald's log. The consumers are served as ever."""
    dead = free_port()
    create_topic(kafka.bootstrap, topic_name)
    chains = {"fetch": [{"type": "fetch_log", "bootstrap": f"127.0.0.1:{dead}",
                         "delivery_timeout_s": 1}]}
    admin = free_port()
    while admin == dead:  # both only free now: not the same one
        admin = free_port()
    config = herald_config(kafka.bootstrap, interceptors=chains,
                           admin={"bind": f"127.0.0.1:{admin}"})
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for i in range(20):
        producer.produce(topic_name, f"r{i}".encode())
    assert producer.flush(30) == 0
    with HeraldProcess(config) as herald:
        assert len(consume_all(herald.bootstrap, topic_name, 20)) == 20
        failing = wait_for(herald, lambda s: total(
            s, "herald_interceptor_level", level="fetch_log_failing") == 1, timeout=30)
        assert total(failing, "herald_interceptor_level", level="fetch_log_failing") == 1
        herald.wait_for_log("event=fetch_log_delivery_failed", timeout=30)
        assert len(consume_all(herald.bootstrap, topic_name, 20)) == 20  # served as ever
        # Failures are counted as the next fetched batch passes: a consumer goes on reading
        # (a record at a time) until the first 20 observations' failures are counted (they
        # may time out in two of librdkafka's scans, the second after a first read).
        consumer = Consumer({"bootstrap.servers": herald.bootstrap, "group.id": topic_name,
                             "auto.offset.reset": "earliest"})
        consumer.subscribe([topic_name])
        deadline = time.monotonic() + 60
        try:
            while True:
                producer.produce(topic_name, b"more")
                assert producer.flush(30) == 0
                consumer.poll(0.5)
                counted = total(scrape(herald), "herald_interceptor_events_total",
                                event="fetch_log_failed")
                if counted >= 20 or time.monotonic() > deadline:
                    break
        finally:
            consumer.close()
        assert counted >= 20, herald.logs()[-3000:]
        time.sleep(2)  # reconnect attempts go on meanwhile (librdkafka backs off from 0.1 s)
        logs = herald.logs()
    lines = [x for x in logs.splitlines() if "event=fetch_log_delivery_failed" in x]
    assert len(lines) == 1, logs[-3000:]
    assert "Connection refused" in lines[0] and f"127.0.0.1:{dead}" in lines[0], lines[0]
    assert "|FAIL|" not in logs and "%3|" not in logs, logs[-3000:]


def test_missing_bootstrap_names_its_path() -> None:
    with pytest.raises(ConfigError, match=r"^interceptors\.fetch\[0\]\.bootstrap: required"):
        build_chains({"fetch": [{"type": "fetch_log", "topic": "x"}]})


@pytest.mark.parametrize("value", [0, -1, "soon"])
def test_a_bad_delivery_timeout_names_its_path(value: object) -> None:
    with pytest.raises(ConfigError, match=r"^interceptors\.fetch\[0\]\.delivery_timeout_s: "):
        build_chains({"fetch": [{"type": "fetch_log", "bootstrap": "a:1",
                                 "delivery_timeout_s": value}]})


def test_security_sections_are_checked_like_upstreams(tmp_path) -> None:
    member = {"type": "fetch_log", "bootstrap": "127.0.0.1:9093"}
    missing = tmp_path / "nope.pem"
    with pytest.raises(ConfigError, match=r"^interceptors\.fetch\[0\]\.tls\.ca_file: .*nope\.pem"):
        build_chains({"fetch": [{**member, "tls": {"ca_file": str(missing)}}]})
    with pytest.raises(ConfigError, match=r"^interceptors\.fetch\[0\]\.sasl\.mechanism: "):
        build_chains({"fetch": [{**member, "sasl": {"mechanism": "MD5"}}]})
    with pytest.raises(ConfigError, match=r"^interceptors\.fetch\[0\]\.sasl\.password: "):
        build_chains({"fetch": [{**member, "sasl": {"mechanism": "PLAIN",
                                                    "username": {"env": "HOME"}}}]})
    secret = tmp_path / "password"
    secret.write_text("hunter2\n")
    chains = build_chains({"fetch": [{**member, "sasl": {
        "mechanism": "SCRAM-SHA-256", "username": {"env": "HOME"},
        "password": {"file": str(secret)}}}]})
    config = chains.fetch.members[0].interceptor.config
    settings = config.producer_settings()
    assert settings["security.protocol"] == "SASL_PLAINTEXT"
    assert settings["sasl.mechanism"] == "SCRAM-SHA-256" and settings["sasl.password"] == "hunter2"
    assert "hunter2" not in repr(config)


def test_the_publisher_counts_what_the_broker_acknowledged(kafka: KafkaCluster) -> None:
    topic = f"fetches-{uuid.uuid4().hex[:8]}"
    create_topic(kafka.bootstrap, topic, 1)
    pub = Publisher(FetchLogConfig(bootstrap=kafka.bootstrap, topic=topic))
    batch = ("orders", 3, "reader", "billing", 1234)
    for i in range(50):
        assert pub.offer(("0af7651916cd43dd8448eb211c80319c" if i % 2 else None, i,
                          str(1000 + i).encode() if i % 3 else None, batch))
    pub.close()
    assert (pub.delivered, pub.failed, pub.dropped) == (50, 0, 0)
    seen = [json.loads(m.value()) for m in consume_all(kafka.bootstrap, topic, 50)]
    assert sorted(o["o"] for o in seen) == list(range(50))
    assert {o["o"]: o["h"] for o in seen} == {i: 1000 + i if i % 3 else None for i in range(50)}
    assert {(o["t"], o["p"], o["c"], o["g"], o["f"]) for o in seen} == {batch}
    assert {o["tr"] for o in seen} == {None, "0af7651916cd43dd8448eb211c80319c"}


def test_a_full_queue_drops_and_counts_instead_of_waiting() -> None:
    """offer() never waits for room. The interpreter is kept from switching threads while the
    offers run, so the publisher's thread cannot drain the queue meanwhile: an offer that
    waited for room would have to let it run (and be let in), and more than `queue_size`
    would be accepted. Exactly `queue_size` are, and every other one is dropped and counted."""
    # Nothing listens on this loopback port: the producer can deliver nothing.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    pub = Publisher(FetchLogConfig(bootstrap=f"127.0.0.1:{port}", queue_size=10))
    interval = sys.getswitchinterval()
    try:
        # From now on the publisher's thread gives the interpreter up only where it waits
        # (for work, or in librdkafka's poll), never holding the queue; the sleep lets it
        # get there.
        sys.setswitchinterval(1000.0)
        time.sleep(0.3)
        accepted = sum(pub.offer((None, i, None, ("t", 0, "c", None, 0))) for i in range(5000))
        queued = len(pub.queue)
    finally:
        sys.setswitchinterval(interval)
        pub._stop = True
        pub._wake.set()
    assert (accepted, queued, pub.dropped) == (10, 10, 4990)
