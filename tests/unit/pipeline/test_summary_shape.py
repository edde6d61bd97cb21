"""`summary.json` has one shape (`pipeline.summary_shape`) and one builder for what the batch
job and the stream share (`pipeline.summary.summary_from`): built here from small figures,
without Spark, the summary holds every key its type declares and nothing else, with values of
the declared types, and the stream's differs from batch's only by what is its own."""

from __future__ import annotations

import json
import types
from typing import Literal, NotRequired, Union, get_args, get_origin, get_type_hints, is_typeddict

import pytest

from pipeline.config import PipelineConfig, StreamConfig
from pipeline.flows import HISTOGRAM_BOUNDS_MS
from pipeline.graph import LOST_REASONS
from pipeline.report import render
from pipeline.sketch import Sketch
from pipeline.stream.aggregates import Aggregates, HeldSizes, StreamCounts
from pipeline.stream.summary import figures_of, stream_section, summary_of
from pipeline.stream.tables import aggregate_tables
from pipeline.summary import (
    FLAGS,
    SummaryFigures,
    _mode,
    flag_counts,
    incomplete_of,
    offsets_of,
    records_of,
    summary_from,
)
from pipeline.summary_shape import (
    FlagCounts,
    FlowCounts,
    PartitionCounts,
    StreamSection,
    StreamSummary,
    Summary,
)
from tests.support.pipeline.aggregates import sample_aggregates

CONFIG = PipelineConfig(topics=["orders", "payments"], terminal_topics=["payments"], top=2,
                        time_bucket_s=60, stream=StreamConfig(checkpoint="x", accuracy=0.02))

SHARED = set(Summary.__required_keys__)


def _mismatch(value: object, hint: object, where: str) -> str | None:
    """Where `value` departs from the type `hint` (None: nowhere). Exact types: a count that
    became a float, or a flag an int, would change the JSON."""
    origin, args = get_origin(hint), get_args(hint)
    if is_typeddict(hint):
        if type(value) is not dict:
            return f"{where}: {type(value).__name__}, not an object"
        required = hint.__required_keys__
        optional = hint.__optional_keys__
        if not required <= value.keys() <= required | optional:
            return (f"{where}: missing {sorted(required - value.keys())}, "
                    f"undeclared {sorted(value.keys() - required - optional)}")
        hints = get_type_hints(hint, include_extras=True)
        for key, item in value.items():
            inner = hints[key]
            if get_origin(inner) is NotRequired:
                inner = get_args(inner)[0]
            if (bad := _mismatch(item, inner, f"{where}.{key}")) is not None:
                return bad
        return None
    if origin is list:
        if type(value) is not list:
            return f"{where}: {type(value).__name__}, not a list"
        return next((bad for i, item in enumerate(value)
                     if (bad := _mismatch(item, args[0], f"{where}[{i}]")) is not None), None)
    if origin is dict:
        if type(value) is not dict:
            return f"{where}: {type(value).__name__}, not an object"
        return next((bad for k, item in value.items()
                     if (bad := _mismatch(k, args[0], f"{where} key")
                         or _mismatch(item, args[1], f"{where}[{k!r}]")) is not None), None)
    if origin in (Union, types.UnionType):
        fits = [_mismatch(value, a, where) for a in args]
        return None if None in fits else f"{where}: {value!r} is none of {hint}"
    if origin is Literal:
        return None if value in args else f"{where}: {value!r} not in {args}"
    expected = type(None) if hint is None else hint
    return None if type(value) is expected else f"{where}: {value!r} is not {hint}"


def assert_shape(value: object, hint: object) -> None:
    bad = _mismatch(value, hint, "summary")
    assert bad is None, bad


def _sketch(*values: int) -> dict[str, object]:
    sk = Sketch()
    for v in values:
        sk.add(v)
    return {"sketch": sk.to_json()}


