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


def uuid7_prefix(ms: int) -> str:
    """The first 15 characters of every UUIDv7 of millisecond `ms` (time and version).

    Computed once per batch; `uuid7` adds the random part per record.
    """
    ms &= (1 << 48) - 1
    h = f"{ms:012x}"
    return f"{h[:8]}-{h[8:]}-7"


def uuid7(prefix: str) -> str:
    """A UUIDv7 (RFC 9562) in canonical text form, from `uuid7_prefix`.

    Version 7 rather than 4: the leading 48 bits are the Unix time in ms, so ids sort by
    creation time, which keeps database indexes and log searches cheap; the remaining 74 bits
    are random.
    """
    r = getrandbits(74)
    rand_a = r >> 62
    rand_b = r & ((1 << 62) - 1)
    var = 0x8000 | (rand_b >> 48)
    return f"{prefix}{rand_a:03x}-{var:04x}-{rand_b & 0xFFFFFFFFFFFF:012x}"


def uuid4() -> str:
    return str(uuid.UUID(int=getrandbits(128), version=4))
