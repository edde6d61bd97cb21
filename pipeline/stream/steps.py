"""Where a micro-batch's time goes: each step of the `foreachBatch` function is timed on the
driver, and the Spark jobs it starts carry the step's name as their description
(`batch N: step`), so Spark's event log (and its UI, where one runs) attributes every job to
its step. The times go to `batches.jsonl` (`steps_ms`); `bench/bench_pipeline_scale.py`
reads them and the event log. So does how many classes the driver's JVM compiled for the
micro-batch's plans (`compiled`; on `local[*]` every task's too): Spark caches them by their
code, so a micro-batch that compiles more than a few again is one whose plans the cache did
not keep (`pipeline.session`)."""

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
        self._compiled_before = self._compilations()

    def _compilations(self) -> int:
        """Classes Spark's code generator compiled in this JVM so far."""
        jvm = self._sc._jvm
        assert jvm is not None  # set once a context is running, as this one is
        metrics = jvm.org.apache.spark.metrics.source.CodegenMetrics
        return int(metrics.METRIC_COMPILATION_TIME().getCount())

    def compiled(self) -> int:
        """Classes compiled since the micro-batch began."""
        return self._compilations() - self._compiled_before

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
            # None removes the property (as its docstring says), though the types want a str.
            self._sc.setLocalProperty(DESCRIPTION, None)  # type: ignore[arg-type]
