"""The stream's merge (`pipeline.stream.merge`) over typed figures, without Spark: what two
micro-batches add up to equals what one would, bucket sizes replace the ones before, and the
aggregates' file (`pipeline.stream.aggregates`) reads back as written, an older version's
missing figures staying missing."""

from __future__ import annotations

import json

from pipeline.config import PipelineConfig, StreamConfig
from pipeline.flow_hold import EVICTED, FINAL, HOP, LATE
from pipeline.flows import HISTOGRAM_BOUNDS_MS
from pipeline.sketch import Sketch
from pipeline.stream.aggregates import Aggregates, HeldSizes
from pipeline.stream.figures import (
    AuditRow,
    BatchFigures,
    BucketSize,
    EdgeWaits,
    GroupLag,
    GroupReads,
    GroupTransit,
    PartitionRead,
    PathDurations,
    ReadFigures,
    SketchBucket,
    StatusCount,
)
from pipeline.stream.merge import merge_batch, merge_reads
from pipeline.stream.rows import FETCH
from pipeline.summary import Tallies

CONFIG = PipelineConfig(topics=["orders", "payments"], stream=StreamConfig(checkpoint="x"))


def _tallies(flows: int) -> Tallies:
    return Tallies(flows={"total": flows, "broken": 1}, branches={"total": flows},
                   evidence={"header": flows}, unresolved=1,
                   incomplete={"hops": 1, "by_reason": {"expired": {"hops": 1}}})


def _waits(ms: int, n: int) -> SketchBucket:
    sk = Sketch()
    sk.add(ms)
    (bucket, _), = sk.positive.items()
    return SketchBucket(1, bucket, n, ms, ms)


def _figures(offset: int, wait_ms: int, sizes: list[BucketSize]) -> BatchFigures:
    return BatchFigures(
        statuses=[StatusCount(HOP, FINAL, 6, 2, 1000 + offset),
                  StatusCount(HOP, EVICTED, 3, 1, 900),
                  StatusCount(HOP, LATE, 1, 1, None),
                  StatusCount(FETCH, LATE, 2, 1, None)],
        sizes=sizes,
        partitions=[PartitionRead("orders", 0, offset, offset + 4, 5, 1, 50)],
        audit=[AuditRow(0, "app", None, None, 5, 50, 1)],
        tallies=_tallies(2),
        edges=[EdgeWaits("orders", "payments", "linked", 60_000, 3, _waits(wait_ms, 2), 2 * wait_ms,
                         1)],
        pathways=[PathDurations("orders > payments", 3, _waits(wait_ms, 2), 2 * wait_ms, 1, 0,
                                0)],
        broken=[{"trace_id": f"t{offset}", "path": "orders > payments", "start_ms": offset,
                 "leaf": {"topic": "payments", "partition": 0, "offset": offset}}])


def test_two_batches_add_up_and_sizes_replace() -> None:
    agg = Aggregates()
    merge_batch(agg, _figures(0, 7, [BucketSize(3, HeldSizes(4, 2, 1)),
                                     BucketSize(5, HeldSizes(1, 1, 0))]), CONFIG)
    merge_batch(agg, _figures(10, 20, [BucketSize(5, HeldSizes(0, 0, 0))]), CONFIG)
    o = agg.offsets[("orders", 0)]
    assert (o.first, o.last, o.records, o.untraced, o.bytes) == (0, 14, 10, 2, 100)
    assert agg.audit[(0, "app", None, None)].records == 10
    assert agg.flows == {"total": 4, "broken": 2} and agg.links == {"header": 4,
                                                                     "unresolved": 2}
    assert agg.incomplete == {"hops": 2, "by_reason": {"expired": {"hops": 2}}}
    edge = agg.edges[("orders", "payments")]
    assert (edge.linked, edge.inferred, edge.incomplete, edge.sum_ms) == (4, 0, 2, 54)
    assert edge.sketch is not None and edge.sketch.count == 4
    assert (edge.sketch.min, edge.sketch.max) == (7, 20)
    assert edge.histogram == [0, 0, 0, 4] + [0] * (len(HISTOGRAM_BOUNDS_MS) - 3)
    assert agg.over_time[("orders", "payments", 60_000)].count == 4
    assert agg.pathways["orders > payments"].broken == 2
    assert [b["trace_id"] for b in agg.broken_branches] == ["t10", "t0"]
    st = agg.stream
    assert (st.finalized_flows, st.evicted_flows, st.evicted_hops, st.late_hops,
            st.late_fetches, st.watermark_ms) == (4, 2, 6, 2, 4, 1010)
    assert st.buckets == {3: HeldSizes(4, 2, 1)} and st.held() == HeldSizes(4, 2, 1)


def test_reads_merge_consumers_transit_and_lag() -> None:
    agg = Aggregates()
    for consumers, lag_bucket in ((["b", "a"], 0), (["a", "c"], 60_000)):
        merge_reads(agg, ReadFigures(
            groups=[GroupReads("orders", "pay", consumers)],
            transit=[GroupTransit("orders", "pay", _waits(5, 3))],
            lag=[GroupLag("orders", "pay", lag_bucket, _waits(100, 3))]), CONFIG)
    transit = agg.transit[("orders", "pay")]
    assert transit.consumers == ["a", "b", "c"]
    assert transit.sketch is not None and transit.sketch.count == 6
    assert sorted(agg.lag) == [("orders", "pay", 0), ("orders", "pay", 60_000)]


def test_the_file_reads_back_as_written_and_old_gaps_stay() -> None:
    agg = Aggregates()
    merge_batch(agg, _figures(0, 7, [BucketSize(3, HeldSizes(4, 2, 1))]), CONFIG)
    merge_reads(agg, ReadFigures([GroupReads("orders", None, ["a"])], [], []), CONFIG)
    written = json.loads(json.dumps(agg.to_json()))
    assert json.loads(json.dumps(Aggregates.from_json(written).to_json())) == written
    assert written["edges"]["orders\0payments"]["sum_ms"] == 14
    assert written["transit"] == {'["orders", null]': {"consumers": ["a"]}}
    # A file from before sums, lost parents and unmeasured fetches were kept.
    del written["incomplete"], written["stream"]["no_record_time"]
    del written["edges"]["orders\0payments"]["sum_ms"]
    old = Aggregates.from_json(written)
    assert old.incomplete is None and old.stream.no_record_time is None
    merge_batch(old, _figures(10, 20, []), CONFIG)
    again = old.to_json()
    assert "sum_ms" not in again["edges"]["orders\0payments"]
    assert "no_record_time" not in again["stream"]
    assert again["incomplete"] == {"hops": 1, "by_reason": {"expired": {"hops": 1}}}
