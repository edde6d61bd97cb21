"""Chain runs against a real broker: a big chained batch in a worker thread does not hold up
small chained requests of other clients, and a shadow member changes no byte while counting
what it then does once a reload promotes it."""

from __future__ import annotations

import signal
import statistics
import threading
import time

import yaml
from confluent_kafka import Producer

from protocol.compression import ZSTD
from protocol.messages.fetch_response import FetchResponse
from protocol.messages.produce_response import ProduceResponse
from protocol.records import Record, build_batch, split_batches
from proxy.devtools.embedded_kafka import KafkaCluster, free_port
from tests.support import raw_client as raw
from tests.support.clients import create_topic
from tests.support.herald_process import HeraldProcess, herald_config
from tests.support.metrics import moved, scrape, total, wait_for
from tests.support.raw_produce import produce_request, send_and_answer

MIB = 1024 * 1024
CHAINS = {"produce": [{"type": "trace_context"}, {"type": "audit"}], "fetch": []}


def test_small_chained_produces_complete_while_a_big_batch_runs_its_chain(
    herald_chain: HeraldProcess, kafka: KafkaCluster, topic_name: str,
) -> None:
    big_topic, small_topic = topic_name + "-big", topic_name + "-small"
    # Leaders ready before the first raw request, which no client would retry.
    create_topic(kafka.bootstrap, big_topic, config={"max.message.bytes": str(32 * MIB)})
    create_topic(kafka.bootstrap, small_topic)
    # 150,000 records that each carry a header the chain must look at (a tracestate without
    # a traceparent), so the chain runs record by record: about a second of work.
    records = build_batch([Record(value=b"", headers=[("tracestate", b"a=1")])
                           for _ in range(150_000)], compression=ZSTD)
    # Herald learns the big topic's size limit on first sight; until then the enriched batch
    # is refused against the broker default (a client retries the same way).
    for corr in range(1, 20):
        partition, took = send_and_answer(herald_chain, produce_request(corr, big_topic, records))
        if partition.error_code != 10:
            break
        time.sleep(0.5)
    assert partition.error_code == 0, partition
    print(f"big batch alone: answered in {took * 1000:.0f} ms")

    # The small client: librdkafka, one record per Produce request, through the same chain.
    producer = Producer({"bootstrap.servers": herald_chain.bootstrap, "linger.ms": 0,
                         "acks": "all"})
    producer.produce(small_topic, b"warm-up")
    assert producer.flush(30) == 0
    offloaded_before = total(scrape(herald_chain), "herald_big_batches_offloaded_total")

    big_done: list[float] = []

    def big() -> None:
        partition, _ = send_and_answer(herald_chain, produce_request(99, big_topic, records))
        big_done.append(time.monotonic())
        assert partition.error_code == 0, partition

    thread = threading.Thread(target=big)
    sent = time.monotonic()
    thread.start()
    time.sleep(0.05)  # the big request is in Herald: decompressing, then its chain
    small: list[tuple[float, float]] = []  # (completed at, latency)
    errors: list[object] = []
    while not big_done and time.monotonic() - sent < 60:
        started = time.monotonic()
        producer.produce(small_topic, b"small", on_delivery=lambda err, _msg: errors.append(err))
        assert producer.flush(30) == 0
        small.append((time.monotonic(), time.monotonic() - started))
    thread.join(timeout=120)
    assert big_done and errors and all(e is None for e in errors)
    before_big = [latency for done, latency in small if done < big_done[0]]
    ms = [round(latency * 1000, 1) for latency in before_big]
    print(f"big batch answered after {(big_done[0] - sent) * 1000:.0f} ms; "
          f"{len(before_big)} small produces completed before it, latency ms: {ms}")
    # Small requests completed one after another while the big one was being processed, with
    # sub-50 ms latency; none waited for the big one's chain run (when chain runs were
    # serialised, one of them waited about as long as the whole run).
    assert len(before_big) >= 5
    assert statistics.median(before_big) < 0.05
    assert max(before_big) < (big_done[0] - sent) / 3
    assert total(scrape(herald_chain), "herald_big_batches_offloaded_total") > offloaded_before


# -- shadow members ---------------------------------------------------------------------------

def shadow_config(kafka: KafkaCluster, audit_shadow: bool) -> dict:
    return herald_config(kafka.bootstrap, admin={"bind": f"127.0.0.1:{free_port()}"},
                         interceptors={"produce": [
                             {"type": "audit", "shadow": audit_shadow},
                             {"type": "require_headers", "headers": ["tenant"], "shadow": True},
                         ]})


