"""A mergeable quantile sketch with a relative-value bound (the DDSketch construction), for the
stream's percentiles.

The batch job's percentiles are exact: it holds every wait of an edge at once. A stream cannot
keep every value it ever saw, and exact percentiles do not merge from per-batch parts, so the
stream keeps, per edge and per pathway, a histogram over logarithmic buckets instead: value
`v > 0` falls in bucket `i = ceil(log(v) / log(gamma))` with `gamma = (1 + a) / (1 - a)`, and
every value of bucket `i` lies in `(gamma^(i-1), gamma^i]`, so the bucket's representative
`2 gamma^i / (gamma + 1)` is within a relative `a` (the *relative accuracy*) of each of them.
Negative values (a clock that went backwards) are kept mirrored in a store of their own, zero
exactly. Two sketches merge by adding counts bucket by bucket, which is exact: merging never
loses accuracy, whatever the order or grouping of the parts.

The bound. For a rank `r`, the sketch returns a value within `a * |x_r|` of the exact `x_r`
(the value of rank `r` in sorted order). `quantile(q)` interpolates linearly between ranks
`floor(q (n-1))` and the next, like Spark's exact `percentile`, so for values of one sign its
answer is within a relative `a` of the batch job's: `|stream - batch| <= a * |batch|`. The
default `a = 0.01` gives stream percentiles within 1% of the batch's. The number of buckets is
`log(max / min) / log(gamma)`: about 800 for 1 ms to 3 hours at 1%, whatever the count, and
`MAX_BUCKETS` caps it by merging the smallest buckets (their values then lose the bound; at
that cap and 1% it takes a range beyond 10^17 to get there).

Spark computes bucket indexes with the same formula (`bucket_column`), so a micro-batch's
values become (key, bucket, count) rows before they reach the driver: the per-batch sketch is
a small aggregate, not a list of values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from pyspark.sql import Column

DEFAULT_ACCURACY = 0.01
MAX_BUCKETS = 4096


def gamma_of(accuracy: float) -> float:
    if not 0 < accuracy < 1:
        raise ValueError(f"relative accuracy must be in (0, 1): {accuracy}")
    return (1 + accuracy) / (1 - accuracy)


def bucket_of(value: float, gamma: float) -> int:
    """Bucket index of |value| > 0: ceil(log|v| / log gamma)."""
    return math.ceil(math.log(abs(value)) / math.log(gamma))


def bucket_column(col: str, accuracy: float = DEFAULT_ACCURACY) -> Column:
    """The signed bucket of each value as a Spark expression: `i` for positive values, `-i`
    for negative ones is not enough (bucket 0 exists on both sides), so the sign is a column
    of its own (see `sign_column`); zero gets bucket 0 and sign 0."""
    from pyspark.sql import functions as F

    log_gamma = math.log(gamma_of(accuracy))
    v = F.abs(F.col(col).cast("double"))
    return F.when(v > 0, F.ceil(F.log(v) / F.lit(log_gamma))).otherwise(F.lit(0)).cast("int")


def sign_column(col: str) -> Column:
    from pyspark.sql import functions as F

    return F.signum(F.col(col)).cast("int")


class SketchJson(TypedDict):
    """A sketch as the aggregates' file keeps it (`pipeline.stream.aggregates`), which a
    restarted stream reads back: accuracy, [bucket, count] pairs of each side, zeros, and the
    exact count, minimum and maximum."""

    a: float
    p: list[list[int]]
    n: list[list[int]]
    z: int
    count: int
    min: float | None
    max: float | None


@dataclass
class Sketch:
    """Counts per logarithmic bucket (positive and negative values apart) and of zeros, plus
    the exact count, minimum and maximum."""

    accuracy: float = DEFAULT_ACCURACY
    positive: dict[int, int] = field(default_factory=dict)
    negative: dict[int, int] = field(default_factory=dict)
    zeros: int = 0
    count: int = 0
    min: float | None = None
    max: float | None = None

    @property
    def gamma(self) -> float:
        return gamma_of(self.accuracy)

    def add(self, value: float, times: int = 1) -> None:
        if value > 0:
            i = bucket_of(value, self.gamma)
            self.positive[i] = self.positive.get(i, 0) + times
        elif value < 0:
            i = bucket_of(value, self.gamma)
            self.negative[i] = self.negative.get(i, 0) + times
        else:
            self.zeros += times
        self._extremes(value, value, times)

    def add_bucket(self, sign: int, bucket: int, times: int, low: float, high: float) -> None:
        """Counts of one bucket computed elsewhere (Spark, `bucket_column`), with the exact
        min and max of the values that fell in it."""
        if sign > 0:
            self.positive[bucket] = self.positive.get(bucket, 0) + times
        elif sign < 0:
            self.negative[bucket] = self.negative.get(bucket, 0) + times
        else:
            self.zeros += times
        self._extremes(low, high, times)
        self._cap()

    def _extremes(self, low: float, high: float, times: int) -> None:
        self.count += times
        self.min = low if self.min is None else min(self.min, low)
        self.max = high if self.max is None else max(self.max, high)

    def merge(self, other: Sketch) -> None:
        if other.accuracy != self.accuracy:
            raise ValueError("sketches of different accuracy do not merge")
        for mine, theirs in ((self.positive, other.positive), (self.negative, other.negative)):
            for i, c in theirs.items():
                mine[i] = mine.get(i, 0) + c
        self.zeros += other.zeros
        if other.count and other.min is not None and other.max is not None:
            self._extremes(other.min, other.max, other.count)
        self._cap()

    def _cap(self) -> None:
        """Keep at most MAX_BUCKETS per side by folding the smallest magnitudes together."""
        for store in (self.positive, self.negative):
            while len(store) > MAX_BUCKETS:
                low, nxt = sorted(store)[:2]
                store[nxt] += store.pop(low)

    def _value_at(self, rank: int) -> float:
        """Estimate of the value of `rank` (0-based, sorted ascending)."""
        g = self.gamma
        seen = 0
        for i in sorted(self.negative, reverse=True):  # most negative first
            seen += self.negative[i]
            if rank < seen:
                return -2 * g ** i / (g + 1)
        seen += self.zeros
        if rank < seen:
            return 0.0
        for i in sorted(self.positive):
            seen += self.positive[i]
            if rank < seen:
                return 2 * g ** i / (g + 1)
        raise IndexError(rank)

    def quantile(self, q: float) -> float | None:
        """The q-quantile, interpolated between ranks like Spark's `percentile`; the estimate
        of each rank is clamped to the exact min and max (which only brings it closer)."""
        low, high = self.min, self.max
        if self.count == 0 or low is None or high is None:  # counted values set both
            return None
        pos = (self.count - 1) * q
        lo = int(pos)
        hi = min(lo + 1, self.count - 1)
        a, b = (min(max(self._value_at(r), low), high) for r in (lo, hi))
        return a + (b - a) * (pos - lo)

    def to_json(self) -> SketchJson:
        return {"a": self.accuracy, "p": [[i, c] for i, c in sorted(self.positive.items())],
                "n": [[i, c] for i, c in sorted(self.negative.items())], "z": self.zeros,
                "count": self.count, "min": self.min, "max": self.max}

    @classmethod
    def from_json(cls, data: SketchJson) -> Sketch:
        return cls(accuracy=data["a"], positive={int(i): c for i, c in data["p"]},
                   negative={int(i): c for i, c in data["n"]}, zeros=data["z"],
                   count=data["count"], min=data["min"], max=data["max"])
