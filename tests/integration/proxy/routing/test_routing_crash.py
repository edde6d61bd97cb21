"""What happens to routed records when Herald is SIGKILLed after the destination cluster
acknowledged a batch's moved records but before the client got its answer.

The window is held open by stopping the primary broker (SIGSTOP): Herald has delivered the
moved records to the destination and waits for the primary's answer for the records that
stay. Herald is killed then, the primary resumes, Herald starts again on the same ports, and
each producer's retry goes to the new process. With its journal (the default) the new process
knows each batch, and every record is there once; without it, it does not know how far the
producers' sequences were shifted, and refuses their next batch.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

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


@dataclass
class Crash:
    figures: dict[str, Any]
    lib: IdempotentProducer
    java: JavaProducer
    logs: str


def crash_in_flight(primary: KafkaCluster, kafka: KafkaCluster, topic_name: str,
                    journal: str) -> Crash:
    """Both producers write BEFORE records, a batch of each is in flight when Herald is
    killed, and AFTER more are written through the Herald started again. A librdkafka
    producer that fails fatally is replaced by a new one (tag `lib-after`) for the AFTER
    records, as an application would."""
    topics = {"lib": f"{topic_name}-lib", "java": f"{topic_name}-java"}
    for name in topics.values():
        create_topic(primary.bootstrap, name)
        create_topic(kafka.bootstrap, name)
    rules = [{"name": kind, "match": {"topics": [name],
                                      "headers": {"header": "region", "equals": "eu"}},
              "cluster": "dest"} for kind, name in topics.items()]
    herald = herald_with_admin(primary.bootstrap, clusters={"dest": {"bootstrap": kafka.bootstrap}},
                               routing={"rules": rules, "journal": journal})
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
        herald.start()  # same config, same ports, same folder (and journal)
        lib.budget = java.budget = BEFORE + IN_FLIGHT + AFTER
        wait_for(lambda: lib.errors.fatal() or len(lib.acked) + len(lib.failed) == lib.budget,
                 "every librdkafka record answered, or a fatal producer error")
        lib.finish()
        after_tag = "lib"
        if lib.errors.fatal():  # what the application then does: a new producer
            after_tag = "lib-after"
            lib_after = IdempotentProducer(herald.bootstrap, topics["lib"], tag=after_tag)
            lib_after.budget = AFTER
            lib_after.start()
            wait_for(lambda: len(lib_after.acked) + len(lib_after.failed) == AFTER,
                     "the new librdkafka producer")
            lib_after.finish()
            assert not lib_after.failed and not lib_after.errors.fatal(), lib_after.failed[:5]
        wait_for(lambda: java.sent >= BEFORE + IN_FLIGHT + AFTER, "the Java producer's input")
        java.finish()
        found = {kind: read_back(primary.bootstrap, t) + read_back(kafka.bootstrap, t)
                 for kind, t in topics.items()}
        logs = herald.logs()

    after = range(BEFORE + IN_FLIGHT, BEFORE + IN_FLIGHT + AFTER)
    # a new librdkafka producer numbers its records from 0
    lib_after_numbers = range(AFTER) if after_tag == "lib-after" else after
    figures: dict[str, Any] = {
        kind: {"before": copies(found[kind], kind, range(BEFORE)),
               "in_flight_moved": copies(found[kind], kind, filter(is_eu, in_flight)),
               "in_flight_kept": copies(found[kind], kind, (n for n in in_flight if not is_eu(n))),
               "after": copies(found["lib"], after_tag, lib_after_numbers)
               if kind == "lib" else copies(found[kind], kind, after)}
        for kind in topics}
    figures["lib"]["failed"] = Counter(e.split(",")[0] for _, e in lib.failed)
    figures["lib"]["unknown"] = sorted(set(found["lib"]) - {
        f"{tag}-{n}".encode() for tag, numbers in (("lib", range(BEFORE + IN_FLIGHT + AFTER)),
                                                   ("lib-after", range(AFTER)))
        for n in numbers})
    figures["refusals"] = logs.count("event=routing_sequence_unknown")
    print(f"routed, SIGKILL in flight, journal {journal}:", figures)
    # What was answered before the crash, and what was written after it, is there once.
    for kind in topics:
        assert figures[kind]["before"] == Counter({1: BEFORE}), figures
        assert figures[kind]["after"] == Counter({1: AFTER}), figures
    assert not figures["lib"]["unknown"], figures
    # Java: no error, every record acknowledged.
    assert java.returncode == 0 and "Error when sending message" not in java.stderr, (
        java.stderr[-3000:])
    return Crash(figures, lib, java, logs)


def test_with_its_journal_a_killed_herald_loses_and_doubles_nothing(
    private_cluster: KafkaCluster, kafka: KafkaCluster, topic_name: str
) -> None:
    """The restarted Herald replays its journal: each producer's retry of the batch in flight
    is known, its kept records go upstream under the sequence they had (the broker recognises
    the duplicate), its moved records are not routed again; neither producer sees an error,
    and every record of both is there exactly once."""
    crash = crash_in_flight(private_cluster, kafka, topic_name, "auto")
    figures = crash.figures
    assert "event=routing_journal_open" in crash.logs, crash.logs[-3000:]
    assert figures["refusals"] == 0, figures
    assert not crash.lib.errors.fatal() and not crash.lib.failed, figures
    assert len(crash.lib.acked) == BEFORE + IN_FLIGHT + AFTER, figures
    for kind in ("lib", "java"):
        for part in ("in_flight_moved", "in_flight_kept"):
            assert set(figures[kind][part]) == {1}, figures  # each record once
    assert "event=routing_journal_mismatch" not in crash.logs


def test_without_a_journal_the_batch_in_flight_is_refused_and_never_guessed(
    private_cluster: KafkaCluster, kafka: KafkaCluster, topic_name: str
) -> None:
    """`routing.journal: off`: the new process does not know the producers' shifts and
    refuses their next batch (UNKNOWN_PRODUCER_ID). librdkafka gives the producer up: the
    batch in flight at most once. The Java client bumps its epoch: at least once, at most
    twice (its first attempt written, the retry under the new epoch written again)."""
    crash = crash_in_flight(private_cluster, kafka, topic_name, "off")
    figures, lib = crash.figures, crash.lib
    assert "routing_journal_open" not in crash.logs
    assert any("UNKNOWN_PRODUCER_ID" in e for e in lib.errors.fatal()), lib.errors.seen
    assert len(lib.acked) == BEFORE, figures
    assert set(figures["lib"]["in_flight_moved"]) <= {0, 1}, figures
    assert set(figures["lib"]["in_flight_kept"]) <= {0, 1}, figures
    for part in ("in_flight_moved", "in_flight_kept"):
        assert set(figures["java"][part]) <= {1, 2}, figures
    assert figures["refusals"] >= 2, figures  # each producer's next batch refused once
