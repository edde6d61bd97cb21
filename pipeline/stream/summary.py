"""The stream's `summary.json`: the batch job's summary (same keys, `pipeline.summary`) drawn
from the merged aggregates and their tables, plus the hold's side (`stream`)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from pipeline.config import PipelineConfig
from pipeline.flows import HISTOGRAM_BOUNDS_MS
from pipeline.stream.aggregates import Aggregates
from pipeline.stream.tables import AggregateRows, stats
from pipeline.summary import (
    audit_of,
    config_of,
    incomplete_of,
    link_counts,
    records_of,
    with_complete,
)

if TYPE_CHECKING:
    from pipeline.stream.progress_record import ProgressRecord

COUNTED = ("total", "broken", "stopped", "slow", "open")  # of flows and of branches


def summary_of(agg: Aggregates, rows: AggregateRows, config: PipelineConfig,
               progress: ProgressRecord | None) -> dict[str, Any]:
    """The summary from the merged aggregates; `progress`, Spark's newest (`progress.jsonl`),
    gives the state store's figures."""
    offsets = sorted(({k: v for k, v in o.to_json().items() if k not in ("untraced", "bytes")}
                      for o in agg.offsets.values()),
                     key=lambda o: (o["topic"], o["partition"]))
    flows = with_complete({k: agg.flows.get(k, 0) for k in COUNTED})
    branches = {k: agg.branches.get(k, 0) for k in COUNTED}
    links = link_counts(agg.links, agg.links.get("unresolved", 0))
    incomplete = incomplete_of(agg.incomplete or {}, rows.edges, rows.pathways)
    edges = [{**e, "histogram": agg.edges[(e["from_topic"], e["to_topic"])].histogram}
             for e in rows.edges]
    over_time = [{"from_topic": a, "to_topic": b, "bucket_ms": t, **stats(sk)}
                 for (a, b, t), sk in agg.over_time.items()]
    over_time.sort(key=lambda r: (r["from_topic"], r["to_topic"], r["bucket_ms"]))
    broken = [{k: v for k, v in b.items() if k != "leaf"} for b in agg.broken_branches]
    st = agg.stream
    return {
        "generated_ms": int(time.time() * 1000),
        "mode": "stream",
        "last_batch_id": agg.batch_id,
        "config": config_of(config),
        "records": records_of(o.to_json() for o in agg.offsets.values()),
        "offsets": offsets, "flows": flows, "branches": branches, "links": links,
        "incomplete": incomplete,
        "edges": edges, "histogram_bounds_ms": list(HISTOGRAM_BOUNDS_MS),
        "pathways": rows.pathways, "over_time": over_time, "broken_branches": broken,
        "transit": rows.transit, "lag": rows.lag,
        "audit": audit_of(rows.audit, config.top),
        "watermark_ms": st.watermark_ms,
        "stream": {**{k: v for k, v in st.to_json().items() if k != "buckets"},
                   **st.held()._asdict(), "accuracy": config.stream.accuracy,
                   "state": None if progress is None else progress.get("state")},
    }
