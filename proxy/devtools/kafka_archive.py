"""Make the class archive Kafka's JVMs start from (configuration/jvm_archive.py), once per
release and classpath: a one-node broker started to write it, given a topic, a few hundred
records produced and consumed by a group, then stopped, so the archive holds the classes a
broker loads to start, to serve a producer, and to coordinate a consumer group.

    python -m proxy.devtools.kafka_archive [VERSION ...]     # scripts/setup.sh: the pinned one

An archive only saves CPU: where none can be made it says why and exits 0, and the JVMs
start as they would have.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from configuration import jvm_archive
from protocol.kafka_versions import KAFKA_VERSION
from proxy.devtools.embedded_kafka import KafkaCluster, class_archive
from proxy.devtools.kafka_dist import classpath

RECORDS = 300
ATTEMPTS = 2


class ArchiveNotMade(RuntimeError):
    """No archive was made; the message says why, in the JVM's words where it gave any."""


def _exercise(bootstrap: str) -> None:
    """Produce and consume through a group, as every test and demo does first."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic  # defined here; `.admin` re-exports it implicitly

    topic = "class-archive"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the topic is made
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                         "compression.type": "lz4"})
    for i in range(RECORDS):
        producer.produce(topic, value=b"v" * 100, key=str(i).encode(),
                         headers=[("h", b"1")])
    if producer.flush(30) != 0:
        raise RuntimeError("the training records were not all delivered")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "class-archive",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    seen, deadline = 0, time.monotonic() + 60
    while seen < RECORDS and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is not None and message.error() is None:
            seen += 1
    consumer.commit(asynchronous=False)
    consumer.close()
    if seen < RECORDS:
        raise RuntimeError(f"the training consumer read {seen} of {RECORDS} records")


def train(version: str = KAFKA_VERSION) -> Path:
    """The archive of `version`'s classpath, made now unless it is there already; a second
    broker tries if the first wrote none (ArchiveNotMade after both)."""
    archive = class_archive(classpath(version))
    if archive.is_file():
        return archive
    refused = jvm_archive.dumping_refused()
    if refused is not None:
        raise ArchiveNotMade(refused)
    failures = []
    for _ in range(ATTEMPTS):
        cluster = KafkaCluster(size=1, version=version, train_archive=True)
        with cluster:
            _exercise(cluster.bootstrap)
        if archive.is_file():
            return archive
        failures.append(cluster.archive_failure or "no reason recorded")
    raise ArchiveNotMade(f"the broker wrote no class archive {archive}: "
                         + "; then: ".join(failures))


def main(argv: list[str] | None = None) -> int:
    for version in (argv if argv is not None else sys.argv[1:]) or [KAFKA_VERSION]:
        start = time.monotonic()
        try:
            archive = train(version)
        except Exception as exc:  # noqa: BLE001 - an archive only saves CPU: say why, go on
            reason = str(exc) if isinstance(exc, ArchiveNotMade) else f"training failed: {exc!r}"
            jvm_archive.record_not_made(class_archive(classpath(version)), reason)
            print(f"kafka-archive: Kafka {version}: no class archive, its JVMs start without "
                  f"one: {reason}")
            continue
        print(f"kafka-archive: Kafka {version}: {archive} "
              f"({archive.stat().st_size // 2**20} MiB, {time.monotonic() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
