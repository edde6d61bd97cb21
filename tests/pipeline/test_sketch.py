"""The stream's quantile sketch against exact numpy percentiles: its documented bound (every
percentile within a relative `accuracy` of the exact, interpolated one) holds for skewed,
heavy-tailed, tiny, negative and merged inputs, and merging is exact."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.sketch import DEFAULT_ACCURACY, Sketch

QS = (0.0, 0.01, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0)


def _within(sketch: Sketch, values: np.ndarray, accuracy: float) -> None:
    for q in QS:
        exact = float(np.quantile(values, q, method="linear"))
        got = sketch.quantile(q)
        assert got is not None
        assert abs(got - exact) <= accuracy * abs(exact) + 1e-9, (q, got, exact)


def _sketch(values: np.ndarray, accuracy: float = DEFAULT_ACCURACY) -> Sketch:
    s = Sketch(accuracy)
    for v in values:
        s.add(float(v))
    return s


@pytest.mark.parametrize("accuracy", [0.01, 0.05])
@pytest.mark.parametrize("shape", ["lognormal", "pareto", "uniform_ms", "constant", "few"])
def test_percentiles_are_within_the_relative_bound(shape: str, accuracy: float) -> None:
    rng = np.random.default_rng(7)
    values = {
        "lognormal": rng.lognormal(3, 2, 20_000),
        "pareto": (rng.pareto(1.2, 20_000) + 1) * 5,
        "uniform_ms": rng.integers(0, 60_000, 20_000).astype(float),  # zeros included
        "constant": np.full(1000, 42.0),
        "few": np.array([3.0, 1000.0]),
    }[shape]
    _within(_sketch(values, accuracy), values, accuracy)


def test_negative_values_keep_the_bound_on_their_side() -> None:
    rng = np.random.default_rng(3)
    values = -rng.lognormal(2, 1, 5000)
    _within(_sketch(values), values, DEFAULT_ACCURACY)


def test_merging_parts_equals_one_sketch_of_everything() -> None:
    rng = np.random.default_rng(11)
    parts = [rng.lognormal(4, 1.5, n) for n in (1, 10, 1000, 5000)]
    whole = _sketch(np.concatenate(parts))
    merged = Sketch()
    for p in reversed(parts):
        merged.merge(_sketch(p))
    assert merged == whole  # counts per bucket add exactly: the order of parts is irrelevant
    _within(merged, np.concatenate(parts), DEFAULT_ACCURACY)


def test_buckets_from_elsewhere_and_json_round_trip() -> None:
    s = Sketch()
    s.add_bucket(1, 100, 5, 7.0, 7.2)
    s.add_bucket(0, 0, 2, 0.0, 0.0)
    back = Sketch.from_json(s.to_json())
    assert back == s and back.count == 7 and back.min == 0.0 and back.max == 7.2
    assert Sketch().quantile(0.5) is None


def test_a_wide_bad_accuracy_is_refused() -> None:
    with pytest.raises(ValueError):
        Sketch(1.5).add(1.0)
