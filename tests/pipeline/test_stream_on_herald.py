"""The stream's dashboard and alerts on what a real Herald wrote: the four services of the
scenario play through Herald with the shipped chains (links by Herald, fetch_log; one service
left out of the links, so its edge is inferred from the fetch log), with branches broken both
ways (stopped, slow) and the consumer lag of their groups; a Herald with room in its link
memory for two traces declares the parents it lost. A stream with a processing-time trigger
reads all of it, a real Prometheus scrapes its metrics every second, and:

* the stream's tables equal the batch job's over the same records;
* the scrape says what those tables say (every edge and pathway series, lag, transit,
  branches, lost parents, links, health);
* every query of the shipped stream dashboard returns data, and of the shipped alerts exactly
  the one this traffic calls for holds;
* the stream's report page is rendered and kept as an artifact.

Nothing here is written in Herald's name: the only record not from a service is an untraced
one, far ahead in time, that moves the stream's event-time watermark past every flow (as the
next minutes of traffic would)."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from confluent_kafka import Producer

from pipeline.config import StreamConfig
from proxy.devtools.embedded_kafka import KafkaCluster, free_port
from tests.support.herald_process import HeraldProcess
from tests.support.pipeline.lost_parents import declare_losses, declared, expected
from tests.support.pipeline.scenario import pipeline_config, play_observed, topic_names
from tests.support.pipeline.screenshot import screenshot
from tests.support.pipeline.stream_runs import assert_stream_equals_batch
from tests.support.pipeline.stream_scrape import (
    ACCURACY,
    assert_every_panel_has_data,
    assert_scrape_says_what_the_tables_say,
    firing_alerts,
    scraped_stream,
)
from tests.support.prometheus import running_prometheus
from tests.support.required_parts import PROMETHEUS, needs

pytestmark = needs(PROMETHEUS)

AHEAD_MS = 120_000  # the clock record's lead over the traffic


def test_the_stream_on_herald_s_traffic_fills_every_panel_and_fires_the_alert_it_should(
    spark, herald_traced: HeraldProcess, kafka: KafkaCluster, tmp_path: Path
) -> None:
    from pipeline.jobs import run_batch

    losses = declare_losses(kafka.bootstrap)
    assert declared(kafka.bootstrap, losses) == expected(losses)
    topics = topic_names()
    play_observed(herald_traced.bootstrap, kafka.bootstrap, topics)
    clock = Producer({"bootstrap.servers": kafka.bootstrap, "client.id": "clock"})
    clock.produce(losses.source, b"clock", timestamp=int(time.time() * 1000) + AHEAD_MS)
    assert clock.flush(30) == 0

    port = free_port("127.0.0.1")
    config = pipeline_config(topics, kafka.bootstrap, tmp_path / "stream", stream=StreamConfig(
        checkpoint=str(tmp_path / "checkpoint"), trigger="processing_time", interval_s=1.0,
        watermark_s=20.0, flow_gap_s=15.0, metrics_bind=f"127.0.0.1:{port}"))
    config = replace(config, topics=[*config.topics, losses.source, losses.sink],
                     terminal_topics=[*config.terminal_topics, losses.sink])
    batch_out = tmp_path / "batch"
    batch = run_batch(spark, replace(config, output=str(batch_out)))
    # What the traffic holds, by the batch job: the kinds of figure the panels show.
    assert batch["incomplete"]["parents_lost"] == 4  # Herald's own declarations
    assert batch["branches"]["stopped"] > 0 and batch["branches"]["slow"] > 0
    assert batch["links"]["linked"] > 0 and batch["links"]["inferred_by_fetch"] > 0
    assert batch["records"]["untraced"] > 0 and batch["lag"] and batch["transit"]

    out = Path(config.output)
    with running_prometheus([f"127.0.0.1:{port}"], tmp_path) as prom, \
            scraped_stream(spark, config, prom, batch["flows"]["total"]) as (summary, scrape):
        assert_stream_equals_batch(spark, out, batch_out, ACCURACY)
        # The legacy producer's records carry no Herald time: their fetches are measured
        # from the records' own times, as batch measures them, not left unmeasured.
        assert summary["stream"]["no_record_time"] == 0
        assert_scrape_says_what_the_tables_say(scrape, summary, spark, out)
        assert_every_panel_has_data(scrape)
        # More than 5% of the branches broke (the scenario's stopped and slow flows); the lag
        # stays under five minutes, every group fetched within the watermark's last 15
        # minutes, the stream progresses, reports and evicts nothing.
        assert firing_alerts(scrape) == {"HeraldKafkaBrokenBranchesRising"}
    png = tmp_path / "report.png"
    screenshot(out / "report.html", png, tmp_path / "profile", (1400, 1600),
               keep_as="stream-report-herald.png")
    html = (out / "report.html").read_text()
    assert "Incomplete: parents Herald could not name" in html
