"""Compression codecs: round trips, the framings Kafka uses, and bounded hostile input."""

from __future__ import annotations

import gzip
import os
import struct

import cramjam
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.compression import (
    CODEC_NAMES,
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    XERIAL_MAGIC,
    ZSTD,
    compress,
    decompress,
)
from protocol.errors import CodecError

CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]
COMPRESSED = [GZIP, SNAPPY, LZ4, ZSTD]
TEXT = b"".join(b"record %d: lorem ipsum dolor sit amet %d\n" % (i, i * 7) for i in range(9000))


def ids(codec: int) -> str:
    return CODEC_NAMES[codec]


@pytest.mark.parametrize("codec", CODECS, ids=ids)
@pytest.mark.parametrize("size", [0, 1, 100, 65535, 65536, 65537, 300_000])
def test_round_trip(codec, size):
    for data in (TEXT[:size], os.urandom(size)):
        assert decompress(codec, compress(codec, data)) == data


@pytest.mark.parametrize("codec", CODECS, ids=ids)
def test_accepts_any_buffer(codec):
    data = TEXT[:5000]
    packed = compress(codec, memoryview(bytearray(data)))
    assert decompress(codec, memoryview(packed)) == data
    assert decompress(codec, bytearray(packed)) == data


# --- lz4 ---------------------------------------------------------------------------------------


def test_lz4_frame_has_independent_blocks_and_a_valid_descriptor():
    frame = compress(LZ4, TEXT)
    assert frame[:4] == b"\x04\x22\x4d\x18"
    flg, bd = frame[4], frame[5]
    assert flg >> 6 == 1  # version
    assert flg & 0x20  # block independence: Kafka's Java reader rejects linked blocks
    assert bd == 0x40  # 64 KiB blocks, like Java's writer
    # cramjam's frame decoder checks the descriptor checksum and the block structure.
    assert bytes(cramjam.lz4.decompress(frame)) == TEXT


def test_lz4_incompressible_blocks_are_stored():
    data = os.urandom(70_000)
    frame = compress(LZ4, data)
    (first,) = struct.unpack_from("<I", frame, 7)
    assert first & 0x80000000
    assert bytes(cramjam.lz4.decompress(frame)) == data
    assert decompress(LZ4, frame) == data


def test_lz4_reads_frames_with_checksums_and_content_size():
    c = cramjam.lz4.Compressor(block_linked=False)  # block + content checksums
    c.compress(TEXT)
    frame = bytes(c.finish())
    assert frame[4] & 0x20 and frame[4] & 0x10
    assert decompress(LZ4, frame) == TEXT


def test_lz4_rejects_linked_blocks_like_java():
    c = cramjam.lz4.Compressor()  # cramjam links blocks by default
    c.compress(TEXT)
    frame = bytes(c.finish())
    assert not frame[4] & 0x20
    with pytest.raises(CodecError, match="linked"):
        decompress(LZ4, frame)


def test_lz4_rejects_bad_descriptor_checksum():
    frame = bytearray(compress(LZ4, TEXT))
    frame[6] ^= 0xFF
    with pytest.raises(CodecError, match="checksum"):
        decompress(LZ4, bytes(frame))


# --- snappy ------------------------------------------------------------------------------------


def test_snappy_writes_xerial_framing():
    packed = compress(SNAPPY, TEXT)
    assert packed[:8] == XERIAL_MAGIC
    assert struct.unpack_from(">ii", packed, 8) == (1, 1)
    # Blocks: big-endian int32 length + raw snappy, 32 KiB of input each.
    pos, out = 16, []
    while pos < len(packed):
        (n,) = struct.unpack_from(">i", packed, pos)
        out.append(bytes(cramjam.snappy.decompress_raw(packed[pos + 4 : pos + 4 + n])))
        pos += 4 + n
    assert all(len(chunk) == 32 * 1024 for chunk in out[:-1])
    assert b"".join(out) == TEXT


def test_snappy_xerial_detected_by_magic_only():
    packed = bytearray(compress(SNAPPY, TEXT))
    packed[8:16] = struct.pack(">ii", 0, 7)  # other writers put other numbers here
    assert decompress(SNAPPY, bytes(packed)) == TEXT


def test_snappy_reads_raw_blocks():
    assert decompress(SNAPPY, bytes(cramjam.snappy.compress_raw(TEXT))) == TEXT


def test_snappy_xerial_truncated():
    packed = compress(SNAPPY, TEXT)
    for cut in (10, 17, 20, len(packed) - 1):
        with pytest.raises(CodecError):
            decompress(SNAPPY, packed[:cut])


