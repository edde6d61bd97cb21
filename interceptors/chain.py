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
* When every member only stamps records (the built-in `trace_context`, `audit` and
  `insert_header` make that promise through `Interceptor._appends`), a record none of them
  has a reason to look at (no header they watch) takes the *append path*: each member's
  headers are appended to a plain list, without a `Headers` wrapper or `on_record` call, with
  exactly the full path's result, counters and traces. Other records take the full path.
* Better still, when those members can also stamp a whole batch (`Appends.stamp`) and no
  record of the batch has a watched header, the batch is *stamped*: it is never parsed into
  records, each member returns its headers for all records in wire form, and
  `protocol.stamping` writes the batch anew in one pass. Bytes, counters and traces are again
  those of the append path; only when a member fails midway do the counts of the members
  before it differ (they stamped the whole batch, not the records before the failing one).
* Control batches (transaction markers) and legacy (magic 0/1) chunks are never touched.

Failure policy. A member that raises never takes the proxy down; it is counted and its
`on_error` policy decides:

* ``reject`` (produce): the partition is refused with UNKNOWN_SERVER_ERROR;
* ``pass``: the batch passes through exactly as it arrived, with no member's changes (a
  half-stamped batch would be worse than an untouched one);
* ``drop`` (fetch): the record is removed before the client sees it.

Record-level errors of the protocol layer (a corrupt batch raising `CodecError` when its
records are read) are not member failures and propagate to the caller.

Members keep per-batch state between `on_batch` and `on_record`, so a chain runs one batch at
a time: call `process` from the event loop only (decompressing in a worker thread first, by
reading `batch.records` there, is fine).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from interceptors.api import DROP, FETCH, KEEP, NEEDS, ON_ERROR, PRODUCE, Appends, Interceptor
from interceptors.context import ConnectionInfo, RecordContext, TraceInfo
from interceptors.errors import INVALID_RECORD, UNKNOWN_SERVER_ERROR, RejectRecord
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

    error_code: int = 0
    error_message: str | None = None
    record_errors: tuple[tuple[int, str], ...] = ()
    traces: tuple[TraceInfo, ...] = ()

    @property
    def ok(self) -> bool:
        return self.error_code == 0


OK = PartitionOutcome()


@dataclass(eq=False)
class ChainMember:
    """One configured member: the interceptor plus where it applies and how it fails.

    `topics` / `client_ids` of None match everything; a request without a client id never
    matches a `client_ids` list. `on_error` of None means the interceptor's default.
    """

    name: str
    interceptor: Interceptor
    topics: NameMatcher | None = None
    client_ids: NameMatcher | None = None
    on_error: str | None = None
    type: str = ""

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

    __slots__ = ("members", "calls", "stats", "batch_hooks", "mode", "enforcing", "appends")

    def __init__(self, members: list[ChainMember], stats: dict[str, MemberStats]) -> None:
        self.members = tuple(members)
        self.calls = tuple(m.interceptor.on_record for m in members)
        self.stats = tuple(stats[m.name] for m in members)
        self.batch_hooks = tuple(
            i for i, m in enumerate(members)
            if type(m.interceptor).on_batch is not Interceptor.on_batch
        )
        ranks = [NEEDS.index(m.interceptor.needs) for m in members]
        self.mode = NEEDS[max(ranks)] if ranks else None
        self.enforcing = any(m.interceptor.enforcing for m in members)
        self.appends = _appending(members) if self.mode == "headers" else None


class _Appending:
    """A plan whose members all only append to records they need not look at (`Appends`).

    `keys` and `prefixes` are what any member watches; `makes` the members' `make`, in order.
    """

    __slots__ = ("keys", "prefixes", "makes", "sizes", "stamps", "wire_keys", "wire_prefixes")

    def __init__(self, offers: list[Appends]) -> None:
        self.keys = frozenset().union(*(a.keys for a in offers))
        self.prefixes = tuple(p for a in offers for p in a.prefixes)
        self.makes = tuple(a.make for a in offers)
        self.sizes = tuple(a.size for a in offers)
        # The whole-batch way (`_Chain._stamp_batch`), when every member can stamp and the
        # watched names can be compared as bytes.
        stamps = tuple(a.stamp for a in offers)
        self.wire_keys = stamping.wire_keys(sorted(self.keys))
        self.wire_prefixes = stamping.wire_keys(self.prefixes)
        usable = all(stamps) and self.wire_keys is not None and self.wire_prefixes is not None
        self.stamps = stamps if usable else None

    def count(self, changed: list[int], added: list[int], records: int, members: int = -1
              ) -> None:
        """Count `records` that the first `members` members (all by default) appended to:
        every header a member appends is one added, and a record it appended to is changed."""
        sizes = self.sizes if members < 0 else self.sizes[:members]
        for i, size in enumerate(sizes):
            if size:
                changed[i] += records
                added[i] += size * records

    def watches(self, headers: list) -> bool:
        """Does any member watch one of `headers`? (Then the record takes the full path.)"""
        keys = self.keys
        prefixes = self.prefixes
        for key, _ in headers:
            if key in keys or key.startswith(prefixes):
                return True
        return False


