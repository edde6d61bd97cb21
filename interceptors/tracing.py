"""Trace context header formats: W3C ``traceparent`` / ``tracestate`` and the B3 single header.

Pure parsing and formatting on header bytes, usable outside the proxy (the analytics pipeline
reads the same headers).

W3C Trace Context (Recommendation, level 1):

* ``traceparent`` is ``version-traceid-parentid-flags``, lowercase hex only. Version ``ff`` is
  invalid; version ``00`` must be exactly 55 characters; all-zero trace or parent ids are
  invalid. A higher version is parsed leniently, as the spec asks: at least 55 characters, the
  version-00 fields in place, and after the flags either the end or a ``-``.
* ``tracestate`` is a comma list of at most 32 ``key=value`` members; empty members and
  whitespace around members are allowed; keys are ``simple-key`` (``[a-z][a-z0-9_*/-]``, up
  to 256) or ``tenant@system`` multi-tenant keys; values are up to 256 printable ASCII
  characters other than ``,`` and ``=``, not ending in a space; a key appears at most once.

B3 single header (openzipkin/b3-propagation): ``{traceid}-{spanid}[-{sampling}[-{parentspanid}]]``
with a 16 or 32 hex trace id, 16 hex span ids, sampling ``1``, ``0`` or ``d`` (debug, implies
sampled); or the sampling decision alone.
"""

from __future__ import annotations

import re
from binascii import hexlify
from dataclasses import dataclass
from typing import TypeGuard

_HEX = b"0123456789abcdef"
_HEX_OR_DASH = _HEX + b"-"
_DASH = 0x2D
_ZERO_TRACE = b"0" * 32
_ZERO_SPAN = b"0" * 16


def _is_hex(b: bytes) -> bool:
    """Lowercase hex only (the spec forbids uppercase); the translate call runs in C."""
    return not b.translate(None, _HEX)


@dataclass(frozen=True, slots=True)
class TraceParent:
    version: int
    trace_id: str
    parent_id: str
    flags: int

    @property
    def sampled(self) -> bool:
        return bool(self.flags & 1)


def valid_traceparent(v: bytes | None) -> TypeGuard[bytes]:
    """Is `v` a traceparent a vendor must honour? The fast check used per record; a type
    guard, so a header value it accepts needs no None check of its own.

    The first 55 characters must be the version-00 fields: lowercase hex with dashes at 2, 35
    and 52. One `translate` (in C) checks that they hold nothing but hex digits and dashes;
    counting the dashes then rules out a dash in place of a digit.
    """
    if v is None or len(v) < 55:
        return False
    if v[2] != _DASH or v[35] != _DASH or v[52] != _DASH:
        return False
    version = v[:2]
    if len(v) == 55:
        fields = v
    elif version == b"00" or v[55] != _DASH:
        return False
    else:
        fields = v[:55]
    if version == b"ff" or fields.translate(None, _HEX_OR_DASH) or fields.count(b"-") != 3:
        return False
    return v[3:35] != _ZERO_TRACE and v[36:52] != _ZERO_SPAN


def parse_traceparent(v: bytes | None) -> TraceParent | None:
    """The fields of a valid traceparent (of any version), else None."""
    if not valid_traceparent(v):
        return None
    assert v is not None
    return TraceParent(int(v[:2], 16), v[3:35].decode(), v[36:52].decode(), int(v[53:55], 16))


def format_traceparent(trace_id: int, span_id: int, sampled: bool) -> bytes:
    """A version-00 traceparent. Flags other than `sampled` are zero, as the spec requires.

    Made per record, so built from `hexlify` of the ids' bytes, which costs a good deal less
    than ``%032x`` formatting of large ints.
    """
    try:
        return b"".join((b"00-", hexlify(trace_id.to_bytes(16, "big")), b"-",
                         hexlify(span_id.to_bytes(8, "big")), b"-01" if sampled else b"-00"))
    except (OverflowError, AttributeError):  # not 128- and 64-bit ids: written as they are
        return b"00-%032x-%016x-%s" % (trace_id, span_id, b"01" if sampled else b"00")


_LCHARS = r"[a-z0-9_*/-]"
_KEY = re.compile(
    rf"[a-z]{_LCHARS}{{0,255}}"  # simple-key
    rf"|[a-z0-9]{_LCHARS}{{0,240}}@[a-z]{_LCHARS}{{0,13}}"  # multi-tenant-key
)
_VALUE = re.compile(r"[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]")
_MAX_MEMBERS = 32


def parse_tracestate(v: bytes | None) -> list[tuple[str, str]] | None:
    """The ``(key, value)`` members of a valid tracestate, in order; None if invalid."""
    if v is None:
        return None
    try:
        text = v.decode("ascii")
    except UnicodeDecodeError:
        return None
    members: list[tuple[str, str]] = []
    seen: set[str] = set()
    for raw in text.split(","):
        member = raw.strip(" \t")
        if not member:
            continue
        key, eq, value = member.partition("=")
        if not eq or not _KEY.fullmatch(key) or not _VALUE.fullmatch(value) or key in seen:
            return None
        seen.add(key)
        members.append((key, value))
        if len(members) > _MAX_MEMBERS:
            return None
    return members


@dataclass(frozen=True, slots=True)
class B3:
    """A B3 single header. `trace_id` is always 32 hex (64-bit ids are left-padded with
    zeros, as W3C interop expects); the ids are None for a sampling-only header."""

    trace_id: str | None
    span_id: str | None
    sampled: bool | None  # None: the sender deferred the decision
    debug: bool
    parent_span_id: str | None

    def to_traceparent(self) -> bytes | None:
        """The same context as a W3C traceparent (the B3 span is the parent), or None."""
        if self.trace_id is None or self.span_id is None:
            return None
        flags = b"01" if self.sampled else b"00"
        return b"00-%s-%s-%s" % (self.trace_id.encode(), self.span_id.encode(), flags)


_SAMPLING = {b"1": (True, False), b"0": (False, False), b"d": (True, True)}


def parse_b3(v: bytes | None) -> B3 | None:
    """A valid B3 single header, else None."""
    if not v:
        return None
    if v in _SAMPLING:
        only_sampled, only_debug = _SAMPLING[v]
        return B3(None, None, only_sampled, only_debug, None)
    parts = v.split(b"-")
    if not 2 <= len(parts) <= 4:
        return None
    trace, span = parts[0], parts[1]
    if len(trace) not in (16, 32) or len(span) != 16:
        return None
    if not (_is_hex(trace) and _is_hex(span)) or not trace.strip(b"0") or span == _ZERO_SPAN:
        return None
    sampled: bool | None = None
    debug = False
    if len(parts) >= 3:
        state = _SAMPLING.get(parts[2])
        if state is None:
            return None
        sampled, debug = state
    parent = None
    if len(parts) == 4:
        p = parts[3]
        if len(p) != 16 or not _is_hex(p) or p == _ZERO_SPAN:
            return None
        parent = p.decode()
    return B3(trace.decode().rjust(32, "0"), span.decode(), sampled, debug, parent)


def format_b3(trace_id: str, span_id: str, sampled: bool) -> bytes:
    return b"%s-%s-%s" % (trace_id.encode(), span_id.encode(), b"1" if sampled else b"0")
