"""What happens to routed records when Herald is SIGKILLed after the destination cluster
acknowledged a batch's moved records but before the client got its answer.

The window is held open by stopping the primary broker (SIGSTOP): Herald has delivered the
moved records to the destination and waits for the primary's answer for the records that
stay. Herald is killed then, the primary resumes, Herald starts again on the same ports, and
each producer's retry goes to the new process, which does not know how far that producer's
sequences were shifted.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import Iterable

from proxy.devtools.embedded_kafka import KafkaCluster
from tests.support.clients import create_topic
from tests.support.restart_clients import (
    IdempotentProducer,
    JavaProducer,
    end_offsets,
    herald_with_admin,
    read_back,
    wait_for,
)
from tests.support.routing_runs import metric

BEFORE, IN_FLIGHT, AFTER = 200, 40, 200  # records written before, across and after the crash
in_flight = range(BEFORE, BEFORE + IN_FLIGHT)


def pause(cluster: KafkaCluster, sig: int) -> None:
    process = cluster.node(1).process
    assert process is not None
    os.killpg(process.pid, sig)


def is_eu(n: int) -> bool:
    return n % 2 == 0


def copies(found: Counter[bytes], tag: str, numbers: Iterable[int]) -> Counter[int]:
    """How often the records of these numbers are found: {copies: how many records}."""
    return Counter(found[f"{tag}-{n}".encode()] for n in numbers)


def test_herald_killed_between_the_destination_ack_and_the_client_answer(
    private_cluster: KafkaCluster, kafka: KafkaCluster, topic_name: str
) -> None:
    """An idempotent librdkafka and the idempotent Java producer write records of which every
    other one moves to the destination. Before and after the crash every record is there once;
    the batches in flight at the crash are at most once for librdkafka (which gives the
    producer up: fatal UNKNOWN_PRODUCER_ID) and at least once, at most twice, for Java."""
    primary = private_cluster  # the cluster records are produced to; paused below
    topics = {"lib": f"{topic_name}-lib", "java": f"{topic_name}-java"}
    for name in topics.values():
        create_topic(primary.bootstrap, name)
        create_topic(kafka.bootstrap, name)
    rules = [{"name": kind, "match": {"topics": [name],
                                      "headers": {"header": "region", "equals": "eu"}},
              "cluster": "dest"} for kind, name in topics.items()]
    herald = herald_with_admin(primary.bootstrap, clusters={"dest": {"bootstrap": kafka.bootstrap}},
                               routing={"rules": rules})
    with herald:
        lib = IdempotentProducer(herald.bootstrap, topics["lib"], tag="lib", headers=lambda n: [
            ("region", b"eu" if is_eu(n) else b"us")])
        java = JavaProducer(herald.bootstrap, topics["java"], tag="java",
                            headers=lambda n: f"region:{'eu' if is_eu(n) else 'us'}")
        lib.budget = java.budget = BEFORE
        lib.start()

        def written(kind: str) -> int:
            return (sum(end_offsets(primary.bootstrap, topics[kind]).values())
                    + sum(end_offsets(kafka.bootstrap, topics[kind]).values()))

        wait_for(lambda: len(lib.acked) == BEFORE, "the librdkafka producer's first records")
        wait_for(lambda: written("java") == BEFORE, "the Java producer's first records")
        pause(primary, signal.SIGSTOP)
        try:
            lib.budget = java.budget = BEFORE + IN_FLIGHT
            eu = sum(map(is_eu, range(BEFORE)))
            for kind in topics:  # a batch's moved records delivered, its answer pending
                wait_for(lambda k=kind: metric(herald, "herald_routing_records_total", rule=k,
                                               outcome="delivered") > eu,
                         f"the {kind} in-flight batch's moved records delivered")
            herald.signal(signal.SIGKILL)
            herald.wait(timeout=30)
        finally:
            pause(primary, signal.SIGCONT)
        herald.start()  # same config, same ports
        lib.budget = java.budget = BEFORE + IN_FLIGHT + AFTER
        wait_for(lambda: lib.errors.fatal() or len(lib.acked) + len(lib.failed) == lib.budget,
                 "every librdkafka record answered, or a fatal producer error")
        lib.finish()
        # librdkafka gives the producer up (what the application then does: a new one)
        assert any("UNKNOWN_PRODUCER_ID" in e for e in lib.errors.fatal()), lib.errors.seen
        lib_after = IdempotentProducer(herald.bootstrap, topics["lib"], tag="lib-after")
        lib_after.budget = AFTER
        lib_after.start()
        wait_for(lambda: len(lib_after.acked) + len(lib_after.failed) == AFTER,
                 "the new librdkafka producer")
        lib_after.finish()
        wait_for(lambda: java.sent >= BEFORE + IN_FLIGHT + AFTER, "the Java producer's input")
        java.finish()
        found = {kind: read_back(primary.bootstrap, t) + read_back(kafka.bootstrap, t)
                 for kind, t in topics.items()}
        refusals = herald.logs().count("event=routing_sequence_unknown")

    after = range(BEFORE + IN_FLIGHT, BEFORE + IN_FLIGHT + AFTER)
    figures = {kind: {"before": copies(found[kind], kind, range(BEFORE)),
                      "in_flight_moved": copies(found[kind], kind, filter(is_eu, in_flight)),
                      "in_flight_kept": copies(found[kind], kind,
                                               (n for n in in_flight if not is_eu(n))),
                      # the new librdkafka producer numbers its records from 0
                      "after": copies(found["lib"], "lib-after", range(AFTER))
                      if kind == "lib" else copies(found[kind], kind, after)}
               for kind in topics}
    figures["lib"]["failed"] = Counter(e.split(",")[0] for _, e in lib.failed)
    figures["refusals"] = refusals
    print("routed, SIGKILL in flight:", figures)
    # What was answered before the crash, and what was written after it, is there once.
    for kind in topics:
        assert figures[kind]["before"] == Counter({1: BEFORE}), figures
        assert figures[kind]["after"] == Counter({1: AFTER}), figures
    assert not lib_after.failed and not lib_after.errors.fatal(), lib_after.failed[:5]
    # librdkafka: nothing of the crashed producer's records after the first BEFORE was
    # acknowledged; each of them is there at most once (the batch in flight, its moved and its
    # kept records, may have been written by the Herald that died).
    assert len(lib.acked) == BEFORE, figures
    lib_unacked = [f"lib-{n}".encode() for n in in_flight]
    assert all(found["lib"][v] <= 1 for v in lib_unacked), figures
    assert set(found["lib"]) <= {f"lib-{n}".encode() for n in range(BEFORE + IN_FLIGHT)} | {
        f"lib-after-{n}".encode() for n in range(AFTER)}, figures
    # Java: no error, every record acknowledged and there; the records in flight at the crash
    # at least once, at most twice (the first attempt written, the retry under a bumped epoch
    # written again).
    assert java.returncode == 0 and "Error when sending message" not in java.stderr, (
        java.stderr[-3000:])
    for part in ("in_flight_moved", "in_flight_kept"):
        assert set(figures["java"][part]) <= {1, 2}, figures
    assert refusals >= 2, figures  # each producer's next batch refused once (at least)
