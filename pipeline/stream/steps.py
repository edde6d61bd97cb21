"""Where a micro-batch's time goes: each step of the `foreachBatch` function is timed on the
driver, and the Spark jobs it starts carry the step's name as their description
(`batch N: step`), so Spark's event log (and its UI, where one runs) attributes every job to
its step. The times go to `batches.jsonl` (`steps_ms`); `bench/bench_pipeline_scale.py`
reads them and the event log."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark import SparkContext

DESCRIPTION = "spark.job.description"  # Spark's local property for a job's description


class StepTimer:
    """Times the steps of one micro-batch, in the order they ran (a step run twice adds up)."""

    def __init__(self, sc: SparkContext, batch_id: int) -> None:
        self._sc = sc
        self._batch_id = batch_id
        self.ms: dict[str, float] = {}

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        """Time `name`, and describe the Spark jobs started meanwhile as its jobs."""
        self._sc.setLocalProperty(DESCRIPTION, f"batch {self._batch_id}: {name}")
        started = time.perf_counter()
        try:
            yield
        finally:
            spent = (time.perf_counter() - started) * 1000
            self.ms[name] = round(self.ms.get(name, 0.0) + spent, 1)
            # The stream's own jobs (offsets, commits) run on this thread too.
            self._sc.setLocalProperty(DESCRIPTION, None)  # type: ignore[arg-type]
