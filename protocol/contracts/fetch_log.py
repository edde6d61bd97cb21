"""The observations the ``fetch_log`` interceptor publishes, one per record a consumer fetched
through Herald, and the analytics pipeline reads back (``pipeline.jobs.read_fetches``) to
measure produce-to-consume latency.

Each is one compact JSON object, the record's value, keyed by the trace id (no key when the
fetched record carried no valid trace context)::

    {"tr": trace id or null, "o": offset, "h": record time or null, "t": topic,
     "p": partition, "c": consumer client id, "s": consumer host or null,
     "g": group or null, "f": fetch time, ms since the epoch}

The keys are one or two letters because there is one observation per fetched record. ``h``
and ``s`` came later: observations written before them parse with them null.
"""

from __future__ import annotations

from json import dumps

DEFAULT_TOPIC = "herald.fetches"
"""Where the observations go unless configured otherwise."""

TRACE_ID = "tr"
"""The trace id of the record's first valid ``traceparent``: 32 lowercase hex digits, or null."""
TOPIC = "t"
PARTITION = "p"
OFFSET = "o"
CONSUMER = "c"
"""The client id of the consumer that fetched the record."""
CONSUMER_HOST = "s"
"""The consumer's source host: the host of its address as Herald saw it (``host`` of
``host:port``, ``[v6]`` of ``[v6]:port``), what the ``herald.source`` audit header of a record
the same service produces starts with. The pipeline matches a service's consumer and producer
by it (``pipeline.inference_scope``); null in observations written before it existed."""
GROUP = "g"
"""The consumer's group, or null for a consumer that reads without one (``assign()``)."""
FETCHED_MS = "f"
"""When Herald handed the record out, ms since the epoch."""
RECORD_MS = "h"
"""The fetched record's Herald receive time: its ``herald.time`` header (the fetch_log member's
``time_header``) as an integer, ms since the epoch; null when the record has no such header or
its value is not a decimal integer. With it, the stream measures transit and lag per partition
without a join to the records; without it, from the record's time its clock still holds
(``pipeline.fetch_clock``)."""

FIELDS = ((TRACE_ID, "string"), (TOPIC, "string"), (PARTITION, "int"), (OFFSET, "long"),
          (CONSUMER, "string"), (GROUP, "string"), (FETCHED_MS, "long"),
          (RECORD_MS, "long"), (CONSUMER_HOST, "string"))
"""Every key with its Spark SQL type."""

SPARK_SCHEMA = ", ".join(f"{key} {kind}" for key, kind in FIELDS)
"""The schema of an observation, for Spark's ``from_json``."""


def batch_tail(topic: str, partition: int, consumer: str | None, group: str | None,
               fetched_ms: int, host: str | None = None) -> str:
    """The end of the JSON text of every observation of one fetched batch: the fields its
    records share, written once per batch (`host`: the consumer's, ``s``)."""
    return (f',"{TOPIC}":{dumps(topic)},"{PARTITION}":{partition},"{CONSUMER}":{dumps(consumer)}'
            f',"{CONSUMER_HOST}":{dumps(host)},"{GROUP}":{dumps(group)}'
            f',"{FETCHED_MS}":{fetched_ms}}}')


_TRACED = f'{{"{TRACE_ID}":"'
_TRACED_OFFSET = f'","{OFFSET}":'
_UNTRACED = f'{{"{TRACE_ID}":null,"{OFFSET}":'
_RECORD_MS = f',"{RECORD_MS}":'
_MAX_DIGITS = 18  # every value of this many decimal digits fits a signed 64-bit long


def record_ms_text(value: bytes | None) -> str:
    """The JSON text of ``h`` from the record's time header value: the value itself when it
    is a decimal integer that fits a long (Herald writes ``str(ms)``), else ``null``. Nothing
    is converted: the digits are already the JSON number."""
    if value and len(value) <= _MAX_DIGITS and value.isdigit():
        return value.decode()
    return "null"


def observation(trace_id: str | None, offset: int, tail: str, record_time: bytes | None = None
                ) -> str:
    """The JSON text of one observation; ``tail`` is its batch's ``batch_tail`` and
    ``record_time`` the raw value of the record's time header (``h``). A trace id is 32 hex
    digits (``parse_traceparent`` checked it), so it needs no escaping."""
    h = record_ms_text(record_time)
    if trace_id:
        return f"{_TRACED}{trace_id}{_TRACED_OFFSET}{offset}{_RECORD_MS}{h}{tail}"
    return f"{_UNTRACED}{offset}{_RECORD_MS}{h}{tail}"
