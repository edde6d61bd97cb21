"""Herald's plain-number metrics export what prometheus_client's Histogram and Counter would."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram

from proxy.observability.metrics import _LATENCY_BUCKETS, LatencyHistogram, PlainCounter


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


def test_same_samples_as_the_prometheus_client_counter():
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    mine = PlainCounter("moved_bytes", "bytes", ("direction",))
    ours.register(mine)
    reference = Counter("moved_bytes", "bytes", ["direction"], registry=theirs)
    for i, n in enumerate([1, 0, 5, 1 << 40, 7]):
        direction = "in" if i % 2 else "out"
        mine.labels(direction).inc(n)
        reference.labels(direction).inc(n)
    mine.labels("idle")
    reference.labels("idle")
    assert _samples(ours) == _samples(theirs)
    assert _samples(ours)[("moved_bytes_total", (("direction", "out"),))] == 1 + 5 + 7


def test_a_counter_refuses_the_wrong_number_of_labels():
    with pytest.raises(ValueError, match="moved_bytes"):
        PlainCounter("moved_bytes", "bytes", ("direction",)).labels("in", "extra")