# --- gzip --------------------------------------------------------------------------------------


def test_gzip_reads_concatenated_members_and_ignores_trailing_bytes():
    packed = gzip.compress(TEXT[:1000]) + gzip.compress(TEXT[1000:3000])
    assert decompress(GZIP, packed) == TEXT[:3000]
    assert decompress(GZIP, packed + b"\x00\x00junk") == TEXT[:3000]


def test_gzip_truncated():
    packed = compress(GZIP, TEXT)
    with pytest.raises(CodecError):
        decompress(GZIP, packed[: len(packed) // 2])


# --- zstd --------------------------------------------------------------------------------------


def test_zstd_reads_several_frames_skippable_and_streamed():
    skippable = struct.pack("<II", 0x184D2A53, 5) + b"12345"
    c = cramjam.zstd.Compressor()
    c.compress(TEXT[:50_000])
    streamed = bytes(c.finish())  # streaming: no content size in the header
    packed = compress(ZSTD, TEXT[:1000]) + skippable + streamed
    assert decompress(ZSTD, packed) == TEXT[:1000] + TEXT[:50_000]


def test_zstd_rejects_trailing_garbage():
    with pytest.raises(CodecError):
        decompress(ZSTD, compress(ZSTD, TEXT[:1000]) + b"garbage!")


# --- limits ------------------------------------------------------------------------------------

BOMB = bytes(24 * 1024 * 1024)  # compresses to almost nothing


@pytest.mark.parametrize("codec", COMPRESSED, ids=ids)
def test_decompressed_size_is_capped(codec):
    packed = compress(codec, BOMB)
    assert len(packed) < 2 * 1024 * 1024
    with pytest.raises(CodecError, match="limit"):
        decompress(codec, packed, max_size=1024 * 1024)
    assert len(decompress(codec, packed, max_size=len(BOMB))) == len(BOMB)


def test_uncompressed_size_is_capped_too():
    with pytest.raises(CodecError):
        decompress(NONE, b"x" * 100, max_size=99)


def test_snappy_forged_length_does_not_allocate():
    # A raw snappy block announcing 4 GiB of output, backed by nothing.
    forged = b"\xff\xff\xff\xff\x0f" + b"\x00" * 10
    with pytest.raises(CodecError):
        decompress(SNAPPY, forged)
    xerial = XERIAL_MAGIC + struct.pack(">iii", 1, 1, len(forged)) + forged
    with pytest.raises(CodecError):
        decompress(SNAPPY, xerial)


def test_lz4_forged_block_size():
    frame = bytearray(compress(LZ4, TEXT[:1000]))
    struct.pack_into("<I", frame, 7, 0x7FFFFFF0)
    with pytest.raises(CodecError):
        decompress(LZ4, bytes(frame))


def test_zstd_many_tiny_blocks_claiming_the_maximum():
    # Each compressed block could regenerate 128 KiB, so the header walk bounds this frame at
    # 250 MiB; decoding then goes into a buffer capped at the limit, and succeeds because
    # these blocks (empty literals, no sequences) actually regenerate nothing.
    header = struct.pack("<I", 0xFD2FB528) + b"\x00\x00"  # no FCS, window descriptor
    block = (2 << 1 | 2 << 3).to_bytes(3, "little") + b"\x00\x00"  # compressed, 2 bytes
    frame = header + block * 2000 + (1 | 0 << 1).to_bytes(3, "little")
    assert decompress(ZSTD, frame, max_size=1024 * 1024) == b""


# --- hostile bytes -----------------------------------------------------------------------------

SAMPLES = {codec: compress(codec, TEXT[:20_000]) for codec in CODECS}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(COMPRESSED), st.data())
def test_mutated_input_raises_only_codec_error(codec, data):
    packed = bytearray(SAMPLES[codec])
    for _ in range(data.draw(st.integers(1, 8))):
        i = data.draw(st.integers(0, len(packed) - 1))
        packed[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(packed)))
    try:
        out = decompress(codec, bytes(packed[:cut]), max_size=1024 * 1024)
    except CodecError:
        return
    assert len(out) <= 1024 * 1024


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(COMPRESSED), st.binary(max_size=300))
def test_random_input_raises_only_codec_error(codec, blob):
    prefix = {GZIP: b"\x1f\x8b\x08\x00", SNAPPY: XERIAL_MAGIC, LZ4: b"\x04\x22\x4d\x18"}
    for data in (blob, prefix.get(codec, b"\x28\xb5\x2f\xfd") + blob):
        try:
            decompress(codec, data, max_size=64 * 1024)
        except CodecError:
            pass