def _appending(members: list[ChainMember]) -> _Appending | None:
    """The plan's `_Appending`, if every member makes the `Appends` promise and none appends
    a key that a later member watches (which would make that member look)."""
    offers = []
    for m in members:
        icpt = m.interceptor
        owner = next(c for c in type(icpt).__mro__ if "_appends" in c.__dict__)
        if type(icpt).on_record is not owner.on_record:
            return None  # a subclass changed on_record: the promise was not made for it
        offer = icpt._appends()
        if offer is None:
            return None
        offers.append(offer)
    for j, earlier in enumerate(offers):
        for later in offers[j + 1:]:
            if any(k in later.keys or k.startswith(later.prefixes) for k in earlier.adds):
                return None
    return _Appending(offers) if offers else None


class _Failed(Exception):
    """Internal: a batch ended early; `outcome` is a RejectRecord or None (pass through)."""

    def __init__(self, outcome: tuple[ChainMember, RejectRecord, int] | None) -> None:
        self.outcome = outcome


class _Chain:
    path: ClassVar[str]

    def __init__(self, members: Sequence[ChainMember] = ()) -> None:
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
            if m.name in names:
                raise ValueError(f"duplicate member name {m.name!r}")
            names.add(m.name)
        self.members = tuple(members)
        self.stats = ChainStats(self.path, {m.name: MemberStats(m.name, m.type) for m in members})
        for m in self.members:
            m.interceptor.stats = self.stats.members[m.name]
        self._plans: dict[tuple[str, str | None], _Plan] = {}

    def __len__(self) -> int:
        return len(self.members)

    def _plan(self, topic: str, client_id: str | None) -> _Plan:
        key = (topic, client_id)
        plan = self._plans.get(key)
        if plan is None:
            if len(self._plans) >= _PLAN_CACHE_LIMIT:
                self._plans.clear()
            members = [m for m in self.members if m.applies(topic, client_id)]
            plan = self._plans[key] = _Plan(members, self.stats.members)
        return plan

    def applies(self, topic: str, conn: ConnectionInfo) -> bool:
        """Does any member apply? If not, the proxy need not even split the batches."""
        return bool(self._plan(topic, conn.client_id).members)

    def needs(self, topic: str, conn: ConnectionInfo) -> str | None:
        """The most any applicable member needs: None, "read", "headers" or "key_value"."""
        return self._plan(topic, conn.client_id).mode

    # -- the per-batch loop -----------------------------------------------------------------

    def _run_batch(self, plan: _Plan, batch: Any, ctx: RecordContext) -> None:
        """Run the plan over one batch and commit its changes; raise `_Failed` to stop early."""
        fetch = self.path == FETCH
        members = plan.members
        ctx.batch = batch
        traces_mark = len(ctx.traces)
        for i in plan.batch_hooks:
            try:
                members[i].interceptor.on_batch(ctx)
            except Exception as exc:
                self._failure(plan, i, exc, ctx, -1, traces_mark)  # returns on "drop"
                n = batch.remove_records(lambda _r: True)
                plan.stats[i].add_dropped("error", n)
                return

        if (plan.appends is not None and plan.appends.stamps is not None
                and type(batch) is RecordBatch and not batch.parsed
                and self._stamp_batch(plan, batch, ctx, traces_mark)):
            return
        readonly = plan.mode == "read"
        iter_headers = getattr(batch, "iter_headers", None) if readonly else None
        records = None if iter_headers is not None else batch.records
        source = iter_headers() if iter_headers is not None else records

        calls = plan.calls
        n = len(calls)
        changed = [0] * n
        added = [0] * n
        edits: list[tuple[Any, Headers, dict | None]] = []
        appended: list[tuple[Any, list]] = []  # (record, new headers) from the append path
        drops: set[int] = set()  # indexes of records to remove
        appends = plan.appends if records is not None else None
        makes = appends.makes if appends is not None else ()
        appended_count = 0  # records that took the append path through every member
        index = -1
        for index, item in enumerate(source):
            if appends is not None:
                # The append path: no member looks at this record, each appends its headers.
                current = item.current_headers()
                if not current or not appends.watches(current):
                    ctx.record = item
                    ctx.index = index
                    new = current[:]
                    make = None
                    try:
                        for make in makes:
                            new += make(ctx)
                    except Exception as exc:
                        i = makes.index(make)  # the member that failed
                        self._failure(plan, i, exc, ctx, index, traces_mark)  # on "drop"
                        drops.add(index)
                        plan.stats[i].add_dropped("error")
                        appends.count(changed, added, 1, i)  # the members before i did append
                    else:
                        appended_count += 1
                    if len(new) != len(current):
                        appended.append((item, new))
                    continue
            if records is None:
                record = None
                headers = Headers(item, readonly=True)
            else:
                record = item
                # Wrapped without a copy: Headers copies on the first change.
                headers = (Headers(item.current_headers(), readonly=True) if readonly
                           else Headers(item.current_headers()))
            ctx.record = record
            ctx.index = index
            # What the members before member i did to this record, to tell what i did.
            mutations = headers_added = 0
            for i in range(n):
                try:
                    verdict = calls[i](ctx, headers)
                    if verdict is not None and verdict is not KEEP:
                        if not (fetch and verdict is DROP):
                            _bad_verdict(verdict, fetch)
                except Exception as exc:
                    self._failure(plan, i, exc, ctx, index, traces_mark)  # returns on "drop"
                    drops.add(index)
                    plan.stats[i].add_dropped("error")
                    break
                if headers.mutations != mutations:
                    mutations = headers.mutations
                    changed[i] += 1
                    added[i] += headers.added - headers_added
                    headers_added = headers.added
                if verdict is DROP:
                    drops.add(index)
                    plan.stats[i].add_dropped("filtered")
                    break
            if headers.mutations or ctx.staged is not None:
                edits.append((record, headers, ctx.staged))
                ctx.staged = None

        if appended_count:
            appends.count(changed, added, appended_count)  # type: ignore[union-attr]
        batch_changed = False
        for record, new in appended:
            record.take_headers(new)
            batch_changed = True
        for record, headers, staged in edits:
            if headers.commit_to(record):
                batch_changed = True
            if staged:
                for name, data in staged.items():
                    setattr(record, name, data)
                batch_changed = True
        if drops:
            if records is None:
                records = batch.records
            doomed = {id(records[j]) for j in drops}
            batch.remove_records(lambda r: id(r) in doomed)
            batch_changed = True
        self._account(plan, index + 1, changed, added, batch_changed)

    def _stamp_batch(self, plan: _Plan, batch: RecordBatch, ctx: RecordContext,
                     traces_mark: int) -> bool:
        """Stamp every record of the batch in one pass, if none has a watched header; return
        False to have the batch go record by record instead.

        The result, counters and traces are those of the append path for each record: every
        member stamps all `n` records (`Appends.stamp`), then `protocol.stamping` writes the
        batch anew without parsing its records into objects.
        """
        appends = plan.appends
        assert appends is not None and appends.stamps is not None
        n = batch.record_count
        if not n or stamping.watched(batch, appends.wire_keys, appends.wire_prefixes):
            return False
        ctx.record = None
        ctx.index = -1
        changed = [0] * len(plan.calls)
        added = [0] * len(plan.calls)
        columns: list = []
        for i, stamp in enumerate(appends.stamps):
            try:
                columns += stamp(ctx, n)
            except Exception as exc:
                self._failure(plan, i, exc, ctx, -1, traces_mark)  # returns on "drop"
                plan.stats[i].add_dropped("error", batch.remove_records(lambda _r: True))
                appends.count(changed, added, n, i)  # the members before i did append
                self._account(plan, n, changed, added, True)
                return True
        total = sum(appends.sizes)
        if total:  # members may append nothing (an audit with no fields)
            stamping.append(batch, total, columns)
        appends.count(changed, added, n)
        self._account(plan, n, changed, added, bool(total))
        return True

    def _account(self, plan: _Plan, count: int, changed: list[int], added: list[int],
                 batch_changed: bool) -> None:
        """Add one batch of `count` records to the chain's and members' counters."""
        for i, st in enumerate(plan.stats):
            st.records_seen += count
            st.records_changed += changed[i]
            st.headers_added += added[i]
        stats = self.stats
        stats.batches_seen += 1
        stats.records_seen += count
        if batch_changed:
            stats.batches_changed += 1

    def _failure(
        self,
        plan: _Plan,
        i: int,
        exc: Exception,
        ctx: RecordContext,
        index: int,
        traces_mark: int,
    ) -> None:
        """Apply member i's policy to `exc`: return for "drop", raise `_Failed` otherwise."""
        member = plan.members[i]
        if isinstance(exc, RejectRecord) and self.path == PRODUCE:
            raise _Failed((member, exc, index))
        st = plan.stats[i]
        st.add_error(exc)
        if sum(st.errors.values()) == 1:
            log.warning(
                "interceptor %r failed on %s %s-%d (on_error=%s; later failures are counted"
                " and logged at debug level)",
                member.name, self.path, ctx.topic, ctx.partition, member.on_error,
                exc_info=exc,
            )
        else:
            log.debug("interceptor %r failed: %r", member.name, exc)
        policy = member.on_error
        if policy == "drop":
            return
        del ctx.traces[traces_mark:]
        ctx.staged = None
        if policy == "reject":
            message = f"interceptor '{member.name}' failed ({type(exc).__name__})"
            raise _Failed((member, RejectRecord(UNKNOWN_SERVER_ERROR, message, "member_error"),
                           -1))
        raise _Failed(None)


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


