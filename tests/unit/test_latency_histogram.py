"""Herald's latency histogram exports what prometheus_client's Histogram would."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram

from proxy.metrics import _LATENCY_BUCKETS, LatencyHistogram


def _samples(registry: CollectorRegistry) -> dict[tuple[str, tuple], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in registry.collect() for s in family.samples
        if not s.name.endswith("_created")
    }


def test_same_buckets_count_and_sum_as_the_prometheus_client_histogram():
    values = [0.0, 0.0004, 0.0005, 0.00051, 0.002, 0.0099, 0.3, 29.9, 30.0, 31.0, 1e9, -1.0]
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    mine = LatencyHistogram("lat_seconds", "latency")
    ours.register(mine)
    reference = Histogram("lat_seconds", "latency", ["api"], buckets=_LATENCY_BUCKETS,
                          registry=theirs)
    for i, v in enumerate(values):
        api = "Produce" if i % 3 else "Fetch"
        mine.labels(api).observe(v)
        reference.labels(api).observe(v)
    got, want = _samples(ours), _samples(theirs)
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert got[key] == value or abs(got[key] - value) < 1e-9, key
    assert got[("lat_seconds_count", (("api", "Produce"),))] == 8
