"""A Kafka Streams application through Herald, as the pipeline draws it: one service between
its topics. The application (tests/support/streams, exactly once, the streams group protocol)
upper-cases every record of its input topic into its output topic; Streams forwards the
input's headers, so each output record continues its input's trace, and Herald's link memory
names the input record it came from. The batch job over both topics then finds one edge,
input → output, every hop of it linked (none inferred), every flow complete and none broken,
and the application's own producer in the audit table."""

from __future__ import annotations

import uuid
from pathlib import Path

from confluent_kafka import Producer

from pipeline.config import PipelineConfig
from proxy.devtools.embedded_kafka import KafkaCluster
from tests.support.clients import consume_all, create_topic
from tests.support.herald_process import HeraldProcess, herald_config
from tests.support.streams.app import running_app

RECORDS = 20
CHAINS = {"produce": [{"type": "trace_context", "link": {"scope": "host"}}, {"type": "audit"}]}


def test_a_streams_application_is_one_linked_edge_between_its_topics(
        spark: object, kafka: KafkaCluster, tmp_path: Path) -> None:
    from pipeline.jobs import run_batch

    run = uuid.uuid4().hex[:8]
    source, sink, app_id = f"st-in-{run}", f"st-out-{run}", f"upper-{run}"
    with HeraldProcess(herald_config(kafka.bootstrap, interceptors=CHAINS)) as herald:
        for topic in (source, sink):
            create_topic(herald.bootstrap, topic)
        with running_app(herald.bootstrap, app_id, source, sink, "streams") as lines:
            producer = Producer({"bootstrap.servers": herald.bootstrap, "client.id": "orders"})
            for i in range(RECORDS):
                producer.produce(source, f"order-{i}".encode())
            assert producer.flush(30) == 0
            outputs = consume_all(herald.bootstrap, sink, RECORDS, timeout=120,
                                  conf={"isolation.level": "read_committed"})
        assert sorted(m.value() for m in outputs) == sorted(
            f"ORDER-{i}".encode() for i in range(RECORDS)), "\n".join(lines[-40:])

    config = PipelineConfig(bootstrap=kafka.bootstrap, topics=[source, sink],
                            terminal_topics=[sink], output=str(tmp_path / "out"),
                            shuffle_partitions=2)
    summary = run_batch(spark, config)
    (edge,) = summary["edges"]
    assert (edge["from_topic"], edge["to_topic"]) == (source, sink)
    assert edge["count"] == RECORDS and edge["link"] == "linked" and edge["incomplete"] == 0
    assert summary["links"]["linked"] == RECORDS and summary["links"]["inferred"] == 0
    flows = summary["flows"]
    assert flows["total"] == flows["complete"] == RECORDS and flows["broken"] == 0
    writers = {row["client_id"]: row["records"] for row in summary["audit"]["by_client_id"]}
    streams = {client: n for client, n in writers.items() if client.startswith(app_id)}
    assert sum(streams.values()) == RECORDS, writers  # Streams' own producer wrote the output
    assert writers.get("orders") == RECORDS
