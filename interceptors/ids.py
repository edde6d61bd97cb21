"""Identifiers stamped on records: W3C trace and span ids, message ids.

They come from Mersenne Twister generators (`random.Random`, seeded from the OS at start and
reseeded in forked children): uniqueness, not secrecy, is what these ids need, and it is
several times cheaper than `os.urandom` per record.

Trace ids and message ids have a generator each, and every id takes a whole number of the
generator's 32-bit words. So the ids of a batch made at once (`trace_ids_hex`, `uuid7_many`)
are the very ids that one call per record would have made, in the same order: the chain
engine may take either way and give the same bytes (`seed` makes that testable).
"""

from __future__ import annotations

import os
import uuid
from random import Random, getrandbits

from protocol.stamping import hex_column

_SPAN_MASK = (1 << 64) - 1
_trace_random = Random()
_message_random = Random()


def seed(value: int) -> None:
    """Seed the id generators (tests: repeatable ids)."""
    _trace_random.seed(value)
    _message_random.seed(value + 1)


def _reseed() -> None:
    _trace_random.seed()
    _message_random.seed()


os.register_at_fork(after_in_child=_reseed)  # a forked worker must not repeat the parent's ids


def new_trace_ids() -> tuple[int, int]:
    """A random 128-bit trace id and 64-bit span id, neither zero (all-zero ids are invalid
    in W3C Trace Context). One draw of 192 bits for both."""
    while True:
        n = _trace_random.getrandbits(192)
        trace_id = n >> 64
        span_id = n & _SPAN_MASK
        if trace_id and span_id:
            return trace_id, span_id


def trace_draws(n: int) -> bytes:
    """The draws of `n` calls of `new_trace_ids`, 24 bytes each (16 of trace id, then 8 of
    span id), the first call's *last*: one draw for all (see `protocol.stamping.hex_column`).

    A zero id needs 8 zero bytes in a row: on any such run (about 1 in 10^17 batches) the
    whole batch is drawn again, where `new_trace_ids` would draw again for that record only.
    """
    while True:
        raw = _trace_random.getrandbits(192 * n).to_bytes(24 * n, "big")
        if b"\0\0\0\0\0\0\0\0" not in raw:
            return raw


def uuid7_prefix(ms: int) -> bytes:
    """The first 15 characters of every UUIDv7 of millisecond `ms` (time and version).

    Computed once per batch; `uuid7` adds the random part per record.
    """
    ms &= (1 << 48) - 1
    h = b"%012x" % ms
    return h[:8] + b"-" + h[8:] + b"-7"


# The random part of a UUIDv7 as cut from 24 hex digits (`protocol.stamping.hex_column`).
_UUID7_RANDOM = ((b"", 3), (b"-", -1), (b"", 3), (b"-", 12))


def uuid7(prefix: bytes) -> bytes:
    """A UUIDv7 (RFC 9562) in canonical text form, as ASCII bytes, from `uuid7_prefix`.

    Version 7 rather than 4: the leading 48 bits are the Unix time in ms, so ids sort by
    creation time, which keeps database indexes and log searches cheap; the remaining 74 bits
    are random: 12 bits of rand_a, then the variant (binary 10) and 62 bits of rand_b (two of
    them in the variant digit). Cut from the hex form of one 96-bit draw by the same
    `hex_column` that `uuid7_many` uses for a batch.
    """
    raw = _message_random.getrandbits(96).to_bytes(12, "big")
    return hex_column(prefix, raw, 1, 12, _UUID7_RANDOM)[0]


def uuid7_many(prefix: bytes, n: int) -> list[bytes]:
    """The ids of `n` calls of `uuid7`, in order, from one draw.

    `prefix` is `uuid7_prefix`'s, possibly behind more bytes (the wire form of a header up to
    its value, so that the results are ready to append to records).
    """
    raw = _message_random.getrandbits(96 * n).to_bytes(12 * n, "big")
    return hex_column(prefix, raw, n, 12, _UUID7_RANDOM)


def uuid4() -> str:
    return str(uuid.UUID(int=getrandbits(128), version=4))
