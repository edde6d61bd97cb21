"""The chain engine: runs the members of a chain over the record batches of one partition.

The proxy calls `ProduceChain.process` for each partition of a Produce request and
`FetchChain.process` for each partition of a Fetch response. Everything else here serves
those two calls, under the hot-path rules:

* Members that do not apply to the topic and client id are filtered once per (topic, client
  id) and cached, so a partition no member wants costs a dict lookup and touches no batch.
* A chain of read-only members (``needs = "read"``) scans headers without building record
  objects and can never mark a batch modified.
* Changes are tracked per record (`Headers`) and applied at the end of each batch, only for
  records that really changed; a batch nobody changed keeps its original bytes.
* Stamping members (`Stamps`: the built-in `trace_context`, `audit`, `insert_header`, and any
  plugin that declares it) are called only for records carrying a header they watch; every
  other record gets their columns for the batch (`Interceptor.columns`).
* When every member stamps, a record none of them watches takes the *append path*: each
  member's row is appended to a plain list, without a `Headers` wrapper (`_stamp_record`).
  Better still, when no record of a batch is watched and every per-record column can be made
  in bulk (`PerRecord.many`), the batch is *stamped*: it is never parsed into records, the
  columns are made for all records at once in wire form, and `protocol.stamping` writes the
  batch anew in one pass (`_stamp_batch`). Bytes, counters and traces are those of the record
  path (`_run_record`, which a chain built with ``fast_paths=False`` takes for every record);
  only when a member fails midway do the counts of the members before it differ (they
  stamped the whole batch, not the records before the failing one).
* Control batches (transaction markers) and legacy (magic 0/1) chunks are never touched.

Failure policy. A member that raises never takes the proxy down; it is counted and its
`on_error` policy decides:

* ``reject`` (produce): the partition is refused with UNKNOWN_SERVER_ERROR;
* ``pass``: the batch passes through exactly as it arrived, with no member's changes (a
  half-stamped batch would be worse than an untouched one);
* ``drop`` (fetch): the record is removed before the client sees it.

Record-level errors of the protocol layer (a corrupt batch raising `CodecError` when its
records are read) are not member failures and propagate to the caller.

Shadow members (`ChainMember.shadow`) run on a copy of each record's headers and are counted
as if live (records they would have changed, headers added and removed, records dropped,
partitions refused), but nothing they do reaches the records, the traces or the outcome.

Runs. `process` may run in several threads at once (the proxy runs large partitions in
worker threads and small ones on its event loop). Each run counts into counters of its own,
merged into the chain's under a lock when it ends; members keep their per-batch state in the
run's context (`RecordContext.memo`). A plan with a member that is not `concurrent` reports
`serial`, and the caller then runs it one at a time.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from interceptors.api import (
    _RUN,
    DROP,
    FETCH,
    KEEP,
    NEEDS,
    ON_ERROR,
    PRODUCE,
    ColumnValue,
    Interceptor,
    PerRecord,
    Stamps,
)
from interceptors.context import ConnectionInfo, RecordContext, TraceInfo
from interceptors.errors import INVALID_RECORD, NONE, UNKNOWN_SERVER_ERROR, RejectRecord
from interceptors.headers import Headers
from interceptors.patterns import NameMatcher
from interceptors.stats import ChainStats, MemberStats
from protocol import stamping
from protocol.records import RecordBatch

log = logging.getLogger("herald.interceptors")

_PLAN_CACHE_LIMIT = 10_000
_RAW = (bytes, bytearray, memoryview)


@dataclass(frozen=True, slots=True)
class PartitionOutcome:
    """The produce chain's answer for one partition.

    `error_code` 0 means: forward the (possibly modified) batches. Anything else means: write
    nothing of this partition and answer the client with this code and `error_message`;
    `record_errors` holds ``(batch_index, message)`` for Produce v8+ responses. `traces` lists
    the trace contexts the chain wrote (only when ok).
    """

    error_code: int = NONE
    error_message: str | None = None
    record_errors: tuple[tuple[int, str], ...] = ()
    traces: tuple[TraceInfo, ...] = ()

    @property
    def ok(self) -> bool:
        return self.error_code == NONE


OK = PartitionOutcome()


@dataclass(eq=False)
class ChainMember:
    """One configured member: the interceptor plus where it applies and how it fails.

    `topics` / `client_ids` of None match everything; a request without a client id never
    matches a `client_ids` list. `on_error` of None means the interceptor's default. A
    `shadow` member is evaluated and counted but changes nothing.
    """

    name: str
    interceptor: Interceptor
    topics: NameMatcher | None = None
    client_ids: NameMatcher | None = None
    on_error: str | None = None
    type: str = ""
    shadow: bool = False

    def __post_init__(self) -> None:
        if self.on_error is None:
            self.on_error = self.interceptor.default_on_error
        if not self.type:
            self.type = type(self.interceptor).__name__

    def applies(self, topic: str, client_id: str | None) -> bool:
        if self.topics is not None and not self.topics(topic):
            return False
        if self.client_ids is not None and (client_id is None or not self.client_ids(client_id)):
            return False
        return True


class _Plan:
    """The members that apply to one (topic, client id), with what the engine needs to know."""

    __slots__ = ("members", "calls", "hooks", "stamps", "shadow", "mode", "enforcing", "serial",
                 "fast", "columns", "by_interceptor")

    def __init__(self, members: list[ChainMember]) -> None:
        self.members = tuple(members)
        self.calls = tuple(m.interceptor.on_record for m in members)
        # Per member: does it override on_batch, its Stamps (None unless it stamps), shadow?
        self.hooks = tuple(type(m.interceptor).on_batch is not Interceptor.on_batch
                           for m in members)
        self.stamps = tuple(m.interceptor.stamps for m in members)
        self.shadow = tuple(m.shadow for m in members)
        ranks = [NEEDS.index(m.interceptor.needs) for m in members]
        self.mode = NEEDS[max(ranks)] if ranks else None
        self.enforcing = tuple(m for m in members if m.interceptor.enforcing and not m.shadow)
        self.serial = not all(m.interceptor.concurrent for m in members)
        self.fast = _fast_path(self) if self.mode == "headers" else None
        self.columns: list[_Columns | None] = [None] * len(members)  # the last, per member
        self.by_interceptor = {m.interceptor: m for m in members}


class _FastPath:
    """What a plan whose members all stamp (and none in shadow) needs for its fast paths.

    `keys` and `prefixes` are what any member watches; `sizes` how many headers each appends.
    `wire_keys` / `wire_prefixes` are the same as bytes, for the whole-batch check, or None
    when they cannot be compared as bytes.
    """

    __slots__ = ("keys", "prefixes", "sizes", "wire_keys", "wire_prefixes")

    def __init__(self, stamps: Sequence[Stamps]) -> None:
        self.keys = frozenset().union(*(s.watches for s in stamps))
        self.prefixes = tuple(p for s in stamps for p in s.watch_prefixes)
        self.sizes = tuple(len(s.appends) for s in stamps)
        self.wire_keys = stamping.wire_keys(sorted(self.keys))
        self.wire_prefixes = stamping.wire_keys(self.prefixes)

    def watches(self, headers: list) -> bool:
        """Does any member watch one of `headers`? (Then the record takes the record path.)"""
        keys = self.keys
        prefixes = self.prefixes
        for key, _ in headers:
            if key in keys or key.startswith(prefixes):
                return True
        return False

    def counts(self, records: int, members: int = -1) -> tuple[list[int], list[int]]:
        """(changed, added) per member when the first `members` (all by default) stamped
        `records` records: every header appended is one added, and a record appended to is
        changed."""
        changed = [0] * len(self.sizes)
        added = [0] * len(self.sizes)
        for i, size in enumerate(self.sizes if members < 0 else self.sizes[:members]):
            if size:
                changed[i] = records
                added[i] = size * records
        return changed, added


def _fast_path(plan: _Plan) -> _FastPath | None:
    """The plan's `_FastPath`, if every member stamps, none is in shadow, and none appends a
    key that a later member watches (which would make that member look)."""
    stamps = plan.stamps
    if not stamps or any(s is None for s in stamps) or any(plan.shadow):
        return None
    for j, earlier in enumerate(stamps):
        for later in stamps[j + 1:]:
            if any(later.watched(key) for key in earlier.appends):  # type: ignore[union-attr]
                return None
    return _FastPath(stamps)  # type: ignore[arg-type]


def _looks(stamps: Stamps, headers: Headers) -> bool:
    """Does a stamping member look at this record (does it carry a header it watches)?"""
    watched = stamps.watched
    for key, _ in headers:
        if watched(key):
            return True
    return False


class _Columns:
    """One stamping member's columns for a batch, ready for records (`row`) and for a whole
    batch (`wire`). Kept while the member gives the same values object (`_columns`)."""

    __slots__ = ("values", "fixed", "template", "each", "bulk", "pieces")

    def __init__(self, stamps: Stamps, values: Sequence[ColumnValue]) -> None:
        keys = stamps.appends
        if len(values) != len(keys):
            raise ValueError(f"columns() gave {len(values)} values for {len(keys)} keys")
        template: list = []
        each = []
        pieces: list = []  # shared runs as wire bytes, per-record columns as (key, maker)
        shared: list = []
        for pos, (key, value) in enumerate(zip(keys, values, strict=True)):
            if type(value) is PerRecord:
                template.append(None)
                each.append((pos, key, value.each))
                if shared:
                    pieces.append(_shared_wire(tuple(shared)))
                    shared = []
                pieces.append((key, value.many))
            elif value is None or type(value) is bytes:
                template.append((key, value))
                shared.append((key, value))
            else:
                raise TypeError(f"column {key!r}: expected bytes, None or PerRecord, not "
                                f"{type(value).__name__}")
        if shared:
            pieces.append(_shared_wire(tuple(shared)))
        self.values = values
        self.fixed = tuple(template) if not each else None
        self.template = template
        self.each = tuple(each)
        self.bulk = all(v.many is not None for v in values if type(v) is PerRecord)
        self.pieces = tuple(pieces)

    def row(self, ctx: RecordContext) -> Sequence[tuple[str, bytes | None]]:
        """The headers one record gets."""
        if self.fixed is not None:
            return self.fixed
        row = self.template[:]
        for pos, key, each in self.each:
            value = each(ctx)
            if value is not None and type(value) is not bytes:
                raise TypeError(f"column {key!r}: value must be bytes or None")
            row[pos] = (key, value)
        return row

    def wire(self, ctx: RecordContext, n: int) -> list[stamping.Column]:
        """The headers of `n` records in wire form, as columns for `stamping.append`."""
        out: list[stamping.Column] = []
        for piece in self.pieces:
            if type(piece) is bytes:
                out.append(piece)
                continue
            key, many = piece
            made = many(ctx, n)
            if type(made) is not list:
                made = list(made)
            if len(made) != n:
                raise ValueError(f"column {key!r}: many({n}) gave {len(made)} values")
            out.append(stamping.value_column(key, made))
        return out


def _columns(plan: _Plan, i: int, ctx: RecordContext) -> _Columns:
    """Member i's `_Columns` for this batch; the last one again when the member gave the very
    same values object (built-ins keep theirs while nothing changes)."""
    values = plan.members[i].interceptor.columns(ctx)
    last = plan.columns[i]
    if last is not None and last.values is values:
        return last
    cols = plan.columns[i] = _Columns(plan.stamps[i], values)  # type: ignore[arg-type]
    return cols


_SHARED: dict[tuple, bytes] = {}
_SHARED_LIMIT = 4096


def _shared_wire(pairs: tuple[tuple[str, bytes | None], ...]) -> bytes:
    """The wire form of headers all records of a batch get; the same from batch to batch
    (audit's hop headers change once a millisecond), so it is kept."""
    wire = _SHARED.get(pairs)
    if wire is None:
        if len(_SHARED) >= _SHARED_LIMIT:
            _SHARED.clear()
        wire = _SHARED[pairs] = stamping.headers_wire(pairs)
    return wire


class _Run:
    """One `process` call: its context and its own counters, merged into the chain's when it
    ends, so that runs in several threads never share a counter.

    Every member of the plan sees the same records, so `seen` is one count; `changed`,
    `added` and `removed` are per member (plan order); the rest of a member's counters are
    in `counted` (`of`)."""

    __slots__ = ("ctx", "plan", "counted", "seen", "changed", "added", "removed", "batches",
                 "batches_changed", "rejected", "records", "muted", "traces_mark")

    def __init__(self, plan: _Plan, ctx: RecordContext, records: int) -> None:
        n = len(plan.members)
        self.ctx = ctx
        self.plan = plan
        self.counted: dict[Interceptor, MemberStats] = {}
        self.seen = 0
        self.changed = [0] * n
        self.added = [0] * n
        self.removed = [0] * n
        self.batches = self.batches_changed = self.rejected = 0
        self.records = records  # in the whole partition, for rejections
        self.muted: set[int] = set()  # shadow members that would have refused the partition
        self.traces_mark = 0

    def of(self, i: int) -> MemberStats:
        """Member i's counters of this run."""
        return self.counter(self.plan.members[i].interceptor)  # type: ignore[return-value]

    def counter(self, interceptor: Interceptor) -> MemberStats | None:
        """The counters of a member of this run (made on first use), None for others."""
        st = self.counted.get(interceptor)
        if st is None:
            m = self.plan.by_interceptor.get(interceptor)
            if m is None:
                return None
            st = self.counted[interceptor] = MemberStats(m.name, m.type, shadow=m.shadow)
        return st

    def totals(self, path: str) -> ChainStats:
        """This run's counters as a `ChainStats`."""
        stats = ChainStats(path, {}, self.batches, self.batches_changed, self.seen,
                           self.rejected)
        for i, m in enumerate(self.plan.members):
            st = MemberStats(m.name, m.type, self.seen, self.changed[i], self.added[i],
                             self.removed[i], shadow=m.shadow)
            if m.interceptor in self.counted:
                st.merge(self.counted[m.interceptor])
            stats.members[m.name] = st
        return stats


class _Batch:
    """What the record path found in one batch, committed at its end."""

    __slots__ = ("changed", "added", "removed", "edits", "appended", "drops", "stamped",
                 "count", "muted")

    def __init__(self, members: int, muted: set[int]) -> None:
        self.changed = [0] * members
        self.added = [0] * members
        self.removed = [0] * members
        self.edits: list[tuple[Any, Headers, dict | None]] = []
        self.appended: list[tuple[Any, list]] = []  # (record, new headers) of the append path
        self.drops: set[int] = set()  # indexes of records to remove
        self.stamped = 0  # records stamped by every member on the append path
        self.count = 0
        self.muted = muted  # shadow members that would have ended the batch


class _Failed(Exception):
    """Internal: a batch ended early; `outcome` is a RejectRecord or None (pass through)."""

    def __init__(self, outcome: tuple[int, RejectRecord, int] | None) -> None:
        self.outcome = outcome


class _Chain:
    path: ClassVar[str]

    def __init__(self, members: Sequence[ChainMember] = (), *, fast_paths: bool = True
                 ) -> None:
        names: set[str] = set()
        for m in members:
            icpt = m.interceptor
            if self.path not in icpt.paths:
                raise ValueError(f"{m.name}: {m.type} cannot run on the {self.path} path")
            if m.on_error not in ON_ERROR[self.path]:
                raise ValueError(
                    f"{m.name}: on_error {m.on_error!r} is not allowed on the {self.path} path"
                )
            if icpt.needs not in NEEDS:
                raise ValueError(f"{m.name}: needs must be one of {NEEDS}, not {icpt.needs!r}")
            if icpt.stamps is not None and not isinstance(icpt.stamps, Stamps):
                raise ValueError(f"{m.name}: stamps must be a Stamps, not {icpt.stamps!r}")
            if m.name in names:
                raise ValueError(f"duplicate member name {m.name!r}")
            names.add(m.name)
        self.members = tuple(members)
        self.stats = ChainStats(self.path, {m.name: MemberStats(m.name, m.type, shadow=m.shadow)
                                            for m in members})
        for m in self.members:
            m.interceptor.stats = self.stats.members[m.name]
        # False runs every record through every member: the reference the fast paths match.
        self.fast_paths = fast_paths
        self._plans: dict[tuple[str, str | None], _Plan] = {}
        self._merging = threading.Lock()

    def __len__(self) -> int:
        return len(self.members)

    def _plan(self, topic: str, client_id: str | None) -> _Plan:
        key = (topic, client_id)
        plan = self._plans.get(key)
        if plan is None:
            if len(self._plans) >= _PLAN_CACHE_LIMIT:
                self._plans.clear()
            plan = _Plan([m for m in self.members if m.applies(topic, client_id)])
            if not self.fast_paths:
                plan.fast = None
            self._plans[key] = plan
        return plan

    def applies(self, topic: str, conn: ConnectionInfo) -> bool:
        """Does any member apply? If not, the proxy need not even split the batches."""
        return bool(self._plan(topic, conn.client_id).members)

    def needs(self, topic: str, conn: ConnectionInfo) -> str | None:
        """The most any applicable member needs: None, "read", "headers" or "key_value"."""
        return self._plan(topic, conn.client_id).mode

    def bulk(self, topic: str, conn: ConnectionInfo) -> bool:
        """Does the chain take the whole-batch path for this topic and client (every member
        declares what it watches and appends)? Then a batch no member watches costs one native
        scan, and the stamping, if any, one native pass."""
        return self._plan(topic, conn.client_id).fast is not None

    def serial(self, topic: str, conn: ConnectionInfo) -> bool:
        """Must runs for this topic and client wait for each other? (A member that is not
        `concurrent` applies.) Other runs may overlap, in any threads."""
        return self._plan(topic, conn.client_id).serial

    # -- a run: counters of its own, merged at the end ------------------------------------------

    def _start(self, plan: _Plan, ctx: RecordContext, batches: list[Any]) -> _Run:
        records = sum(b.record_count for b in batches if not isinstance(b, _RAW))
        run = _Run(plan, ctx, records)
        _RUN.run = run
        return run

    def _end(self, run: _Run, counts: Callable[[ChainStats], None] | None) -> None:
        """Merge the run's counters into the chain's (`counts` sees the run's alone first)."""
        _RUN.run = None
        if counts is not None:
            counts(run.totals(self.path))
        members = self.stats.members
        with self._merging:
            stats = self.stats
            stats.batches_seen += run.batches
            stats.batches_changed += run.batches_changed
            stats.records_seen += run.seen
            stats.partitions_rejected += run.rejected
            for i, m in enumerate(run.plan.members):
                st = members[m.name]
                st.records_seen += run.seen
                st.records_changed += run.changed[i]
                st.headers_added += run.added[i]
                st.headers_removed += run.removed[i]
                counted = run.counted.get(m.interceptor)
                if counted is not None:
                    st.merge(counted)

    def add_run(self, run: ChainStats) -> None:
        """Add counters of work done outside `process` (the native relay stamping for this
        chain: proxy/native/stamp_plan.py) to the chain's, as a run's would be."""
        with self._merging:
            self.stats.merge(run)

    # -- one batch ------------------------------------------------------------------------------

    def _run_batch(self, plan: _Plan, batch: Any, run: _Run) -> None:
        """Run the plan over one batch and commit its changes; raise `_Failed` to stop early.

        Stamping members get their columns first; then the batch is stamped whole if it can
        be, else its records go one by one (`_stamp_record` or `_run_record`)."""
        ctx = run.ctx
        ctx.batch = batch
        run.traces_mark = len(ctx.traces)
        muted: set[int] = set()
        columns = self._start_batch(plan, batch, run, muted)
        if columns is None or self._stamp_batch(plan, batch, run, columns):
            return
        work = _Batch(len(plan.members), muted)
        readonly = plan.mode == "read"
        iter_headers = getattr(batch, "iter_headers", None) if readonly else None
        records = None if iter_headers is not None else batch.records
        source = iter_headers() if iter_headers is not None else records
        fast = plan.fast if records is not None else None
        for index, item in enumerate(source):
            work.count += 1
            if fast is not None:
                current = item.current_headers()
                if not current or not fast.watches(current):
                    self._stamp_record(plan, run, work, columns, item, index, current)
                    continue
            self._run_record(plan, run, work, columns, item, index, records is None, readonly)
        changed = self._commit(batch, records, work)
        if work.stamped:
            counts = fast.counts(work.stamped)  # type: ignore[union-attr]
            for i in range(len(plan.members)):
                work.changed[i] += counts[0][i]
                work.added[i] += counts[1][i]
        self._account(run, work.count, work.changed, work.added, work.removed, changed)

    def _start_batch(self, plan: _Plan, batch: Any, run: _Run, muted: set[int]
                     ) -> list[Any] | None:
        """Call the members' `on_batch` and take the stamping members' columns (None for the
        others). Shadow members that fail here are added to `muted`. None when the batch was
        dropped (a member failed under ``on_error: drop``)."""
        ctx = run.ctx
        columns: list[Any] = [None] * len(plan.members)
        for i, m in enumerate(plan.members):
            if i in run.muted or (not plan.hooks[i] and plan.stamps[i] is None):
                continue
            icpt = m.interceptor
            try:
                if plan.hooks[i]:
                    icpt.on_batch(ctx)
                if plan.stamps[i] is not None:
                    columns[i] = _columns(plan, i, ctx)
            except Exception as exc:
                if plan.shadow[i]:
                    self._shadow_failure(plan, run, i, exc, batch.record_count)
                    muted.add(i)
                    continue
                self._failure(plan, run, i, exc, -1)  # returns on "drop"
                run.of(i).add_dropped("error", batch.remove_records(lambda _r: True))
                return None
        return columns

    def _stamp_batch(self, plan: _Plan, batch: Any, run: _Run, columns: list[Any]) -> bool:
        """Stamp every record of the batch in one pass, if none has a watched header; return
        False to have the batch go record by record instead.

        The result, counters and traces are those of the record path, except when a member
        fails midway: the members before it stamped the whole batch, not the records before
        the failing one.
        """
        fast = plan.fast
        if (fast is None or fast.wire_keys is None or fast.wire_prefixes is None
                or type(batch) is not RecordBatch or batch.parsed):
            return False
        for cols in columns:
            if not cols.bulk:
                return False
        n = batch.record_count
        if not n or stamping.watched(batch, fast.wire_keys, fast.wire_prefixes):
            return False
        ctx = run.ctx
        ctx.record = None
        ctx.index = -1
        wire: list = []
        zeros = [0] * len(columns)
        for i, cols in enumerate(columns):
            try:
                wire += cols.wire(ctx, n)
            except Exception as exc:
                self._failure(plan, run, i, exc, -1)  # returns on "drop"
                run.of(i).add_dropped("error", batch.remove_records(lambda _r: True))
                self._account(run, n, *fast.counts(n, i), zeros, True)
                return True
        total = sum(fast.sizes)
        if total:  # members may append nothing (an audit with no fields)
            stamping.append(batch, total, wire)
        self._account(run, n, *fast.counts(n), zeros, bool(total))
        return True

    def _stamp_record(self, plan: _Plan, run: _Run, work: _Batch, columns: list[Any],
                      record: Any, index: int, current: list) -> None:
        """A record no member watches: each member's row is appended to a plain list."""
        ctx = run.ctx
        ctx.record = record
        ctx.index = index
        new = current[:]
        for i, cols in enumerate(columns):
            try:
                new += cols.row(ctx)
            except Exception as exc:
                self._failure(plan, run, i, exc, index)  # returns on "drop"
                work.drops.add(index)
                run.of(i).add_dropped("error")
                changed, added = plan.fast.counts(1, i)  # type: ignore[union-attr]
                for j in range(i):  # the members before i did append
                    work.changed[j] += changed[j]
                    work.added[j] += added[j]
                break
        else:
            work.stamped += 1
        if len(new) != len(current):
            work.appended.append((record, new))

    def _run_record(self, plan: _Plan, run: _Run, work: _Batch, columns: list[Any],
                    item: Any, index: int, headers_only: bool, readonly: bool) -> None:
        """A record that goes through each member in turn, in a `Headers` wrapper."""
        ctx = run.ctx
        if headers_only:
            record = None
            headers = Headers(item, readonly=True)
        else:
            record = item
            # Wrapped without a copy: Headers copies on the first change.
            headers = Headers(item.current_headers(), readonly=readonly)
        ctx.record = record
        ctx.index = index
        fetch = self.path == FETCH
        calls = plan.calls
        # What the members before member i did to this record, to tell what i did.
        mutations = added = removed = 0
        for i in range(len(calls)):
            if plan.shadow[i]:
                if i not in run.muted and i not in work.muted:
                    self._shadow_record(plan, run, work, i, columns[i], headers)
                continue
            try:
                cols = columns[i]
                if cols is not None and not _looks(plan.stamps[i], headers):
                    headers.extend(cols.row(ctx))
                    verdict = None
                else:
                    verdict = calls[i](ctx, headers)
                    if verdict is not None and verdict is not KEEP:
                        if not (fetch and verdict is DROP):
                            _bad_verdict(verdict, fetch)
            except Exception as exc:
                self._failure(plan, run, i, exc, index)  # returns on "drop"
                work.drops.add(index)
                run.of(i).add_dropped("error")
                break
            if headers.mutations != mutations:
                mutations = headers.mutations
                work.changed[i] += 1
                work.added[i] += headers.added - added
                work.removed[i] += headers.removed - removed
                added = headers.added
                removed = headers.removed
            if verdict is DROP:
                work.drops.add(index)
                run.of(i).add_dropped("filtered")
                break
        if headers.mutations or ctx.staged is not None:
            work.edits.append((record, headers, ctx.staged))
            ctx.staged = None

    def _commit(self, batch: Any, records: list | None, work: _Batch) -> bool:
        """Give the changed records their new headers, keys and values; remove the dropped
        ones. True when anything changed."""
        changed = False
        for record, new in work.appended:
            record.take_headers(new)
            changed = True
        for record, headers, staged in work.edits:
            if headers.commit_to(record):
                changed = True
            if staged:
                for name, data in staged.items():
                    setattr(record, name, data)
                changed = True
        if work.drops:
            if records is None:
                records = batch.records
            doomed = {id(records[j]) for j in work.drops}
            batch.remove_records(lambda r: id(r) in doomed)
            changed = True
        return changed

    def _account(self, run: _Run, count: int, changed: list[int], added: list[int],
                 removed: list[int], batch_changed: bool) -> None:
        """Add one batch of `count` records to the run's counters."""
        for i in range(len(changed)):
            run.changed[i] += changed[i]
            run.added[i] += added[i]
            run.removed[i] += removed[i]
        run.seen += count
        run.batches += 1
        if batch_changed:
            run.batches_changed += 1

    # -- shadow members: evaluated and counted, nothing changed -----------------------------

    def _shadow_record(self, plan: _Plan, run: _Run, work: _Batch, i: int, cols: Any,
                       headers: Headers) -> None:
        """Run shadow member i on a copy of the record's headers as the members before it
        left them; count what it would have done, then forget it (headers, key and value,
        traces)."""
        ctx = run.ctx
        st = run.of(i)
        view = Headers(headers.to_list())
        staged = ctx.staged
        ctx.staged = None
        mark = len(ctx.traces)
        try:
            if cols is not None and not _looks(plan.stamps[i], view):
                view.extend(cols.row(ctx))
                verdict = None
            else:
                verdict = plan.calls[i](ctx, view)
                if verdict is not None and verdict is not KEEP:
                    if not (self.path == FETCH and verdict is DROP):
                        _bad_verdict(verdict, self.path == FETCH)
            would_stage = ctx.staged is not None
        except Exception as exc:
            self._shadow_failure(plan, run, i, exc, 1, work)
            return
        finally:
            del ctx.traces[mark:]
            ctx.staged = staged
        if view.mutations or would_stage:
            work.changed[i] += 1
            work.added[i] += view.added
            work.removed[i] += view.removed
        if verdict is DROP:
            st.add_dropped("filtered")

    def _shadow_failure(self, plan: _Plan, run: _Run, i: int, exc: Exception, records: int,
                        work: _Batch | None = None) -> None:
        """Count what a live member's failure or refusal would have done to `records` (1, or
        the batch's when `on_batch` failed). Where the live member would have ended the batch
        or the partition, the shadow member stops too and its changes to the batch are not
        counted, as a live member's would not be."""
        st = run.of(i)
        refused = isinstance(exc, RejectRecord) and self.path == PRODUCE
        if not refused:
            self._log_failure(plan.members[i], st, exc, run.ctx)
        policy = plan.members[i].on_error
        if not refused and policy == "drop":
            st.add_dropped("error", records)
            return
        if refused or policy == "reject":
            reason = exc.reason if refused else "member_error"  # type: ignore[attr-defined]
            st.add_rejected(reason, run.records)
            run.muted.add(i)  # the partition would have ended here
        if work is not None:
            work.changed[i] = work.added[i] = work.removed[i] = 0
            work.muted.add(i)  # the batch would have ended here

    # -- failures -------------------------------------------------------------------------------

    def _failure(self, plan: _Plan, run: _Run, i: int, exc: Exception, index: int) -> None:
        """Apply member i's policy to `exc`: return for "drop", raise `_Failed` otherwise."""
        member = plan.members[i]
        ctx = run.ctx
        if isinstance(exc, RejectRecord) and self.path == PRODUCE:
            raise _Failed((i, exc, index))
        self._log_failure(member, run.of(i), exc, ctx)
        policy = member.on_error
        if policy == "drop":
            return
        del ctx.traces[run.traces_mark:]
        ctx.staged = None
        if policy == "reject":
            message = f"interceptor '{member.name}' failed ({type(exc).__name__})"
            raise _Failed((i, RejectRecord(UNKNOWN_SERVER_ERROR, message, "member_error"), -1))
        raise _Failed(None)

    def _log_failure(self, member: ChainMember, st: MemberStats, exc: Exception,
                     ctx: RecordContext) -> None:
        """Count a failure; log the member's first at warning level, later ones at debug."""
        st.add_error(exc)
        earlier = sum(self.stats.members[member.name].errors.values())
        if earlier + sum(st.errors.values()) == 1:
            log.warning(
                "interceptor %r%s failed on %s %s-%d (on_error=%s; later failures are counted"
                " and logged at debug level)",
                member.name, " (shadow)" if member.shadow else "", self.path, ctx.topic,
                ctx.partition, member.on_error, exc_info=exc,
            )
        else:
            log.debug("interceptor %r failed: %r", member.name, exc)


def _bad_verdict(verdict: object, fetch: bool) -> None:
    if isinstance(verdict, RejectRecord):
        if fetch:
            raise TypeError("RejectRecord is only allowed on the produce path")
        raise verdict
    if verdict is DROP:
        raise TypeError("DROP is only allowed on the fetch path (records of a produce batch "
                        "cannot be removed without breaking idempotent producers)")
    raise TypeError(f"on_record returned {verdict!r}; expected None, KEEP, DROP or RejectRecord")


def _is_batch(b: Any) -> bool:
    return not isinstance(b, _RAW) and not b.is_control


_LEGACY = RejectRecord(
    INVALID_RECORD,
    "record format v0/v1 cannot carry headers, which a policy on this topic needs",
    "legacy_format",
)


class ProduceChain(_Chain):
    """The chain over records a client produces, before they reach the broker."""

    path = PRODUCE

    def process(
        self, topic: str, partition: int, batches: list[Any], conn: ConnectionInfo, *,
        traces: bool = True, counts: Callable[[ChainStats], None] | None = None,
    ) -> PartitionOutcome:
        """Run the chain over one partition of a Produce request.

        On success the batches may have been modified in place (forward each with
        `to_bytes()`). On rejection nothing of the partition may be written: the batches may
        be half-edited and must be dropped. With `traces` False the outcome lists no traces
        (tracing is off), which spares the members the work of noting them. `counts`, if
        given, is shown this run's own counters before they are merged into the chain's.
        """
        plan = self._plan(topic, conn.client_id)
        if not plan.members:
            return OK
        ctx = RecordContext(PRODUCE, topic, partition, conn, key_value=plan.mode == "key_value",
                            notes_traces=traces)
        run = self._start(plan, ctx, batches)
        try:
            return self._run(plan, run, batches)
        finally:
            self._end(run, counts)

    def _run(self, plan: _Plan, run: _Run, batches: list[Any]) -> PartitionOutcome:
        if any(isinstance(b, _RAW) for b in batches):
            if plan.enforcing:
                blamed = [plan.members.index(m) for m in plan.enforcing]
                return self._reject(plan, run, _LEGACY, blamed)
            for i, m in enumerate(plan.members):
                if m.shadow and m.interceptor.enforcing:
                    run.of(i).add_rejected(_LEGACY.reason, run.records)
        for batch in batches:
            if _is_batch(batch):
                try:
                    self._run_batch(plan, batch, run)
                except _Failed as failed:
                    if failed.outcome is not None:
                        i, rejection, index = failed.outcome
                        return self._reject(plan, run, rejection, [i], index)
        if run.ctx.traces:
            return PartitionOutcome(traces=tuple(run.ctx.traces))
        return OK

    def _reject(self, plan: _Plan, run: _Run, rejection: RejectRecord, blamed: list[int],
                index: int = -1) -> PartitionOutcome:
        """The outcome refusing the partition; `index` is the culprit record's, if known."""
        run.rejected += 1
        for i in blamed:
            run.of(i).add_rejected(rejection.reason, run.records)
        message = (rejection.message
                   or f"record refused by interceptor '{plan.members[blamed[0]].name}'")
        record_errors = ((index, message),) if index >= 0 else ()
        return PartitionOutcome(rejection.error_code, message, record_errors)


class FetchChain(_Chain):
    """The chain over records the broker returns, before the client sees them."""

    path = FETCH

    def process(
        self, topic: str, partition: int, batches: list[Any], conn: ConnectionInfo, *,
        counts: Callable[[ChainStats], None] | None = None,
    ) -> None:
        """Run the chain over one partition of a Fetch response, editing batches in place.

        Records may lose headers or be removed (`remove_records`: offsets stay valid and
        consumers step over the gap, as after compaction).
        """
        plan = self._plan(topic, conn.client_id)
        if not plan.members:
            return
        ctx = RecordContext(FETCH, topic, partition, conn, key_value=plan.mode == "key_value")
        run = self._start(plan, ctx, batches)
        try:
            for batch in batches:
                if _is_batch(batch):
                    try:
                        self._run_batch(plan, batch, run)
                    except _Failed:
                        pass  # the batch goes out as it came
        finally:
            self._end(run, counts)


@dataclass
class Chains:
    """Both chains, as built from the ``interceptors`` section of the configuration."""

    produce: ProduceChain = field(default_factory=ProduceChain)
    fetch: FetchChain = field(default_factory=FetchChain)

    def snapshot(self) -> dict[str, Any]:
        return {"produce": self.produce.stats.snapshot(), "fetch": self.fetch.stats.snapshot()}
