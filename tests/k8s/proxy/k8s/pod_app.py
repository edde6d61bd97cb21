"""The application container of the simulated pod: a Kafka client that knows only the
bootstrap address its environment gives it (`KAFKA_BOOTSTRAP_SERVERS`, set by the injector).

It produces a first set of records and consumes them back, then produces steadily, with
batches always in flight, until SIGTERM: then it stops, waits for every outstanding record
to be acknowledged, prints what it saw as one JSON line, and exits 0 when nothing failed.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import uuid

from confluent_kafka import Consumer, KafkaError, Producer

FIRST = 200


def main() -> int:
    bootstrap = os.environ["KAFKA_BOOTSTRAP_SERVERS"]
    topic = os.environ["TOPIC"]
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    acked: list[int] = []
    failed: list[str] = []

    def delivered(err: object, msg: object) -> None:
        if err is None:
            acked.append(int(msg.value()))  # type: ignore[attr-defined]
        else:
            failed.append(str(err))

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all",
                         "enable.idempotence": True})
    for i in range(FIRST):
        producer.produce(topic, str(i).encode(), on_delivery=delivered)
    producer.flush(60)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"app-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    seen = []
    deadline = time.monotonic() + 60
    while len(seen) < FIRST and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            seen.append(int(msg.value()))
        elif msg is not None and msg.error().code() != KafkaError._PARTITION_EOF:
            failed.append(str(msg.error()))
    consumer.close()
    print(json.dumps({"event": "consumed", "records": sorted(seen) == list(range(FIRST))}),
          flush=True)

    sent = FIRST
    while not stopping:
        producer.produce(topic, str(sent).encode(), on_delivery=delivered)
        sent += 1
        producer.poll(0)
        time.sleep(0.002)
    in_flight = len(producer)
    left = producer.flush(30)
    print(json.dumps({"event": "stopped", "sent": sent, "acked": len(acked),
                      "in_flight_at_sigterm": in_flight, "unflushed": left,
                      "failed": failed[:5]}), flush=True)
    return 0 if not failed and left == 0 and len(acked) == sent else 1


if __name__ == "__main__":
    sys.exit(main())
