"""Hostile input: truncated, mutated, forged and random bytes raise CodecError, and only that.

Mutations are re-sealed with a valid CRC so that they reach the record parser and the
decompressors instead of stopping at the CRC check.
"""

from __future__ import annotations

import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD
from protocol.errors import CodecError
from protocol.records import Record, RecordBatch, build_batch, join_batches, split_batches
from tests.support.records import TS, records_payload, reseal

CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]


def sample(codec: int = NONE, n: int = 6) -> bytes:
    recs = [
        Record(f"k{i}".encode(), b"v" * (i * 30), [("h", b"x" * i), ("n", None)][: i % 3])
        for i in range(n)
    ]
    return build_batch(recs, compression=codec, base_timestamp=TS, producer_id=5)


def exercise(data: bytes) -> None:
    """Everything a proxy would do with a batch; only CodecError may escape."""
    try:
        parts = split_batches(data)
        for part in parts:
            if isinstance(part, RecordBatch):
                list(part.iter_headers())
                for rec in part.records:
                    _ = (rec.key, rec.value, rec.timestamp_delta, rec.offset_delta)
                    if not part.is_control:
                        rec.headers.append(("herald", b"1"))
        join_batches(parts)
    except CodecError:
        pass


@pytest.mark.parametrize("codec", CODECS)
def test_every_truncation(codec):
    data = sample(codec)
    for cut in range(len(data)):
        parts = split_batches(data[:cut])
        # a cut batch is a trailing partial batch: passed through, never parsed
        assert parts == ([data[:cut]] if cut else [])
    for cut in range(61, len(data)):
        with pytest.raises(CodecError):
            _ = RecordBatch(data[:cut]).records
        exercise(reseal(data[:cut]))


@pytest.mark.parametrize("codec", CODECS)
def test_bad_crc_is_refused_before_parsing(codec):
    data = bytearray(sample(codec))
    data[-1] ^= 1
    batch = split_batches(bytes(data))[0]
    assert not batch.crc_is_valid()
    with pytest.raises(CodecError, match="CRC"):
        _ = batch.records
    with pytest.raises(CodecError, match="CRC"):
        batch.iter_headers()
    assert batch.to_bytes() == bytes(data)  # forwarding untouched is still possible


SAMPLES = {codec: sample(codec) for codec in CODECS}
slow_ok = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@slow_ok
@given(st.sampled_from(CODECS), st.data())
def test_mutations_raise_only_codec_error(codec, data):
    raw = bytearray(SAMPLES[codec])
    for _ in range(data.draw(st.integers(1, 6))):
        i = data.draw(st.integers(21, len(raw) - 1))  # attributes onwards
        raw[i] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        cut = data.draw(st.integers(61, len(raw)))
        raw = raw[:cut]
    exercise(reseal(raw))


@slow_ok
@given(st.binary(max_size=400))
def test_random_records_section(blob):
    exercise(records_payload(blob, 3))


@slow_ok
@given(st.binary(max_size=200))
def test_random_bytes(blob):
    exercise(blob)
    exercise(struct.pack(">qi", 0, len(blob)) + blob)


def test_invalid_batch_framing():
    with pytest.raises(CodecError):
        split_batches(struct.pack(">qib", 0, 3, 2) + b"\x00" * 20)  # length below minimum
    data = bytearray(sample())
    data[16] = 7
    with pytest.raises(CodecError, match="magic"):
        split_batches(bytes(data))
    data = bytearray(sample())
    struct.pack_into(">i", data, 57, -1)  # negative record count
    with pytest.raises(CodecError):
        split_batches(reseal(data))
    with pytest.raises(CodecError):
        RecordBatch(b"\x00" * 30)


def test_forged_huge_lengths_do_not_allocate_or_hang():
    varint_2g = b"\xfe\xff\xff\xff\x0f"  # zigzag 2**31 - 1
    cases = [
        varint_2g + b"\x00" * 10,  # record length
        b"\x14\x00\x00\x00" + varint_2g + b"\x00" * 10,  # key length
        b"\x14\x00\x00\x00\x00" + varint_2g + b"\x00" * 10,  # value length
        b"\x14\x00\x00\x00\x00\x00" + varint_2g + b"\x00" * 10,  # header count
        b"\x14\x00\x00\x00\x00\x00\x02" + varint_2g + b"\x00" * 10,  # header key length
        b"\x14\x00\x00\x00\x00\x00\x02\x02a" + varint_2g + b"\x00" * 10,  # header value length
        b"\x14" + b"\x80" * 30,  # endless varint
        b"\x14\x00\x00\x00\x03\x00\x00" + b"\x00" * 10,  # key length -2
    ]
    for records in cases:
        start = time.perf_counter()
        with pytest.raises(CodecError):
            _ = split_batches(records_payload(records, 1))[0].records
        with pytest.raises(CodecError):
            split_batches(records_payload(records, 1))[0].iter_headers()
        assert time.perf_counter() - start < 0.5


def test_record_count_must_match():
    data = bytearray(sample(n=4))
    struct.pack_into(">i", data, 57, 2**31 - 1)
    with pytest.raises(CodecError, match="declares"):
        _ = split_batches(reseal(data))[0].records


def test_huge_batch_length_is_a_partial_tail():
    # A forged batchLength of 2 GiB cannot be satisfied: treated as a partial batch (bytes).
    data = bytearray(sample())
    struct.pack_into(">i", data, 8, 2**31 - 1)
    assert split_batches(bytes(data)) == [bytes(data)]


def test_header_count_cannot_exceed_record_size():
    # 1000 headers claimed in a 10-byte record.
    body = b"\x00\x00\x00\x01\x01" + b"\xd0\x0f" + b"\x00\x00\x00"
    records = bytes([len(body) << 1]) + body
    with pytest.raises(CodecError, match="header count"):
        _ = split_batches(records_payload(records, 1))[0].records
