"""The links Herald records itself (`trace_context` with ``link``), end to end: services played
by real clients through Herald continue traces as OpenTelemetry does (same trace id, a new span
id) and write no link of their own; Herald names, on each record they produce, the records they
fetched of that trace. Then the batch job turns those headers into the graph.

Orders are read by two services (fan-out: stock and billing); billing feeds payments, which
fails every third order once and sends it through a retry topic back to itself (a retry loop);
shipping joins each order's stock reservation and payment (fan-in); an auditor outside Herald
reads shipments from the broker and writes to it directly, so its edges have no header and
must be inferred, and marked so. Every service notes what it continued (the truth); every
expected figure is computed from that and the records as the broker holds them.
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from pipeline.config import PipelineConfig
from proxy.devtools.embedded_kafka import KafkaCluster
from tests.support.clients import create_topic
from tests.support.herald_process import HeraldProcess, herald_config
from tests.support.pipeline.scenario import _continue, _each, hop_key, key_of, read_back

Key = tuple[str, int, int]
ORDERS = 9
RETRY_EVERY = 3
ROLES = ("orders", "stock", "payreq", "pay", "retry", "ship", "audit")
Output = tuple[str, bytes, list[Any]]  # (topic, value, the records it continues)


@dataclass
class World:
    herald: str
    broker: str
    topics: dict[str, str]
    truth: list[tuple[Key, Key]] = field(default_factory=list)  # (continued, written)
    delivered: set[Key] = field(default_factory=set)
    errors: list[BaseException] = field(default_factory=list)


@pytest.fixture(scope="module")
def herald_linking(kafka: KafkaCluster) -> Iterator[HeraldProcess]:
    """Herald making the links. Every service here runs on this host, so the scope is the
    client id, which each service gives its consumer and its producer alike."""
    chains = {"produce": [{"type": "trace_context", "link": {"scope": "client_id"}},
                          {"type": "audit"}]}
    with HeraldProcess(herald_config(kafka.bootstrap, interceptors=chains)) as proc:
        yield proc


def _service(world: World, name: str, roles: tuple[str, ...], count: int,
             handle: Callable[[Any], list[Output]], via_herald: bool = True
             ) -> threading.Thread:
    """A service in its own thread: reads `count` records of `roles` and writes what `handle`
    says, continuing the trace of what it read; nothing else in its headers."""
    bootstrap = world.herald if via_herald else world.broker

    def run() -> None:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": name,
                             "client.id": name, "auto.offset.reset": "earliest",
                             "enable.auto.commit": False})
        consumer.subscribe([world.topics[r] for r in roles])
        try:
            producer = Producer({"bootstrap.servers": bootstrap, "client.id": name,
                                 "linger.ms": 5})
            for msg in _each(consumer, count, timeout=120):
                for role, value, continued in handle(msg):
                    def done(err: Any, out: Any, continued: list[Any] = continued) -> None:
                        assert err is None, err
                        world.delivered.add(key_of(out))
                        world.truth.extend((key_of(c), key_of(out)) for c in continued)
                    producer.produce(world.topics[role], value, msg.key(),
                                     headers=_continue(continued[-1]),
                                     on_delivery=done)
                producer.poll(0)
            assert producer.flush(30) == 0
        except BaseException as exc:  # reported by the test
            world.errors.append(exc)
        finally:
            consumer.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _play(world: World) -> None:
    t = world.topics
    for name in t.values():
        create_topic(world.broker, name, 2)

    def pay(msg: Any) -> list[Output]:
        value = msg.value()
        if int(value.split()[1]) % RETRY_EVERY == 0 and not value.endswith(b"retry"):
            return [("retry", value + b" retry", [msg])]
        return [("pay", value.replace(b"payreq", b"pay"), [msg])]

    waiting: dict[bytes, Any] = {}

    def ship(msg: Any) -> list[Output]:
        other = waiting.pop(msg.key(), None)
        if other is None:
            waiting[msg.key()] = msg
            return []
        return [("ship", b"ship " + msg.key(), [other, msg])]

    services = [
        _service(world, "svc-stock", ("orders",), ORDERS,
                 lambda m: [("stock", m.value().replace(b"order", b"stock"), [m])]),
        _service(world, "svc-bill", ("orders",), ORDERS,
                 lambda m: [("payreq", m.value().replace(b"order", b"payreq"), [m])]),
        _service(world, "svc-pay", ("payreq",), ORDERS + ORDERS // RETRY_EVERY, pay),
        _service(world, "svc-retry", ("retry",), ORDERS // RETRY_EVERY,
                 lambda m: [("payreq", m.value(), [m])]),
        _service(world, "svc-ship", ("stock", "pay"), 2 * ORDERS, ship),
        _service(world, "svc-audit", ("ship",), ORDERS,
                 lambda m: [("audit", b"audited", [m])], via_herald=False),
    ]
    source = Producer({"bootstrap.servers": world.herald, "client.id": "svc-orders"})
    for i in range(ORDERS):
        source.produce(t["orders"], f"order {i} linked".encode(), f"o{i}".encode(),
                       on_delivery=lambda err, m: world.delivered.add(key_of(m)))
    assert source.flush(30) == 0
    for service in services:
        service.join(150)
    assert not any(s.is_alive() for s in services) and world.errors == [], world.errors


@pytest.fixture(scope="module")
def world(herald_linking: HeraldProcess, kafka: KafkaCluster) -> World:
    tag = uuid.uuid4().hex[:8]
    w = World(herald_linking.bootstrap, kafka.bootstrap,
              {role: f"ln-{role}-{tag}" for role in ROLES})
    _play(w)
    return w


def _parents_of(world: World) -> dict[Key, set[Key]]:
    out: dict[Key, set[Key]] = {k: set() for k in world.delivered}
    for parent, child in world.truth:
        out[child].add(parent)
    return out


def test_each_record_names_exactly_the_records_its_service_continued(
    world: World, kafka: KafkaCluster
) -> None:
    played = read_back(kafka.bootstrap, world.topics, world.delivered)
    want = _parents_of(world)
    audit = world.topics["audit"]
    t = world.topics
    for hop in played.hops:
        key = hop_key(hop)
        got = {(p["topic"], p["partition"], p["offset"]) for p in hop["parents"]}
        assert len(got) == len(hop["parents"])  # one header per parent, none twice
        if key[0] == audit:  # written straight to the broker: Herald never saw it
            assert got == set() and hop["client_id"] is None
        else:
            assert got == want[key], (key, got, want[key])
    # The shapes are there: fan-in (two parents), fan-out, the retry loop.
    assert all(len(want[k]) == 2 for k in world.delivered if k[0] == t["ship"])
    loops = [(p, c) for p, c in world.truth if p[0] == t["retry"] and c[0] == t["payreq"]]
    assert len(loops) == ORDERS // RETRY_EVERY


def _table(spark: Any, output: Path, name: str) -> list[dict]:
    return [r.asDict(recursive=True) for r in spark.read.parquet(str(output / name)).collect()]


def test_the_batch_job_builds_the_graph_from_herald_s_links(
    spark: Any, world: World, kafka: KafkaCluster, tmp_path: Path
) -> None:
    """Every edge count equals what the records travelled, no edge joins records that no
    service connected, and only the auditor's edges (written outside Herald) are inferred."""
    from pipeline.jobs import run_batch

    t = world.topics
    config = PipelineConfig(bootstrap=kafka.bootstrap, topics=[t[r] for r in ROLES],
                            terminal_topics=[t["audit"]], max_wait_ms=60_000,
                            time_bucket_s=1, output=str(tmp_path), shuffle_partitions=2)
    summary = run_batch(spark, config)
    links = _table(spark, tmp_path, "links")
    got = {(hop_key(lk["parent_key"]), hop_key(lk["key"])): lk for lk in links}
    assert len(got) == len(links) and set(got) == set(world.truth)
    for (_, child), lk in got.items():
        want = ("inferred", "time") if child[0] == t["audit"] else ("linked", "header")
        assert (lk["link"], lk["evidence"]) == want, lk
    pairs = Counter((p[0], c[0]) for p, c in world.truth)
    inferred = sum(n for (_, b), n in pairs.items() if b == t["audit"])
    assert summary["links"]["linked"] == len(world.truth) - inferred
    assert summary["links"]["inferred"] == inferred == ORDERS
    edges = {(e["from_topic"], e["to_topic"]): e for e in _table(spark, tmp_path, "edges")}
    assert set(edges) == set(pairs) == {
        (t["orders"], t["stock"]), (t["orders"], t["payreq"]), (t["payreq"], t["pay"]),
        (t["payreq"], t["retry"]), (t["retry"], t["payreq"]), (t["stock"], t["ship"]),
        (t["pay"], t["ship"]), (t["ship"], t["audit"])}
    for edge, n in pairs.items():
        by_audit = edge[1] == t["audit"]
        assert (edges[edge]["count"], edges[edge]["linked"], edges[edge]["inferred"],
                edges[edge]["link"]) == (
            n, 0 if by_audit else n, n if by_audit else 0,
            "inferred" if by_audit else "linked"), edge
