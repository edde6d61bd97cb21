"""The tracing member of the filter chain: OpenTelemetry spans of the records Herald forwards,
after the messaging conventions for Kafka (the provider and its configuration are
`proxy/observability/tracing.py`).

Spans:

* ``send {topic}`` (PRODUCER), per produced partition: started when Herald forwards the
  Produce request, ended when the broker answers it (at once for acks=0), with error status
  and ``error.type`` when the partition failed.
* ``receive {topic}`` (CONSUMER), per fetched partition with records, linked to the records'
  creation contexts (their ``traceparent`` headers).

How the spans relate to the trace ids in the records (the part an APM tool joins on): every
record of a produced partition is covered by exactly one ``send`` span.

* A record the ``trace_context`` interceptor gave a *new* context is covered by the span whose
  trace id and span id are exactly those of its ``traceparent`` (trace id and parent-id). With
  ``mode: batch`` that is one span per batch; with ``mode: record`` one span per record, at
  most `MAX_SPANS_PER_PARTITION` per partition (the rest are counted, not exported).
* The other records (they arrived with a context of their own, or no interceptor gave them
  one) are covered by one span with ids of Herald's own, linked to each of their contexts
  (at most `MAX_LINKS` distinct links).

The new contexts were sampled when the interceptor wrote them (its `sampled` option, carried
in the traceparent flags), so spans for them follow that decision; every other span follows
the sampler of ``OTEL_TRACES_SAMPLER``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from interceptors import TraceInfo
from interceptors.tracing import valid_traceparent
from protocol.api_keys import ApiKey
from protocol.contracts.headers import TRACEPARENT
from protocol.contracts.kafka_errors import error_name
from protocol.errors import CodecError
from protocol.message import Message
from protocol.messages import FetchResponse, ProduceRequest, ProduceResponse
from protocol.primitives import Buffer
from protocol.records import RecordBatch, split_batches
from proxy.filters.chain import NATIVE_NOTHING, Exchange, Filter, SessionContext
from proxy.observability.logs import get_logger
from proxy.observability.tracing import Tracing, remote_link
from proxy.upstream.topic_ids import TopicIds, topic_key

log = get_logger("tracing")

MAX_LINKS = 32
"""Links per span to the records' contexts: a batch of thousands must not make a huge span."""

MAX_SPANS_PER_PARTITION = 100
"""``trace_context`` in ``mode: record`` makes one context per record; spans beyond this many
per partition are not exported (counted in ``herald_tracing_spans_skipped_total``)."""


# ---- the filter-chain member ------------------------------------------------------------------


def _contexts(batches: list[RecordBatch | bytes]) -> Iterator[tuple[int, int, int] | None]:
    """Per record, (trace id, span id, flags) of its first ``traceparent`` header (the one
    OpenTelemetry's own Kafka instrumentations read), or None when it has no valid one."""
    for b in batches:
        if isinstance(b, bytes | bytearray | memoryview) or b.is_control:
            continue
        for headers in b.iter_headers():
            tp = next((v for k, v in headers if k == TRACEPARENT), None)
            if tp is not None and valid_traceparent(tp):
                yield int(tp[3:35], 16), int(tp[36:52], 16), int(tp[53:55], 16)
            else:
                yield None


_SendKey = tuple[str | bytes | None, int]
"""A partition as the Produce request and its response both name it: (`topic_key`, index)."""


class _Pending:
    """A send span waiting for the broker's answer; `index` is its record's position in the
    partition when it covers exactly one record (its offset is base offset + index)."""

    __slots__ = ("span", "index")

    def __init__(self, span: Span, index: int | None) -> None:
        self.span = span
        self.index = index


