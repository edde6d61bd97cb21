"""``trace_context``: make every produced record carry a W3C trace context (produce path).

* A record with one valid ``traceparent`` keeps it, and its ``tracestate``, unchanged: a proxy
  is a pass-through in W3C terms, and the spec forbids touching ``tracestate`` when
  ``traceparent`` is unchanged. An invalid ``tracestate`` next to it is counted
  (``tracestate_invalid``) and still passed on.
* A record without a valid one gets a new context (a restart, in W3C terms): version 00, a
  random trace id and parent id (never zero), flags from ``sampled``. Any ``tracestate``
  belonged to the missing or invalid parent and is removed, as the spec recommends on
  restart. With ``mode: batch`` one new context is shared by all such records of a batch
  (cheaper, and one producer send is one operation); ``mode: record`` gives each its own.
* Duplicate ``traceparent`` headers are collapsed to one, because readers disagree:
  OpenTelemetry reads the first header with a key, Brave the last. The first *valid* one wins
  and takes the place of the first; the others are removed (``traceparent_collapsed``).
* ``b3_read``: when there is no valid ``traceparent``, a valid B3 single header (``b3``)
  becomes the parent: the traceparent carries its trace id (64-bit ids left-padded) and its
  span id as parent-id, and its sampling decision.
* ``b3_write``: records whose ``b3`` header is missing or invalid get one matching the
  traceparent they leave with.
* ``trace_id_headers``: header names that receive a copy of the trace id (32 lowercase hex),
  for tools that look for their own header.
* ``link``: record the causal link where it happens (`interceptors.trace_links`). Herald
  remembers the traced records each client scope fetched (a member this one adds to the
  fetch chain, `trace_context.fetched`); a produced record that keeps its own valid
  traceparent and continues a trace its scope fetched gets one ``herald.parent`` header
  (``link.header``) per remembered record, ``<topic>:<partition>:<offset>``, and, when its
  round had parents Herald cannot name, one ``herald.parents_lost`` header per reason,
  ``<reason>:<count>`` (``expired``, ``evicted``, ``overflow``), with parents or without.
  Records without trace context pay nothing more: they are not looked at, as before.
  Counted: ``link_made`` (records linked), ``link_parents`` (headers written),
  ``link_missed_unseen`` / ``_expired`` / ``_evicted`` (a traced record with no remembered
  fetch, by reason), ``link_lost_expired`` / ``_evicted`` / ``_overflow`` (parents declared
  lost, the counts the headers carry, summed). With ``audit`` in the chain, before or after
  this member, these headers survive its forgery check and any other header under its
  prefix does not.

Header names are matched exactly (Kafka header keys are case-sensitive); producers write
them in lowercase, as the spec asks.

The trace contexts this member writes are reported through `RecordContext.note_trace` and
end up in `PartitionOutcome.traces`, so the observability layer can emit a span whose id is
the parent-id consumers will continue from.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from configuration import InvalidConfig
from interceptors.api import (
    PRODUCE,
    ColumnValue,
    Interceptor,
    NativeColumn,
    PerRecord,
    Stamps,
)
from interceptors.api import TRACEPARENT as NATIVE_TRACEPARENT
from interceptors.context import ConnectionInfo, ProxyInfo, RecordContext
from interceptors.headers import Headers
from interceptors.ids import new_trace_ids, trace_draws
from interceptors.trace_links import (
    LINKED_MEMO,
    LOST_HEADER,
    LOST_REASONS,
    FetchedTraces,
    LinkConfig,
    NativeFetchedTraces,
    RememberFetched,
    fetched_traces,
    lost_values,
    parent_value,
)
from interceptors.tracing import (
    format_b3,
    format_traceparent,
    parse_b3,
    parse_tracestate,
    valid_traceparent,
)
from protocol.contracts.headers import B3 as B3_HEADER
from protocol.contracts.headers import TRACEPARENT, TRACESTATE
from protocol.contracts.native_relay import (
    LINK_MADE,
    LINK_PARENTS,
    LOST_COUNTERS,
    MISS_REASONS,
    MISSED_COUNTERS,
)
from protocol.stamping import hex_column

_MISSED = dict(zip(MISS_REASONS, MISSED_COUNTERS, strict=True))
_LOST = dict(zip(LOST_REASONS, LOST_COUNTERS, strict=True))

# A new traceparent cut from 24 random bytes (`protocol.stamping.hex_column`).
_NEW_SAMPLED = ((b"00-", 32), (b"-", 16), (b"-01", 0))
_NEW_UNSAMPLED = ((b"00-", 32), (b"-", 16), (b"-00", 0))


@dataclass
class TraceContextConfig:
    mode: Literal["record", "batch"] = "record"
    sampled: bool = True
    b3_read: bool = False
    b3_write: bool = False
    trace_id_headers: list[str] = field(default_factory=list)
    link: LinkConfig | None = None  # off unless given (``link: {}`` for the defaults)

    def __post_init__(self) -> None:
        for i, name in enumerate(self.trace_id_headers):
            if not name or name in (TRACEPARENT, TRACESTATE, B3_HEADER):
                raise InvalidConfig(f"trace_id_headers[{i}]", f"cannot use {name!r}")


class _Batch:
    """Per batch: the new context shared by the batch's records (``mode: batch``)."""

    __slots__ = ("context",)

    def __init__(self) -> None:
        self.context: bytes | None = None  # made on first use: a traced batch costs nothing


