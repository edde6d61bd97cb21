"""Parents a real Herald cannot name, declared on the records it stamps (`herald.parents_lost`).

Three traces (a, b, c) have two records each in a source topic, written straight to the
broker. A service reads the six through a Herald whose link memory holds two traces
(a, b, c, a, b, c), then continues each trace with one record. Every fetch evicts the least
recent trace, whose parents are carried: a's record names no parent and declares both
evicted, b's and c's name their second input and declare the first.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass

from confluent_kafka import Producer

from tests.support.clients import consume_all, create_topic
from tests.support.herald_process import HeraldProcess, herald_config

LOST = "herald.parents_lost"
CLIENT = "svc-small"


@dataclass
class Losses:
    source: str
    sink: str
    traces: list[str]  # a, b, c


def _tp(trace: str) -> bytes:
    return f"00-{trace}-{os.urandom(8).hex()}-01".encode()


def read(bootstrap: str, topic: str, count: int, client_id: str) -> list:
    got = consume_all(bootstrap, topic, count, timeout=120, conf={"client.id": client_id})
    assert len(got) == count, (topic, len(got))
    return got


def declare_losses(broker: str) -> Losses:
    """Play the three traces through a Herald with room for two (see the module)."""
    tag = uuid.uuid4().hex[:8]
    losses = Losses(f"lost-in-{tag}", f"lost-out-{tag}", [os.urandom(16).hex()
                                                          for _ in range(3)])
    for topic in (losses.source, losses.sink):
        create_topic(broker, topic, 1)
    direct = Producer({"bootstrap.servers": broker})
    for trace in losses.traces * 2:
        direct.produce(losses.source, b"in", headers=[("traceparent", _tp(trace))])
        assert direct.flush(30) == 0
    chains = {"produce": [{"type": "trace_context",
                           "link": {"capacity": 2, "scope": "client_id"}},
                          {"type": "audit"}]}
    with HeraldProcess(herald_config(broker, interceptors=chains)) as herald:
        read(herald.bootstrap, losses.source, 6, CLIENT)
        producer = Producer({"bootstrap.servers": herald.bootstrap, "client.id": CLIENT,
                             "linger.ms": 0})
        for trace in losses.traces:
            producer.produce(losses.sink, b"out", headers=[("traceparent", _tp(trace))])
            assert producer.flush(30) == 0
    return losses


def declared(broker: str, losses: Losses) -> dict[str, tuple[str, int, bool]]:
    """What Herald wrote, read back from the broker: per trace, the reason and number of the
    losses it declared and whether the record names a parent."""
    out = {}
    for msg in read(broker, losses.sink, 3, "checker"):
        headers = dict(msg.headers())
        trace = headers["traceparent"].decode().split("-")[1]
        reason, _, n = headers[LOST].decode().partition(":")
        out[trace] = (reason, int(n), "herald.parent" in headers)
    return out


def expected(losses: Losses) -> dict[str, tuple[str, int, bool]]:
    a, b, c = losses.traces
    return {a: ("evicted", 2, False), b: ("evicted", 1, True), c: ("evicted", 1, True)}
