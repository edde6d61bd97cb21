"""A span per routed batch (tracing on): `send {topic}` on the destination cluster, from the
hand-over to the destination's producer to its last acknowledgement, linked to the trace
contexts the records carry (their first valid `traceparent`, as the chains wrote it)."""

from __future__ import annotations

from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode

from interceptors.tracing import valid_traceparent
from protocol.contracts.headers import TRACEPARENT
from proxy.observability.tracing import Tracing, remote_link

MAX_LINKS = 128  # the SDK's default limit per span


def start_span(tracing: Tracing, rule: str, cluster: str, topic: str,
               headers_of_records: list[list[tuple[str, bytes | None]]]) -> Span:
    links: dict[tuple[int, int], Link] = {}
    for headers in headers_of_records:
        tp = next((v for k, v in headers if k == TRACEPARENT), None)
        if tp is None or not valid_traceparent(tp):
            continue
        ids = (int(tp[3:35], 16), int(tp[36:52], 16))
        if ids not in links and len(links) < MAX_LINKS:
            links[ids] = remote_link(*ids, int(tp[53:55], 16))
    return tracing.start(f"send {topic}", SpanKind.PRODUCER, {
        "messaging.system": "kafka",
        "messaging.operation.name": "send",
        "messaging.operation.type": "send",
        "messaging.destination.name": topic,
        "messaging.batch.message_count": len(headers_of_records),
        "herald.route.rule": rule,
        "herald.route.cluster": cluster,
    }, list(links.values()))


def end_span(span: Span, error: str | None) -> None:
    if error is not None:
        span.set_status(Status(StatusCode.ERROR, error))
        span.set_attribute("error.type", "routing_failed")
    span.end()
