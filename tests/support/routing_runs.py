"""Records the traffic of two Kafka clusters routing moves between: producers that write
known records, what the rules say each record becomes, and where it is then found."""

from __future__ import annotations

import uuid
from typing import Any

from confluent_kafka import Producer

from proxy.routing.rules import ORIGIN_HEADER
from tests.support.clients import consume_all
from tests.support.herald_process import HeraldProcess


def produce(bootstrap: str, topic: str, records: list[dict], pause_every: int = 0,
            progress: list[int] | None = None, **conf: Any) -> list[str]:
    """Produce through `bootstrap` with one producer; the delivery errors (empty when all were
    acknowledged). `pause_every` N records it sleeps half a second, to spread the writes."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 20, **conf})
    errors: list[str] = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    for n, r in enumerate(records, 1):
        if pause_every and n % pause_every == 0:
            producer.poll(0.5)
        while True:
            try:
                producer.produce(topic, key=r["key"], value=r["value"],
                                 partition=r["partition"], headers=r["headers"],
                                 on_delivery=report)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
        if progress is not None:
            progress.append(n)
    left = producer.flush(120)
    assert left == 0, f"{left} records not delivered"
    return errors


def mixed_records(n: int, partitions: int) -> list[dict]:
    """Records with a mix of headers: a third eu, some debug, some big amounts, the rest plain."""
    out = []
    for i in range(n):
        headers: list[tuple[str, bytes]] = [("seq", str(i).encode())]
        if i % 3 == 0:
            headers.append(("region", b"eu"))
        elif i % 3 == 1:
            headers.append(("region", b"us"))
        if i % 7 == 0:
            headers.append(("debug", b"1"))
        headers.append(("amount", str(i * 3 % 500).encode()))
        out.append({"key": f"k{i}".encode(), "value": f"v{i}-{uuid.uuid4().hex}".encode(),
                    "partition": i % partitions, "headers": headers})
    return out


def as_tuple(msg: Any) -> tuple:
    return (msg.key(), msg.value(), tuple((k, v) for k, v in (msg.headers() or [])))


def by_partition(messages: list[Any]) -> dict[int, list[tuple]]:
    out: dict[int, list[tuple]] = {}
    for m in sorted(messages, key=lambda m: (m.partition(), m.offset())):
        out.setdefault(m.partition(), []).append(as_tuple(m))
    return out


def expect(records: list[dict], keep: Any, extra_headers: tuple = ()) -> dict[int, list[tuple]]:
    out: dict[int, list[tuple]] = {}
    for r in records:
        if keep(r):
            out.setdefault(r["partition"], []).append(
                (r["key"], r["value"], tuple(r["headers"]) + extra_headers))
    return out


def header(r: dict, key: str) -> bytes | None:
    return next((v for k, v in reversed(r["headers"]) if k == key), None)


def metric(herald: HeraldProcess, name: str, **labels: str) -> float:
    import urllib.request

    text = urllib.request.urlopen(f"{herald.admin_url}/metrics", timeout=10).read().decode()
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def is_eu(r: dict) -> bool:
    return header(r, "region") == b"eu"


def assert_where_rules_say(primary: str, destination: str, topic: str, records: list[dict],
                           moves: Any) -> None:
    """The records `moves` selects are on the destination (with the origin header), the others
    on the primary: each once, in order per source partition, and nothing else."""
    stay = expect(records, lambda r: not moves(r))
    moved = expect(records, moves, ((ORIGIN_HEADER, None),))
    got_stay = by_partition(consume_all(primary, topic, sum(map(len, stay.values()))))
    got_moved = by_partition(consume_all(destination, topic, sum(map(len, moved.values()))))
    assert got_stay == stay, topic
    assert strip_origin(got_moved) == moved, topic
    # Nothing beyond them either: each partition ends where its expected records do.
    assert end_offsets(primary, topic) == {p: len(rows) for p, rows in stay.items()}, topic
    assert end_offsets(destination, topic) == {p: len(rows) for p, rows in moved.items()}, topic


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """Each non-empty partition's end offset (its record count: no transactions here)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "end-offsets"})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in partitions}
    finally:
        consumer.close()
    return {p: end for p, end in ends.items() if end}


def strip_origin(parts: dict[int, list[tuple]]) -> dict[int, list[tuple]]:
    """The origin header's value is the primary's cluster id: checked present, then blanked."""
    out = {}
    for p, items in parts.items():
        rows = []
        for key, value, headers in items:
            assert headers and headers[-1][0] == ORIGIN_HEADER and headers[-1][1]
            rows.append((key, value, headers[:-1] + ((ORIGIN_HEADER, None),)))
        out[p] = rows
    return out
