"""Kafka record-batch compression codecs, with decompression bounded for hostile input.

Codec ids are the values of bits 0-2 of the batch attributes. The codec libraries are
`cramjam` (snappy, lz4 blocks, zstd, gzip writing) and the stdlib `zlib` for gzip reading,
because zlib can stop at an output limit and cramjam's gzip cannot.

Output bound: a batch of a few hundred bytes can legitimately expand a thousandfold (runs of
zeros, repeated JSON), so a ratio limit would reject real traffic. We cap the *absolute*
decompressed size instead, `DEFAULT_MAX_DECOMPRESSED` (64 MiB) unless the caller passes another
`max_size`. Every decoder checks the limit before allocating, from sizes the formats announce
(snappy's length prefix, lz4's block maximum, zstd's per-block maximum) or by streaming
(gzip), so a forged header never makes us allocate more than the limit.

Functions are pure (no shared state), so a caller may run large jobs in a worker thread.
"""

from __future__ import annotations

import struct
import zlib

import cramjam

from protocol.errors import CodecError


class DecompressedTooLarge(CodecError):
    """The data decompresses to more than the caller's limit (found while decompressing)."""

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4

CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

DEFAULT_MAX_DECOMPRESSED = 64 * 1024 * 1024

Buffer = bytes | bytearray | memoryview

# --- snappy, xerial framing -------------------------------------------------------------------
# Kafka's Java client writes snappy through snappy-java's stream format: an 8-byte magic, two
# big-endian int32s (version, compatible version), then blocks of int32 length + raw snappy.
XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024  # snappy-java's default block size; every reader copes with it

# --- lz4 frame --------------------------------------------------------------------------------
# We write the frame ourselves around cramjam's block compressor so that the frame flags are
# fixed and known: version 01, independent blocks (Java's reader rejects linked blocks, and
# cramjam's own frame writer links them by default), no block or content checksum, no content
# size, 64 KiB maximum block (BD 0x40, Java's default).
_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_BLOCK = 64 * 1024
_LZ4_END = b"\x00\x00\x00\x00"
_LZ4_BLOCK_MAX = {4: 64 * 1024, 5: 256 * 1024, 6: 1024 * 1024, 7: 4 * 1024 * 1024}

_P1, _P2, _P3, _P4, _P5 = 0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D, 0x27D4EB2F, 0x165667B1
_M32 = 0xFFFFFFFF


def _xxh32_short(data: bytes) -> int:
    """xxHash32 with seed 0 of fewer than 16 bytes: all an LZ4 frame descriptor ever needs."""
    n = len(data)
    if n >= 16:
        raise ValueError("only short inputs are supported")
    acc = (_P5 + n) & _M32
    pos = 0
    while pos + 4 <= n:
        acc = (acc + int.from_bytes(data[pos : pos + 4], "little") * _P3) & _M32
        acc = (((acc << 17) | (acc >> 15)) & _M32) * _P4 & _M32
        pos += 4
    while pos < n:
        acc = (acc + data[pos] * _P5) & _M32
        acc = (((acc << 11) | (acc >> 21)) & _M32) * _P1 & _M32
        pos += 1
    acc ^= acc >> 15
    acc = acc * _P2 & _M32
    acc ^= acc >> 13
    acc = acc * _P3 & _M32
    return acc ^ (acc >> 16)


def _lz4_header_checksum(descriptor: bytes) -> int:
    return (_xxh32_short(descriptor) >> 8) & 0xFF


_LZ4_DESCRIPTOR = b"\x60\x40"
_LZ4_HEADER = _LZ4_MAGIC + _LZ4_DESCRIPTOR + bytes((_lz4_header_checksum(_LZ4_DESCRIPTOR),))

# --- zstd -------------------------------------------------------------------------------------
_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_BLOCK_MAX = 128 * 1024  # a compressed block never regenerates more than this


def compress(codec: int, data: Buffer, level: int | None = None) -> bytes:
    """Compress `data` the way Kafka's Java producer would frame it for `codec`.

    `level` applies to gzip and zstd (library default when None); lz4 has one level here.
    """
    if codec == NONE:
        return bytes(data)
    try:
        if codec == GZIP:
            return bytes(cramjam.gzip.compress(data, level=level))
        if codec == SNAPPY:
            return _xerial_compress(data)
        if codec == LZ4:
            return _lz4_compress(data)
        if codec == ZSTD:
            return bytes(cramjam.zstd.compress(data, level=level))
    except cramjam.CompressionError as exc:  # pragma: no cover - only on library failure
        raise ValueError(f"{CODEC_NAMES[codec]} compression failed: {exc}") from exc
    raise CodecError(f"unknown compression codec {codec}")