class ProduceChain(_Chain):
    """The chain over records a client produces, before they reach the broker."""

    path = PRODUCE

    def process(
        self, topic: str, partition: int, batches: list[Any], conn: ConnectionInfo, *,
        traces: bool = True,
    ) -> PartitionOutcome:
        """Run the chain over one partition of a Produce request.

        On success the batches may have been modified in place (forward each with
        `to_bytes()`). On rejection nothing of the partition may be written: the batches may
        be half-edited and must be dropped. With `traces` False the outcome lists no traces
        (tracing is off), which spares the members the work of noting them.
        """
        plan = self._plan(topic, conn.client_id)
        if not plan.members:
            return OK
        if plan.enforcing and any(isinstance(b, _RAW) for b in batches):
            legacy = RejectRecord(
                INVALID_RECORD,
                "record format v0/v1 cannot carry headers, which a policy on this topic needs",
                "legacy_format",
            )
            return self._reject(batches, legacy, [m for m in plan.members
                                                  if m.interceptor.enforcing])
        ctx = RecordContext(PRODUCE, topic, partition, conn, key_value=plan.mode == "key_value",
                            notes_traces=traces)
        for batch in batches:
            if _is_batch(batch):
                try:
                    self._run_batch(plan, batch, ctx)
                except _Failed as failed:
                    if failed.outcome is not None:
                        member, rejection, index = failed.outcome
                        return self._reject(batches, rejection, [member], index)
        if ctx.traces:
            return PartitionOutcome(traces=tuple(ctx.traces))
        return OK

    def _reject(
        self,
        batches: list[Any],
        rejection: RejectRecord,
        blamed: list[ChainMember],
        index: int = -1,
    ) -> PartitionOutcome:
        """The outcome refusing the partition; `index` is the culprit record's, if known."""
        records = sum(b.record_count for b in batches if not isinstance(b, _RAW))
        self.stats.partitions_rejected += 1
        for m in blamed:
            self.stats.members[m.name].add_rejected(rejection.reason, records)
        message = rejection.message or f"record refused by interceptor '{blamed[0].name}'"
        record_errors = ((index, message),) if index >= 0 else ()
        return PartitionOutcome(rejection.error_code, message, record_errors)


class FetchChain(_Chain):
    """The chain over records the broker returns, before the client sees them."""

    path = FETCH

    def process(
        self, topic: str, partition: int, batches: list[Any], conn: ConnectionInfo
    ) -> None:
        """Run the chain over one partition of a Fetch response, editing batches in place.

        Records may lose headers or be removed (`remove_records`: offsets stay valid and
        consumers step over the gap, as after compaction).
        """
        plan = self._plan(topic, conn.client_id)
        if not plan.members:
            return
        ctx = RecordContext(FETCH, topic, partition, conn, key_value=plan.mode == "key_value")
        for batch in batches:
            if _is_batch(batch):
                try:
                    self._run_batch(plan, batch, ctx)
                except _Failed:
                    pass  # the batch goes out as it came


@dataclass
class Chains:
    """Both chains, as built from the ``interceptors`` section of the configuration."""

    produce: ProduceChain = field(default_factory=ProduceChain)
    fetch: FetchChain = field(default_factory=FetchChain)

    def snapshot(self) -> dict[str, Any]:
        return {"produce": self.produce.stats.snapshot(), "fetch": self.fetch.stats.snapshot()}
