"""The observations topic fetch_log writes to, read back until it holds what a test expects."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable

from confluent_kafka import Consumer

FETCH_TOPIC = f"herald-fetches-{uuid.uuid4().hex[:8]}"


def read_observations(bootstrap: str, topics: set[str], count: int,
                      done: Callable[[list[dict]], bool] | None = None) -> list[dict]:
    """The fetch_log observations of `topics` (other tests' fetches share the topic): at
    least `count`, and until `done` says the list is complete when it is given."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([FETCH_TOPIC])
    found: list[dict] = []
    deadline = time.monotonic() + 60
    try:
        while (len(found) < count or (done is not None and not done(found))) \
                and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                obs = json.loads(msg.value())
                if obs["t"] in topics:
                    found.append(obs)
    finally:
        consumer.close()
    return found
