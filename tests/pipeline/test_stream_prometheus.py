"""The stream's metrics read by a real Prometheus: a stream with a processing-time trigger
runs over synthetic Herald traffic (with its consumers' fetch observations) on the real
broker, Prometheus scrapes its metrics port every second, and PromQL answers what the
stream's own tables say for the same traffic: edge and pathway counts, the exact sum of the
waits, latency quantiles (`histogram_quantile`, within the bucket that holds the stream's
sketch quantile), consumer lag in seconds, broken branches, untraced records and the stream's
health. On the same scrape every query of the shipped dashboard returns data, and of the
shipped alerts exactly those the traffic calls for would fire."""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path

from proxy.devtools.embedded_kafka import KafkaCluster, free_port
from tests.support.pipeline.scenario import topic_names
from tests.support.pipeline.stream_runs import KINDS, T0, lost_parents_of, observe, stream_config
from tests.support.pipeline.stream_scrape import (
    assert_every_panel_has_data,
    assert_scrape_says_what_the_tables_say,
    firing_alerts,
    newest_lag,
    scraped_stream,
)
from tests.support.pipeline.synthetic import Hop, Traffic
from tests.support.prometheus import Prometheus, running_prometheus
from tests.support.required_parts import PROMETHEUS, needs

pytestmark = needs(PROMETHEUS)


def test_prometheus_scraping_the_stream_sees_what_its_tables_say(
    spark, kafka: KafkaCluster, tmp_path: Path
) -> None:
    topics = topic_names()
    config = stream_config(topics, kafka.bootstrap, tmp_path, f"fetches-{uuid.uuid4().hex[:8]}",
                           watermark_s=20.0, flow_gap_s=15.0)
    port = free_port("127.0.0.1")
    config = replace(config, stream=replace(
        config.stream, trigger="processing_time", interval_s=1.0,
        metrics_bind=f"127.0.0.1:{port}"))
    traffic = Traffic(topics, fetch_topic=config.fetch_topic)
    flows = [traffic.flow(T0 + i * 3000, KINDS[i % len(KINDS)]) for i in range(12)]
    for n, made in enumerate(flows):
        observe(traffic, made, n)
    lossy = lost_parents_of(traffic, T0 + 40_000)  # records declaring lost parents
    for i in range(3):  # no trace context
        traffic.add(Hop(topics["orders"], T0 + 500 + i, None, client="legacy"))
    end = max(h.event_ms for h in traffic.hops)
    # A group reading the first order only at the end: its newest lag is the whole run.
    traffic.fetch(flows[0][0], "svc-late", "late-app", end + 1000 - T0)
    # An untraced record far ahead moves the watermark past every flow and fetch.
    traffic.add(Hop(topics["orders"], end + 120_000, None, client="clock"))
    traffic.write(kafka.bootstrap)

    out = Path(config.output)
    with running_prometheus([f"127.0.0.1:{port}"], tmp_path) as prom, \
            scraped_stream(spark, config, prom, len(flows) + len(lossy)) as (summary, scrape):
        assert len(summary["edges"]) >= 3
        assert_scrape_says_what_the_tables_say(scrape, summary, spark, out)
        _assert_what_this_traffic_made(scrape, summary, topics)
        assert_every_panel_has_data(scrape)
        # Of the shipped alerts, the broken-branches one holds (the traffic breaks more than
        # 5% of its branches) and no other: the lag stays under five minutes, every group
        # fetched within the watermark's last 15 minutes, the stream progresses, reports and
        # evicts nothing.
        assert firing_alerts(scrape) == {"HeraldKafkaBrokenBranchesRising"}


def _assert_what_this_traffic_made(prom: Prometheus, summary: dict,
                                   topics: dict[str, str]) -> None:
    """The figures the synthetic traffic was built to make are there (not only equal to the
    tables): a late group, breaks of both kinds, parents lost for every reason, inferred
    links and the untraced records."""
    assert newest_lag(summary)[(topics["orders"], "late-app")]["max_s"] > 30
    branches, incomplete = summary["branches"], summary["incomplete"]
    assert branches["broken"] > 0 and branches["stopped"] > 0 and branches["slow"] > 0
    assert incomplete["branches"] > 0
    assert prom.value("herald_stream_flows_incomplete_total") == incomplete["flows"] == 2
    assert prom.value("herald_stream_parents_lost_total") == incomplete["parents_lost"] == 4
    for reason in ("expired", "evicted", "overflow"):
        assert incomplete["by_reason"][reason]["branches"] > 0, reason
    assert sum(e["incomplete"] for e in summary["edges"]) > 0
    assert summary["records"]["untraced"] == 4
    assert summary["links"]["inferred_by_fetch"] > 0
