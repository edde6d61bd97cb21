"""The stateful operator's per-key function, run on the executors (`applyInPandasWithState`):
a bucket of traces, whose hops and observations are held until each flow is final
(`pipeline.flow_hold`); untraced hops, passed straight through; or a partition's clock
(`pipeline.fetch_clock`). See `pipeline.stream`, steps 1 to 3."""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from pipeline.config import PipelineConfig
from pipeline.fetch_clock import Read, add, new_clock, next_due, release, upgraded
from pipeline.flow_hold import HOP, UNTRACED, Bucket, HoldRules, empty_bucket, hold
from pipeline.stream.rows import (
    CLOCK,
    DUPLICATE,
    FETCH,
    HELD_COLUMNS,
    NO_RECORD_TIME,
    PARTITION_KEY,
    STATE,
    TRANSIT,
    emit,
    with_all_columns,
)

if TYPE_CHECKING:
    import pandas as pd  # type: ignore[import-untyped]  # pandas ships no types: frames are Any
    from pyspark.sql.streaming.state import GroupState

Key = tuple["str | None"]
"""The operator's grouping key: a trace bucket, a partition clock's key, or None (untraced)."""
Step = Callable[[Key, Iterable["pd.DataFrame"], "GroupState"], Iterator["pd.DataFrame"]]


CLOCK_COLUMNS = ["kind", "event_ms", "offset", "group", "consumer", "record_ms"]  # a clock reads


def one_frame(frames: list[pd.DataFrame], columns: list[str] | None = None) -> pd.DataFrame:
    """A key's Arrow batches as one frame (of `columns` only). Most keys come as one batch,
    which is used as it is; several are concatenated on just the columns read, since pandas
    checks every all-null column of a concatenation value by value (in the stream's profile
    the clocks' concatenation of the hops' columns, all null on their time-only twins, was
    the largest single cost of the operator)."""
    import pandas as pd

    parts = frames if columns is None else [f[columns] for f in frames]
    if len(parts) == 1:
        return parts[0]
    return pd.concat(parts, ignore_index=True)


def _reads_frame(reads: list[Read], topic: str, partition: int, watermark: int) -> pd.DataFrame:
    """A partition clock's released reads (`fetch_clock.Read`) as emitted rows."""
    import pandas as pd

    out = pd.DataFrame({
        "offset": [r.offset for r in reads], "event_ms": [r.fetched_ms for r in reads],
        "group": [r.group for r in reads], "consumer": [r.consumer for r in reads],
        "record_ms": pd.array([r.record_ms for r in reads], dtype="Int64"),
        "transit_ms": pd.array([r.transit_ms for r in reads], dtype="Int64"),
        "lag_ms": pd.array([r.lag_ms for r in reads], dtype="Int64"),
        "status": [TRANSIT if r.first else NO_RECORD_TIME if r.record_ms is None
                   else DUPLICATE for r in reads]})
    out["topic"], out["partition"], out["kind"] = topic, partition, FETCH
    out["watermark_ms"] = watermark
    return with_all_columns(out)


def tick_partition(key: str, frames: Iterable[pd.DataFrame], state: GroupState,
                   watermark: int) -> Iterator[pd.DataFrame]:
    """One partition's clock (`pipeline.fetch_clock`): queue its record times and
    observations, release what the watermark passed, wake up again at the earliest queued
    time. The state is never removed: it holds the offsets each reader has counted."""
    import pandas as pd

    _, topic, partition = key.split(PARTITION_KEY)
    clock = upgraded(pickle.loads(state.get[0])) if state.exists else new_clock()
    if not state.hasTimedOut:
        new = one_frame(list(frames), CLOCK_COLUMNS)
        records, fetches = new[new["kind"] == CLOCK], new[new["kind"] == FETCH]
        record_ms = fetches["record_ms"].astype("Int64")
        add(clock, zip(records["event_ms"].astype("int64").tolist(),
                       records["offset"].astype("int64").tolist(), strict=True),
            zip(fetches["event_ms"].astype("int64").tolist(),
                fetches["offset"].astype("int64").tolist(), fetches["group"].tolist(),
                fetches["consumer"].tolist(),
                [None if pd.isna(v) else int(v) for v in record_ms.tolist()], strict=True))
    reads = release(clock, watermark)
    if reads:
        yield _reads_frame(reads, topic, int(partition), watermark)
    state.update((pickle.dumps(clock, protocol=5),))
    due = next_due(clock)
    if due is not None:
        state.setTimeoutTimestamp(max(due, watermark, 1))


def hold_rules(config: PipelineConfig) -> HoldRules:
    st = config.stream
    return HoldRules(gap_ms=int(st.flow_gap_s * 1000), max_age_ms=int(st.max_flow_age_s * 1000),
                     retention_ms=int(st.late_retention_s * 1000), max_hops=st.max_flow_hops)


def _sizes(bucket: int, kept: Bucket | None, watermark: int) -> pd.DataFrame:
    """A bucket's `state` row: hops and flows it holds, and its tombstones."""
    import pandas as pd

    held = kept.held if kept is not None else None
    hops = held[held["kind"] == HOP] if held is not None else None
    return with_all_columns(pd.DataFrame({
        "status": [STATE], "watermark_ms": [watermark], "bucket": [bucket],
        "held_hops": [0 if hops is None else len(hops)],
        "held_flows": [0 if hops is None else hops["trace_id"].nunique()],
        "tombstones": [0 if kept is None else len(kept.tomb_ids)]}))


def hold_flows(config: PipelineConfig) -> Step:
    """The per-key function of `applyInPandasWithState` (`pipeline.stream`, steps 1 to 3): a
    bucket of traces, whose hops and observations are held until each flow is final
    (`pipeline.flow_hold.hold`); untraced hops, passed through; or a partition's clock."""
    rules = hold_rules(config)

    def step(key: Key, frames: Iterable[pd.DataFrame], state: GroupState
             ) -> Iterator[pd.DataFrame]:
        watermark = max(state.getCurrentWatermarkMs(), 0)
        if key[0] is not None and key[0].startswith(PARTITION_KEY):
            yield from tick_partition(key[0], frames, state, watermark)
            return
        new = None if state.hasTimedOut else one_frame(list(frames), HELD_COLUMNS)
        if key[0] is None:  # untraced: no flow to hold
            if new is not None and len(new):
                yield emit(new, UNTRACED, watermark)
            return
        bucket = pickle.loads(state.get[0]) if state.exists else empty_bucket(HELD_COLUMNS)
        done = hold(bucket, new, watermark, rules)
        for rows, status in done.emitted:
            yield emit(rows, status, watermark)
        if done.bucket is None:
            state.remove()
        else:
            state.update((pickle.dumps(done.bucket, protocol=5),))
            due = done.bucket.timeout(rules)
            assert due is not None  # a bucket kept holds something (`flow_hold._step`)
            state.setTimeoutTimestamp(max(due, 1))
        yield _sizes(int(key[0]), done.bucket, watermark)

    return step

