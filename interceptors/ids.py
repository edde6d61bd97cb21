"""Identifiers stamped on records: W3C trace and span ids, message ids.

They come from `random.getrandbits` (Mersenne Twister, seeded from the OS at start and reseeded
in forked children): uniqueness, not secrecy, is what these ids need, and it is several times
cheaper than `os.urandom` per record.
"""

from __future__ import annotations

import uuid
from random import getrandbits

_SPAN_MASK = (1 << 64) - 1


def new_trace_ids() -> tuple[int, int]:
    """A random 128-bit trace id and 64-bit span id, neither zero (all-zero ids are invalid
    in W3C Trace Context). One call to the generator for both."""
    while True:
        n = getrandbits(192)
        trace_id = n >> 64
        span_id = n & _SPAN_MASK
        if trace_id and span_id:
            return trace_id, span_id


def uuid7_prefix(ms: int) -> bytes:
    """The first 15 characters of every UUIDv7 of millisecond `ms` (time and version).

    Computed once per batch; `uuid7` adds the random part per record.
    """
    ms &= (1 << 48) - 1
    h = b"%012x" % ms
    return h[:8] + b"-" + h[8:] + b"-7"


def uuid7(prefix: bytes) -> bytes:
    """A UUIDv7 (RFC 9562) in canonical text form, as ASCII bytes, from `uuid7_prefix`.

    Version 7 rather than 4: the leading 48 bits are the Unix time in ms, so ids sort by
    creation time, which keeps database indexes and log searches cheap; the remaining 74 bits
    are random: 12 bits of rand_a, then the variant (binary 10) and 62 bits of rand_b. Bytes,
    and one formatting operation, because it runs per record and ends up a header value.
    """
    r = getrandbits(74)
    return b"%b%03x-%04x-%012x" % (
        prefix, r >> 62, 0x8000 | (r >> 48 & 0x3FFF), r & 0xFFFFFFFFFFFF
    )


def uuid4() -> str:
    return str(uuid.UUID(int=getrandbits(128), version=4))
