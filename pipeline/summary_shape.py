"""The shape of `summary.json`, as types: what the batch job and the stream write
(`pipeline.summary.summary_from` builds the part they share, `pipeline.stream.summary` adds
the stream's own) and what the report (`pipeline.report`) and `herald pipeline` read.

Kept apart from the builders so that the report, which must run without Spark, imports the
shape alone. A file written by an older version may lack keys declared here; the report
reads those with a default (`pipeline.report`).
"""

# No `from __future__ import annotations`: Python 3.11 tells a `NotRequired` key from a
# required one (`__optional_keys__`) only by an evaluated annotation.
from typing import Literal, NotRequired, TypedDict

Mode = Literal["batch", "stream"]
"""Which job wrote the summary."""

EdgeKey = tuple[str, str]
"""An edge: parent topic, child topic."""


class SummaryConfig(TypedDict):
    """The settings the summary's figures depend on."""

    topics: list[str]
    terminal_topics: list[str]
    max_wait_ms: int
    time_source: Literal["herald", "broker"]
    time_bucket_s: int


class TopicRecords(TypedDict):
    """What was read of one topic."""

    topic: str
    records: int
    untraced: int
    bytes: int


class Records(TypedDict):
    """What was read: in all, and per topic."""

    total: int
    traced: int
    untraced: int
    by_topic: list[TopicRecords]


class OffsetRange(TypedDict):
    """The offsets read of one partition, and its records."""

    topic: str
    partition: int
    first: int
    last: int
    records: int


class PartitionCounts(OffsetRange):
    """One partition as both jobs count it: `records` and `offsets` are drawn from these.
    `bytes` is null when no record of it had a size."""

    untraced: int
    bytes: int | None


class FlagCounts(TypedDict):
    """Flows or branches: in all, and with each flag (`pipeline.summary.FLAGS`)."""

    total: int
    broken: int
    stopped: int
    slow: int
    open: int


class FlowCounts(FlagCounts):
    """The flows' counts, with those neither broken nor still open."""

    complete: int


class Links(TypedDict):
    """How parent and child hops were joined, and the hops whose parent was not read."""

    linked: int
    inferred: int
    inferred_by_fetch: int
    inferred_by_time: int
    by_evidence: dict[str, int]
    unresolved: int


class ReasonCounts(TypedDict):
    """What carries one reason a parent was lost: hops, the links into them, branches."""

    hops: int
    links: int
    branches: int


class LossCounts(TypedDict):
    """What lost parents touched, counted over flows (`pipeline.summary.tally`)."""

    hops: int
    parents_lost: int
    roots: int
    links: int
    branches: int
    flows: int
    by_reason: dict[str, ReasonCounts]


class Incomplete(LossCounts):
    """`LossCounts` with the edges and pathways an incomplete hop or branch touched."""

    edges: int
    pathways: int


class Latency(TypedDict):
    """A table row's latency columns; a percentile or max of no values is null."""

    count: int
    p50_ms: float | None
    p90_ms: float | None
    p99_ms: float | None
    max_ms: int | None


class EdgeRow(Latency):
    """A row of the `edges` table."""

    from_topic: str
    to_topic: str
    linked: int
    inferred: int
    link: str
    incomplete: int


class Edge(EdgeRow):
    """An edge as the summary holds it: its row with the counts per histogram bucket
    (`histogram_bounds_ms`); null for an edge the stream first merged before it kept them."""

    histogram: list[int] | None


class Pathway(Latency):
    """A row of the `pathways` table."""

    path: str
    broken: int
    inferred: int
    incomplete: int


class OverTime(Latency):
    """One edge's latency in one time bucket."""

    from_topic: str
    to_topic: str
    bucket_ms: int


class BrokenBranch(TypedDict):
    """One broken branch (`pipeline.summary.BROKEN_COLUMNS`); `max_wait_ms` is null for a
    branch of a lone root."""

    trace_id: str
    path: str
    last_topic: str
    start_ms: int
    duration_ms: int
    max_wait_ms: int | None
    stopped: bool
    slow: bool
    inferred_edges: int
    incomplete: bool
    lost_reasons: list[str]


class Transit(Latency):
    """A row of the `transit` table: one topic and consumer group (null: none, `assign`)."""

    topic: str
    group: str | None
    consumers: list[str]


class Lag(TypedDict):
    """A row of the `lag` table: one topic, consumer group and time bucket."""

    topic: str
    group: str | None
    bucket_ms: int
    fetches: int
    p50_s: float
    max_s: float


class AuditTableRow(TypedDict):
    """A row of the `audit` table, its hour as milliseconds; `bytes` is null when no record
    of it had a size."""

    hour_ms: int
    client_id: str | None
    principal: str | None
    origin: str | None
    records: int
    bytes: int | None
    untraced: int


class ClientIdTotal(TypedDict):
    client_id: str | None
    records: int
    bytes: int


class PrincipalTotal(TypedDict):
    principal: str | None
    records: int
    bytes: int


class OriginTotal(TypedDict):
    origin: str | None
    records: int
    bytes: int


class HourTotal(TypedDict):
    hour_ms: int
    records: int
    bytes: int


class Audit(TypedDict):
    """The top producers by client id, principal and origin (null: not via Herald), and
    what each hour brought."""

    by_client_id: list[ClientIdTotal]
    by_principal: list[PrincipalTotal]
    by_origin: list[OriginTotal]
    by_hour: list[HourTotal]


class Summary(TypedDict):
    """`summary.json` as both jobs write it; the stream's adds its own keys to it
    (`StreamSummary`), so what reads either reads this."""

    generated_ms: int
    mode: Mode
    config: SummaryConfig
    records: Records
    offsets: list[OffsetRange]
    flows: FlowCounts
    branches: FlagCounts
    links: Links
    incomplete: Incomplete
    edges: list[Edge]
    histogram_bounds_ms: list[int]
    pathways: list[Pathway]
    over_time: list[OverTime]
    broken_branches: list[BrokenBranch]
    transit: list[Transit]
    lag: list[Lag]
    audit: Audit
    watermark_ms: int | None


class StreamSection(TypedDict):
    """The hold's side of the stream (`pipeline.stream.aggregates.StreamCounts`, what the
    state holds over every bucket, the sketches' accuracy and the state store's figures).
    `late_fetches` and `no_record_time` are absent while an aggregate from before they were
    counted is merged on."""

    finalized_flows: int
    evicted_flows: int
    evicted_hops: int
    late_hops: int
    untraced: int
    watermark_ms: int | None
    late_fetches: NotRequired[int]
    no_record_time: NotRequired[int]
    held_hops: int
    held_flows: int
    tombstones: int
    accuracy: float
    state: dict[str, int] | None


class StreamSummary(Summary):
    """The stream's `summary.json`: the shared summary, the micro-batch it was drawn after,
    and the hold's side."""

    last_batch_id: int
    stream: StreamSection
