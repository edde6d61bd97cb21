"""The engine's codecs (proxy/native/relay_codec.c) and its stamping and scanning of compressed
batches, against their Python references: protocol/compression.py for the codecs, the Python
produce and fetch chains for what is stamped and scanned.

What must be the same bytes is: every record section once decompressed, every batch header
field but the length and CRC32C (which must be valid), and for lz4 the compressed bytes too
(both frame 64 KiB independent blocks the same way and compress each with liblz4's
LZ4_compress_default). The gzip and zstd bytes differ because the libraries differ (Python's
cramjam brings its own deflate and its own build of zstd, the engine uses the system's zlib
and libzstd), and so may snappy's (cramjam's pure-Rust snappy, the engine's libsnappy): for
those the decompressed records are compared, and each side reads what the other writes.
Every frame the engine reads, Python reads as the same bytes, but for corrupt zstd frames,
which two builds of libzstd may read differently (see the mutation test).
"""

from __future__ import annotations

import random
import struct
from typing import Any

import pytest

from protocol import compression
from protocol.compression import GZIP, LZ4, SNAPPY, ZSTD, CodecError
from protocol.records import Record, RecordBatch, build_batch
from tests.support.native import fetch as fetch_tests
from tests.support.native import stamp as stamp_tests
from tests.support.native.codecs import (
    SAME_BYTES,
    assert_same_batches,
    batches_of,
    compressed_request,
)
from tests.support.native_parts import native_module

_relay = native_module("proxy.native._relay")

CODECS = (GZIP, SNAPPY, LZ4, ZSTD)
"""Codecs whose compressed bytes the engine writes exactly as Python does."""


def sample(rng: random.Random, size: int) -> bytes:
    """Data like record sections: runs of text with random ids, some random bytes."""
    out = bytearray()
    while len(out) < size:
        out += b"record-%d:%s;" % (rng.randrange(1000), rng.randbytes(rng.randrange(0, 6)).hex()
                                   .encode())
        if rng.random() < 0.05:
            out += rng.randbytes(rng.randrange(0, 300))
    return bytes(out[:size])


SIZES = (0, 1, 100, 70_000, 300_000)


@pytest.mark.parametrize("codec", CODECS)
def test_each_side_reads_what_the_other_writes(codec: int) -> None:
    rng = random.Random(codec)
    for size in SIZES:
        data = sample(rng, size)
        python = compression.compress(codec, data)
        native = _relay.codec_compress(codec, data)
        assert _relay.codec_decompress(codec, python, size) == data
        assert compression.decompress(codec, native, size) == data
        if codec in SAME_BYTES:
            assert native == python
    zeros = bytes(1_000_000)  # a thousandfold: a ratio limit would refuse real traffic
    assert _relay.codec_decompress(codec, compression.compress(codec, zeros), 10**6) == zeros


@pytest.mark.parametrize("codec", CODECS)
def test_decompression_stops_at_the_limit(codec: int) -> None:
    data = sample(random.Random(7), 200_000)
    packed = compression.compress(codec, data)
    assert _relay.codec_decompress(codec, packed, len(data)) == data
    assert _relay.codec_decompress(codec, packed, len(data) - 1) == (None, "too large")
    assert _relay.codec_decompress(codec, packed, 0) == (None, "too large")
    with pytest.raises(compression.DecompressedTooLarge):
        compression.decompress(codec, packed, len(data) - 1)


