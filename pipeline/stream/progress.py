"""Spark's progress of each micro-batch: what the stream keeps of it (`progress_record`), one
line per micro-batch in `<output>/progress.jsonl` (the state size and per-batch work over the
run), written by one listener per Spark session, which also feeds each query's exporter."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.stream.progress_record import ProgressRecord
from pipeline.stream_metrics import StreamCollector

if TYPE_CHECKING:
    from pyspark.sql.streaming.listener import (
        QueryIdleEvent,
        QueryProgressEvent,
        QueryStartedEvent,
        QueryTerminatedEvent,
        StreamingQueryListener,
        StreamingQueryProgress,
    )

# Output folder and metrics of each running query (by query id, which the checkpoint keeps
# across restarts), for the one listener of the session.
_OUTPUTS: dict[str, Path] = {}
_METRICS: dict[str, StreamCollector] = {}


def _progress_path(out: Path) -> Path:
    return out / "progress.jsonl"


def last_progress(out: Path) -> ProgressRecord | None:
    """The newest line of `progress.jsonl`, read from the end (the file grows by one line per
    micro-batch; a micro-batch must not read all of it)."""
    path = _progress_path(out)
    try:
        with path.open("rb") as f:
            size = f.seek(0, 2)
            f.seek(max(0, size - 65536))
            lines = f.read().splitlines()
    except FileNotFoundError:
        return None
    return json.loads(lines[-1]) if lines else None


def progress_record(progress: StreamingQueryProgress | Mapping[str, Any]) -> ProgressRecord:
    """What the stream keeps of Spark's progress of one micro-batch: input rows, the state
    operator's rows and memory, rows dropped behind the watermark, durations."""
    data = json.loads(progress.json) if hasattr(progress, "json") else progress
    ops = data.get("stateOperators") or []
    state = None
    if ops:
        state = {k: sum(int(o.get(k) or 0) for o in ops) for k in (
            "numRowsTotal", "numRowsUpdated", "numRowsRemoved", "memoryUsedBytes",
            "numRowsDroppedByWatermark")}
    durations = data.get("durationMs") or {}
    return {"batch_id": data.get("batchId"), "input_rows": data.get("numInputRows"),
            "duration_ms": durations.get("triggerExecution"),
            "durations_ms": durations,
            "watermark": (data.get("eventTime") or {}).get("watermark"),
            "timestamp": data.get("timestamp"), "state": state,
            "behind": _behind(data.get("sources") or [])}


def _offsets(value: object) -> dict[str, dict[str, int]]:
    """A Kafka source's offsets in Spark's progress (JSON text or already parsed)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}


def _behind(sources: list[dict[str, Any]]) -> int | None:
    """Records in Kafka that the micro-batch left for later: per partition of every source,
    the latest offset Spark saw minus the offset the micro-batch read to (None when Spark
    did not say). Flat over a run means the stream keeps up; growing, a backlog."""
    total, known = 0, False
    for source in sources:
        end, latest = _offsets(source.get("endOffset")), _offsets(source.get("latestOffset"))
        for topic, parts in latest.items():
            for part, offset in (parts or {}).items():
                read = (end.get(topic) or {}).get(part)
                if read is not None and offset is not None:
                    total += max(0, int(offset) - int(read))
                    known = True
    return total if known else None



def progress_listener() -> StreamingQueryListener:
    """A listener appending each micro-batch's progress (`progress_record`) to its query's
    `<output>/progress.jsonl`: the state size and per-batch work over the run."""
    from pyspark.sql.streaming.listener import StreamingQueryListener

    class Listener(StreamingQueryListener):
        def onQueryStarted(self, event: QueryStartedEvent) -> None:
            pass

        def onQueryProgress(self, event: QueryProgressEvent) -> None:
            out = _OUTPUTS.get(str(event.progress.id))
            if out is None:
                return
            record = progress_record(event.progress)
            with _progress_path(out).open("a") as f:
                f.write(json.dumps(record) + "\n")
            if str(event.progress.id) in _METRICS:
                _METRICS[str(event.progress.id)].on_progress(record)

        def onQueryIdle(self, event: QueryIdleEvent) -> None:
            if str(event.id) in _METRICS:
                _METRICS[str(event.id)].on_idle()

        def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
            pass

    return Listener()



def register(query_id: str, out: Path, metrics: StreamCollector | None) -> None:
    """Where the listener writes the progress of query `query_id`, and which exporter it
    feeds (None: none)."""
    _OUTPUTS[query_id] = out
    if metrics is not None:
        _METRICS[query_id] = metrics
    else:
        _METRICS.pop(query_id, None)
