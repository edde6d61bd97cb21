"""Synthetic Herald-stamped traffic with event times chosen by the test.

The stream's behaviour depends on event time (when a flow is final, which hop is late), so
these records carry a `herald.time` the test sets instead of the time they were written. Each
topic has one partition and records are written in event-time order, so the offset of every
record is known before it is written and a child can name its parent in `herald.parent`.

`fetch` notes that a consumer fetched a record at a chosen time; `write` then publishes the
observation to `fetch_topic` as Herald's `fetch_log` does (`protocol.contracts.fetch_log`,
with the record's `herald.time` as `h` and, when given, the consumer's host as `s`), once the
record's offset is known.

A hop's `lost` are the values of its `herald.parents_lost` headers, written as given (Herald's
layout is `<reason>:<count>`, `PARENTS_LOST_VALUE_RE`; a test may write one that is not), and
its `source` its `herald.source` (`host:port`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from confluent_kafka import Producer

from protocol.contracts import fetch_log
from tests.support.clients import create_topic

STOPPED, SLOW, FANOUT, RETRY = "stopped", "slow", "fanout", "retry"


@dataclass
class Hop:
    topic: str
    event_ms: int
    trace: str | None
    parents: list[int] = field(default_factory=list)  # indexes into the traffic's hops
    client: str = "svc"
    lost: list[str] = field(default_factory=list)  # herald.parents_lost values, as written
    source: str | None = None                      # herald.source, host:port


@dataclass
class Fetched:
    hop: int                # index into the traffic's hops
    consumer: str
    group: str | None
    fetched_ms: int
    host: str | None = None  # the consumer's host (`s`); None: an observation of before it


@dataclass
class Traffic:
    """Hops to write, in any order; `write` sends them in event-time order."""

    topics: dict[str, str]
    hops: list[Hop] = field(default_factory=list)
    offsets: dict[str, int] = field(default_factory=dict)  # next offset per topic
    keys: dict[int, tuple[str, int, int]] = field(default_factory=dict)  # hop index -> key
    fetch_topic: str = ""   # where `write` publishes the observations of `fetches`
    fetches: list[Fetched] = field(default_factory=list)
    published: int = 0      # fetches already written

    def add(self, hop: Hop) -> int:
        self.hops.append(hop)
        return len(self.hops) - 1

    def fetch(self, hop: int, consumer: str, group: str | None, delay_ms: int = 5,
              host: str | None = None) -> None:
        """`consumer` (of `group`, None: without one; on `host`, None: not recorded) fetched
        hop `hop`, `delay_ms` after its event time."""
        self.fetches.append(Fetched(hop, consumer, group, self.hops[hop].event_ms + delay_ms,
                                    host))

    def flow(self, start_ms: int, kind: str = "", wait_ms: int = 20) -> list[int]:
        """orders > payments > shipments, `wait_ms` apart (`slow`: the payment waits 10 s;
        `stopped`: no shipment; `retry`: payments twice; `fanout`: the order is also checked
        by fraud, which names no parent, so its edge is inferred)."""
        t = self.topics
        trace = os.urandom(16).hex()
        order = self.add(Hop(t["orders"], start_ms, trace, client="svc-a"))
        pay_ms = start_ms + (10_000 if kind == SLOW else wait_ms)
        pay = self.add(Hop(t["payments"], pay_ms, trace, [order], "svc-b"))
        made = [order, pay]
        if kind == RETRY:
            pay = self.add(Hop(t["payments"], pay_ms + wait_ms, trace, [pay], "svc-c"))
            made.append(pay)
        if kind != STOPPED:
            made.append(self.add(Hop(t["shipments"], pay_ms + 2 * wait_ms, trace, [pay],
                                     "svc-c")))
        if kind == FANOUT:
            made.append(self.add(Hop(t["fraud"], start_ms + wait_ms // 2 + 1, trace, [],
                                     "svc-f")))
        return made

    def write(self, bootstrap: str, create: bool = True) -> list[tuple[str, int, int]]:
        """Write every hop not written yet (topics created on the first call); return the
        keys written, in order."""
        if create:
            for name in self.topics.values():
                create_topic(bootstrap, name, 1)
            if self.fetch_topic:
                create_topic(bootstrap, self.fetch_topic, 1)
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                             "linger.ms": 5})
        pending = sorted((i for i in range(len(self.hops)) if i not in self.keys),
                         key=lambda i: (self.hops[i].event_ms, i))
        written = []
        for i in pending:
            hop = self.hops[i]
            offset = self.offsets.get(hop.topic, 0)
            self.offsets[hop.topic] = offset + 1
            self.keys[i] = (hop.topic, 0, offset)
            headers = [("herald.time", str(hop.event_ms).encode()),
                       ("herald.client_id", hop.client.encode()),
                       ("herald.principal", b"User:ANONYMOUS"),
                       ("herald.origin", b"synthetic"),
                       ("herald.msg_id", os.urandom(8).hex().encode())]
            if hop.trace is not None:
                headers.insert(0, ("traceparent",
                                   f"00-{hop.trace}-{os.urandom(8).hex()}-01".encode()))
            if hop.source is not None:
                headers.append(("herald.source", hop.source.encode()))
            for p in hop.parents:
                headers.append(("herald.parent", "{}:{}:{}".format(*self.keys[p]).encode()))
            headers += [("herald.parents_lost", value.encode()) for value in hop.lost]
            producer.produce(hop.topic, b"v" * 20, headers=headers, partition=0)
            written.append(self.keys[i])
        self._publish(producer)
        assert producer.flush(30) == 0
        return written

    def _publish(self, producer: Producer) -> None:
        """The observations not written yet, in fetch-time order, as fetch_log writes them."""
        new = sorted(self.fetches[self.published:], key=lambda f: f.fetched_ms)
        self.published = len(self.fetches)
        for f in new:
            hop = self.hops[f.hop]
            topic, partition, offset = self.keys[f.hop]
            tail = fetch_log.batch_tail(topic, partition, f.consumer, f.group, f.fetched_ms,
                                        f.host)
            text = fetch_log.observation(hop.trace, offset, tail, str(hop.event_ms).encode())
            producer.produce(self.fetch_topic, text.encode(),
                             hop.trace.encode() if hop.trace else None, partition=0)
