"""Four services played by real clients through Herald, and what the pipeline should yield.

Service A produces orders. Two services read every order, each in its own consumer group: B
produces a payment, F (fraud) checks every third order and writes a fraud check. C reads the
payments and produces shipments; a payment it cannot settle at once (plan `retry`) it writes
back to payments first, and ships it when it reads it again (a retry loop). Every service
continues the trace as OpenTelemetry does (same trace id, a new span id) and names nothing
else: Herald writes the links (`trace_context` with `link`, as the shipped proxy.yaml has it).
All services run in this one process, so they reach Herald from one address, and each gives
its consumer and its producer its own name as client id: that pair is what `scope: client_id`
(proxy.yaml's scope) tells the services apart by, so each one's writes name exactly the
records it fetched, never those another service fetched of the same trace (B and F both read
every order; with `scope: host` they would share one memory).

Some flows are broken on purpose (B or C drops the record, or B holds it past the wait
threshold), and a legacy producer writes orders straight to the broker, without any trace
context. Each service also notes which record it continued (`Played.truth`), so what the
pipeline should report is computed here from what the services did and the records as a
separate consumer reads them back from the broker, in plain Python.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer

from interceptors.tracing import parse_traceparent
from pipeline.config import PipelineConfig
from tests.support.clients import create_topic
from tests.support.pipeline.observations import FETCH_TOPIC, read_observations

FULL, STOP_AT_ORDERS, STOP_AT_PAYMENTS, SLOW, RETRY = (
    "full", "stop_orders", "stop_payments", "slow", "retry")
PLAN = [FULL] * 8 + [STOP_AT_ORDERS] * 2 + [STOP_AT_PAYMENTS] * 2 + [SLOW] * 2 + [RETRY] * 2
FRAUD_EVERY = 3        # F checks the orders whose number is a multiple of this
LEGACY_RECORDS = 3
MAX_WAIT_MS = 4000
ROLES = ("orders", "payments", "shipments", "fraud")
TERMINAL_ROLES = ("shipments", "fraud")
Key = tuple[str, int, int]


@dataclass
class Played:
    topics: dict[str, str]                 # role (orders/payments/...) -> topic name
    hops: list[dict[str, Any]]             # one per record, as read back from the broker
    plan_of_trace: dict[str, str]          # trace id -> plan
    number_of_trace: dict[str, int] = field(default_factory=dict)  # trace id -> order number
    delivered: set[Key] = field(default_factory=set)
    truth: list[tuple[Key, Key]] = field(default_factory=list)  # (continued, written)
    fetches: list[dict[str, Any]] = field(default_factory=list)  # fetch_log observations


def topic_names(tag: str | None = None) -> dict[str, str]:
    tag = tag or uuid.uuid4().hex[:8]
    return {role: f"{role}-{tag}" for role in ROLES}


def _producer(bootstrap: str, client_id: str) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5})


def key_of(msg: Any) -> Key:
    return (msg.topic(), msg.partition(), msg.offset())


def _send(producer: Producer, delivered: set, topic: str, value: bytes, key: bytes,
          headers: list[tuple[str, bytes]] | None = None,
          truth: tuple[list, Key] | None = None) -> None:
    """Produce; once delivered, note the record (and, with `truth`, what it continued)."""
    def on_delivery(err: Any, msg: Any) -> None:
        assert err is None, err
        delivered.add(key_of(msg))
        if truth is not None:
            truth[0].append((truth[1], key_of(msg)))

    producer.produce(topic, value, key, headers=headers, on_delivery=on_delivery)


def _consumer(bootstrap: str, group: str, topic: str) -> Consumer:
    """A member of `group` reading `topic` from the start; its client id is the group's name
    too, so that Herald tells the groups' fetches apart (fetch_log) and links a service's
    writes to its own fetches (`scope: client_id`)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    return c


def _each(consumer: Consumer, count: int, timeout: float = 60.0) -> Iterator[Any]:
    """Yield `count` records as they arrive (a service handles each one at once)."""
    got = 0
    deadline = time.monotonic() + timeout
    while got < count and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None or msg.error():
            continue
        got += 1
        yield msg
    assert got == count, f"got {got} of {count}"


def _header(msg: Any, key: str) -> bytes | None:
    for k, v in msg.headers() or []:
        if k == key:
            return v
    return None


def _text(msg: Any, key: str) -> str | None:
    value = _header(msg, key)
    return None if value is None else value.decode()


