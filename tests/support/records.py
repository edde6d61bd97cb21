"""Record batches built by hand for hostile-input tests: a records section from raw fields, and a
batch resealed (length and CRC) around a tampered one, and the varints a records section is
made of read back."""

from __future__ import annotations

import struct

from crc32c import crc32c

TS = 1_700_000_000_000


def reseal(data: bytes | bytearray) -> bytes:
    """Fix batchLength and CRC after tampering, as a careful attacker would."""
    data = bytearray(data)
    struct.pack_into(">i", data, 8, len(data) - 12)
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


def records_payload(records: bytes, count: int) -> bytes:
    crc_part = struct.pack(">hiqqqhii", 0, max(count - 1, 0), TS, TS, -1, -1, -1, count)
    head = struct.pack(">qiibI", 0, 49 + len(records), -1, 2, 0)
    return reseal(head + crc_part + records)


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The unsigned varint at `pos` (a record's length is its zigzag): its value and where the
    bytes after it start."""
    value, shift = 0, 0
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return value, pos
