"""Lost parents end to end: a real Herald whose link memory is too small declares the parents
it could not name on the records it stamps (`herald.parents_lost`), and the batch job marks
those hops, their links and their branches incomplete, counting each parent lost by reason.

Three traces (a, b, c) have two records each in the source topic, written straight to the
broker. A service reads the six through Herald (a, b, c, a, b, c) with room in Herald's memory
for two traces, then continues each trace with one record. Every fetch evicts the least recent
trace, whose parents are carried: a's record names no parent and declares both evicted, b's
and c's name their second input and declare the first.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from confluent_kafka import Producer

from pipeline.config import PipelineConfig
from proxy.devtools.embedded_kafka import KafkaCluster
from tests.support.clients import consume_all, create_topic
from tests.support.herald_process import HeraldProcess, herald_config

LOST = "herald.parents_lost"


def _tp(trace: str) -> bytes:
    return f"00-{trace}-{os.urandom(8).hex()}-01".encode()


def _read(bootstrap: str, topic: str, count: int, client_id: str) -> list:
    got = consume_all(bootstrap, topic, count, timeout=120, conf={"client.id": client_id})
    assert len(got) == count, (topic, len(got))
    return got


def test_herald_s_declared_losses_make_the_pipeline_s_hops_incomplete(
        spark, kafka: KafkaCluster, tmp_path: Path) -> None:
    from pipeline.jobs import run_batch

    tag = uuid.uuid4().hex[:8]
    src, dst = f"lost-in-{tag}", f"lost-out-{tag}"
    for topic in (src, dst):
        create_topic(kafka.bootstrap, topic, 1)
    traces = [os.urandom(16).hex() for _ in range(3)]
    direct = Producer({"bootstrap.servers": kafka.bootstrap})
    for trace in traces * 2:
        direct.produce(src, b"in", headers=[("traceparent", _tp(trace))])
        assert direct.flush(30) == 0
    chains = {"produce": [{"type": "trace_context",
                           "link": {"capacity": 2, "scope": "client_id"}},
                          {"type": "audit"}]}
    with HeraldProcess(herald_config(kafka.bootstrap, interceptors=chains)) as herald:
        _read(herald.bootstrap, src, 6, "svc-small")
        producer = Producer({"bootstrap.servers": herald.bootstrap, "client.id": "svc-small",
                             "linger.ms": 0})
        for trace in traces:
            producer.produce(dst, b"out", headers=[("traceparent", _tp(trace))])
            assert producer.flush(30) == 0

    # What Herald wrote, read back from the broker: the losses it declared, by record.
    written = _read(kafka.bootstrap, dst, 3, "checker")
    declared = {}
    for msg in written:
        headers = dict(msg.headers())
        trace = headers["traceparent"].decode().split("-")[1]
        reason, _, n = headers[LOST].decode().partition(":")
        declared[trace] = (reason, int(n), "herald.parent" in headers)
    assert declared == {traces[0]: ("evicted", 2, False), traces[1]: ("evicted", 1, True),
                        traces[2]: ("evicted", 1, True)}

    config = PipelineConfig(bootstrap=kafka.bootstrap, topics=[src, dst], terminal_topics=[dst],
                            output=str(tmp_path / "out"), shuffle_partitions=2)
    summary = run_batch(spark, config)
    incomplete = summary["incomplete"]
    assert incomplete["hops"] == 3 and incomplete["parents_lost"] == 4
    assert incomplete["by_reason"]["evicted"]["hops"] == 3
    assert incomplete["by_reason"]["expired"]["hops"] == incomplete["by_reason"]["overflow"][
        "hops"] == 0
    # a's record names no parent: its branch starts there, marked (a lost root); b's and c's
    # keep the link to their second input, marked incomplete.
    assert incomplete["roots"] == 1 and incomplete["links"] == 2
    assert incomplete["flows"] == 3
    edges = {(e["from_topic"], e["to_topic"]): e for e in summary["edges"]}
    assert edges[(src, dst)]["count"] == 2 and edges[(src, dst)]["incomplete"] == 2