def decompress(codec: int, data: Buffer, max_size: int = DEFAULT_MAX_DECOMPRESSED) -> bytes:
    """Decompress one batch's records section; raise CodecError on bad or oversized input."""
    if codec == NONE:
        if len(data) > max_size:
            raise DecompressedTooLarge("records section exceeds the size limit")
        return bytes(data)
    try:
        if codec == GZIP:
            return _gunzip(data, max_size)
        if codec == SNAPPY:
            return _snappy_decompress(data, max_size)
        if codec == LZ4:
            return _lz4_decompress(data, max_size)
        if codec == ZSTD:
            return _zstd_decompress(data, max_size)
    except (cramjam.DecompressionError, zlib.error, struct.error, IndexError) as exc:
        raise CodecError(f"corrupt {CODEC_NAMES[codec]} data: {exc}") from None
    raise CodecError(f"unknown compression codec {codec}")


# --- gzip ---------------------------------------------------------------------------------------


def _gunzip(data: Buffer, max_size: int) -> bytes:
    # Concatenated members are legal gzip and Java's GZIPInputStream reads them; like it, we
    # ignore trailing bytes that do not start another member.
    out = []
    room = max_size
    rest = data
    while True:
        d = zlib.decompressobj(wbits=31)
        chunk = d.decompress(rest, room + 1)
        if len(chunk) > room:
            raise DecompressedTooLarge("gzip data exceeds the decompressed size limit")
        room -= len(chunk)
        out.append(chunk)
        if not d.eof:
            raise CodecError("truncated gzip data")
        rest = d.unused_data
        if not rest.startswith(b"\x1f\x8b"):
            return b"".join(out)


# --- snappy ---------------------------------------------------------------------------------------


