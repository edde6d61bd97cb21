"""A three-service flow played by real clients through Herald, and what it should yield.

Service A produces orders; B consumes them and produces a payment with the same trace id (its
own span as the parent, the W3C way of continuing a trace); C consumes payments and produces
shipments. Some flows are broken on purpose (B or C drops the record, or B holds it past the
wait threshold), and a legacy producer writes orders straight to the broker, without any
trace context. Everything the pipeline should report is then computed here from the records
as a separate consumer reads them back from the broker, in plain Python.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from interceptors.tracing import parse_traceparent
from tests.support.clients import create_topic

FULL, STOP_AT_ORDERS, STOP_AT_PAYMENTS, SLOW = "full", "stop_orders", "stop_payments", "slow"
PLAN = [FULL] * 9 + [STOP_AT_ORDERS] * 2 + [STOP_AT_PAYMENTS] * 2 + [SLOW] * 2
LEGACY_RECORDS = 3
MAX_WAIT_MS = 4000


@dataclass
class Played:
    topics: dict[str, str]                 # role (orders/payments/shipments) -> topic name
    hops: list[dict[str, Any]]             # one per record, as read back from the broker
    plan_of_trace: dict[str, str]          # trace id -> plan
    delivered: set[tuple[str, int, int]] = field(default_factory=set)
    fetches: list[dict[str, Any]] = field(default_factory=list)  # fetch_log observations


def topic_names(tag: str | None = None) -> dict[str, str]:
    tag = tag or uuid.uuid4().hex[:8]
    return {role: f"{role}-{tag}" for role in ("orders", "payments", "shipments")}


def _producer(bootstrap: str, client_id: str) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5})


def _send(producer: Producer, delivered: set, topic: str, value: bytes, key: bytes,
          headers: list[tuple[str, bytes]] | None = None) -> None:
    def on_delivery(err: Any, msg: Any) -> None:
        assert err is None, err
        delivered.add((msg.topic(), msg.partition(), msg.offset()))

    producer.produce(topic, value, key, headers=headers, on_delivery=on_delivery)


def _consumer(bootstrap: str, group: str, topic: str, partitions: int) -> Consumer:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
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
    """The traceparent a service writes downstream: same trace, its own span as parent."""
    tp = parse_traceparent(_header(msg, "traceparent"))
    assert tp is not None
    return [("traceparent", f"00-{tp.trace_id}-{os.urandom(8).hex()}-01".encode())]


def _service_c(herald: str, c_in: Consumer, topics: dict[str, str], count: int,
               delivered: set, errors: list[BaseException]) -> None:
    try:
        c = _producer(herald, "svc-c")
        for msg in _each(c_in, count, timeout=90):
            if msg.value().endswith(STOP_AT_PAYMENTS.encode()):
                continue
            _send(c, delivered, topics["shipments"],
                  msg.value().replace(b"payment", b"shipment"), msg.key(), _continue(msg))
            c.poll(0)
        assert c.flush(30) == 0
    except BaseException as exc:  # reported by the caller
        errors.append(exc)
    finally:
        c_in.close()


def create_topics(broker: str, topics: dict[str, str], partitions: int = 2) -> None:
    for name in topics.values():
        create_topic(broker, name, partitions)


def play(herald: str, broker: str, topics: dict[str, str], partitions: int = 2,
         create: bool = True) -> Played:
    if create:
        create_topics(broker, topics, partitions)
    delivered: set[tuple[str, int, int]] = set()
    b_in = _consumer(herald, "svc-b", topics["orders"], partitions)
    c_in = _consumer(herald, "svc-c", topics["payments"], partitions)
    for c in (b_in, c_in):
        c.poll(0.5)  # connected and assigned before the first order

    errors: list[BaseException] = []
    forwarded = PLAN.count(FULL) + PLAN.count(STOP_AT_PAYMENTS) + PLAN.count(SLOW)
    service_c = threading.Thread(target=_service_c, daemon=True,
                                 args=(herald, c_in, topics, forwarded, delivered, errors))
    service_c.start()  # C runs beside B, so a payment moves on as soon as it is written

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
    for msg in _each(b_in, len(PLAN) + LEGACY_RECORDS):
        value = msg.value().decode()
        if value.startswith("legacy") or value.endswith(STOP_AT_ORDERS):
            continue
        if value.endswith(SLOW):
            held.append(msg)
            continue
        _send(b, delivered, topics["payments"], value.replace("order", "payment").encode(),
              msg.key(), _continue(msg))
        b.poll(0)
    assert b.flush(30) == 0
    for msg in held:  # forwarded after waiting longer than the threshold
        due = int(_header(msg, "herald.time")) + MAX_WAIT_MS + 600
        time.sleep(max(0.0, due / 1000 - time.time()))
        _send(b, delivered, topics["payments"], msg.value().replace(b"order", b"payment"),
              msg.key(), _continue(msg))
    assert b.flush(30) == 0
    b_in.close()

    service_c.join(90)
    assert not service_c.is_alive() and errors == [], errors
    return read_back(broker, topics, partitions, delivered)


def read_back(broker: str, topics: dict[str, str], partitions: int,
              delivered: set[tuple[str, int, int]]) -> Played:
    """Every record of the three topics, read directly from the broker, as expected hops."""
    counts = Counter(t for t, _, _ in delivered)
    hops: list[dict[str, Any]] = []
    plan_of_trace: dict[str, str] = {}
    for name in topics.values():
        consumer = _consumer(broker, f"check-{uuid.uuid4().hex[:6]}", name, partitions)
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
            hops.append({
                "trace_id": tp.trace_id if tp else None,
                "parent_span": tp.parent_id if tp else None,
                "topic": m.topic(), "partition": m.partition(), "offset": m.offset(),
                "timestamp_ms": ts, "timestamp_type": "log_append" if ts_type == 2 else "create",
                "herald_time_ms": int(herald_time) if herald_time else None,
                "client_id": _text(m, "herald.client_id"),
                "principal": _text(m, "herald.principal"),
                "origin": _text(m, "herald.origin"), "message_id": _text(m, "herald.msg_id"),
                "size": size,
            })
            if tp and m.topic() == topics["orders"]:
                plan_of_trace[tp.trace_id] = m.value().decode().rsplit(" ", 1)[1]
    return Played(topics=topics, hops=hops, plan_of_trace=plan_of_trace, delivered=delivered)


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


def expected_flows(played: Played, max_wait_ms: int, terminal: str) -> dict[str, dict]:
    """trace id -> path, waits and broken flags, from the hops read back."""
    by_trace: dict[str, list[dict]] = defaultdict(list)
    for h in played.hops:
        if h["trace_id"]:
            by_trace[h["trace_id"]].append(h)
    flows = {}
    for trace, hops in by_trace.items():
        hops.sort(key=lambda h: (h["herald_time_ms"], h["topic"], h["partition"], h["offset"]))
        pairs = list(zip(hops, hops[1:], strict=False))
        waits = [b["herald_time_ms"] - a["herald_time_ms"] for a, b in pairs]
        flows[trace] = {
            "path": " > ".join(h["topic"] for h in hops),
            "edges": [(a["topic"], b["topic"]) for a, b in pairs],
            "waits": waits,
            "duration_ms": hops[-1]["herald_time_ms"] - hops[0]["herald_time_ms"],
            "stopped": hops[-1]["topic"] != terminal,
            "slow": any(w > max_wait_ms for w in waits),
        }
    return flows


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
