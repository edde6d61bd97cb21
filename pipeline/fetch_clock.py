"""Transit and lag per partition, in event-time order, for the stream: the state the stream keeps
per topic partition (`pipeline.stream`), as plain functions over plain data so that it can be
tested without Spark.

The batch job computes transit and lag (`pipeline.flows.transit_of`, `lag_of`) by joining the
`fetch_log` observations to every hop and running a maximum over each partition's records and
fetches in time order. A stream cannot: it would have to keep (or read again) every hop. So
each observation carries the fetched record's own Herald time (`h`,
`protocol.contracts.fetch_log.RECORD_MS`), and each partition keeps only:

* `records`: (event time, offset) of its records still above the watermark (unordered;
  sorted when released);
* `fetches`: its observations still above the watermark: (fetched_ms, offset, group,
  consumer, record_ms);
* `newest`: the running maximum of the record times already released;
* `seen`: per reader (group, and consumer for a consumer without a group, as
  `flows._first_fetches` has it) the offsets already counted, as merged disjoint ranges
  (consumers read in offset order, so this is a range or a few per reader).

An observation without `h` (a record written past Herald, with no `herald.time`; or any
record under `time_source: broker`, where `h` is not the hops' clock) takes the event time of
its record from `records`, as the batch job looks it up, when the partition still holds the
record: when the observation arrives, or when the watermark releases it. A record is queued
until the watermark passes its own time, and a fetch of it comes later, so this holds for
every consumer that reads within the watermark's delay of the write. A fetch of an older
record (a consumer catching up) finds it gone: it is released unmeasured (`Read.record_ms`
None), counted, and left to the batch job.

Once the watermark has passed a time, no record or fetch at or before it can arrive any more
(Spark drops rows behind the watermark before the state), so everything earlier than the
watermark is released in (time, kind) order, records before fetches at equal times as in
`lag_of`'s window, and every reader's first fetch of a record is final: its transit is
`fetched_ms - record_ms` and its lag `max(0, newest - record_ms)` with `newest` the running
maximum of record times at or before the fetch. A later fetch of the same record by the same
reader (after a rebalance) is a duplicate: it counts no transit, but its consumer is one of
the reader's consumers, as in batch. The state is bounded by the records and fetches of one
watermark delay plus the ranges.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from typing import Any, NamedTuple, TypedDict, cast

Fetch = tuple[int, int, "str | None", "str | None", "int | None"]
"""(fetched_ms, offset, group, consumer, record_ms) of one observation."""
Reader = tuple["str | None", "str | None"]
"""(group, consumer) of a reader: the consumer only when it reads without a group."""


class Clock(TypedDict):
    """A partition's state (the module says what each part keeps): a plain dict, since it is
    pickled into Spark's state store and read back by later versions."""

    records: list[tuple[int, int]]
    fetches: list[Fetch]
    newest: int | None
    seen: dict[Reader, list[list[int]]]


class Read(NamedTuple):
    """A released fetch. `first`: the reader's first fetch of the record, which counts;
    otherwise a duplicate, or unmeasured (`record_ms` None: the record's time is not known
    here), and `transit_ms`/`lag_ms` are None."""

    fetched_ms: int
    offset: int
    group: str | None
    consumer: str | None
    record_ms: int | None
    first: bool
    transit_ms: int | None
    lag_ms: int | None


def new_clock() -> Clock:
    """An empty partition state (plain data: it is pickled into Spark's state store)."""
    return {"records": [], "fetches": [], "newest": None, "seen": {}}


def upgraded(clock: dict[str, Any]) -> Clock:
    """A state as unpickled, which may have been written before records kept their offsets
    (bare times): the times stay, with no offset to look a fetch up by."""
    records = clock["records"]
    if records and not isinstance(records[0], tuple):
        clock["records"] = [(int(t), -1) for t in records]
    return cast(Clock, clock)  # unpickled, so untyped: new_clock's shape, records now pairs


