"""The stream's per-partition transit and lag state (`pipeline.fetch_clock`) on plain data: fed
in pieces as Spark would feed it (only what is above the watermark arrives, the watermark only
moves forward), it yields exactly what the batch job's definition gives over everything at
once."""

from __future__ import annotations

import random

from pipeline.fetch_clock import add, first_read, new_clock, next_due, release, upgraded


def _reference(records: list[int], fetches: list[tuple]) -> tuple[list, dict]:
    """The batch job's definition (`flows.transit_of`, `lag_of`), by brute force: each
    reader's first fetch of each record; lag against the newest record at or before it."""
    first: dict[tuple, tuple] = {}
    consumers: dict = {}
    for f in fetches:
        fetched, offset, group, consumer, record_ms = f
        reader = (group, consumer if group is None else None, offset)
        if reader not in first or fetched < first[reader][0]:
            first[reader] = f
        consumers.setdefault(group, set()).add(consumer)
    rows = []
    for fetched, offset, group, _consumer, record_ms in first.values():
        newest = max((t for t in records if t <= fetched), default=None)
        lag = 0 if newest is None else max(0, newest - record_ms)
        rows.append((group, offset, fetched, fetched - record_ms, lag))
    return sorted(rows, key=repr), consumers


def _streamed(records: list[int], fetches: list[tuple], steps: list[int]) -> tuple[list, dict]:
    """Feed the items to the state in a shuffled arrival order, a watermark at a time: an item
    arrives in any step up to the one whose watermark passes it, never after (Spark drops
    what is behind the watermark), and each step releases what the watermark passed."""
    rng = random.Random(7)
    clock = new_clock()
    items = [("r", t, (t, o)) for o, t in enumerate(records)] + [("f", f[0], f) for f in fetches]
    rng.shuffle(items)
    rows, consumers = [], {}
    for wm in [*steps, max(it[1] for it in items) + 1]:
        now, later = [], []
        for it in items:
            (now if it[1] <= wm or rng.random() < 0.4 else later).append(it)
        items = later
        add(clock, [r for k, _, r in now if k == "r"], [f for k, _, f in now if k == "f"])
        for read in release(clock, wm):
            consumers.setdefault(read.group, set()).add(read.consumer)
            if read.first:
                rows.append((read.group, read.offset, read.fetched_ms, read.transit_ms,
                             read.lag_ms))
        due = next_due(clock)
        assert due is None or due >= wm
    assert not items and next_due(clock) is None
    return sorted(rows, key=repr), consumers


def test_released_reads_equal_the_batch_definition() -> None:
    rng = random.Random(1)
    records = sorted(rng.randrange(0, 5000) for _ in range(300))
    offsets = list(enumerate(records))
    fetches = []
    for group, consumers in (("billing", ["b1", "b2"]), ("audit", ["a1"]), (None, ["x", "y"])):
        for offset, t in offsets:
            for _ in range(rng.choice((1, 1, 1, 2, 3))):  # re-fetched after a rebalance
                consumer = rng.choice(consumers)
                fetches.append((t + rng.randrange(0, 400), offset, group, consumer, t))
    steps = sorted(rng.sample(range(1, 5400), 25))
    got, got_consumers = _streamed(records, fetches, steps)
    want, want_consumers = _reference(records, fetches)
    assert got == want
    assert got_consumers == want_consumers
    assert len(want) == 300 * 2 + len({(f[1], f[3]) for f in fetches if f[2] is None})
    assert any(row[4] > 0 for row in want) and any(row[4] == 0 for row in want)


def test_a_record_at_the_fetch_time_counts_as_there_and_later_ones_do_not() -> None:
    clock = new_clock()
    add(clock, [(100, 0), (200, 1), (300, 2)], [(200, 0, "g", "c", 100)])
    assert next_due(clock) == 100
    assert release(clock, 200) == []  # nothing at 200 is final until the watermark passes it
    (read,) = release(clock, 201)
    assert (read.first, read.transit_ms, read.lag_ms) == (True, 100, 100)
    assert clock["newest"] == 200 and clock["records"] == [(300, 2)] and next_due(clock) == 300