class TraceContext(Interceptor):
    Config = TraceContextConfig
    paths = frozenset({PRODUCE})
    concurrent = True

    def __init__(self, config: TraceContextConfig, env: ProxyInfo) -> None:
        super().__init__(config, env)
        self._per_batch = config.mode == "batch"
        self._sampled = config.sampled
        self._b3_read = config.b3_read
        self._b3_write = config.b3_write
        self._copies = tuple(config.trace_id_headers)
        # A record with neither traceparent nor tracestate (nor, with b3_read, a b3 header)
        # just gets a new context; with B3 writes or trace id copies every record is looked at.
        if not (self._b3_write or self._copies):
            watched = (TRACEPARENT, TRACESTATE, B3_HEADER) if self._b3_read else (
                TRACEPARENT, TRACESTATE)
            self.stamps = Stamps((TRACEPARENT,), frozenset(watched))
        # A new context per record (or one per batch), in bulk from one draw of ids.
        self._columns: list[ColumnValue] = [PerRecord(self._new_sampled, self._new_contexts)]
        link = config.link
        self._memory: FetchedTraces | NativeFetchedTraces | None = None
        if link is not None:
            # Kept across reloads while the settings stay (`ProxyInfo.kept`): what clients
            # fetched just before a SIGHUP still links what they produce just after it.
            key = ("trace_links", link.scope, link.capacity, link.ttl_s, link.max_parents)
            memory = env.kept.get(key)
            if memory is None:
                memory = env.kept[key] = fetched_traces(link)
            self._memory = memory
            self._link_key = link.header
            self.fetch_member = RememberFetched(self._memory, env)

    def on_batch(self, ctx: RecordContext) -> None:
        if self._per_batch:
            ctx.memo[self] = _Batch()

    def columns(self, ctx: RecordContext) -> list[ColumnValue]:
        return self._columns

    def native_columns(self, conn: ConnectionInfo) -> list[NativeColumn] | None:
        if self.stamps is None:  # B3 headers or trace id copies: every record is looked at
            return None
        # A record with one valid traceparent (and valid tracestates) keeps it: `on_record`
        # changes and counts nothing for it. An invalid tracestate is counted there: Python's.
        # With links such a record may need parent headers from the memory: the engine reads
        # the C memory (`NativeFetchedTraces`) itself; with the Python one (no extension)
        # records carrying a traceparent go to Python.
        memory = self._memory
        links = None
        if isinstance(memory, NativeFetchedTraces):
            links = (memory.native, memory.scope(conn), self._link_key)
        return [NativeColumn(NATIVE_TRACEPARENT, sampled=self._sampled,
                             per_batch=self._per_batch, event="trace_new_context",
                             keeps_valid=memory is None or links is not None, links=links)]

    def _new_sampled(self, ctx: RecordContext) -> bytes:
        return self._new_context(ctx, self._sampled)

    def _new_contexts(self, ctx: RecordContext, n: int) -> list[bytes]:
        """The values of n calls of `_new_context`, from one draw of ids."""
        if self._per_batch:
            return [self._new_context(ctx, self._sampled)] * n
        sampled = self._sampled
        raw = trace_draws(n)
        values = hex_column(b"", raw, n, 24, _NEW_SAMPLED if sampled else _NEW_UNSAMPLED)
        if ctx.notes_traces:
            note = ctx.note_trace
            for i in range(24 * (n - 1), -1, -24):  # the first record's ids are the last
                note(int.from_bytes(raw[i:i + 16], "big"),
                     int.from_bytes(raw[i + 16:i + 24], "big"), None, sampled, "new")
        self.stats.count("trace_new_context", n)
        return values

    def _new_context(self, ctx: RecordContext, sampled: bool) -> bytes:
        batch: _Batch | None = ctx.memo.get(self) if self._per_batch else None
        shared = batch is not None and sampled == self._sampled
        if shared and batch.context is not None:  # type: ignore[union-attr]
            return batch.context  # type: ignore[union-attr]
        trace_id, span_id = new_trace_ids()
        tp = format_traceparent(trace_id, span_id, sampled)
        ctx.note_trace(trace_id, span_id, None, sampled, "new")
        self.stats.count("trace_new_context")
        if shared:
            batch.context = tp  # type: ignore[union-attr]
        return tp

    def on_record(self, ctx: RecordContext, headers: Headers) -> None:
        # One pass over the headers finds both the traceparents and whether a tracestate is
        # there (an untraced producer's record usually has few headers, often none).
        found: list[bytes | None] | None = None
        has_state = False
        tp: bytes | None
        for key, value in headers:
            if key == TRACEPARENT:
                if found is None:
                    found = [value]
                else:
                    found.append(value)
            elif key == TRACESTATE:
                has_state = True
        if found is None:  # the common case of an untraced producer: one append
            tp = self._restart(ctx, headers, has_state)
            headers.add(TRACEPARENT, tp)
        elif len(found) == 1 and valid_traceparent(found[0]):
            tp = found[0]
            if has_state and any(parse_tracestate(s) is None for s in headers.all(TRACESTATE)):
                self.stats.count("tracestate_invalid")
            if self._memory is not None:
                self._link(ctx, headers, tp)
        else:
            for tp in found:
                if valid_traceparent(tp):
                    self.stats.count("traceparent_collapsed")
                    if self._memory is not None:
                        self._link(ctx, headers, tp)
                    break
            else:
                self.stats.count("traceparent_invalid")
                tp = self._restart(ctx, headers, has_state)
            headers.set(TRACEPARENT, tp)
        if self._b3_write or self._copies:
            self._write_extras(headers, tp)

    def _link(self, ctx: RecordContext, headers: Headers, tp: bytes) -> None:
        """Name the records this one continues, as its scope fetched them (`link`)."""
        memory = self._memory
        assert memory is not None
        found, lost = memory.parents(memory.scope(ctx.conn), tp[3:35])
        stats = self.stats
        written: tuple[tuple[str, int], ...] = ()
        if type(found) is str:
            stats.count(_MISSED[found])
        else:
            key = self._link_key
            for parent in found:
                headers.add(key, parent_value(parent))  # type: ignore[arg-type]
            written = ((key, len(found)),)
            stats.count(LINK_MADE)
            stats.count(LINK_PARENTS, len(found))
        if lost is not None:  # the round's parents it cannot name: declared, never silent
            values = lost_values(lost)
            for reason, n, value in values:
                headers.add(LOST_HEADER, value)
                stats.count(_LOST[reason], n)
            written += ((LOST_HEADER, len(values)),)
        if written:
            ctx.memo[LINKED_MEMO] = (headers, written)

    def _restart(self, ctx: RecordContext, headers: Headers, has_state: bool) -> bytes:
        """The context for a record without a valid traceparent; drops its tracestate."""
        if has_state:
            headers.remove(TRACESTATE)
        tp = self._from_b3(ctx, headers) if self._b3_read else None
        return tp if tp is not None else self._new_context(ctx, self._sampled)

    def _from_b3(self, ctx: RecordContext, headers: Headers) -> bytes | None:
        b3 = parse_b3(headers.last(B3_HEADER))
        if b3 is None:
            return None
        if b3.sampled is None:  # the sender deferred the decision: ours applies
            b3 = replace(b3, sampled=self._sampled)
        tp = b3.to_traceparent()
        trace_id, span_id = b3.trace_id, b3.span_id
        # A sampling decision alone (`to_traceparent` is None exactly when an id is missing):
        # start a trace that honours it.
        if tp is None or trace_id is None or span_id is None:
            return self._new_context(ctx, bool(b3.sampled))
        parent = int(b3.parent_span_id, 16) if b3.parent_span_id else None
        ctx.note_trace(int(trace_id, 16), int(span_id, 16), parent, bool(b3.sampled), "b3")
        self.stats.count("trace_from_b3")
        return tp

    def _write_extras(self, headers: Headers, tp: bytes) -> None:
        trace_id = tp[3:35]
        if self._b3_write and parse_b3(headers.last(B3_HEADER)) is None:
            headers.set(B3_HEADER, format_b3(trace_id.decode(), tp[36:52].decode(),
                                             bool(int(tp[53:55], 16) & 1)))
        for name in self._copies:
            headers.set(name, trace_id)