def _continue(msg: Any) -> list[tuple[str, bytes]]:
    """The headers a service writes downstream: the same trace with its own span, as
    OpenTelemetry continues a trace. Which record it continues is Herald's to write."""
    tp = parse_traceparent(_header(msg, "traceparent"))
    assert tp is not None
    return [("traceparent", f"00-{tp.trace_id}-{os.urandom(8).hex()}-01".encode())]


def _service(herald: str, name: str, topic: str, count: int,
             decide: Callable[[Any], list[tuple[str, bytes]]], delivered: set,
             truth: list, errors: list[BaseException]) -> threading.Thread:
    """A service in its own thread: reads `count` records of `topic` in group `name` and
    writes what `decide` says for each, continuing the record's trace; its consumer and its
    producer both have client id `name`."""
    def run() -> None:
        consumer = _consumer(herald, name, topic)
        try:
            producer = _producer(herald, name)
            for msg in _each(consumer, count, timeout=120):
                for out, value in decide(msg):
                    _send(producer, delivered, out, value, msg.key(), _continue(msg),
                          (truth, key_of(msg)))
                producer.poll(0)
            assert producer.flush(30) == 0
        except BaseException as exc:  # reported by the caller
            errors.append(exc)
        finally:
            consumer.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def create_topics(broker: str, topics: dict[str, str], partitions: int = 2) -> None:
    for name in topics.values():
        create_topic(broker, name, partitions)


def fraud_checked(number: int) -> bool:
    return number % FRAUD_EVERY == 0


def play(herald: str, broker: str, topics: dict[str, str], partitions: int = 2,
         create: bool = True) -> Played:
    if create:
        create_topics(broker, topics, partitions)
    delivered: set[Key] = set()
    truth: list[tuple[Key, Key]] = []
    errors: list[BaseException] = []

    def payments(msg: Any) -> list[tuple[str, bytes]]:
        value = msg.value()
        if value.endswith(STOP_AT_PAYMENTS.encode()):
            return []
        if value.endswith(RETRY.encode()):  # first attempt: back to payments
            return [(topics["payments"], value + b" retried")]
        return [(topics["shipments"], value.replace(b"payment", b"shipment"))]

    def fraud(msg: Any) -> list[tuple[str, bytes]]:
        words = msg.value().decode().split()
        if words[0] == "legacy" or not fraud_checked(int(words[1])):
            return []
        return [(topics["fraud"], msg.value().replace(b"order", b"fraud-check"))]

    orders = len(PLAN) + LEGACY_RECORDS
    forwarded = len(PLAN) - PLAN.count(STOP_AT_ORDERS)
    services = [  # C and F run beside B, so a record moves on as soon as it is written
        _service(herald, "svc-c", topics["payments"], forwarded + PLAN.count(RETRY),
                 payments, delivered, truth, errors),
        _service(herald, "svc-f", topics["orders"], orders, fraud, delivered, truth, errors),
    ]
    b_in = _consumer(herald, "svc-b", topics["orders"])

    a = _producer(herald, "svc-a")
    for i, plan in enumerate(PLAN):
        _send(a, delivered, topics["orders"], f"order {i} {plan}".encode(), f"o{i}".encode())
    assert a.flush(30) == 0
    legacy = _producer(broker, "legacy")  # not through Herald: no trace context at all
    for i in range(LEGACY_RECORDS):
        _send(legacy, delivered, topics["orders"], f"legacy {i}".encode(), f"l{i}".encode())
    assert legacy.flush(30) == 0

    b = _producer(herald, "svc-b")
    held = []
    for msg in _each(b_in, orders):
        value = msg.value().decode()
        if value.startswith("legacy") or value.endswith(STOP_AT_ORDERS):
            continue
        if value.endswith(SLOW):
            held.append(msg)
            continue
        _send(b, delivered, topics["payments"], value.replace("order", "payment").encode(),
              msg.key(), _continue(msg), (truth, key_of(msg)))
        b.poll(0)
    assert b.flush(30) == 0
    for msg in held:  # forwarded after waiting longer than the threshold
        due = int(_header(msg, "herald.time")) + MAX_WAIT_MS + 600
        time.sleep(max(0.0, due / 1000 - time.time()))
        _send(b, delivered, topics["payments"], msg.value().replace(b"order", b"payment"),
              msg.key(), _continue(msg), (truth, key_of(msg)))
    assert b.flush(30) == 0
    b_in.close()

    for service in services:
        service.join(120)
    assert not any(s.is_alive() for s in services) and errors == [], errors
    played = read_back(broker, topics, delivered)
    played.truth = truth
    return played