def client_batch() -> bytes:
    """The batch a client sends: records without headers, with a forged audit header, and
    with a trace context."""
    headers = [[], [("herald.client_id", b"forged")], [("traceparent", b"00-x")], [("k", None)]]
    return build_batch([Record(b"key-%d" % i, b"value-%d" % i, h)
                        for i, h in enumerate(headers * 5)],
                       # within the broker's retention: an older batch may be deleted
                       base_timestamp=int(time.time() * 1000), producer_id=-1,
                       base_sequence=-1)


def produce_raw(proc: HeraldProcess, topic: str, batch: bytes) -> None:
    client = raw.SocketRawClient(proc.bootstrap)
    try:
        client.send(raw.metadata(1, [topic]))
        assert client.recv() is not None
        body = produce_request(2, topic, batch)
        client.send(body)
        payload = client.recv()
    finally:
        client.close()
    msg = ProduceResponse.decode(payload, 9, 5)
    assert msg.responses[0].partition_responses[0].error_code == 0


def fetch_direct(kafka: KafkaCluster, topic: str) -> bytes:
    """The records of partition 0 as the broker stores them (fetched without Herald)."""
    client = raw.SocketRawClient(kafka.bootstrap)
    try:
        for _ in range(50):
            client.send(raw.fetch(1, topic))
            msg = FetchResponse.decode(client.recv(), 12, 5)
            records = msg.responses[0].partitions[0].records
            if records:
                return records
            time.sleep(0.1)
    finally:
        client.close()
    raise AssertionError("nothing fetched")


def test_a_shadow_member_changes_no_byte_and_counts_what_it_does_once_promoted(
    kafka: KafkaCluster, topic_name: str,
) -> None:
    sent = client_batch()
    n = 20
    create_topic(kafka.bootstrap, topic_name + "-shadow")
    create_topic(kafka.bootstrap, topic_name + "-live")
    config = shadow_config(kafka, audit_shadow=True)
    with HeraldProcess(config) as proc:
        before = scrape(proc)
        produce_raw(proc, topic_name + "-shadow", sent)
        # The broker holds exactly the client's batch: every byte from the magic on (the base
        # offset and leader epoch are the broker's to set), CRC included.
        stored = fetch_direct(kafka, topic_name + "-shadow")
        assert stored[16:] == sent[16:] and stored[8:12] == sent[8:12]
        shadow = wait_for(proc, lambda s: moved(before, s, "herald_interceptor_records_total",
                                                 interceptor="audit", outcome="seen") >= n)

        def audit(samples: dict, name: str, **labels: str) -> float:
            return moved(before, samples, name, interceptor="audit", **labels)

        would = {
            "changed": audit(shadow, "herald_interceptor_records_total",
                             outcome="shadow_changed"),
            "added": audit(shadow, "herald_interceptor_shadow_headers_total", change="added"),
            "removed": audit(shadow, "herald_interceptor_shadow_headers_total",
                             change="removed"),
            "stripped": audit(shadow, "herald_interceptor_events_total",
                              event="forged_stripped"),
        }
        assert audit(shadow, "herald_interceptor_records_total", outcome="changed") == 0
        # require_headers stays in shadow: it would have refused the partition (none of the
        # records has a tenant header), and the batch was written all the same.
        assert moved(before, shadow, "herald_interceptor_records_total",
                     interceptor="require_headers", outcome="shadow_rejected") == n

        # SIGHUP without `shadow` on audit promotes it; the same batch again.
        live_config = shadow_config(kafka, audit_shadow=False)
        live_config.update({k: config[k] for k in ("listen", "admin")})
        proc.config_path.write_text(yaml.safe_dump(live_config))
        proc.signal(signal.SIGHUP)
        reloaded = wait_for(proc, lambda s: moved(shadow, s, "herald_config_reloads_total",
                                                  outcome="applied") >= 1)
        assert moved(shadow, reloaded, "herald_config_reloads_total", outcome="applied") == 1
        produce_raw(proc, topic_name + "-live", sent)
        live = wait_for(proc, lambda s: moved(reloaded, s, "herald_interceptor_records_total",
                                              interceptor="audit", outcome="seen") >= n)

        def done(name: str, **labels: str) -> float:
            return moved(reloaded, live, name, interceptor="audit", **labels)

        did = {
            "changed": done("herald_interceptor_records_total", outcome="changed"),
            "added": done("herald_interceptor_headers_added_total"),
            "removed": done("herald_interceptor_headers_removed_total"),
            "stripped": done("herald_interceptor_events_total", event="forged_stripped"),
        }
    print(f"shadow audit would have: {would}; live audit did: {did}")
    assert would == did == {"changed": n, "added": 8 * n, "removed": n // 4, "stripped": n // 4}
    stamped = split_batches(fetch_direct(kafka, topic_name + "-live"))[0].records
    assert all(dict(r.headers).get("herald.proxy") for r in stamped)
