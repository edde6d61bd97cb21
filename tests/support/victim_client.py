"""A producer and a consumer (librdkafka) that keep at it for a while, in a process of their
own: tests/integration/proxy/session/test_hostile_broker.py runs them against a broker that
mangles their answers. librdkafka may abort on such answers (an allocation of a size read from
them); that ends this process, as it would end an application, not the test.

    python tests/support/victim_client.py BOOTSTRAP INDEX SECONDS
"""

from __future__ import annotations

import os
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition

TRACEPARENT = b"00-" + b"1" * 32 + b"-" + b"2" * 16 + b"-01"


def main(bootstrap: str, index: int, seconds: float) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": f"victim-p-{index}",
                         "linger.ms": 5, "enable.idempotence": False,
                         "request.timeout.ms": 2000, "message.timeout.ms": 4000,
                         "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 200})
    consumer = Consumer({"bootstrap.servers": bootstrap, "client.id": f"victim-c-{index}",
                         "group.id": f"victim-{index}", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 50, "socket.timeout.ms": 2000,
                         "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 200})
    consumer.assign([TopicPartition("victims", 0, 0)])
    n = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(20):
            try:
                producer.produce("victims", b"v" * (n % 3000),
                                 headers=[("traceparent", TRACEPARENT), ("x-debug", b"1")])
            except BufferError:
                break
            n += 1
        producer.poll(0)
        consumer.poll(0.05)
    sys.stdout.flush()
    os._exit(0)  # closing against a hostile broker may wait for answers that never come


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]))