def _timed(fetches: list[Fetch], records: list[tuple[int, int]]) -> list[Fetch]:
    """`fetches` with the record time of each one that has none taken from `records` by
    offset, where it is there (see the module)."""
    if all(f[4] is not None for f in fetches):
        return fetches
    times = {offset: t for t, offset in records}
    return [f if f[4] is not None or f[1] not in times else (*f[:4], times[f[1]])
            for f in fetches]


def add(clock: Clock, records: Iterable[tuple[int, int]],
        fetches: Iterable[Fetch]) -> None:
    """Queue (event time, offset) of records and observations until the watermark passes
    them; an observation without a record time takes its record's, when queued."""
    clock["records"].extend((int(t), int(o)) for t, o in records)
    clock["fetches"].extend(_timed(list(fetches), clock["records"]))


def first_read(ranges: list[list[int]], offset: int) -> bool:
    """Add `offset` to a reader's counted ranges (sorted, disjoint, never adjacent: inclusive
    [low, high] pairs); False when it was already there."""
    i = bisect_right(ranges, offset, key=lambda r: r[0])  # ranges[:i] start at or before it
    if i and ranges[i - 1][1] >= offset:
        return False
    joins_left = i > 0 and ranges[i - 1][1] == offset - 1
    joins_right = i < len(ranges) and ranges[i][0] == offset + 1
    if joins_left and joins_right:
        ranges[i - 1][1] = ranges[i][1]
        del ranges[i]
    elif joins_left:
        ranges[i - 1][1] = offset
    elif joins_right:
        ranges[i][0] = offset
    else:
        ranges.insert(i, [offset, offset])
    return True


def _reader(group: str | None, consumer: str | None) -> Reader:
    """Who reads a record once: a group, or a consumer that reads without one."""
    return (group, consumer if group is None else None)


def _fetch_order(f: Fetch) -> tuple[int, int, str, str]:
    return (f[0], f[1], f[2] or "", f[3] or "")


def release(clock: Clock, watermark_ms: int) -> list[Read]:
    """Everything earlier than the watermark, in (time, kind) order: records move `newest`,
    fetches become reads (see the module). What is not earlier stays queued."""
    records = sorted(clock["records"])
    fetches = sorted(_timed(clock["fetches"], records), key=_fetch_order)
    r = bisect_right(records, (watermark_ms - 1, float("inf")))
    n = 0
    while n < len(fetches) and fetches[n][0] < watermark_ms:
        n += 1
    newest, seen = clock["newest"], clock["seen"]
    reads, i = [], 0
    for fetched_ms, offset, group, consumer, record_ms in fetches[:n]:
        while i < r and records[i][0] <= fetched_ms:
            newest = records[i][0] if newest is None else max(newest, records[i][0])
            i += 1
        if record_ms is None:
            reads.append(Read(fetched_ms, offset, group, consumer, None, False, None, None))
        elif first_read(seen.setdefault(_reader(group, consumer), []), offset):
            lag = 0 if newest is None else max(0, newest - record_ms)
            reads.append(Read(fetched_ms, offset, group, consumer, record_ms, True,
                              fetched_ms - record_ms, lag))
        else:
            reads.append(Read(fetched_ms, offset, group, consumer, record_ms, False, None, None))
    if i < r:
        last = records[r - 1][0]
        newest = last if newest is None else max(newest, last)
    clock["newest"] = newest
    clock["records"], clock["fetches"] = records[r:], fetches[n:]
    return reads


def next_due(clock: Clock) -> int | None:
    """The earliest queued time (the state's event-time timeout: once the watermark passes
    it, a quiet partition still releases), or None when nothing is queued."""
    firsts = [min(clock["records"])[0]] if clock["records"] else []
    if clock["fetches"]:
        firsts.append(min(f[0] for f in clock["fetches"]))
    return min(firsts, default=None)
