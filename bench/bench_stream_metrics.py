"""What a scrape of the stream's metrics costs the driver, on aggregates of a chosen size.

    python bench/bench_stream_metrics.py [--edges 200] [--paths 200] [--groups 50]
                                         [--lag-buckets 60] [--scrapes 50]
    valgrind --tool=callgrind python bench/bench_stream_metrics.py --scrapes 5   # instructions

A micro-batch hands the exporter (`pipeline.stream_metrics`) a reference to the merged
aggregates and pays nothing more; the cost is the scrape's, which turns the aggregates into
metric families and text. This builds aggregates of the shape the stream writes (edges and
paths with a sketch of a thousand values and a histogram, groups with transit and
`--lag-buckets` lag sketches each), then renders `/metrics` `--scrapes` times and reports the
CPU time per scrape (process time, not wall-clock: meaningful on a shared machine too), the
text's size and the series count. Beyond `stream.metrics_top` (50) labels fold into `other`,
which the default sizes exercise.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prometheus_client import generate_latest  # noqa: E402
from prometheus_client.registry import CollectorRegistry  # noqa: E402

from pipeline.config import PipelineConfig, StreamConfig  # noqa: E402
from pipeline.flows import HISTOGRAM_BOUNDS_MS  # noqa: E402
from pipeline.sketch import Sketch  # noqa: E402
from pipeline.stream.aggregates import Aggregates  # noqa: E402
from pipeline.stream_metrics import StreamCollector  # noqa: E402


def _entry(rng: random.Random, n: int = 1000) -> dict:
    sk = Sketch()
    hist = [0] * (len(HISTOGRAM_BOUNDS_MS) + 1)
    total = 0
    for _ in range(n):
        v = int(rng.lognormvariate(3, 1.5)) + 1
        sk.add(v)
        total += v
        hist[next((i for i, b in enumerate(HISTOGRAM_BOUNDS_MS) if v <= b),
                  len(HISTOGRAM_BOUNDS_MS))] += 1
    return {"sketch": sk.to_json(), "histogram": hist, "sum_ms": total}


def aggregates(edges: int, paths: int, groups: int, lag_buckets: int, topics: list[str]
               ) -> Aggregates:
    rng = random.Random(7)
    agg = Aggregates().to_json()  # as the file holds them
    agg["batch_id"] = 1
    for i in range(edges):
        a, b = topics[i % len(topics)], topics[(i * 7 + 1) % len(topics)]
        agg["edges"][f"{a}-{i}\0{b}"] = {**_entry(rng), "linked": 900, "inferred": 100}
    for i in range(paths):
        agg["pathways"][" > ".join(topics[: 2 + i % 3]) + f" #{i}"] = {
            **_entry(rng), "broken": 10, "inferred": 5}
    agg["branches"] = {"total": 10**6, "broken": 10**4, "stopped": 5000, "slow": 6000}
    for i, t in enumerate(topics):
        agg["offsets"][f"{t}\x000"] = {"topic": t, "partition": 0, "first": 0, "last": 10**6,
                                       "records": 10**6, "untraced": i, "bytes": 10**8}
    for g in range(groups):
        topic = topics[g % len(topics)]
        agg["transit"][json.dumps([topic, f"group-{g}"])] = {
            "sketch": _entry(rng)["sketch"], "consumers": [f"c{g}"]}
        for k in range(lag_buckets):
            agg["lag"][json.dumps([topic, f"group-{g}", k * 60_000])] = {
                "sketch": _entry(rng, 60)["sketch"]}
    agg["stream"]["watermark_ms"] = 10**12
    return Aggregates.from_json(agg)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edges", type=int, default=200)
    parser.add_argument("--paths", type=int, default=200)
    parser.add_argument("--groups", type=int, default=50)
    parser.add_argument("--lag-buckets", type=int, default=60)
    parser.add_argument("--scrapes", type=int, default=50)
    args = parser.parse_args(argv)
    topics = [f"topic-{i}" for i in range(20)]
    collector = StreamCollector(PipelineConfig(topics=topics, stream=StreamConfig()))
    collector.publish(aggregates(args.edges, args.paths, args.groups, args.lag_buckets, topics))
    collector.on_progress({"batch_id": 1, "input_rows": 4000, "duration_ms": 8000,
                           "state": {"numRowsTotal": 70, "memoryUsedBytes": 10**7}})
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)  # type: ignore[arg-type]
    cpu_ms = []
    for _ in range(args.scrapes):
        t = time.process_time()
        text = generate_latest(registry)
        cpu_ms.append((time.process_time() - t) * 1000)
    series = sum(1 for line in text.splitlines() if line and not line.startswith(b"#"))
    print(json.dumps({"bench": "stream metrics scrape", **vars(args),
                      "cpu_ms_median": round(statistics.median(cpu_ms), 2),
                      "cpu_ms_max": round(max(cpu_ms), 2), "bytes": len(text),
                      "series": series}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