def test_forged_sizes_are_refused_before_anything_is_allocated() -> None:
    """Headers that announce far more than the limit: refused from the header, never read
    into a buffer of the announced size (a terabyte here: an allocation would fail)."""
    big = 1 << 40
    # snappy raw: a uvarint length prefix of 2^32 - 1 (the most it holds), then a few bytes
    varint = bytearray()
    n = (1 << 32) - 1
    while n >= 0x80:
        varint.append(n & 0x7F | 0x80)
        n >>= 7
    varint.append(n)
    assert _relay.codec_decompress(SNAPPY, bytes(varint) + b"\x00" * 8, 1 << 20) == \
        (None, "too large")
    # xerial: a valid header, then a block announcing as much
    xerial = compression.XERIAL_MAGIC + struct.pack(">ii", 1, 1)
    block = bytes(varint) + b"\x00" * 8
    assert _relay.codec_decompress(SNAPPY, xerial + struct.pack(">i", len(block)) + block,
                                   1 << 20) == (None, "too large")
    # zstd: a frame whose header announces 2^40 bytes of content, one raw block of 10
    fhd = 0xE0  # 8-byte content size, single segment
    zstd = (struct.pack("<IB", 0xFD2FB528, fhd) + struct.pack("<Q", big)
            + struct.pack("<I", (10 << 3) | 1)[:3] + b"x" * 10)
    got = _relay.codec_decompress(ZSTD, zstd, 1 << 20)
    assert got[0] is None
    # gzip and lz4 grow their output with what they decode, never past the limit:
    # 4 MiB lz4 blocks of zeros under a 1 MiB limit
    lz4 = compression.compress(LZ4, bytes(8 << 20))
    assert _relay.codec_decompress(LZ4, lz4, 1 << 20) == (None, "too large")


def mutations(rng: random.Random, data: bytes, n: int) -> list[bytes]:
    out = []
    for _ in range(n):
        mutated = bytearray(data)
        kind = rng.randrange(4)
        if kind == 0 and mutated:
            for _ in range(rng.randrange(1, 4)):
                mutated[rng.randrange(len(mutated))] ^= 1 << rng.randrange(8)
        elif kind == 1:
            del mutated[rng.randrange(len(mutated) + 1):]
        elif kind == 2 and mutated:
            at = rng.randrange(min(len(mutated), 24))
            mutated[at] = rng.randrange(256)
        else:
            mutated += rng.randbytes(rng.randrange(1, 9))
        out.append(bytes(mutated))
    return out


@pytest.mark.parametrize("codec", CODECS)
def test_what_the_engine_accepts_python_accepts_the_same(codec: int) -> None:
    """Mutated frames (bit flips, truncation, header bytes, trailing bytes): whatever the
    engine reads, Python reads as the same bytes, so the engine never stamps a batch Python
    would refuse or read otherwise. (The engine may refuse more: that batch goes to Python.)

    But for zstd: a corrupted zstd frame without a content checksum (Kafka's producers write
    none) is not always detected, and what two builds of libzstd make of it may differ (the
    format promises memory safety on corrupt input, not one output; the system's 1.5.4 and
    cramjam's newer build differ here, the broker's zstd-jni is a third). Such a frame can
    only come from the client itself, its batch CRC32C covering it, and its records must
    still walk exactly; for zstd the test checks that the engine stays within the limit."""
    rng = random.Random(100 + codec)
    accepted = agreed = 0
    for size in (50, 3000, 80_000):
        data = sample(rng, size)
        for packed in (compression.compress(codec, data), _relay.codec_compress(codec, data)):
            for mutated in mutations(rng, packed, 150):
                got = _relay.codec_decompress(codec, mutated, 1 << 20)
                if isinstance(got, tuple):
                    assert got[0] is None and got[1]
                    continue
                accepted += 1
                assert len(got) <= 1 << 20
                if codec == ZSTD:
                    continue
                assert compression.decompress(codec, mutated, 1 << 20) == got
                agreed += 1
    assert accepted > 0


