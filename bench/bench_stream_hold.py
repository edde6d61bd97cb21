"""The stream's hold without Spark: the per-key function of its stateful operator
(`pipeline.stream.hold.hold_flows`) called as Spark's `applyInPandasWithState` calls it, once
per key and micro-batch, on frames shaped as the stream's sources shape them. What this
measures is the Python side of the operator's step (the hold's rules and the emitted frames);
Spark's Arrow conversion and the JVM around it come on top (`bench_pipeline_scale.py stream`).

    python bench/bench_stream_hold.py [--rate 2000] [--interval-s 10] [--batches 6]
                                      [--buckets 64] [--partitions 3]

Traffic: flows of three hops, one per topic, at `--rate` records per second, each record with
one fetch observation 2 ms later; every record and observation also goes to its partition's
clock, as with `fetch_topic` set (four operator rows per record). The watermark trails the
newest time by 5 s and flows finish 10 s after their last hop, as in the stream bench. Reported
per micro-batch: the CPU of the calls (process time), the keys called, the rows in and out.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.config import PipelineConfig, StreamConfig  # noqa: E402
from pipeline.flow_hold import HOP  # noqa: E402
from pipeline.stream.hold import CLOCK_COLUMNS, hold_flows  # noqa: E402
from pipeline.stream.rows import CLOCK, FETCH, HELD_COLUMNS, PARTITION_KEY  # noqa: E402

TOPICS = ("orders", "payments", "shipments")
WATERMARK_MS, GAP_S = 5_000, 10.0


class State:
    """What the function reads and writes of Spark's GroupState, kept between calls."""

    def __init__(self, blob: bytes | None, watermark: int, timed_out: bool) -> None:
        self.blob, self.watermark, self.hasTimedOut = blob, watermark, timed_out
        self.timeout: int | None = None

    @property
    def exists(self) -> bool:
        return self.blob is not None

    @property
    def get(self) -> tuple[bytes]:
        assert self.blob is not None
        return (self.blob,)

    def update(self, value: tuple[bytes]) -> None:
        self.blob = value[0]

    def remove(self) -> None:
        self.blob = None

    def setTimeoutTimestamp(self, ms: int) -> None:  # noqa: N802 - Spark's name
        self.timeout = ms

    def getCurrentWatermarkMs(self) -> int:  # noqa: N802 - Spark's name
        return self.watermark


def _rows(first: int, count: int, t0: int, rate: int, partitions: int, buckets: int
          ) -> tuple[dict[str, list[dict[str, Any]]], int]:
    """The operator's input rows of records first .. first+count-1, by key; the newest time."""
    by_key: dict[str, list[dict[str, Any]]] = {}
    newest = t0
    for n in range(first, first + count):
        flow, hop = divmod(n, 3)
        ms = t0 + n * 1000 // rate
        newest = max(newest, ms + 2)
        trace = f"{flow:032x}"
        topic, partition, offset = TOPICS[hop], flow % partitions, flow // partitions
        hop_row = {c: None for c in HELD_COLUMNS}
        hop_row.update(trace_id=trace, parent_span=f"{n:016x}", topic=topic,
                       partition=partition, offset=offset, timestamp_ms=ms,
                       timestamp_type="create", herald_time_ms=ms, client_id="bench-app",
                       principal="User:ANONYMOUS", origin="bench", message_id=f"m{n}",
                       size=480, parents="[]", parents_lost=0, lost_reasons="[]",
                       source_host="10.0.0.1", event_ms=ms, kind=HOP)
        fetch_row = {c: None for c in HELD_COLUMNS}
        fetch_row.update(trace_id=trace, topic=topic, partition=partition, offset=offset,
                         event_ms=ms + 2, kind=FETCH, consumer="c1", consumer_host="10.0.0.2",
                         group="g1", record_ms=ms)
        bucket = str(flow % buckets)  # the stream hashes the trace id; any spread will do
        by_key.setdefault(bucket, []).extend((hop_row, fetch_row))
        clock = f"{PARTITION_KEY}{topic}{PARTITION_KEY}{partition}"
        by_key.setdefault(clock, []).extend((
            {"kind": CLOCK, "event_ms": ms, "offset": offset, "group": None, "consumer": None,
             "record_ms": None},
            {"kind": FETCH, "event_ms": ms + 2, "offset": offset, "group": "g1",
             "consumer": "c1", "record_ms": ms}))
    return by_key, newest


def run(rate: int, interval_s: float, batches: int, partitions: int, buckets: int
        ) -> dict[str, Any]:
    import pandas as pd

    config = PipelineConfig(topics=list(TOPICS), stream=StreamConfig(
        checkpoint="unused", watermark_s=WATERMARK_MS / 1000, flow_gap_s=GAP_S,
        state_buckets=buckets))
    step = hold_flows(config)
    states: dict[str, tuple[bytes | None, int | None]] = {}
    per_batch = rate * int(interval_s)
    t0 = 1_700_000_000_000
    watermark = 0
    report = []
    for b in range(batches):
        by_key, newest = _rows(b * per_batch, per_batch, t0, rate, partitions, buckets)
        frames = {key: pd.DataFrame(rows, columns=CLOCK_COLUMNS if key.startswith(PARTITION_KEY)
                                    else HELD_COLUMNS) for key, rows in by_key.items()}
        due = [k for k, (blob, timeout) in states.items()
               if k not in frames and blob is not None and timeout is not None
               and timeout < watermark]
        rows_in = sum(len(f) for f in frames.values())
        rows_out = 0
        started = time.process_time()
        for key in [*frames, *due]:
            blob, _ = states.get(key, (None, None))
            state = State(blob, watermark, key not in frames)
            given = [frames[key]] if key in frames else []
            for out in step((key,), given, state):  # type: ignore[arg-type]
                rows_out += len(out)
            states[key] = (state.blob, state.timeout)
        cpu_ms = (time.process_time() - started) * 1000
        report.append({"batch": b, "keys": len(frames) + len(due), "rows_in": rows_in,
                       "rows_out": rows_out, "cpu_ms": round(cpu_ms),
                       "state_bytes": sum(len(s or b"") for s, _ in states.values())})
        watermark = newest - WATERMARK_MS  # Spark moves it once the micro-batch is done
    steady = [r["cpu_ms"] for r in report[1:]] or [report[0]["cpu_ms"]]
    return {"bench": "stream hold (Python side)", "rate": rate, "interval_s": interval_s,
            "buckets": buckets, "partitions": partitions, "rows_per_batch": 4 * per_batch,
            "cpu_ms_median": round(statistics.median(steady)),
            "cpu_us_per_row": round(1000 * statistics.median(steady) / (4 * per_batch), 1),
            "per_batch": report}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--interval-s", type=float, default=10.0)
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--buckets", type=int, default=64)
    parser.add_argument("--partitions", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(run(args.rate, args.interval_s, args.batches, args.partitions,
                         args.buckets), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