def _xerial_compress(data: Buffer) -> bytes:
    view = memoryview(data)
    parts = [_XERIAL_HEADER]
    for i in range(0, len(view), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[i : i + _XERIAL_BLOCK]))
        parts.append(struct.pack(">i", len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_raw(block: Buffer, room: int) -> bytes:
    # The raw format starts with the uncompressed length: check it before anything allocates.
    if len(block) == 0:
        raise CodecError("empty snappy block")
    if cramjam.snappy.decompress_raw_len(block) > room:
        raise DecompressedTooLarge("snappy data exceeds the decompressed size limit")
    return bytes(cramjam.snappy.decompress_raw(block))


def _snappy_decompress(data: Buffer, max_size: int) -> bytes:
    view = memoryview(data)
    if bytes(view[:8]) != XERIAL_MAGIC:
        return _snappy_raw(view, max_size)
    # Only the magic identifies the framing: writers disagree about the version fields.
    if len(view) < 16:
        raise CodecError("truncated xerial snappy header")
    out = []
    room = max_size
    pos = 16
    end = len(view)
    while pos < end:
        if pos + 4 > end:
            raise CodecError("truncated xerial snappy block length")
        (size,) = struct.unpack_from(">i", view, pos)
        pos += 4
        if size < 0 or pos + size > end:
            raise CodecError("xerial snappy block length out of range")
        chunk = _snappy_raw(view[pos : pos + size], room)
        pos += size
        room -= len(chunk)
        out.append(chunk)
    return b"".join(out)


# --- lz4 ------------------------------------------------------------------------------------------


def _lz4_compress(data: Buffer) -> bytes:
    # cramjam's block compressor has a single (fast) mode, so `level` does not apply to lz4.
    view = memoryview(data)
    parts = [_LZ4_HEADER]
    for i in range(0, len(view), _LZ4_BLOCK):
        raw = view[i : i + _LZ4_BLOCK]
        block = bytes(cramjam.lz4.compress_block(raw, store_size=False))
        if len(block) >= len(raw):
            # Incompressible: the high bit of the size marks a stored (uncompressed) block.
            parts.append(struct.pack("<I", len(raw) | 0x80000000))
            parts.append(bytes(raw))
        else:
            parts.append(struct.pack("<I", len(block)))
            parts.append(block)
    parts.append(_LZ4_END)
    return b"".join(parts)


def _lz4_decompress(data: Buffer, max_size: int) -> bytes:
    # Walk the frame ourselves so each block is decoded into a buffer of its announced maximum;
    # a decoder that grows its output freely could be driven to any size.
    view = memoryview(data)
    end = len(view)
    if end < 7 or bytes(view[:4]) != _LZ4_MAGIC:
        raise CodecError("not an lz4 frame")
    # The same frame checks as Kafka's Java reader, so we accept exactly what brokers accept.
    flg = view[4]
    bd = view[5]
    if flg >> 6 != 1:
        raise CodecError("unsupported lz4 frame version")
    if not flg & 0x20:
        raise CodecError("lz4 frames with linked blocks are not supported")
    if flg & 0x03 or bd & 0x8F:
        raise CodecError("lz4 frame descriptor reserved bits set")
    block_max = _LZ4_BLOCK_MAX.get((bd >> 4) & 7)
    if block_max is None:
        raise CodecError("bad lz4 block maximum size")
    block_checksum = flg & 0x10
    pos = 6 + (8 if flg & 0x08 else 0)  # optional content size
    if pos >= end or view[pos] != _lz4_header_checksum(bytes(view[4:pos])):
        raise CodecError("lz4 frame descriptor checksum mismatch")
    pos += 1
    # LZ4 expands at most ~255:1, so small frames never need a full-size scratch block.
    scratch = bytearray(min(block_max, max_size, 255 * end + 64))
    scratch_view = memoryview(scratch)
    out = []
    room = max_size
    while True:
        if pos + 4 > end:
            raise CodecError("truncated lz4 frame")
        (size,) = struct.unpack_from("<I", view, pos)
        pos += 4
        if size == 0:
            break  # end mark; an optional content checksum may follow, as in Java we skip it
        stored = size & 0x80000000
        size &= 0x7FFFFFFF
        if size > block_max or pos + size > end:
            raise CodecError("lz4 block size out of range")
        block = view[pos : pos + size]
        pos += size + (4 if block_checksum else 0)
        if stored:
            chunk = bytes(block)
        else:
            n = cramjam.lz4.decompress_block_into(block, scratch)
            chunk = bytes(scratch_view[:n])
        if len(chunk) > room:
            raise DecompressedTooLarge("lz4 data exceeds the decompressed size limit")
        room -= len(chunk)
        out.append(chunk)
    return b"".join(out)


# --- zstd -----------------------------------------------------------------------------------------


def _zstd_bound(view: memoryview) -> int:
    """Upper bound of the regenerated size, from the frame and block headers alone."""
    end = len(view)
    pos = 0
    bound = 0
    while pos < end:
        (magic,) = struct.unpack_from("<I", view, pos)
        if magic & 0xFFFFFFF0 == 0x184D2A50:  # skippable frame
            (size,) = struct.unpack_from("<I", view, pos + 4)
            pos += 8 + size
            continue
        if magic != _ZSTD_MAGIC:
            raise CodecError("not a zstd frame")
        fhd = view[pos + 4]
        single_segment = fhd & 0x20
        fcs_size = (0, 2, 4, 8)[fhd >> 6] or (1 if single_segment else 0)
        did_size = (0, 1, 2, 4)[fhd & 3]
        pos += 5 + (0 if single_segment else 1) + did_size + fcs_size
        while True:
            header = view[pos] | view[pos + 1] << 8 | view[pos + 2] << 16
            pos += 3
            kind = (header >> 1) & 3
            size = header >> 3
            if kind == 0:  # raw
                bound += size
                pos += size
            elif kind == 1:  # run length: one byte repeated `size` times
                bound += size
                pos += 1
            elif kind == 2:
                if size > _ZSTD_BLOCK_MAX:
                    raise CodecError("zstd block too large")
                bound += _ZSTD_BLOCK_MAX
                pos += size
            else:
                raise CodecError("reserved zstd block type")
            if header & 1:
                break
        if fhd & 0x04:
            pos += 4  # content checksum
    if pos > end:
        raise CodecError("truncated zstd frame")
    return bound


def _zstd_decompress(data: Buffer, max_size: int) -> bytes:
    view = memoryview(data)
    bound = _zstd_bound(view)
    if bound == 0:
        return b""
    # The bound is tight for ordinary encoders (full blocks). When it exceeds the limit we still
    # try, into a buffer one byte over the limit: filling it means the data is too large.
    out = bytearray(min(bound, max_size + 1))
    try:
        n = cramjam.zstd.decompress_into(view, out)
    except cramjam.DecompressionError:
        if bound > max_size:
            raise DecompressedTooLarge("zstd data exceeds the decompressed size limit") from None
        raise
    if n > max_size:
        raise DecompressedTooLarge("zstd data exceeds the decompressed size limit")
    return bytes(memoryview(out)[:n])
