"""Reading single fields of a request without decoding all of it.

The proxy must know, before forwarding a Produce request, whether the client expects a response
(acks=0 gets none). Decoding the whole request would materialise every partition's records, so
this reads just the two leading fields.
"""

from __future__ import annotations

from struct import Struct
from struct import error as StructError

from protocol.api_keys import ApiKey
from protocol.contracts.features import PRODUCE_FLEXIBLE_VERSION, PRODUCE_TRANSACTIONAL_ID_VERSION
from protocol.errors import CodecError
from protocol.primitives import Buffer, read_unsigned_varint

_INT16 = Struct(">h")
_PRODUCE_KEY = int(ApiKey.PRODUCE)


def produce_acks(body: Buffer, version: int, offset: int = 0) -> int:
    """The ``acks`` of a Produce request body (0, 1 or -1), skipping TransactionalId.

    ``body`` starts right after the request header (or pass the whole frame and the body
    offset). Raises CodecError if the body is too short.
    """
    pos = offset
    try:
        if version >= PRODUCE_TRANSACTIONAL_ID_VERSION:
            if version >= PRODUCE_FLEXIBLE_VERSION:
                n, pos = read_unsigned_varint(body, pos)
                pos += max(n - 1, 0)
            else:
                n = _INT16.unpack_from(body, pos)[0]
                pos += 2 + max(n, 0)
        acks: int = _INT16.unpack_from(body, pos)[0]
        return acks
    except StructError:
        raise CodecError(f"Produce v{version} body too short to hold acks") from None


def answered(api_key: int, version: int, frame: Buffer, body_offset: int) -> bool:
    """Whether the broker answers this request: every request but a Produce with acks=0.

    ``body_offset`` is where the body starts in ``frame`` (negative: unknown, which for a
    Produce request is an error).
    """
    if api_key != _PRODUCE_KEY:
        return True
    if body_offset < 0:
        raise CodecError("Produce request header unreadable: where its body starts is unknown")
    return produce_acks(frame, version, body_offset) != 0


def skip_tagged_fields(buf: Buffer, pos: int) -> int:
    """The offset after a tagged-field section (a count, then tag, size and data each)."""
    count, pos = read_unsigned_varint(buf, pos)
    for _ in range(count):
        _, pos = read_unsigned_varint(buf, pos)
        size, pos = read_unsigned_varint(buf, pos)
        pos += size
    if pos > len(buf):
        raise CodecError("tagged fields run past the end of the frame")
    return pos