@pytest.mark.parametrize("codec", CODECS)
def test_frames_python_refuses_the_engine_refuses(codec: int) -> None:
    data = sample(random.Random(3), 5000)
    packed = compression.compress(codec, data)
    broken = [packed[: len(packed) // 2], b"\x00" * 40]
    if codec != ZSTD:  # no zstd frame at all is no content (Python's reading too)
        broken.append(b"")
    if codec == LZ4:
        linked = bytearray(packed)
        linked[4] &= ~0x20  # linked blocks: Java's reader refuses them
        broken += [bytes(linked)]
        checksum = bytearray(packed)
        checksum[6] ^= 0xFF
        broken += [bytes(checksum)]
    for frame in broken:
        with pytest.raises(CodecError):
            compression.decompress(codec, frame, 1 << 20)
        got = _relay.codec_decompress(codec, frame, 1 << 20)
        assert isinstance(got, tuple) and got[0] is None, frame[:20]


# ---- stamping -----------------------------------------------------------------------------


STAMP_CASES = [
    ({"mode": "record"}, {}),
    ({"mode": "batch"}, {"fields": ["client_id", "msg_id", "time"]}),
    ({"mode": "record"}, None),
]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("version", [3, 7, 9, 13])
@pytest.mark.parametrize("case", range(len(STAMP_CASES)))
def test_compressed_batches_stamped_as_python_stamps_them(codec: int, version: int,
                                                          case: int) -> None:
    """The same records, headers and header fields as the Python chain, and the same
    counters (batches re-encoded by codec among them)."""
    trace, audit = STAMP_CASES[case]
    rng = random.Random(codec * 1000 + version * 10 + case)
    for round_, traced in enumerate((0.0, 0.5, 1.0)):
        filt, plan = stamp_tests.setup(trace, audit)
        msg = compressed_request(rng, codec, traced, partitions=1 + round_ % 2,
                                 batches=1 + round_ % 2, mixed=round_ == 1)
        data = stamp_tests.frame(version, msg)
        seed = rng.randrange(1 << 30)
        per_batch = trace is not None and trace.get("mode") == "batch"
        wants_uuid = audit is not None and "msg_id" in audit.get("fields", ["msg_id"])
        trace_draws, msg_draws = stamp_tests.draws_of(msg, seed, per_batch, trace is not None,
                                                      wants_uuid, keeps=trace is not None)
        stamp_tests.ids.seed(seed)
        python = stamp_tests.python_output(filt, stamp_tests.session(), data)
        got = _relay.stamp_produce(data, plan.wire, trace_draws, msg_draws, stamp_tests.NOW)
        assert got[0] is not None, got[1]
        assert_same_batches(got[0], python, codec)
        if python == data:  # every record kept its own traceparent: nothing appended
            assert got[0] == data
        counts = got[1]
        assert counts[4][codec] > 0 or python == data
        engine, _ = stamp_tests.setup(trace, audit)
        stamp_tests.plan_of(engine).count(*counts)
        assert engine.chains.produce.stats.snapshot() == filt.chains.produce.stats.snapshot()
        assert engine.codec.reencoded == filt.codec.reencoded


def wire_with(plan: Any, **limits: int) -> tuple:
    """The plan's wire form with other limits (max_batch_bytes at 5, the decompression
    limits at 7 and 8)."""
    wire = list(plan.wire)
    for name, at in (("batch_bytes", 5), ("batch_decompressed", 7),
                     ("request_decompressed", 8)):
        if name in limits:
            wire[at] = limits[name]
    return tuple(wire)


def stamp(data: bytes, wire: tuple) -> tuple:
    return _relay.stamp_produce(data, wire, bytes(24 * 4096), bytes(12 * 4096),
                                stamp_tests.NOW)


@pytest.mark.parametrize("codec", CODECS)
def test_a_batch_that_no_longer_fits_its_topic_goes_to_python(codec: int) -> None:
    """interceptors/batch_fit.py: a batch that fitted the topic's limit and would not once
    stamped is Python's, which re-encodes it with a stronger codec or refuses it; a batch
    that did not fit before is stamped as it is (the broker answers for it)."""
    _, plan = stamp_tests.setup({"mode": "record"}, {})
    rng = random.Random(codec)
    batch = build_batch(stamp_tests.records(rng, 40, 0.0), compression=codec)
    data = stamp_tests.one_partition(batch)
    stamped = stamp(data, plan.wire)
    assert stamped[0] is not None
    grown = len(batches_of(stamped[0])[0])
    assert grown > len(batch)
    assert stamp(data, wire_with(plan, batch_bytes=grown))[0] is not None
    assert stamp(data, wire_with(plan, batch_bytes=grown - 1)) == (
        None, "a batch over the topic's size limit once stamped")
    assert stamp(data, wire_with(plan, batch_bytes=len(batch) - 1))[0] is not None


@pytest.mark.parametrize("codec", CODECS)
def test_the_decompression_limits_send_a_request_to_python(codec: int) -> None:
    """Past limits.max_batch_decompressed_bytes or max_request_decompressed_bytes the
    request is Python's, which refuses the partition with that limit's error."""
    _, plan = stamp_tests.setup({"mode": "record"}, {})
    rng = random.Random(codec)
    batches = [build_batch(stamp_tests.records(rng, 30, 0.0), compression=codec)
               for _ in range(2)]
    sizes = [b.records_section()[2] - b.records_section()[1]
             for b in (RecordBatch(x) for x in batches)]
    data = stamp_tests.one_partition(b"".join(batches))
    # (the batch limit bounds the stamped records too, which grow: room for them)
    assert stamp(data, wire_with(plan, batch_decompressed=10 * max(sizes),
                                 request_decompressed=sum(sizes)))[0] is not None
    too_large = (None, "a compressed batch over the decompression limits")
    refused = stamp(data, wire_with(plan, batch_decompressed=max(sizes) - 1))
    assert refused[0] is None and refused[1].startswith(too_large[1])
    assert stamp(data, wire_with(plan, batch_decompressed=10 * max(sizes),
                                 request_decompressed=sum(sizes) - 1)) == too_large
    # A plan without them (as made before the engine read compressed batches): Python's.
    assert stamp(data, plan.wire[:7]) == too_large


def test_a_batch_of_tiny_records_that_grows_manyfold_goes_to_python() -> None:
    """The stamped records are held before they are compressed: within the same bound."""
    _, plan = stamp_tests.setup({"mode": "record"}, {})
    batch = build_batch([Record(None, b"") for _ in range(2000)], compression=ZSTD)
    section = RecordBatch(batch).records_section()
    size = section[2] - section[1]
    data = stamp_tests.one_partition(batch)
    assert stamp(data, wire_with(plan, batch_decompressed=size * 100))[0] is not None
    assert stamp(data, wire_with(plan, batch_decompressed=size * 2)) == (
        None, "a compressed batch over the decompression limits once stamped")


def test_a_corrupt_compressed_batch_is_never_sealed_with_a_fresh_crc() -> None:
    """Bytes changed inside a compressed batch: the CRC check comes first, as in Python,
    and the request goes to Python unchanged; a batch resealed around a corrupt frame
    (valid CRC) is refused by the codec, as Python refuses it."""
    _, plan = stamp_tests.setup({"mode": "record"}, {})
    batch = bytearray(build_batch(stamp_tests.records(random.Random(1), 20, 0.0),
                                  compression=LZ4))
    batch[70] ^= 0xFF
    assert stamp(stamp_tests.one_partition(bytes(batch)), plan.wire) == (
        None, "a record batch CRC mismatch")
    batch[4 + 63] = 0  # the lz4 frame's flags, then the batch resealed
    resealed = bytes(batch[:17]) + struct.pack(">I", _relay.crc32c(bytes(batch[21:]))) + \
        bytes(batch[21:])
    out = stamp(stamp_tests.one_partition(resealed), plan.wire)
    assert out[0] is None and "lz4" in out[1]


# ---- the Fetch scan ------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("version", [4, 11, 12, 13, 16])
def test_compressed_fetch_responses_scanned_as_python_reads_them(codec: int, version: int
                                                                 ) -> None:
    rng = random.Random(codec * 100 + version)
    verdicts = set()
    for round_ in range(8):
        watched = (0.0, 0.0, 0.05, 0.3)[round_ % 4]
        msg = fetch_tests.response(rng, version, topics=1 + round_ % 2, partitions=1,
                                   batches=1 + round_ % 3, watched=watched,
                                   compression=codec, truncated=round_ % 3 == 1)
        verdicts.add(fetch_tests.scan_agrees_with_python(version, msg))
    assert verdicts == {True, False}


def test_a_fetched_batch_over_the_decompression_limit_goes_to_python() -> None:
    rng = random.Random(9)
    _, plan = fetch_tests.setup()
    data = fetch_tests.frame(12, fetch_tests.response(rng, 12, 1, 1, 1, 0.0, compression=ZSTD))
    assert fetch_tests.scan(data, 12, plan)[0] is not None
    small = list(plan.wire)
    small[7] = 10
    assert _relay.scan_fetch(data, 1, 12, tuple(small), False) == (
        None, "a compressed batch over the decompression limits")