def play_observed(herald: str, broker: str, topics: dict[str, str]) -> Played:
    """The scenario played through `herald`, with the fetch_log observations of its topics.
    B and F fetched every order and C every payment through Herald: this waits until each of
    those fetches was observed (a record fetched again after a rebalance is seen twice)."""
    played = play(herald, broker, topics)
    t = played.topics
    want = {(c, key) for key in played.delivered for c in ("svc-b", "svc-f")
            if key[0] == t["orders"]}
    want |= {("svc-c", key) for key in played.delivered if key[0] == t["payments"]}

    def complete(found: list[dict]) -> bool:
        return {(o["c"], (o["t"], o["p"], o["o"])) for o in found} >= want

    played.fetches = read_observations(broker, set(t.values()), len(want), complete)
    assert complete(played.fetches)
    return played


def pipeline_config(topics: dict[str, str], bootstrap: str, output: Path, **more: object
                    ) -> PipelineConfig:
    """The pipeline over the services' topics, with the scenario's threshold; one-second
    buckets, so that the few seconds the services run make a trend. Every service runs on this
    host, so an inferred parent's fetch is matched by host and client id (`client_id`), as
    Herald's link memory would have to key them."""
    more.setdefault("inference_scope", "client_id")
    return PipelineConfig(bootstrap=bootstrap, topics=[topics[r] for r in ROLES],
                          terminal_topics=[topics[r] for r in TERMINAL_ROLES],
                          max_wait_ms=MAX_WAIT_MS, time_bucket_s=1,
                          output=str(output), shuffle_partitions=2,
                          fetch_topic=FETCH_TOPIC, **more)


