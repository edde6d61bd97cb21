"""OpenTelemetry traces of the records Herald forwards, after the messaging conventions for Kafka.

Configured only by the standard ``OTEL_*`` environment variables, like any OpenTelemetry SDK
(see docs/observability.md): on when ``OTEL_TRACES_EXPORTER`` names ``otlp`` or ``console``,
or when an OTLP endpoint variable is set; off by default, and off with
``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none``. When off, the tracing member is
not in the filter chain at all: no span objects, no header scans, no decoded Fetch responses.

The spans themselves, and how they relate to the trace ids in the records, are the
tracing member's (`proxy/filters/tracing.py`); this module only sets up the provider they
come from.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from opentelemetry.context import Context
from opentelemetry.sdk.resources import OTELResourceDetector, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, TraceFlags, TraceState
from opentelemetry.util.types import Attributes, AttributeValue

from proxy.observability.logs import get_logger
from proxy.observability.metrics import HERALD_VERSION

log = get_logger("tracing")


# ---- configuration from the environment ----------------------------------------------------


def exporters_from_env(env: Mapping[str, str]) -> list[str]:
    """The exporters the ``OTEL_*`` variables ask for (``otlp``, ``console``); [] means off."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    names = [n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "").split(",")]
    names = [n for n in names if n]
    if not names:
        endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
            "OTEL_EXPORTER_OTLP_ENDPOINT")
        return ["otlp"] if endpoint else []
    if "none" in names:
        return []
    known = [n for n in names if n in ("otlp", "console")]
    for n in names:
        if n not in known:
            log.warning("tracing_exporter_unsupported", exporter=n, supported="otlp,console")
    return list(dict.fromkeys(known))


def tracing_from_env(env: Mapping[str, str] | None = None) -> Tracing | None:
    """A `Tracing` configured from the environment, or None when tracing is off."""
    env = os.environ if env is None else env
    names = exporters_from_env(env)
    if not names:
        return None
    exporters: list[SpanExporter] = []
    if "otlp" in names:
        protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get(
            "OTEL_EXPORTER_OTLP_PROTOCOL")
        if protocol and protocol != "http/protobuf":
            log.warning("tracing_protocol_unsupported", protocol=protocol,
                        using="http/protobuf")
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporters.append(OTLPSpanExporter())  # reads the endpoint, headers, timeout itself
    if "console" in names:
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        exporters.append(ConsoleSpanExporter())
    tracing = Tracing(exporters)
    log.info("tracing_enabled", exporters=",".join(names),
             service=str(tracing.provider.resource.attributes.get("service.name")))
    return tracing


def _resource() -> Resource:
    """The SDK's resource (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, ...) with Herald's
    defaults for what the environment leaves out."""
    detected = OTELResourceDetector().detect().attributes
    defaults: dict[str, str] = {}
    if "service.name" not in detected:
        defaults["service.name"] = "herald"
    if "service.version" not in detected:
        defaults["service.version"] = HERALD_VERSION
    return Resource.create(defaults)


# ---- spans with ids chosen by the trace_context interceptor ---------------------------------


class _Preset:
    """Ids for the next span to start; set and cleared around one `start_span` call."""

    __slots__ = ("ids",)

    def __init__(self) -> None:
        self.ids: tuple[int, int] | None = None


class _PresetIds(IdGenerator):
    """Random ids, except for a span that must carry the ids already written in records."""

    def __init__(self, preset: _Preset) -> None:
        self._preset = preset
        self._random = RandomIdGenerator()

    def generate_trace_id(self) -> int:
        ids = self._preset.ids
        return ids[0] if ids is not None else self._random.generate_trace_id()

    def generate_span_id(self) -> int:
        ids = self._preset.ids
        return ids[1] if ids is not None else self._random.generate_span_id()

    def is_trace_id_random(self) -> bool:
        return True  # the interceptor's trace ids are random too (interceptors.ids)


class _PresetSampler(Sampler):
    """The configured sampler, except for spans with preset ids: their sampling decision was
    made when the interceptor wrote the context into the records (and only sampled ones
    get a span), so they are always recorded."""

    def __init__(self, preset: _Preset, delegate: Sampler) -> None:
        self._preset = preset
        self._delegate = delegate

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        if self._preset.ids is not None:
            return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes)
        return self._delegate.should_sample(
            parent_context, trace_id, name, kind, attributes, links, trace_state)

    def get_description(self) -> str:
        return f"HeraldPreset{{{self._delegate.get_description()}}}"


class Tracing:
    """The tracer provider and the tracer Herald's spans come from."""

    def __init__(self, exporters: Sequence[SpanExporter]) -> None:
        self._preset = _Preset()
        self.provider = TracerProvider(resource=_resource(), id_generator=_PresetIds(self._preset))
        # The provider read OTEL_TRACES_SAMPLER / _ARG; keep that sampler for Herald's own spans.
        self.provider.sampler = _PresetSampler(self._preset, self.provider.sampler)
        for exporter in exporters:
            self.provider.add_span_processor(BatchSpanProcessor(exporter))
        self.tracer = self.provider.get_tracer("herald", HERALD_VERSION)
        self._root = Context()  # Herald's spans never pick up an ambient parent

    def start(
        self,
        name: str,
        kind: SpanKind,
        attributes: Mapping[str, AttributeValue],
        links: Sequence[Link] = (),
        ids: tuple[int, int] | None = None,
    ) -> Span:
        """Start a root span; with `ids`, exactly that (trace id, span id)."""
        self._preset.ids = ids
        try:
            return self.tracer.start_span(
                name, context=self._root, kind=kind, attributes=attributes, links=links)
        finally:
            self._preset.ids = None

    def shutdown(self) -> None:
        """Export what is buffered, then stop (bounded by the exporter's own timeout)."""
        self.provider.shutdown()


def remote_link(trace_id: int, span_id: int, flags: int) -> Link:
    """A link to a context a record carries (its ``traceparent``), for a span of Herald's."""
    return Link(SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(flags)))
