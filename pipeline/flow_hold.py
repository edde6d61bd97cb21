"""The stream's hold: which flows are finished, evicted or late, decided for a whole bucket of
trace ids at once (pure pandas and numpy, no Spark, so it is tested on plain frames).

Why buckets and not one state per trace id. Spark's `applyInPandasWithState` calls the
function once per key and micro-batch, moving each key's rows and state through Arrow and the
JVM on their own. Keyed by trace id, that per-key machinery cost about 2-3 ms per trace on the
2-core test machine, so a stream topped out near 800 records per second however simple the
work. Keyed by a hash bucket of the trace id (`stream.state_buckets` keys), one call decides
for every trace of its bucket with vectorised operations, and the per-key cost is paid a few
dozen times per micro-batch instead of once per trace.

The rules per trace are unchanged (docs/pipeline.md, "Streaming"):

* a flow's hops are held until the event-time watermark passes its last hop plus
  `flow_gap_s`: then it is *final* and its hops are emitted together;
* a flow holding more than `max_flow_hops` hops, or whose first hop is `max_flow_age_s`
  behind the watermark, is *evicted*: emitted at once, counted apart;
* a finished trace leaves a tombstone until `last + flow_gap_s + late_retention_s`; a hop of
  it arriving meanwhile is *late*: emitted apart, never merged into the finished flow;
* untraced records take part in no flow and pass straight through.

Timing follows Spark's event-time timeouts, which the per-trace version relied on: a held
flow that receives hops in a micro-batch is finished when its due time is at or behind the
watermark; one that receives none is finished when its due time is strictly behind it (Spark
times a key out when its timeout is earlier than the watermark). A tombstone found by a hop is
used before tombstones are expired (the hop is late, as it would have been for a per-trace
state not yet timed out), and a tombstone past its time goes at the bucket's first call after
it, whether that call brought hops or not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd  # type: ignore[import-untyped]  # pandas ships no types: frames are Any

FINAL, EVICTED, LATE, UNTRACED = "final", "evicted", "late", "untraced"
HOP = "hop"  # the `kind` of a hop row; other kinds (fetch observations) ride with the flow
TRACE_WIDTH = 32  # a trace id's hex digits: tombstones keep them as fixed-width bytes


@dataclass(frozen=True)
class HoldRules:
    """The stream's settings, in milliseconds."""

    gap_ms: int
    max_age_ms: int
    retention_ms: int
    max_hops: int


@dataclass
class Bucket:
    """What one bucket keeps between micro-batches: the hops of its unfinished flows, and the
    tombstones of its finished traces (trace ids as fixed-width bytes, with the event time
    until which each is remembered)."""

    held: pd.DataFrame
    tomb_ids: np.ndarray    # dtype S32
    tomb_until: np.ndarray  # int64

    def timeout(self, rules: HoldRules) -> int | None:
        """The earliest time anything in the bucket is due: a held flow to finish or a
        tombstone to expire. None when the bucket is empty (its state can go)."""
        times = []
        if len(self.held):
            hops = _hops(self.held)
            if len(hops):
                times.append(int(_due(_spans(hops), rules).min()))
            waiting = _waiting(self.held, rules)
            if len(waiting):
                times.append(int(waiting.min()))
        if len(self.tomb_until):
            times.append(int(self.tomb_until.min()))
        return min(times) if times else None


@dataclass
class Step:
    """One call's verdicts: the frames to emit with their status, and the bucket to keep
    (None: nothing left, remove the state)."""

    emitted: list[tuple[pd.DataFrame, str]]
    bucket: Bucket | None


def empty_bucket(columns: list[str]) -> Bucket:
    import pandas as pd

    return Bucket(pd.DataFrame(columns=columns), np.array([], dtype=f"S{TRACE_WIDTH}"),
                  np.array([], dtype=np.int64))


def _ids(traces: pd.Series) -> np.ndarray:
    ids: np.ndarray = traces.to_numpy(dtype=str).astype(f"S{TRACE_WIDTH}")  # pandas is untyped
    return ids


def _hops(rows: pd.DataFrame) -> pd.DataFrame:
    """The hop rows of `rows`: all of them when there is no `kind` column."""
    return rows[rows["kind"] == HOP] if "kind" in rows.columns else rows


def _spans(hops: pd.DataFrame) -> pd.DataFrame:
    """Per trace id: first and last event time and the number of hops."""
    return hops.groupby("trace_id", sort=False)["event_ms"].agg(["min", "max", "size"])


