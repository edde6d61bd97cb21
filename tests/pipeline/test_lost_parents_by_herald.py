"""Lost parents end to end: a real Herald whose link memory is too small declares the parents
it could not name on the records it stamps (`herald.parents_lost`, played by
`tests.support.pipeline.lost_parents`), and the batch job marks those hops, their links and
their branches incomplete, counting each parent lost by reason."""

from __future__ import annotations

from pathlib import Path

from pipeline.config import PipelineConfig
from proxy.devtools.embedded_kafka import KafkaCluster
from tests.support.pipeline.lost_parents import declare_losses, declared, expected


def test_herald_s_declared_losses_make_the_pipeline_s_hops_incomplete(
        spark, kafka: KafkaCluster, tmp_path: Path) -> None:
    from pipeline.jobs import run_batch

    losses = declare_losses(kafka.bootstrap)
    assert declared(kafka.bootstrap, losses) == expected(losses)
    src, dst = losses.source, losses.sink

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
