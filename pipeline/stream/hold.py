"""The stateful operator's per-key function, run on the executors (`applyInPandasWithState`):
a bucket of traces, whose hops and observations are held until each flow is final
(`pipeline.flow_hold`); untraced hops, passed straight through; or a partition's clock
(`pipeline.fetch_clock`). See `pipeline.stream`, steps 1 to 3."""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from pipeline.config import PipelineConfig
from pipeline.fetch_clock import Read, add, new_clock, next_due, release
from pipeline.flow_hold import HOP, UNTRACED, Bucket, HoldRules, empty_bucket, hold
from pipeline.stream.rows import (
    CLOCK,
    DUPLICATE,
    EMITTED_COLUMNS,
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
    import pandas as pd
    from pyspark.sql.streaming.state import GroupState

Step = Callable[[tuple, Iterator["pd.DataFrame"], "GroupState"], Iterator["pd.DataFrame"]]


def _reads_frame(reads: list[Read], topic: str, partition: int, watermark: int) -> pd.DataFrame:
    """A partition clock's released reads (`fetch_clock.Read`) as emitted rows."""
    import pandas as pd

    out = pd.DataFrame({c: [None] * len(reads) for c in EMITTED_COLUMNS})
    out["topic"], out["partition"], out["kind"] = topic, partition, FETCH
    out["offset"] = [r.offset for r in reads]
    out["event_ms"] = [r.fetched_ms for r in reads]
    out["group"] = [r.group for r in reads]
    out["consumer"] = [r.consumer for r in reads]
    out["record_ms"] = [r.record_ms for r in reads]
    out["transit_ms"] = [r.transit_ms for r in reads]
    out["lag_ms"] = [r.lag_ms for r in reads]
    out["status"] = [TRANSIT if r.first else DUPLICATE for r in reads]
    out["watermark_ms"] = watermark
    return with_all_columns(out)


def tick_partition(key: str, frames: Iterator[pd.DataFrame], state: GroupState,
                   watermark: int) -> Iterator[pd.DataFrame]:
    """One partition's clock (`pipeline.fetch_clock`): queue its record times and
    observations, release what the watermark passed, wake up again at the earliest queued
    time. The state is never removed: it holds the offsets each reader has counted."""
    import pandas as pd

    _, topic, partition = key.split(PARTITION_KEY)
    clock = pickle.loads(state.get[0]) if state.exists else new_clock()
    if not state.hasTimedOut:
        new = pd.concat(list(frames), ignore_index=True)
        obs = new[new["kind"] == FETCH]
        timed = obs[obs["record_ms"].notna()]
        if len(timed) < len(obs):  # counted, and left to batch: see `pipeline.stream`
            yield emit(obs[obs["record_ms"].isna()], NO_RECORD_TIME, watermark)
        add(clock, new.loc[new["kind"] == CLOCK, "event_ms"].astype("int64").tolist(),
            zip(timed["event_ms"].astype("int64").tolist(),
                timed["offset"].astype("int64").tolist(), timed["group"].tolist(),
                timed["consumer"].tolist(), timed["record_ms"].astype("int64").tolist(),
                strict=True))
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

    def step(key: tuple, frames: Iterator[pd.DataFrame], state: GroupState
             ) -> Iterator[pd.DataFrame]:
        import pandas as pd

        watermark = max(state.getCurrentWatermarkMs(), 0)
        if key[0] is not None and key[0].startswith(PARTITION_KEY):
            yield from tick_partition(key[0], frames, state, watermark)
            return
        new = None if state.hasTimedOut else pd.concat(list(frames), ignore_index=True)
        if key[0] is None:  # untraced: no flow to hold
            if new is not None and len(new):
                yield emit(new, UNTRACED, watermark)
            return
        bucket = pickle.loads(state.get[0]) if state.exists else empty_bucket(HELD_COLUMNS)
        done = hold(bucket, None if new is None else new[HELD_COLUMNS], watermark, rules)
        for rows, status in done.emitted:
            yield emit(rows, status, watermark)
        if done.bucket is None:
            state.remove()
        else:
            state.update((pickle.dumps(done.bucket, protocol=5),))
            state.setTimeoutTimestamp(max(done.bucket.timeout(rules), 1))
        yield _sizes(int(key[0]), done.bucket, watermark)

    return step

