"""The merged aggregates: every count, histogram and sketch the stream's tables, summary and
metrics are drawn from, merged from the checkpoint onwards (`pipeline.stream.merge`), as
typed values; and their JSON, the file `aggregates/N.json` (`pipeline.stream.store`).

Why the JSON is kept as it was. A stream restarted from its checkpoint reads the file the
previous run wrote, perhaps an older version: a figure that version did not keep is absent
from the file, and stays None here (never a confident 0) until a micro-batch merges it, so
the exporter can leave out what it cannot state (`pipeline.stream_metrics`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple, Self

from pipeline.sketch import Sketch, SketchJson

Counts = dict[str, int]
"""Counts by name (flows and branches by flag, links by evidence)."""
OffsetsKey = tuple[str, int]  # topic, partition
EdgeKey = tuple[str, str]  # parent topic, child topic
OverTimeKey = tuple[str, str, int]  # parent topic, child topic, start of the time bucket (ms)
AuditKey = tuple[int, str | None, str | None, str | None]  # hour (ms), client, principal, origin
GroupKey = tuple[str, str | None]  # topic, consumer group
LagKey = tuple[str, str | None, int]  # topic, group, start of the bucket of fetch time (ms)


def _present(**values: object) -> dict[str, object]:
    """The figures that are there (an older version's file may lack some)."""
    return {k: v for k, v in values.items() if v is not None}


def _sketch(data: SketchJson | None) -> Sketch | None:
    return None if data is None else Sketch.from_json(data)


@dataclass
class Entry:
    """An edge's or a pathway's merged figures: its counters (`COUNTS`, always there), those
    through a hop with lost parents, and its values (ms: an edge's waits, a pathway's
    durations) as a sketch, for the tables' percentiles, and as the fixed-bound histogram
    (`pipeline.flows.HISTOGRAM_BOUNDS_MS`) with the exact sum, which Prometheus histograms
    need. An entry first merged by a version without `incomplete`, the histogram or the sum
    keeps None for it (the sum for good)."""

    COUNTS: ClassVar[tuple[str, ...]] = ()

    incomplete: int | None = None
    sketch: Sketch | None = None
    histogram: list[int] | None = None
    sum_ms: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {**{k: getattr(self, k) for k in self.COUNTS},
                **_present(incomplete=self.incomplete,
                           sketch=None if self.sketch is None else self.sketch.to_json(),
                           histogram=self.histogram, sum_ms=self.sum_ms)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Self:
        return cls(**{k: data[k] for k in cls.COUNTS}, incomplete=data.get("incomplete"),
                   sketch=_sketch(data.get("sketch")), histogram=data.get("histogram"),
                   sum_ms=data.get("sum_ms"))


@dataclass
class Edge(Entry):
    """A parent topic to child topic edge: its hops by how the parent was found."""

    COUNTS: ClassVar[tuple[str, ...]] = ("linked", "inferred")

    linked: int = 0
    inferred: int = 0


@dataclass
class Pathway(Entry):
    """The branches along one path: broken ones, ones with an inferred edge."""

    COUNTS: ClassVar[tuple[str, ...]] = ("broken", "inferred")

    broken: int = 0
    inferred: int = 0


@dataclass
class PartitionOffsets:
    """What was read of one partition: its offsets' range, records, untraced ones, bytes."""

    topic: str
    partition: int
    first: int
    last: int
    records: int = 0
    untraced: int = 0
    bytes: int = 0

    def to_json(self) -> dict[str, str | int]:
        return {"topic": self.topic, "partition": self.partition, "first": self.first,
                "last": self.last, "records": self.records, "untraced": self.untraced,
                "bytes": self.bytes}


@dataclass
class AuditCounts:
    """Records, bytes and untraced records of one hour, client id, principal and origin."""

    records: int = 0
    bytes: int = 0
    untraced: int = 0

    def to_json(self) -> dict[str, int]:
        return {"records": self.records, "bytes": self.bytes, "untraced": self.untraced}


@dataclass
class Transit:
    """Per topic and consumer group: the consumers of every read, and a sketch of the first
    reads' transit (None until a first read is released)."""

    consumers: list[str] = field(default_factory=list)
    sketch: Sketch | None = None

    def to_json(self) -> dict[str, Any]:
        return {"consumers": self.consumers,
                **_present(sketch=None if self.sketch is None else self.sketch.to_json())}


class HeldSizes(NamedTuple):
    """What the state holds (of one bucket, or of all): hops and flows waiting, tombstones."""

    held_hops: int
    held_flows: int
    tombstones: int


@dataclass
class StreamCounts:
    """The hold's side: flows finalised and evicted, hops evicted, late and untraced,
    observations not merged (late, or without the record's time: None in a file written
    before they were counted), the watermark, and each trace bucket's size (by bucket)."""

    finalized_flows: int = 0
    evicted_flows: int = 0
    evicted_hops: int = 0
    late_hops: int = 0
    untraced: int = 0
    late_fetches: int | None = 0
    no_record_time: int | None = 0
    watermark_ms: int | None = None
    buckets: dict[int, HeldSizes] = field(default_factory=dict)

    def held(self) -> HeldSizes:
        """What the state holds, over every bucket."""
        return HeldSizes(*(sum(b[i] for b in self.buckets.values()) for i in range(3)))

    def to_json(self) -> dict[str, Any]:
        return {"finalized_flows": self.finalized_flows, "evicted_flows": self.evicted_flows,
                "evicted_hops": self.evicted_hops, "late_hops": self.late_hops,
                "untraced": self.untraced, "watermark_ms": self.watermark_ms,
                **_present(late_fetches=self.late_fetches, no_record_time=self.no_record_time),
                "buckets": {str(b): list(s) for b, s in self.buckets.items()}}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StreamCounts:
        return cls(finalized_flows=data["finalized_flows"], evicted_flows=data["evicted_flows"],
                   evicted_hops=data["evicted_hops"], late_hops=data["late_hops"],
                   untraced=data["untraced"], late_fetches=data.get("late_fetches"),
                   no_record_time=data.get("no_record_time"),
                   watermark_ms=data["watermark_ms"],
                   buckets={int(b): HeldSizes(*s) for b, s in data.get("buckets", {}).items()})


@dataclass
class Aggregates:
    """The merged aggregates after micro-batch `batch_id` (-1: none yet). `flows`,
    `branches` and `links` (by evidence, with `unresolved`) add up `pipeline.summary.tally`'s
    counts, `incomplete` its nested loss counts (None: a file from before they were counted);
    `broken_branches` are the newest broken branches' rows (`BROKEN_COLUMNS` and `leaf`)."""

    batch_id: int = -1
    offsets: dict[OffsetsKey, PartitionOffsets] = field(default_factory=dict)
    flows: Counts = field(default_factory=dict)
    branches: Counts = field(default_factory=dict)
    links: Counts = field(default_factory=dict)
    incomplete: dict[str, Any] | None = field(default_factory=dict)
    edges: dict[EdgeKey, Edge] = field(default_factory=dict)
    pathways: dict[str, Pathway] = field(default_factory=dict)
    over_time: dict[OverTimeKey, Sketch] = field(default_factory=dict)
    broken_branches: list[dict[str, Any]] = field(default_factory=list)
    audit: dict[AuditKey, AuditCounts] = field(default_factory=dict)
    transit: dict[GroupKey, Transit] = field(default_factory=dict)
    lag: dict[LagKey, Sketch] = field(default_factory=dict)
    stream: StreamCounts = field(default_factory=StreamCounts)

    def to_json(self) -> dict[str, Any]:
        """The file's content (string keys: parts joined by NUL, or a JSON list)."""
        return {
            "batch_id": self.batch_id,
            "offsets": {f"{t}\0{p}": o.to_json() for (t, p), o in self.offsets.items()},
            "flows": self.flows, "branches": self.branches, "links": self.links,
            **_present(incomplete=self.incomplete),
            "edges": {"\0".join(k): e.to_json() for k, e in self.edges.items()},
            "pathways": {k: p.to_json() for k, p in self.pathways.items()},
            "over_time": {f"{a}\0{b}\0{t}": {"sketch": s.to_json()}
                          for (a, b, t), s in self.over_time.items()},
            "broken_branches": self.broken_branches,
            "audit": {json.dumps(list(k)): a.to_json() for k, a in self.audit.items()},
            "transit": {json.dumps(list(k)): t.to_json() for k, t in self.transit.items()},
            "lag": {json.dumps(list(k)): {"sketch": s.to_json()} for k, s in self.lag.items()},
            "stream": self.stream.to_json()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Aggregates:
        def edge_key(key: str) -> EdgeKey:
            a, b = key.split("\0")
            return a, b

        over_time = {}
        for key, entry in data["over_time"].items():
            a, b, t = key.split("\0")
            over_time[(a, b, int(t))] = Sketch.from_json(entry["sketch"])
        return cls(
            batch_id=data["batch_id"],
            offsets={(o["topic"], o["partition"]): PartitionOffsets(**o)
                     for o in data["offsets"].values()},
            flows=data["flows"], branches=data["branches"], links=data["links"],
            incomplete=data.get("incomplete"),
            edges={edge_key(k): Edge.from_json(e) for k, e in data["edges"].items()},
            pathways={k: Pathway.from_json(p) for k, p in data["pathways"].items()},
            over_time=over_time,
            broken_branches=data["broken_branches"],
            audit={tuple(json.loads(k)): AuditCounts(**a) for k, a in data["audit"].items()},
            transit={tuple(json.loads(k)): Transit(t["consumers"], _sketch(t.get("sketch")))
                     for k, t in data.get("transit", {}).items()},
            lag={tuple(json.loads(k)): Sketch.from_json(e["sketch"])
                 for k, e in data.get("lag", {}).items()},
            stream=StreamCounts.from_json(data["stream"]))
