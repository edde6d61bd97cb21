"""The shape of one line of `progress.jsonl`, apart from the code that writes it
(`pipeline.stream.progress`), so that the readers (the metrics, the summary) need not import
the writer, which imports them."""

from __future__ import annotations

from typing import TypedDict


class ProgressRecord(TypedDict):
    """What the stream keeps of one micro-batch's progress (`progress_record`): one line of
    `progress.jsonl`. A figure Spark did not report is None."""

    batch_id: int | None
    input_rows: int | None
    duration_ms: int | None
    durations_ms: dict[str, int]
    watermark: str | None
    timestamp: str | None
    state: dict[str, int] | None
    behind: int | None