def read_back(broker: str, topics: dict[str, str], delivered: set[Key]) -> Played:
    """Every record of the topics, read directly from the broker, as expected hops."""
    counts = Counter(t for t, _, _ in delivered)
    hops: list[dict[str, Any]] = []
    plan_of_trace: dict[str, str] = {}
    number_of_trace: dict[str, int] = {}
    for name in topics.values():
        consumer = _consumer(broker, f"check-{uuid.uuid4().hex[:6]}", name)
        try:
            msgs = list(_each(consumer, counts[name]))
        finally:
            consumer.close()
        for m in msgs:
            tp = parse_traceparent(_header(m, "traceparent"))
            size = len(m.key() or b"") + len(m.value() or b"") + sum(
                len(k.encode()) + len(v or b"") for k, v in m.headers() or [])
            ts_type, ts = m.timestamp()
            herald_time = _text(m, "herald.time")
            parents = []
            lost: dict[str, int] = {}
            for k, v in m.headers() or []:
                if k == "herald.parent":
                    topic, partition, offset = v.decode().rsplit(":", 2)
                    parents.append({"topic": topic, "partition": int(partition),
                                    "offset": int(offset)})
                elif k == "herald.parents_lost":
                    reason, count = v.decode().split(":")
                    lost[reason] = lost.get(reason, 0) + int(count)
            source = _text(m, "herald.source")
            hops.append({
                "trace_id": tp.trace_id if tp else None,
                "parent_span": tp.parent_id if tp else None,
                "topic": m.topic(), "partition": m.partition(), "offset": m.offset(),
                "timestamp_ms": ts, "timestamp_type": "log_append" if ts_type == 2 else "create",
                "herald_time_ms": int(herald_time) if herald_time else None,
                "client_id": _text(m, "herald.client_id"),
                "principal": _text(m, "herald.principal"),
                "origin": _text(m, "herald.origin"), "message_id": _text(m, "herald.msg_id"),
                "size": size, "parents": parents,
                "parents_lost": sum(lost.values()), "lost_reasons": sorted(lost),
                "source_host": source.rpartition(":")[0] if source else None,
            })
            if tp and m.topic() == topics["orders"]:
                _, number, plan = m.value().decode().split()
                plan_of_trace[tp.trace_id] = plan
                number_of_trace[tp.trace_id] = int(number)
    return Played(topics=topics, hops=hops, plan_of_trace=plan_of_trace,
                  number_of_trace=number_of_trace, delivered=delivered)


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (what Spark's exact `percentile` does)."""
    s = sorted(values)
    pos = (len(s) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def stats(values: list[float]) -> dict[str, Any]:
    return {"count": len(values), "p50_ms": percentile(values, 0.5),
            "p90_ms": percentile(values, 0.9), "p99_ms": percentile(values, 0.99),
            "max_ms": max(values)}


def hop_key(h: dict[str, Any]) -> Key:
    return (h["topic"], h["partition"], h["offset"])


def branches(nodes: list[Key], pairs: list[tuple[Key, Key]]) -> list[list[Key]]:
    """Root-to-leaf paths of hops, by depth-first search over (parent, child) pairs."""
    children: dict[Key, list[Key]] = defaultdict(list)
    for parent, child in pairs:
        children[parent].append(child)
    has_parent = {c for _, c in pairs}
    out: list[list[Key]] = []
    stack = [[n] for n in nodes if n not in has_parent]
    while stack:
        path = stack.pop()
        nxt = [c for c in children[path[-1]] if c not in path]
        if not nxt:
            out.append(path)
        stack.extend([*path, c] for c in nxt)
    return out


def expected_graph(hops: list[dict[str, Any]], pairs: list[tuple[Key, Key]],
                   max_wait_ms: int, terminal: list[str]) -> dict[str, Any]:
    """Edges (waits per topic pair), pathways (durations and broken counts per path) and
    flows (per trace: pathways, stopped, slow) from (parent, child) pairs of hops."""
    by_key = {hop_key(h): h for h in hops if h["trace_id"]}
    time_of = {k: h["herald_time_ms"] or h["timestamp_ms"] for k, h in by_key.items()}
    waits: dict[tuple[str, str], list[int]] = defaultdict(list)
    for parent, child in pairs:
        waits[(parent[0], child[0])].append(time_of[child] - time_of[parent])
    durations: dict[str, list[int]] = defaultdict(list)
    broken: Counter = Counter()
    flows: dict[str, dict[str, Any]] = {}
    for path in branches(sorted(by_key), pairs):
        name = " > ".join(k[0] for k in path)
        durations[name].append(time_of[path[-1]] - time_of[path[0]])
        stopped = path[-1][0] not in terminal
        slow = any(time_of[b] - time_of[a] > max_wait_ms
                   for a, b in zip(path, path[1:], strict=False))
        broken[name] += stopped or slow
        flow = flows.setdefault(by_key[path[0]]["trace_id"], {
            "pathways": set(), "stopped": False, "slow": False, "branches": 0})
        flow["pathways"].add(name)
        flow["stopped"] |= stopped
        flow["slow"] |= slow
        flow["branches"] += 1
    return {"edges": dict(waits), "pathways": dict(durations), "broken": broken,
            "flows": flows}


def expected_lag(fetches: list[dict[str, Any]], hops: list[dict[str, Any]], bucket_ms: int
                 ) -> dict[tuple[str, str | None, int], list[int]]:
    """(topic, group, bucket) -> the lags (ms) at each group's first fetch of each record: the
    newest record of the partition at or before the fetch, minus the fetched record."""
    time_of = {hop_key(h): h["herald_time_ms"] or h["timestamp_ms"] for h in hops}
    first: dict[tuple, int] = {}
    for o in fetches:
        if (o["t"], o["p"], o["o"]) in time_of:
            reader = (o["t"], o["g"], None if o["g"] else o["c"], o["p"], o["o"])
            first[reader] = min(first.get(reader, o["f"]), o["f"])
    lags: dict[tuple[str, str | None, int], list[int]] = defaultdict(list)
    for (topic, group, _solo, p, offset), fetched in first.items():
        newest = max(ms for (t, q, _), ms in time_of.items()
                     if (t, q) == (topic, p) and ms <= fetched)
        lags[(topic, group, fetched // bucket_ms * bucket_ms)].append(
            max(0, newest - time_of[(topic, p, offset)]))
    return dict(lags)


def expected_transit(fetches: list[dict[str, Any]], hop_time: dict[tuple[str, int, int], int]
                     ) -> dict[tuple[str, str | None], dict[str, Any]]:
    """(topic, group) -> transit statistics and consumers, from fetch_log observations: each
    record's first fetch by each group (by each consumer, for consumers without a group)."""
    first: dict[tuple, int] = {}
    consumers: dict[tuple[str, str | None], set[str]] = defaultdict(set)
    for o in fetches:
        reader = (o["t"], o["g"], None if o["g"] else o["c"], o["p"], o["o"])
        first[reader] = min(first.get(reader, o["f"]), o["f"])
        consumers[(o["t"], o["g"])].add(o["c"])
    values: dict[tuple[str, str | None], list[int]] = defaultdict(list)
    for (topic, group, _solo, p, offset), fetched in first.items():
        values[(topic, group)].append(fetched - hop_time[(topic, p, offset)])
    return {key: {**stats(v), "consumers": sorted(consumers[key])} for key, v in values.items()}
