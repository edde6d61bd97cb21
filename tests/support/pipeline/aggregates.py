"""One micro-batch's aggregates with every kind of entry: edges, pathways, a legacy entry without
sums and one whose histogram falls short of its sketch."""

from __future__ import annotations

import json

from pipeline.flows import HISTOGRAM_BOUNDS_MS
from pipeline.sketch import Sketch
from pipeline.stream import _empty_aggregates


def _entry(values: list[int], **more: int) -> dict:
    sk = Sketch()
    hist = [0] * (len(HISTOGRAM_BOUNDS_MS) + 1)
    for v in values:
        sk.add(v)
        hist[next((i for i, b in enumerate(HISTOGRAM_BOUNDS_MS) if v <= b),
                  len(HISTOGRAM_BOUNDS_MS))] += 1
    return {"sketch": sk.to_json(), "histogram": hist, "sum_ms": sum(values), **more}


def sample_aggregates() -> dict:
    agg = _empty_aggregates()
    agg["batch_id"] = 7
    agg["edges"] = {
        "orders\0payments": _entry([3, 20, 20, 700], linked=4, inferred=0, incomplete=1),
        "payments\0shipments": _entry([20, 40, 90], linked=2, inferred=1, incomplete=0),
        "orders\0fraud": _entry([1], linked=0, inferred=1, incomplete=0),
        "fraud\0alerts": _entry([60_001, 5], linked=2, inferred=0, incomplete=0),
    }
    old = _entry([10, 10], linked=2, inferred=0)  # merged by a version without sums
    del old["sum_ms"]
    agg["edges"]["legacy\0payments"] = old
    partial = _entry([10], broken=0, inferred=0)  # a histogram short of its sketch
    partial["histogram"] = [0] * (len(HISTOGRAM_BOUNDS_MS) + 1)
    agg["pathways"] = {"orders > payments": _entry([25, 30], broken=1, inferred=0),
                       "orders > fraud": partial}
    agg["branches"] = {"total": 5, "broken": 2, "stopped": 1, "slow": 2, "open": 0}
    # `fetch`: merged before the fetch evidence was split by match (client ids, as now)
    agg["links"] = {"header": 6, "fetch": 2, "fetch_client_id": 1, "time": 1}
    agg["incomplete"] = {"hops": 2, "parents_lost": 3, "roots": 0, "links": 2, "branches": 1,
                         "flows": 1, "by_reason": {"expired": {"hops": 1, "links": 1,
                                                               "branches": 1}}}
    agg["offsets"] = {"orders\x000": {"topic": "orders", "partition": 0, "first": 0,
                                      "last": 9, "records": 10, "untraced": 3, "bytes": 100},
                      "fraud\x000": {"topic": "fraud", "partition": 0, "first": 0, "last": 0,
                                     "records": 1, "untraced": 0, "bytes": 9}}
    lag = {}
    for group, bucket_ms, values in (("pay", 0, [900]), ("pay", 60_000, [0, 2000]),
                                     ("ship", 60_000, [100]), (None, 0, [5])):
        sk = Sketch()
        for v in values:
            sk.add(v)
        lag[json.dumps(["orders", group, bucket_ms])] = {"sketch": sk.to_json()}
    agg["lag"] = lag
    transit = {}
    for group, n in (("pay", 30), ("ship", 10), (None, 1)):
        sk = Sketch()
        sk.add(5, n)
        transit[json.dumps(["orders", group])] = {"sketch": sk.to_json(), "consumers": ["c"]}
    agg["transit"] = transit
    agg["stream"].update({"late_hops": 4, "watermark_ms": 1_000_000,
                          "buckets": {"3": [6, 2, 9]}})
    return agg
