"""Transit and lag per partition, in event-time order, for the stream: the state the stream keeps
per topic partition (`pipeline.stream`), as plain functions over plain data so that it can be
tested without Spark.

The batch job computes transit and lag (`pipeline.flows.transit_of`, `lag_of`) by joining the
`fetch_log` observations to every hop and running a maximum over each partition's records and
fetches in time order. A stream cannot: it would have to keep (or read again) every hop. So
each observation carries the fetched record's own Herald time (`h`,
`protocol.contracts.fetch_log.RECORD_MS`), and each partition keeps only:

* `records`: the event times of its records still above the watermark (unordered; sorted when
  released);
* `fetches`: its observations still above the watermark: (fetched_ms, offset, group,
  consumer, record_ms);
* `newest`: the running maximum of the record times already released;
* `seen`: per reader (group, and consumer for a consumer without a group, as
  `flows._first_fetches` has it) the offsets already counted, as merged disjoint ranges
  (consumers read in offset order, so this is a range or a few per reader).

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
from typing import Any, NamedTuple

Fetch = tuple[int, int, "str | None", "str | None", "int | None"]
"""(fetched_ms, offset, group, consumer, record_ms) of one observation."""


class Read(NamedTuple):
    """A released fetch. `first`: the reader's first fetch of the record, which counts;
    otherwise a duplicate and `transit_ms`/`lag_ms` are None."""

    fetched_ms: int
    offset: int
    group: str | None
    consumer: str | None
    record_ms: int
    first: bool
    transit_ms: int | None
    lag_ms: int | None


def new_clock() -> dict[str, Any]:
    """An empty partition state (plain data: it is pickled into Spark's state store)."""
    return {"records": [], "fetches": [], "newest": None, "seen": {}}


def add(clock: dict[str, Any], records: Iterable[int], fetches: Iterable[Fetch]) -> int:
    """Queue record times and observations until the watermark passes them. An observation
    without a record time cannot be measured here: it is not queued, and counted in the
    return value (the batch job, which looks the record up, still measures it)."""
    clock["records"].extend(int(t) for t in records)
    untimed = 0
    for f in fetches:
        if f[4] is None:
            untimed += 1
        else:
            clock["fetches"].append(f)
    return untimed


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


def _reader(group: str | None, consumer: str | None) -> tuple[str | None, str | None]:
    """Who reads a record once: a group, or a consumer that reads without one."""
    return (group, consumer if group is None else None)


def _fetch_order(f: Fetch) -> tuple:
    return (f[0], f[1], f[2] or "", f[3] or "")


def release(clock: dict[str, Any], watermark_ms: int) -> list[Read]:
    """Everything earlier than the watermark, in (time, kind) order: records move `newest`,
    fetches become reads (see the module). What is not earlier stays queued."""
    records = sorted(clock["records"])
    fetches = sorted(clock["fetches"], key=_fetch_order)
    r = bisect_right(records, watermark_ms - 1)
    n = 0
    while n < len(fetches) and fetches[n][0] < watermark_ms:
        n += 1
    newest, seen = clock["newest"], clock["seen"]
    reads, i = [], 0
    for fetched_ms, offset, group, consumer, record_ms in fetches[:n]:
        while i < r and records[i] <= fetched_ms:
            newest = records[i] if newest is None else max(newest, records[i])
            i += 1
        if first_read(seen.setdefault(_reader(group, consumer), []), offset):
            lag = 0 if newest is None else max(0, newest - record_ms)
            reads.append(Read(fetched_ms, offset, group, consumer, record_ms, True,
                              fetched_ms - record_ms, lag))
        else:
            reads.append(Read(fetched_ms, offset, group, consumer, record_ms, False, None, None))
    if i < r:
        newest = records[r - 1] if newest is None else max(newest, records[r - 1])
    clock["newest"] = newest
    clock["records"], clock["fetches"] = records[r:], fetches[n:]
    return reads


def next_due(clock: dict[str, Any]) -> int | None:
    """The earliest queued time (the state's event-time timeout: once the watermark passes
    it, a quiet partition still releases), or None when nothing is queued."""
    firsts = [min(clock["records"])] if clock["records"] else []
    if clock["fetches"]:
        firsts.append(min(f[0] for f in clock["fetches"]))
    return min(firsts, default=None)