def test_a_fetch_before_any_record_lags_zero() -> None:
    clock = new_clock()
    add(clock, [], [(50, 3, None, "solo", 40)])
    (read,) = release(clock, 100)
    assert (read.group, read.consumer, read.transit_ms, read.lag_ms) == (None, "solo", 10, 0)
    assert clock["seen"] == {(None, "solo"): [[3, 3]]} and next_due(clock) is None


def test_an_untimed_fetch_takes_its_record_s_time_while_the_partition_holds_the_record() -> None:
    """A record written past Herald has no `h`: its fetch is measured from the record's own
    time, as the batch job looks it up, whether the fetch arrives with the record, before it
    or after it; once the watermark has released the record, a later fetch of it is released
    unmeasured, counted by no reader."""
    clock = new_clock()
    add(clock, [(100, 0), (200, 1)], [(150, 0, "g", "c", None)])  # with its record
    add(clock, [], [(400, 5, "g", "c", None)])  # before its record
    add(clock, [(390, 5)], [])
    reads = release(clock, 500)
    assert [(r.offset, r.record_ms, r.first, r.transit_ms, r.lag_ms) for r in reads] == [
        (0, 100, True, 50, 0), (5, 390, True, 10, 0)]
    add(clock, [(600, 7)], [])
    assert release(clock, 700) == []  # the record is released: its time is gone
    add(clock, [], [(800, 7, "g", "c", None)])
    (read,) = release(clock, 900)
    assert (read.record_ms, read.first, read.transit_ms, read.lag_ms) == (None, False, None,
                                                                          None)
    assert clock["seen"] == {("g", None): [[0, 0], [5, 5]]}


def test_a_state_of_bare_record_times_is_read_with_no_offsets() -> None:
    """A checkpoint written before records kept their offsets goes on: its times still move
    `newest`, and no fetch is looked up by them."""
    clock = upgraded({"records": [300, 100], "fetches": [(250, 0, "g", "c", None)],
                      "newest": None, "seen": {}})
    assert clock["records"] == [(300, -1), (100, -1)]
    (read,) = release(clock, 400)
    assert read.record_ms is None and clock["newest"] == 300


def test_duplicates_count_once_per_reader() -> None:
    clock = new_clock()
    add(clock, [(10, 0)], [(20, 0, "g", "c1", 10), (30, 0, "g", "c2", 10), (25, 0, "h", "d", 10),
                      (40, 0, None, "s1", 10), (41, 0, None, "s2", 10), (42, 0, None, "s1", 10)])
    reads = release(clock, 100)
    assert [(r.group, r.consumer, r.first) for r in reads] == [
        ("g", "c1", True), ("h", "d", True), ("g", "c2", False), (None, "s1", True),
        (None, "s2", True), (None, "s1", False)]
    assert [r.transit_ms for r in reads] == [10, 15, None, 30, 31, None]


def test_counted_offsets_stay_merged_ranges() -> None:
    ranges: list[list[int]] = []
    for offset in (5, 7, 3, 6, 4, 10, 9, 0):
        assert first_read(ranges, offset)
    assert ranges == [[0, 0], [3, 7], [9, 10]]
    for offset in (0, 3, 5, 7, 9, 10):
        assert not first_read(ranges, offset)
    assert first_read(ranges, 8) and first_read(ranges, 1) and first_read(ranges, 2)
    assert ranges == [[0, 10]]
    rng = random.Random(3)
    ranges, seen = [], set()
    for _ in range(2000):
        offset = rng.randrange(0, 500)
        assert first_read(ranges, offset) == (offset not in seen)
        seen.add(offset)
    assert sum(hi - lo + 1 for lo, hi in ranges) == len(seen)
    assert all(a[1] + 1 < b[0] for a, b in zip(ranges, ranges[1:], strict=False))