def _aggregates() -> Aggregates:
    """Merged aggregates with every part of the summary: edges and pathways (one edge merged
    before histograms were kept), times, broken branches, producers, reads."""
    data = sample_aggregates()
    data["flows"] = {"total": 9, "broken": 2, "stopped": 1, "slow": 2, "open": 1}
    data["over_time"] = {"orders\0payments\x0060000": _sketch(3, 20),
                         "orders\0payments\x000": _sketch(700), "fraud\0alerts\x000": _sketch(5)}
    data["broken_branches"] = [
        {"trace_id": "t2", "path": "orders > payments", "last_topic": "payments",
         "start_ms": 20, "duration_ms": 5, "max_wait_ms": 5, "stopped": True, "slow": False,
         "inferred_edges": 0, "incomplete": False, "lost_reasons": [],
         "leaf": {"topic": "payments", "partition": 0, "offset": 3}},
        {"trace_id": "t1", "path": "orders", "last_topic": "orders", "start_ms": 10,
         "duration_ms": 0, "max_wait_ms": None, "stopped": True, "slow": True,
         "inferred_edges": 1, "incomplete": True, "lost_reasons": ["expired"],
         "leaf": {"topic": "orders", "partition": 0, "offset": 1}}]
    data["audit"] = {
        json.dumps([0, "app", "alice", None]): {"records": 5, "bytes": 50, "untraced": 1},
        json.dumps([3_600_000, None, None, "dc2"]): {"records": 5, "bytes": 7, "untraced": 0},
        json.dumps([3_600_000, "app", None, None]): {"records": 2, "bytes": 0, "untraced": 2}}
    del data["edges"]["orders\0payments"]["histogram"]
    return Aggregates.from_json(data)


PROGRESS = {"batch_id": 7, "input_rows": 10, "duration_ms": 30, "durations_ms": {},
            "watermark": None, "timestamp": None, "state": {"numRowsTotal": 4}, "behind": 0}


def _stream_summary(agg: Aggregates | None = None) -> StreamSummary:
    agg = agg or _aggregates()
    return summary_of(agg, aggregate_tables(agg), CONFIG, PROGRESS)


def _batch_figures() -> SummaryFigures:
    """Figures as the batch job collects them from Spark's rows (`pipeline.summary.summarize`):
    unordered where the summary orders them itself, `bytes` null where no record had a size."""
    latency = {"count": 2, "p50_ms": 10.0, "p90_ms": 18.0, "p99_ms": 19.8, "max_ms": 20}
    return SummaryFigures(
        partitions=[
            {"topic": "payments", "partition": 0, "first": 3, "last": 4, "records": 2,
             "untraced": 0, "bytes": None},
            {"topic": "orders", "partition": 1, "first": 0, "last": 0, "records": 1,
             "untraced": 1, "bytes": 5},
            {"topic": "orders", "partition": 0, "first": 0, "last": 9, "records": 10,
             "untraced": 0, "bytes": 100}],
        flows={"total": 4, "broken": 1, "stopped": 1, "slow": 0, "open": 1},
        branches={"total": 5, "broken": 1, "stopped": 1, "slow": 0, "open": 1},
        evidence={"header": 3, "fetch_host": 1, "time": 1}, unresolved=2,
        incomplete={"hops": 1, "parents_lost": 2, "roots": 1, "links": 1, "branches": 1,
                    "flows": 1, "by_reason": {r: {"hops": int(r == "expired"), "links": 0,
                                                  "branches": 0} for r in LOST_REASONS}},
        edges=[{"from_topic": "orders", "to_topic": "payments", **latency,
                "linked": 1, "inferred": 1, "link": "mixed", "incomplete": 1}],
        histograms={("orders", "payments"): [0] * 4 + [2] + [0] * (len(HISTOGRAM_BOUNDS_MS) - 4)},
        pathways=[{"path": "orders > payments", **latency,
                   "broken": 1, "inferred": 1, "incomplete": 0}],
        over_time=[{"from_topic": "orders", "to_topic": "payments", "bucket_ms": t,
                    **latency} for t in (60_000, 0)],
        broken_branches=[{"trace_id": "t1", "path": "orders", "last_topic": "orders",
                          "start_ms": 10, "duration_ms": 0, "max_wait_ms": None,
                          "stopped": True, "slow": False, "inferred_edges": 0,
                          "incomplete": True, "lost_reasons": ["expired"]}],
        transit=[{"topic": "orders", "group": None, **latency,
                  "consumers": ["c1", "c2"]}],
        lag=[{"topic": "orders", "group": "g", "bucket_ms": 0, "fetches": 2, "p50_s": 0.0,
              "max_s": 1.5}],
        audit=[{"hour_ms": 0, "client_id": "app", "principal": None, "origin": None,
                "records": 13, "bytes": None, "untraced": 1}])