def _waiting(rows: pd.DataFrame, rules: HoldRules) -> pd.Series:
    """Per trace id with observations but no hop yet: when they stop waiting for one (the
    latest observation plus the gap)."""
    others = rows[rows["kind"] != HOP] if "kind" in rows.columns else rows.iloc[:0]
    if not len(others):
        return others["event_ms"]
    alone = ~others["trace_id"].isin(_hops(rows)["trace_id"])
    return others[alone].groupby("trace_id", sort=False)["event_ms"].max() + rules.gap_ms


def _due(spans: pd.DataFrame, rules: HoldRules) -> pd.Series:
    """When each flow is due: its last hop plus the gap, or its first plus the age limit."""
    return np.minimum(spans["max"] + rules.gap_ms, spans["min"] + rules.max_age_ms)


def hold(bucket: Bucket, new: pd.DataFrame | None, watermark: int, rules: HoldRules) -> Step:
    """Decide for one bucket: `new` are the rows that arrived for it in this micro-batch (None
    when Spark calls because the bucket's timeout passed).

    Rows with a `kind` other than `hop` (the `fetch_log` observations of a trace) ride with
    their flow: held with it, emitted with it under its status, late with a finished trace
    (the caller tells them from hops by their kind), and never counted as its hops or times.
    Observations of a trace with no hop wait the gap after the latest of them for one, and
    are then dropped."""
    import pandas as pd

    emitted: list[tuple[pd.DataFrame, str]] = []
    held = bucket.held
    tomb_ids, tomb_until = bucket.tomb_ids, bucket.tomb_until
    arrived = pd.Index([])
    if new is not None and len(new):
        untraced = new["trace_id"].isna()
        if untraced.any():
            emitted.append((new[untraced], UNTRACED))
            new = new[~untraced]
        late = np.isin(_ids(new["trace_id"]), tomb_ids) if len(tomb_ids) else None
        if late is not None and late.any():
            emitted.append((new[late], LATE))
            new = new[~late]
        if len(new):
            arrived = pd.Index(new["trace_id"].unique())
            held = pd.concat([held, new], ignore_index=True) if len(held) else new
    keep = tomb_until >= watermark  # Spark removes a timed-out tombstone when it is < watermark
    tomb_ids, tomb_until = tomb_ids[keep], tomb_until[keep]
    waiting = _waiting(held, rules) if len(held) else None
    if waiting is not None and len(waiting):  # stale observations without a flow: dropped
        stale = waiting.index[waiting < watermark]
        if len(stale):
            held = held[~held["trace_id"].isin(stale)].reset_index(drop=True)
    hop_rows = _hops(held) if len(held) else held
    if not len(hop_rows):
        return _step(emitted, held, tomb_ids, tomb_until)

    spans = _spans(hop_rows)
    due = _due(spans, rules)
    fresh = spans.index.isin(arrived)
    too_big = spans["size"] > rules.max_hops
    too_old = spans["min"] + rules.max_age_ms <= watermark
    evicted = fresh & (too_big | too_old)
    final = fresh & ~evicted & (due <= watermark)
    timed_out = ~fresh & (due < watermark)
    quiet = spans["max"] + rules.gap_ms < watermark
    final |= timed_out & quiet
    evicted |= timed_out & ~quiet
    done = final | evicted
    if done.any():
        status = pd.Series(np.where(final, FINAL, EVICTED), index=spans.index)
        which = held["trace_id"].map(status.where(done))
        for name in (FINAL, EVICTED):
            rows = held[which == name]
            if len(rows):
                emitted.append((rows, name))
        until = spans["max"][done] + rules.gap_ms + rules.retention_ms
        until = until[until > watermark]  # a tombstone already past its time is not kept
        if len(until):
            tomb_ids = np.concatenate([tomb_ids, _ids(until.index.to_series())])
            tomb_until = np.concatenate([tomb_until, until.to_numpy(dtype=np.int64)])
        held = held[which.isna()].reset_index(drop=True)
    return _step(emitted, held, tomb_ids, tomb_until)


def _step(emitted: list[tuple[pd.DataFrame, str]], held: pd.DataFrame, tomb_ids: np.ndarray,
          tomb_until: np.ndarray) -> Step:
    bucket = Bucket(held, tomb_ids, tomb_until)
    return Step(emitted, bucket if len(held) or len(tomb_ids) else None)
