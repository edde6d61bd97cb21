"""Kafka wire primitives: fixed-width integers, varints, strings, tagged fields.

Readers take ``(buf, pos)`` and return ``(value, new_pos)``; writers append to a ``bytearray``.
``buf`` may be ``bytes``, ``bytearray`` or a ``memoryview`` of unsigned bytes. Every reader
raises :class:`~protocol.errors.CodecError` (and nothing else) on bad input, and checks a
claimed length against the bytes that remain *before* allocating anything,
so memory use stays proportional to the input.

Representation choices, made for speed on the proxy's hot path:

* ``uuid`` values are 16-byte ``bytes`` (not :class:`uuid.UUID`): they come straight out of a
  ``struct`` unpack, hash and compare cheaply, and serve well as dictionary keys for the
  topic id <-> name map. ``ZERO_UUID`` is the all-zero id Kafka uses for "no id".
* Strings are decoded with ``surrogateescape``, so bytes that are not valid UTF-8 survive a
  decode/encode round trip unchanged instead of failing a connection the broker would accept.
* Unknown tagged fields are kept as ``dict[int, bytes]`` (tag -> raw payload) and written back
  unchanged, interleaved in ascending tag order with the known ones (KIP-482).

The generated message codecs in ``protocol.messages`` inline the fast paths of these readers
and only call in here for the rare slow paths (multi-byte varints, unknown tagged fields).
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from struct import Struct
from struct import error as StructError
from typing import Any, TypeVar

from protocol.errors import CodecError

Buffer = bytes | bytearray | memoryview
T = TypeVar("T")

ZERO_UUID = bytes(16)

#: Longest string Kafka accepts in a message field (the Java reader rejects longer ones).
MAX_STRING_LENGTH = 0x7FFF

INT8 = Struct(">b")
INT16 = Struct(">h")
INT32 = Struct(">i")
BOOL = Struct(">?")

_SMALL_ARRAY = 64
_array_structs: dict[str, tuple[Struct, ...]] = {
    code: tuple(Struct(">" + code * n) for n in range(_SMALL_ARRAY))
    for code in ("b", "h", "i", "q", "H", "I", "d", "?")
}
_array_structs["16s"] = tuple(Struct(">" + "16s" * n) for n in range(_SMALL_ARRAY))


def array_struct(code: str, count: int) -> Struct:
    """A struct for ``count`` big-endian elements of format ``code`` (cached when small)."""
    if count < _SMALL_ARRAY:
        return _array_structs[code][count]
    return Struct(">" + code * count)


# --------------------------------------------------------------------------- fixed width


def _fixed_reader(s: Struct) -> Callable[[Buffer, int], tuple[Any, int]]:
    unpack_from = s.unpack_from
    size = s.size

    def read(buf: Buffer, pos: int) -> tuple[Any, int]:
        try:
            return unpack_from(buf, pos)[0], pos + size
        except StructError:
            raise CodecError(f"truncated: need {size} bytes at offset {pos}") from None

    return read


read_int8: Callable[[Buffer, int], tuple[int, int]] = _fixed_reader(INT8)
read_int16: Callable[[Buffer, int], tuple[int, int]] = _fixed_reader(INT16)
read_int32: Callable[[Buffer, int], tuple[int, int]] = _fixed_reader(INT32)
read_bool: Callable[[Buffer, int], tuple[bool, int]] = _fixed_reader(BOOL)


# --------------------------------------------------------------------------- varints


def read_unsigned_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    """An unsigned varint of at most 5 bytes holding at most 32 bits (Kafka's unsigned varint).

    Values past 32 bits are refused rather than truncated, so that whatever decodes can be
    written back.
    """
    try:
        b = buf[pos]
        if b < 0x80:
            return b, pos + 1
        value = b & 0x7F
        shift = 7
        pos += 1
        while True:
            b = buf[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            if b < 0x80:
                if value > 0xFFFFFFFF:
                    raise CodecError(f"unsigned varint over 32 bits at offset {pos}")
                return value, pos
            shift += 7
            if shift > 28:
                raise CodecError(f"unsigned varint longer than 5 bytes at offset {pos}")
    except IndexError:
        raise CodecError(f"truncated varint at offset {pos}") from None


def unsigned_varint_bytes(value: int) -> bytes:
    """The unsigned varint encoding of ``0 <= value < 2**32``."""
    if value < 0x80:
        if value < 0:
            raise CodecError(f"unsigned varint cannot hold {value}")
        return bytes((value,))
    if value > 0xFFFFFFFF:
        raise CodecError(f"unsigned varint cannot hold {value}")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def write_unsigned_varint(out: bytearray, value: int) -> None:
    if 0 <= value < 0x80:
        out.append(value)
    else:
        out += unsigned_varint_bytes(value)


# --------------------------------------------------------------------------- strings


def _take(buf: Buffer, pos: int, n: int) -> int:
    end = pos + n
    if end > len(buf):
        raise CodecError(f"length {n} at offset {pos} runs past the end ({len(buf)} bytes)")
    return end


def _decode_str(buf: Buffer, pos: int, end: int) -> str:
    return str(buf[pos:end], "utf-8", "surrogateescape")


def read_nullable_string(buf: Buffer, pos: int) -> tuple[str | None, int]:
    """A string with an int16 length; a negative length is null."""
    n, pos = read_int16(buf, pos)
    if n < 0:
        return None, pos
    end = _take(buf, pos, n)
    return _decode_str(buf, pos, end), end


def read_string(buf: Buffer, pos: int) -> tuple[str, int]:
    value, end = read_nullable_string(buf, pos)
    if value is None:
        raise CodecError(f"non-nullable string is null at offset {pos}")
    return value, end


def read_compact_nullable_string(buf: Buffer, pos: int) -> tuple[str | None, int]:
    """A KIP-482 compact string: unsigned varint length + 1, 0 meaning null."""
    n, pos = read_unsigned_varint(buf, pos)
    n -= 1
    if n < 0:
        return None, pos
    if n > MAX_STRING_LENGTH:
        raise CodecError(f"string length {n} exceeds {MAX_STRING_LENGTH}")
    end = _take(buf, pos, n)
    return _decode_str(buf, pos, end), end


def read_compact_string(buf: Buffer, pos: int) -> tuple[str, int]:
    value, end = read_compact_nullable_string(buf, pos)
    if value is None:
        raise CodecError(f"non-nullable compact string is null at offset {pos}")
    return value, end


# --------------------------------------------------------------------------- tagged fields


def write_tagged_fields(out: bytearray, fields: dict[int, bytes] | None) -> None:
    """Write a raw tagged-field section in ascending tag order."""
    if not fields:
        out.append(0)
        return
    write_unsigned_varint(out, len(fields))
    for tag in sorted(fields):
        data = fields[tag]
        write_unsigned_varint(out, tag)
        write_unsigned_varint(out, len(data))
        out += data


def merge_tagged_fields(
    known: Sequence[tuple[int, bytes | bytearray]],
    unknown: dict[int, bytes],
    reserved: tuple[int, ...] = (),
) -> list[tuple[int, bytes | bytearray]]:
    """Combine encoded known tagged fields with preserved unknown ones, by ascending tag.

    ``reserved`` are the tags of every known tagged field of the version, written or not: a
    preserved tag among them would be read back as that field, so it is refused.
    """
    merged = dict(known)
    for tag, data in unknown.items():
        if tag in merged or tag in reserved:
            raise CodecError(f"unknown tagged field {tag} collides with a known field")
        if not isinstance(tag, int) or tag < 0:
            raise CodecError(f"invalid tag {tag!r}")
        merged[tag] = data
    return sorted(merged.items())


def write_tag_list(out: bytearray, fields: list[tuple[int, bytes | bytearray]]) -> None:
    """Write an already sorted list of (tag, payload) as a tagged-field section."""
    write_unsigned_varint(out, len(fields))
    for tag, data in fields:
        write_unsigned_varint(out, tag)
        write_unsigned_varint(out, len(data))
        out += data


# --------------------------------------------------------------------------- cursor


class Reader:
    """A cursor for hand-written parsing: every read advances ``pos``.

    The generated codecs do not use it (they inline their reads); it serves code that needs a
    few fields out of a frame, such as a DescribeConfigs response's topic settings.
    """

    __slots__ = ("buf", "pos")

    def __init__(self, buf: Buffer, pos: int = 0) -> None:
        self.buf = buf
        self.pos = pos

    def _fixed(self, read: Callable[[Buffer, int], tuple[T, int]]) -> T:
        value, self.pos = read(self.buf, self.pos)
        return value

    def int8(self) -> int:
        return self._fixed(read_int8)

    def int16(self) -> int:
        return self._fixed(read_int16)

    def int32(self) -> int:
        return self._fixed(read_int32)

    def bool(self) -> builtins.bool:
        return self._fixed(read_bool)

    def string(self, compact: builtins.bool = False) -> str:
        return self._fixed(read_compact_string if compact else read_string)

    def nullable_string(self, compact: builtins.bool = False) -> str | None:
        return self._fixed(read_compact_nullable_string if compact else read_nullable_string)


#: Precompiled structs for small fixed-width arrays, by struct format character.
ARRAY_STRUCTS: dict[str, tuple[Struct, ...]] = _array_structs
SMALL_ARRAY = _SMALL_ARRAY