def test_stream_summary_holds_every_declared_key_and_nothing_else() -> None:
    summary = _stream_summary()

    assert_shape(summary, StreamSummary)
    assert_shape(json.loads(json.dumps(summary)), StreamSummary)  # as the file holds it
    assert summary["mode"] == "stream" and summary["last_batch_id"] == 7
    assert [e["histogram"] is None for e in summary["edges"]] == [
        e == ("orders", "payments") for e in sorted(_aggregates().edges)]


def test_batch_summary_holds_every_declared_key_and_nothing_else() -> None:
    summary = summary_from(_batch_figures(), CONFIG, "batch", None)

    assert_shape(summary, Summary)
    assert summary.keys() == SHARED
    assert summary["offsets"] == [
        {"topic": "orders", "partition": 0, "first": 0, "last": 9, "records": 10},
        {"topic": "orders", "partition": 1, "first": 0, "last": 0, "records": 1},
        {"topic": "payments", "partition": 0, "first": 3, "last": 4, "records": 2}]
    assert [p["bucket_ms"] for p in summary["over_time"]] == [0, 60_000]
    assert summary["histogram_bounds_ms"] == list(HISTOGRAM_BOUNDS_MS)


def test_the_stream_adds_only_its_own_keys_to_the_shared_summary() -> None:
    agg = _aggregates()
    rows = aggregate_tables(agg)
    summary = _stream_summary(agg)
    shared = summary_from(figures_of(agg, rows), CONFIG, "stream", agg.stream.watermark_ms)

    assert StreamSummary.__required_keys__ - SHARED == {"last_batch_id", "stream"}
    assert summary.keys() - SHARED == {"last_batch_id", "stream"}
    assert {k: v for k, v in summary.items() if k in SHARED and k != "generated_ms"} == \
        {k: v for k, v in shared.items() if k != "generated_ms"}
    assert summary["watermark_ms"] == summary["stream"]["watermark_ms"] == 1_000_000


def test_the_same_figures_give_the_same_summary_in_either_mode() -> None:
    """A partition, flow and link counted by batch or merged by the stream: the summary's
    figures drawn from them are equal, `complete` included."""
    agg = Aggregates.from_json({
        **Aggregates().to_json(),
        "offsets": {"orders\x000": {"topic": "orders", "partition": 0, "first": 0, "last": 9,
                                    "records": 10, "untraced": 1, "bytes": 40}},
        "flows": {"total": 4, "broken": 1, "stopped": 1, "slow": 0, "open": 1},
        "branches": {"total": 6, "broken": 2, "stopped": 1, "slow": 1, "open": 1},
        "links": {"header": 5, "time": 1, "unresolved": 2},
        "incomplete": {"hops": 1, "parents_lost": 1, "roots": 0, "links": 0, "branches": 0,
                       "flows": 0, "by_reason": {"evicted": {"hops": 1}}}})
    batch = SummaryFigures(
        partitions=[{"topic": "orders", "partition": 0, "first": 0, "last": 9, "records": 10,
                     "untraced": 1, "bytes": 40}],
        flows={"total": 4, "broken": 1, "stopped": 1, "slow": 0, "open": 1},
        branches={"total": 6, "broken": 2, "stopped": 1, "slow": 1, "open": 1},
        evidence={"header": 5, "time": 1}, unresolved=2,
        incomplete={"hops": 1, "parents_lost": 1, "roots": 0, "links": 0, "branches": 0,
                    "flows": 0, "by_reason": {"evicted": {"hops": 1, "links": 0, "branches": 0},
                                              "expired": {"hops": 0, "links": 0, "branches": 0},
                                              "overflow": {"hops": 0, "links": 0,
                                                           "branches": 0}}},
        edges=[], histograms={}, pathways=[], over_time=[], broken_branches=[], transit=[],
        lag=[], audit=[])

    streamed = _stream_summary(agg)
    batched = summary_from(batch, CONFIG, "batch", None)

    for key in SHARED - {"generated_ms", "mode", "watermark_ms"}:
        assert streamed[key] == batched[key], key
    assert batched["flows"] == {"total": 4, "broken": 1, "stopped": 1, "slow": 0, "open": 1,
                                "complete": 2}
    assert batched["records"] == {"total": 10, "traced": 9, "untraced": 1, "by_topic": [
        {"topic": "orders", "records": 10, "untraced": 1, "bytes": 40}]}


