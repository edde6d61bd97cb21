"""An OTLP/HTTP receiver on loopback that decodes exported spans as a collector would."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)


@dataclass
class Exported:
    name: str
    kind: int
    trace_id: str
    span_id: str
    attributes: dict[str, Any]
    links: list[tuple[str, str]]
    status: int
    service: str


@dataclass
class Receiver:
    """Collects the spans of every OTLP/HTTP export request it receives."""

    spans: list[Exported] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, request: ExportTraceServiceRequest) -> None:
        with self.lock:
            for rs in request.resource_spans:
                res = {a.key: a.value.string_value for a in rs.resource.attributes}
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        self.spans.append(Exported(
                            s.name, s.kind, s.trace_id.hex(), s.span_id.hex(),
                            {a.key: _value(a.value) for a in s.attributes},
                            [(link.trace_id.hex(), link.span_id.hex()) for link in s.links],
                            s.status.code, res.get("service.name", ""),
                        ))

    def wait(self, check: Callable[[list[Exported]], bool], timeout: float = 20) -> list[Exported]:
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                spans = list(self.spans)
            if check(spans) or time.monotonic() > deadline:
                return spans
            time.sleep(0.1)


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None
