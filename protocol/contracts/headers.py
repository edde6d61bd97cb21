"""The record headers Herald writes and reads, by name.

Kafka header keys are case-sensitive; these are matched exactly. Herald's own headers live
under ``RESERVED_PREFIX``, which clients cannot write to (the ``audit`` member strips or
rejects what a client puts there): what is found under it was written by a Herald.
"""

from __future__ import annotations

RESERVED_PREFIX = "herald."
"""Herald's namespace: the default prefix of the audit headers, and the routing origin's."""

# The audit fields (``interceptors/builtin/audit.py``). A field travels as the header
# ``<prefix><field>``, with the prefix the audit member is configured with (by default
# RESERVED_PREFIX): ``herald.client_id``, ``herald.time``, ...
AUDIT_CLIENT_ID = "client_id"
"""The client id of the Produce request (a null value when it had none)."""
AUDIT_PRINCIPAL = "principal"
"""The authenticated principal (``User:ANONYMOUS`` by default when there is none)."""
AUDIT_SOURCE = "source"
"""The client's address, ``host:port``."""
AUDIT_PROXY = "proxy"
"""The instance id of the Herald the record went through."""
AUDIT_CLUSTER = "cluster"
"""The upstream cluster id (a null value until Herald has learnt it)."""
AUDIT_TIME = "time"
"""Herald's receive time, ms since the epoch, as decimal text."""
AUDIT_MSG_ID = "msg_id"
"""A message id, a UUIDv7 (time-ordered): the same across clusters a record is mirrored to."""
AUDIT_ORIGIN = "origin"
"""The cluster the record was first produced into."""

AUDIT_FIELDS = (AUDIT_CLIENT_ID, AUDIT_PRINCIPAL, AUDIT_SOURCE, AUDIT_PROXY, AUDIT_CLUSTER,
                AUDIT_TIME, AUDIT_MSG_ID, AUDIT_ORIGIN)
"""Every audit field, in the order the headers are appended."""
AUDIT_MESSAGE_FIELDS = (AUDIT_MSG_ID, AUDIT_ORIGIN)
"""The fields that describe the message rather than the hop: kept from a trusted source."""


def audit_header(field: str, prefix: str = RESERVED_PREFIX) -> str:
    """The header key of the audit field ``field`` under ``prefix``."""
    return prefix + field


# Trace context (``interceptors/builtin/trace_context.py``, ``interceptors/tracing.py``).
TRACEPARENT = "traceparent"
"""W3C Trace Context: ``version-traceid-parentid-flags``; the first one is read, as
OpenTelemetry does."""
TRACESTATE = "tracestate"
"""W3C Trace Context: vendor state that travels with the traceparent."""
B3 = "b3"
"""Zipkin's B3 single header, read and written on request."""

# Causal links (read by ``pipeline/hops.py`` and ``pipeline/graph.py``).
PARENT = "parent"
"""``<prefix>parent``: a record this one continues, as ``<topic>:<partition>:<offset>`` (topic
names hold no ':', so the value splits from the right); one header per parent."""
PARENT_VALUE_RE = r"^(.+):([0-9]{1,10}):([0-9]{1,19})$"
PARENTS_LOST = "parents_lost"
"""``<prefix>parents_lost``: parents Herald knew this record continues but cannot name, as
``<reason>:<count>``, reason ``expired`` (not refreshed for ``link.ttl_s``), ``evicted`` (the
memory was full) or ``overflow`` (more than ``link.max_parents``); one header per reason with
a count, in that order, beside the ``parent`` headers Herald could write. A record with one is
incomplete: some of its parents are not named."""
PARENTS_LOST_REASONS = ("expired", "evicted", "overflow")
"""The reasons of ``parents_lost``, in the order its headers are written."""
PARENTS_LOST_VALUE_RE = rf"^({'|'.join(PARENTS_LOST_REASONS)}):([0-9]{{1,10}})$"

# Routing (``proxy/routing``).
ROUTE_ORIGIN = RESERVED_PREFIX + "route.origin"
"""Set on every record Herald writes to another topic or cluster: the cluster it was first
produced to and a MAC sealing it (``proxy/routing/origin.py``). Move and mirror rules never
apply again to a record that arrives with a mark Herald verifies (no loops)."""