class TracingFilter(Filter):
    """Starts and ends the spans; placed after the interceptors so it sees what they wrote."""

    name = "tracing"
    # The engine takes over nothing this member reads: spans are made in Python.
    native = NATIVE_NOTHING

    def __init__(
        self,
        tracing: Tracing,
        topics: TopicIds,
        on_skipped: Callable[[int], None] | None = None,
        max_links: int = MAX_LINKS,
        max_spans: int = MAX_SPANS_PER_PARTITION,
    ) -> None:
        self.tracing = tracing
        self.topics = topics
        self.on_skipped = on_skipped  # called with the number of contexts left without a span
        self.max_links = max_links
        self.max_spans = max_spans
        self._failed_once = False

    def wants_request(self, api_key: int, version: int) -> bool:
        return api_key == ApiKey.PRODUCE

    def wants_response(self, api_key: int, version: int) -> bool:
        return api_key == ApiKey.FETCH

    # Tracing must never break traffic: a failure is logged once and the message goes on.
    def _failed(self, exc: Exception) -> None:
        if not self._failed_once:
            self._failed_once = True
            log.warning("tracing_failed", error=repr(exc), note="later failures are not logged")

    def _common(self, ctx: SessionContext, operation: str, topic: str | None,
                partition: int) -> dict[str, str | int]:
        attrs: dict[str, str | int] = {
            "messaging.system": "kafka",
            "messaging.operation.name": operation,
            "messaging.operation.type": operation,
            "messaging.destination.partition.id": str(partition),
        }
        if topic is not None:
            attrs["messaging.destination.name"] = topic
        if ctx.client_id:
            attrs["messaging.client.id"] = ctx.client_id
        host, _, port = ctx.upstream_address.rpartition(":")
        if host and port.isdigit():
            attrs["server.address"] = host.strip("[]")
            attrs["server.port"] = int(port)
        return attrs

    # ---- produce ----

    async def on_request(
        self, ctx: SessionContext, exchange: Exchange, api_key: int, version: int, msg: Message
    ) -> bool:
        try:
            assert isinstance(msg, ProduceRequest), "wants_request asks for no other"
            self._start_sends(ctx, exchange, version, msg)
        except Exception as exc:  # see _failed
            self._failed(exc)
        return False

    def _start_sends(self, ctx: SessionContext, exchange: Exchange, version: int,
                     msg: ProduceRequest) -> None:
        written = exchange.traces or {}
        pending: dict[_SendKey, list[_Pending]] = {}
        for t in msg.topic_data:
            topic = self.topics.topic(t.name, t.topic_id, version)
            key = topic_key(t.name, t.topic_id, version)
            for p in t.partition_data:
                if not p.records:
                    continue
                traces = written.get((topic, p.index), ()) if topic is not None else ()
                spans = self._partition_sends(ctx, topic, p.index, p.records, traces)
                if spans:
                    pending[(key, p.index)] = spans
        if not pending:
            return
        if msg.acks == 0:  # no response will come
            for spans in pending.values():
                for s in spans:
                    s.span.end()
        else:
            exchange.notes[self] = pending

    def _partition_sends(
        self,
        ctx: SessionContext,
        topic: str | None,
        partition: int,
        records: Buffer,
        traces: Sequence[TraceInfo],
    ) -> list[_Pending]:
        new = {(t.trace_id, t.span_id): t for t in traces if t.source == "new"}
        own: dict[tuple[int, int], list[int]] = {}  # ids -> [records, first index]
        others = 0
        links: dict[tuple[int, int], int] = {}
        batches = split_batches(records)
        for index, found in enumerate(_contexts(batches)):
            if found is not None:
                ids = found[:2]
                if ids in new:
                    entry = own.get(ids)
                    if entry is None:
                        own[ids] = [1, index]
                    else:
                        entry[0] += 1
                    continue
                if len(links) < self.max_links and ids not in links:
                    links[ids] = found[2]
            others += 1
        name = f"send {topic}" if topic is not None else "send"
        out: list[_Pending] = []
        skipped = 0
        for ids, (count, first) in own.items():
            if not new[ids].sampled:
                continue
            if len(out) >= self.max_spans:
                skipped += 1
                continue
            attrs = self._common(ctx, "send", topic, partition)
            if count > 1:
                attrs["messaging.batch.message_count"] = count
            span = self.tracing.start(name, SpanKind.PRODUCER, attrs, ids=ids)
            out.append(_Pending(span, first if count == 1 else None))
        if skipped and self.on_skipped is not None:
            self.on_skipped(skipped)
        if others:
            attrs = self._common(ctx, "send", topic, partition)
            if others > 1:
                attrs["messaging.batch.message_count"] = others
            span = self.tracing.start(name, SpanKind.PRODUCER, attrs,
                                      [remote_link(tid, sid, f) for (tid, sid), f in links.items()])
            out.append(_Pending(span, None))
        return out

    async def on_response(
        self, ctx: SessionContext, exchange: Exchange, api_key: int, version: int, msg: Message
    ) -> bool:
        try:
            if isinstance(msg, FetchResponse):
                self._receive(ctx, version, msg)
            else:  # read for the note its request left
                assert isinstance(msg, ProduceResponse), "wants_response asks for no other"
                self._end_sends(exchange.notes.get(self), version, msg)
        except Exception as exc:  # see _failed
            self._failed(exc)
        return False

    def _end_sends(self, pending: dict[_SendKey, list[_Pending]] | None, version: int,
                   msg: ProduceResponse) -> None:
        if not pending:
            return
        for t in msg.responses:
            key = topic_key(t.name, t.topic_id, version)
            for p in t.partition_responses:
                spans = pending.pop((key, p.index), None)
                if spans is None:
                    continue
                for s in spans:
                    if p.error_code:
                        _fail(s.span, error_name(p.error_code))
                    elif s.index is not None and p.base_offset >= 0:
                        s.span.set_attribute("messaging.kafka.offset", p.base_offset + s.index)
                    s.span.end()
        for spans in pending.values():  # partitions the broker did not answer for
            for s in spans:
                _fail(s.span, "missing_in_response")
                s.span.end()

    def on_abandoned(self, ctx: SessionContext, exchange: Exchange) -> None:
        pending = exchange.notes.get(self)
        for spans in (pending or {}).values():
            for s in spans:
                _fail(s.span, "connection_closed")
                s.span.end()

    # ---- fetch ----

    def _receive(self, ctx: SessionContext, version: int, msg: FetchResponse) -> None:
        for t in msg.responses:
            topic = self.topics.topic(t.topic, t.topic_id, version)
            name = f"receive {topic}" if topic is not None else "receive"
            for p in t.partitions:
                if not p.records:
                    continue
                batches = split_batches(p.records)
                count = sum(b.record_count for b in batches
                            if not isinstance(b, bytes | bytearray | memoryview)
                            and not b.is_control)
                if not count:
                    continue
                links: dict[tuple[int, int], int] = {}
                try:
                    for found in _contexts(batches):
                        if found is not None and found[:2] not in links:
                            links[found[:2]] = found[2]
                            if len(links) >= self.max_links:
                                break
                except CodecError:
                    pass  # the client will see the same bad batch; the span has no links
                attrs = self._common(ctx, "receive", topic, p.partition_index)
                if count > 1:
                    attrs["messaging.batch.message_count"] = count
                span = self.tracing.start(
                    name, SpanKind.CONSUMER, attrs,
                    [remote_link(tid, sid, f) for (tid, sid), f in links.items()])
                span.end()


def _fail(span: Span, error_type: str) -> None:
    span.set_attribute("error.type", error_type)
    span.set_status(Status(StatusCode.ERROR, error_type))