def test_flows_and_branches_count_every_flag() -> None:
    assert tuple(FlagCounts.__annotations__) == ("total", *FLAGS)
    assert FlowCounts.__required_keys__ - FlagCounts.__required_keys__ == {"complete"}
    # The stream before any micro-batch counted a flag: 0 of it.
    assert flag_counts({"total": 3, "broken": 1}) == {"total": 3, "broken": 1, "stopped": 0,
                                                      "slow": 0, "open": 0}
    summary = summary_from(_batch_figures(), CONFIG, "batch", None)
    assert summary["flows"]["complete"] == 4 - 1 - 1
    assert "complete" not in summary["branches"]


def test_the_stream_section_is_what_the_hold_counts() -> None:
    counts = StreamCounts(finalized_flows=3, late_hops=1, watermark_ms=5,
                          buckets={0: HeldSizes(4, 2, 1), 1: HeldSizes(1, 1, 0)})
    section = stream_section(counts, CONFIG, None)

    assert_shape(section, StreamSection)
    assert section.keys() == (counts.to_json().keys() - {"buckets"}) | set(HeldSizes._fields) \
        | {"accuracy", "state"}
    assert (section["held_hops"], section["held_flows"], section["tombstones"]) == (5, 3, 1)
    assert section["accuracy"] == 0.02 and section["state"] is None
    # An aggregate from before late observations were counted: the section leaves them out.
    older = stream_section(StreamCounts(late_fetches=None, no_record_time=None), CONFIG, None)
    assert_shape(older, StreamSection)
    assert {"late_fetches", "no_record_time"}.isdisjoint(older)


def test_records_and_offsets_come_from_the_same_partitions() -> None:
    partitions: list[PartitionCounts] = _batch_figures().partitions
    records = records_of(partitions)

    assert records == {"total": 13, "traced": 12, "untraced": 1, "by_topic": [
        {"topic": "orders", "records": 11, "untraced": 1, "bytes": 105},
        {"topic": "payments", "records": 2, "untraced": 0, "bytes": 0}]}
    assert sum(o["records"] for o in offsets_of(partitions)) == records["total"]


def test_incomplete_lacks_nothing_an_older_aggregate_never_counted() -> None:
    got = incomplete_of({"hops": 2, "by_reason": {"expired": {"hops": 2}}}, [], [])

    assert got == {"hops": 2, "parents_lost": 0, "roots": 0, "links": 0, "branches": 0,
                   "flows": 0, "edges": 0, "pathways": 0,
                   "by_reason": {r: {"hops": 2 if r == "expired" else 0, "links": 0,
                                     "branches": 0} for r in LOST_REASONS}}


def test_the_batch_job_names_only_its_mode() -> None:
    assert _mode(None) == _mode({"mode": "batch"}) == "batch"
    with pytest.raises(ValueError):
        _mode({"mode": "nightly"})
    with pytest.raises(ValueError):
        _mode({"mode": "batch", "owner": "me"})


def test_the_report_reads_the_summary_as_written() -> None:
    for summary in (_stream_summary(), summary_from(_batch_figures(), CONFIG, "batch", None)):
        assert render(summary) == render(json.loads(json.dumps(summary, sort_keys=True)))
