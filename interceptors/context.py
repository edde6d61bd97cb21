"""What an interceptor may know while it looks at a record: the connection, the proxy, the record.

`ConnectionInfo` and `ProxyInfo` are filled in by the proxy; `RecordContext` is built by the
chain engine once per partition and moved from record to record, so members must not keep a
reference to it beyond the call.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from interceptors.services import GroupDirectory, KafkaClients


@dataclass(frozen=True, slots=True)
class ConnectionInfo:
    """The client side of a request.

    `client_id` comes from the request header (clients choose it freely, so it proves
    nothing); `principal` is the authenticated Kafka principal (``User:alice``) when the proxy
    knows it, else None; `address` is the client's ``host:port`` (``[v6]:port`` for IPv6).
    """

    client_id: str | None = None
    address: str = ""
    principal: str | None = None


def _instance_id() -> str:
    return f"herald-{os.urandom(4).hex()}"


@dataclass(slots=True)
class ProxyInfo:
    """Facts about this proxy that interceptors stamp on records, and the services it gives
    the members that use them (`interceptors.services`).

    The proxy sets `cluster_id` when it learns it from a Metadata response; members read it
    per batch, so a late value is picked up without rebuilding the chains. `clock` returns
    seconds since the epoch and exists so tests can pin time. `groups` is the consumer groups
    the proxy learned (`CONSUMER_GROUPS`) and `kafka` how members reach a cluster of their
    own (`KAFKA_CLIENTS`); each is None where no proxy supplies it.

    `kept` holds what members keep across reloads of the chains (the proxy builds the new
    chains with the same `ProxyInfo`), each under a key of its own that names its settings
    too, so a reload that changes them starts afresh: `trace_context` keeps its memory of
    fetched traces there, so links in flight survive a SIGHUP.
    """

    instance_id: str = field(default_factory=_instance_id)
    cluster_id: str | None = None
    clock: Callable[[], float] = time.time
    groups: GroupDirectory | None = None
    kafka: KafkaClients | None = None
    kept: dict[Any, Any] = field(default_factory=dict)

    def time_ms(self) -> int:
        return int(self.clock() * 1000)


class TraceInfo(NamedTuple):
    """A trace context an interceptor wrote on a record (for the observability layer).

    Ids are ints, as OpenTelemetry's SpanContext takes them. `span_id` is the id written as
    the traceparent's parent-id, the span consumers will continue from.

    * ``source == "new"``: Herald started this trace; no span with `span_id` exists yet, so
      the observability layer may emit one (a producer-side span) with exactly that id.
    * ``source == "b3"``: the context was translated from the producer's B3 header; the span
      belongs to the producer's tracer (`parent_span_id` is its parent) and must not be
      emitted again.
    """

    trace_id: int
    span_id: int
    parent_span_id: int | None
    sampled: bool
    source: str
    topic: str
    partition: int


# TraceInfo's own constructor is a Python function; tuple.__new__ builds the same object in C,
# which matters when a trace is noted for every record.
_new_trace = tuple.__new__


class RecordView(Protocol):
    """What a member may read of the record in `RecordContext.record`: a
    `protocol.records.Record` in the proxy, an `interceptors.testing.FakeRecord` in unit
    tests. Members change records through `Headers` and `RecordContext.set_key` /
    `set_value`, never through this."""

    @property
    def timestamp_delta(self) -> int: ...
    @property
    def offset_delta(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...


class BatchView(Protocol):
    """What a member may read of the batch in `RecordContext.batch`: a
    `protocol.records.RecordBatch` in the proxy, an `interceptors.testing.FakeBatch` in unit
    tests."""

    @property
    def base_offset(self) -> int: ...
    @property
    def base_timestamp(self) -> int: ...
    @property
    def last_offset_delta(self) -> int: ...
    @property
    def record_count(self) -> int: ...
    @property
    def records(self) -> Sequence[RecordView]: ...


class RecordContext:
    """Where the current record comes from, and access to the record itself.

    `record` and `timestamp` are there unless every applicable member declared
    ``needs = "read"`` (the engine then scans only headers). `key` and `value` need a member
    that declared ``needs = "key_value"``; set a new key or value with `set_key` /
    `set_value` (the engine applies them when the batch is committed).

    `notes_traces` is False when nobody will read the traces members note (tracing is off):
    `note_trace` then keeps nothing, and members may skip the work of noting altogether.

    `memo` is where members keep what lasts a batch, under their own key
    (``ctx.memo[self] = ...`` in `on_batch`): it belongs to this run alone, whereas the member
    object is shared by runs that may overlap in several threads.
    """

    __slots__ = (
        "path",
        "topic",
        "partition",
        "conn",
        "batch",
        "record",
        "index",
        "traces",
        "staged",
        "notes_traces",
        "memo",
        "_key_value",
    )

    def __init__(
        self,
        path: str,
        topic: str,
        partition: int,
        conn: ConnectionInfo,
        *,
        key_value: bool = False,
        notes_traces: bool = True,
    ) -> None:
        self.path = path
        self.topic = topic
        self.partition = partition
        self.conn = conn
        self.batch: BatchView | None = None
        self.record: RecordView | None = None
        self.index = -1
        self.traces: list[TraceInfo] = []
        self.staged: dict[str, bytes | None] | None = None
        self.notes_traces = notes_traces
        self.memo: dict[Any, Any] = {}
        self._key_value = key_value

    @property
    def client_id(self) -> str | None:
        return self.conn.client_id

    @property
    def principal(self) -> str | None:
        return self.conn.principal

    @property
    def address(self) -> str:
        return self.conn.address

    def _require_record(self) -> RecordView:
        record = self.record
        if not self._key_value or record is None:
            raise RuntimeError("key and value need an interceptor with needs = 'key_value'")
        return record

    @property
    def timestamp(self) -> int:
        """The record's timestamp in ms: the batch base timestamp plus the record's delta."""
        record, batch = self.record, self.batch
        if record is None or batch is None:  # the engine sets the batch before any record
            raise RuntimeError("the timestamp needs an interceptor with needs = 'headers' or "
                               "'key_value'")
        return batch.base_timestamp + record.timestamp_delta

    @property
    def key(self) -> bytes | None:
        record = self._require_record()
        staged = self.staged
        if staged is not None and "key" in staged:
            return staged["key"]
        return record.key

    @property
    def value(self) -> bytes | None:
        record = self._require_record()
        staged = self.staged
        if staged is not None and "value" in staged:
            return staged["value"]
        return record.value

    def set_key(self, key: bytes | None) -> None:
        self._stage("key", key)

    def set_value(self, value: bytes | None) -> None:
        self._stage("value", value)

    def _stage(self, name: str, data: bytes | None) -> None:
        self._require_record()
        if data is not None and type(data) is not bytes:
            raise TypeError(f"record {name} must be bytes or None, not {type(data).__name__}")
        if self.staged is None:
            self.staged = {}
        self.staged[name] = data

    def note_trace(
        self,
        trace_id: int,
        span_id: int,
        parent_span_id: int | None,
        sampled: bool,
        source: str,
    ) -> None:
        """Tell the observability layer about a trace context written on this record."""
        if self.notes_traces:
            self.traces.append(_new_trace(
                TraceInfo,
                (trace_id, span_id, parent_span_id, sampled, source, self.topic, self.partition),
            ))
