"""Record batches: framing, lazy parsing, header splicing, filtering, building."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD
from protocol.errors import CodecError
from protocol.records import (
    HEADER_SIZE,
    ReadOnlyRecordError,
    Record,
    RecordBatch,
    build_batch,
    join_batches,
    split_batches,
    with_base_sequence,
)

CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]
TS = 1_700_000_000_000


def sample(n: int = 5, **kwargs) -> bytes:
    records = [
        Record(
            f"k{i}".encode(),
            b"v" * (i * 40),
            [("traceparent", f"00-{i}".encode()), ("dup", b"a"), ("dup", None)][: i % 4],
            timestamp_delta=i * 1000,
        )
        for i in range(n)
    ]
    options = dict(base_offset=100, base_timestamp=TS, producer_id=77, producer_epoch=3)
    options.update(kwargs)
    return build_batch(records, **options)


def header_fields(batch: RecordBatch) -> tuple:
    return (
        batch.base_offset,
        batch.partition_leader_epoch,
        batch.attributes,
        batch.last_offset_delta,
        batch.base_timestamp,
        batch.max_timestamp,
        batch.producer_id,
        batch.producer_epoch,
        batch.base_sequence,
    )


def only(data: bytes) -> RecordBatch:
    (batch,) = split_batches(data)
    assert isinstance(batch, RecordBatch)
    return batch


# --- strategies -------------------------------------------------------------------------------

header_keys = st.text(max_size=12)
header_values = st.none() | st.binary(max_size=40)
headers = st.lists(st.tuples(header_keys, header_values), max_size=5)
records = st.lists(
    st.builds(
        Record,
        key=st.none() | st.binary(max_size=30),
        value=st.none() | st.binary(max_size=300),
        headers=headers,
        timestamp_delta=st.integers(0, 2**40),
    ),
    max_size=12,
)
batch_options = st.fixed_dictionaries(
    {
        "compression": st.sampled_from(CODECS),
        "base_offset": st.integers(0, 2**62),
        "base_timestamp": st.integers(-1, 2**45),
        "partition_leader_epoch": st.integers(-1, 2**31 - 1),
        "producer_id": st.integers(-1, 2**62),
        "producer_epoch": st.integers(-1, 2**15 - 1),
        "base_sequence": st.integers(-1, 2**31 - 1),
        "is_transactional": st.booleans(),
        "timestamp_type": st.integers(0, 1),
    }
)
fast = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --- round trips ------------------------------------------------------------------------------


@fast
@given(records, batch_options)
def test_build_split_parse_round_trip(recs, options):
    data = build_batch(recs, **options)
    batch = only(data)
    assert batch.crc_is_valid()
    assert batch.record_count == len(recs)
    assert batch.compression == options["compression"]
    assert batch.is_transactional == options["is_transactional"]
    assert batch.timestamp_type == options["timestamp_type"]
    assert batch.producer_id == options["producer_id"]
    parsed = batch.records
    assert [(r.key, r.value, r.headers, r.timestamp_delta) for r in parsed] == [
        (r.key, r.value, r.headers, r.timestamp_delta) for r in recs
    ]
    assert [r.offset_delta for r in parsed] == list(range(len(recs)))
    assert list(batch.iter_headers()) == [r.headers for r in recs]
    # Reading everything changes nothing: the original bytes go out.
    assert not batch.modified
    assert batch.to_bytes() is data
    assert join_batches([batch]) == data


@fast
@given(records, batch_options, st.data())
def test_header_edits_reencode_and_preserve_everything_else(recs, options, data):
    raw = build_batch(recs, **options)
    batch = only(raw)
    wanted = []
    for rec in batch.records:
        action = data.draw(st.sampled_from(["keep", "append", "replace", "clear", "inplace"]))
        if action == "append":
            rec.headers.append(("herald.hop", b"1"))
            rec.headers.append(("herald.null", None))
        elif action == "replace":
            rec.headers = data.draw(headers)
        elif action == "clear":
            rec.headers = []
        elif action == "inplace" and rec.headers:
            rec.headers[0] = (rec.headers[0][0], b"changed")
        wanted.append(list(rec.headers))
    out = batch.to_bytes()
    again = only(out)
    assert again.crc_is_valid()
    assert len(out) == again.batch_length + 12
    assert header_fields(again) == header_fields(batch)
    assert again.record_count == batch.record_count
    assert [r.headers for r in again.records] == wanted
    assert [r.offset_delta for r in again.records] == list(range(len(recs)))
    assert [(r.key, r.value, r.timestamp_delta) for r in again.records] == [
        (r.key, r.value, r.timestamp_delta) for r in recs
    ]
    assert out == raw or batch.modified


@fast
@given(records, st.data())
def test_appended_tails_encode_like_a_fresh_batch(recs, data):
    """However the tails appended to a batch's records vary (constant runs, per-record ids,
    odd ones out, other lengths), the spliced batch is the one a producer would build."""
    raw = build_batch(recs, base_timestamp=TS)
    batch = only(raw)
    constants = [(f"c{i}", b"const-%d" % i) for i in range(4)]
    for i, rec in enumerate(batch.records):
        if data.draw(st.integers(0, 9)) == 0:
            continue
        tail = [("id", b"%016d" % data.draw(st.integers(0, 10**15))), *constants,
                ("seq", str(i).encode()), ("null", None)]
        if data.draw(st.integers(0, 4)) == 0:
            position = data.draw(st.integers(0, len(tail) - 1))
            tail[position] = (data.draw(st.sampled_from(["c0", "id", "other"])),
                              data.draw(st.sampled_from([None, b"odd", bytearray(b"ba"),
                                                         b"x" * 9000, b"sixteen-bytes-id"])))
        rec.headers.extend(tail[: data.draw(st.sampled_from([len(tail), len(tail), 3]))])
    wanted = [Record(r.key, r.value, r.headers, timestamp_delta=r.timestamp_delta)
              for r in batch.records]
    assert batch.to_bytes() == build_batch(wanted, base_timestamp=TS)


def test_appended_tails_that_break_the_learnt_shape():
    const = [("a", b"1"), ("b", b"2")]
    varying = [
        [("id", b"0001"), *const, ("o", b"x")],
        [("id", b"0002"), *const, ("o", b"x")],  # the shape is learnt here
        [("id", b"0003"), *const, ("o", b"x")],
        [("ix", b"0004"), *const, ("o", b"x")],  # another key, same value length
        [("id", b"00005"), *const, ("o", b"x")],  # another value length
        [("id", None), *const, ("o", b"x")],
        [("id", b"0007"), ("a", b"1"), ("b", b"3"), ("o", b"x")],  # a constant changed
        [("id", b"0008"), *const],  # shorter
        [("id", b"0009"), *const, ("o", bytearray(b"x"))],  # equal, not the same type
    ]
    constant = [[*const, ("o", b"x")]] * 3 + [
        [*const, ("o", b"y")], [*const, ("o", bytearray(b"x"))], [*const], [("a", b"1")],
        [("a", b"1")], [("a", b"1")], [("a", b"2")], [], [("a", b"1")],
    ]
    for tails in (varying, constant):
        batch = only(build_batch([Record(b"k", b"v") for _ in tails], base_timestamp=TS))
        for rec, tail in zip(batch.records, tails, strict=True):
            rec.headers.extend(tail)
        assert batch.to_bytes() == build_batch(
            [Record(b"k", b"v", tail) for tail in tails], base_timestamp=TS)


def test_current_headers_and_take_headers_skip_the_copies():
    batch = only(sample(3))
    rec = batch.records[2]
    original = rec.current_headers()
    assert original == [("traceparent", b"00-2"), ("dup", b"a")]
    assert rec.current_headers() is original and not batch.modified  # no copy was made
    new = [*original, ("x", b"1")]
    rec.take_headers(new)
    assert rec.headers is new and rec.current_headers() is new and batch.modified
    assert only(batch.to_bytes()).records[2].headers == new
    control = only(build_batch([Record(None, b"c")], is_control=True, base_timestamp=TS))
    with pytest.raises(ReadOnlyRecordError):
        control.records[0].take_headers([])


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_edit_keeps_codec(codec):
    batch = only(sample(50, compression=codec))
    for rec in batch.records:
        rec.headers.append(("x", b"y"))
    again = only(batch.to_bytes())
    assert again.compression == codec
    assert all(r.headers[-1] == ("x", b"y") for r in again.records)


def test_splice_reuses_the_original_record_body():
    data = sample(3)
    batch = only(data)
    rec = batch.records[2]
    key = data.index(b"k2")
    # attributes, timestampDelta 2000 (2 bytes), offsetDelta, key length | key | 2 + 80 value
    body = data[key - 5 : key + 2 + 2 + 80]
    assert body[0] == 0 and body[-1:] == b"v"
    rec.headers = [("only", b"this")]
    out = batch.to_bytes()
    assert body in out
    again = only(out).records[2]
    assert again.key == b"k2" and again.value == b"v" * 80
    assert again.headers == [("only", b"this")]


def test_noop_assignments_leave_batch_untouched():
    data = sample(4)
    batch = only(data)
    for rec in batch.records:
        rec.headers = list(rec.headers)
        rec.key = rec.key
        rec.value = rec.value
    assert not batch.modified
    assert batch.to_bytes() is data


def test_key_and_value_edits():
    batch = only(sample(4, compression=ZSTD))
    batch.records[1].key = None
    batch.records[2].value = b"new value"
    batch.records[3].headers.append(("h", None))
    assert batch.modified and batch.records[1].modified
    again = only(batch.to_bytes()).records
    assert again[1].key is None and again[1].value == b"v" * 40
    assert again[2].value == b"new value" and again[2].key == b"k2"
    assert again[3].headers[-1] == ("h", None)
    assert [r.timestamp_delta for r in again] == [0, 1000, 2000, 3000]
    assert [r.offset_delta for r in again] == [0, 1, 2, 3]


def test_untouched_records_between_edits_are_copied():
    batch = only(sample(10))
    batch.records[4].headers.append(("a", b"b"))
    again = only(batch.to_bytes()).records
    original = only(sample(10)).records
    for i, (a, b) in enumerate(zip(again, original, strict=True)):
        assert a.key == b.key and a.value == b.value
        assert a.headers == b.headers + ([("a", b"b")] if i == 4 else [])


def test_invalid_utf8_header_key_round_trips():
    # Java decodes header keys leniently; we must not reject them, nor alter them on splice.
    rec = Record(b"k", b"v", [("\udcff\udcfekey", b"x")])
    data = build_batch([rec], base_timestamp=TS)
    assert b"\xff\xfekey" in data
    batch = only(data)
    batch.records[0].headers.append(("new", b"1"))
    out = batch.to_bytes()
    assert b"\xff\xfekey" in out
    assert only(out).records[0].headers[0] == ("\udcff\udcfekey", b"x")


def test_header_type_errors():
    batch = only(sample(2))
    batch.records[1].headers.append(("k", "not bytes"))
    with pytest.raises(TypeError):
        batch.to_bytes()
    batch = only(sample(2))
    batch.records[1].headers.append((b"bytes key", b"v"))
    with pytest.raises(TypeError):
        batch.to_bytes()
    with pytest.raises(TypeError):
        Record(key="str")
    batch = only(sample(2))
    batch.records[1].headers.append(("k", 3))  # bytes(3) would be three zero bytes
    with pytest.raises(TypeError):
        batch.to_bytes()


def test_long_fields_use_multibyte_varints():
    big = [Record(b"k" * 10_000, b"v" * 70_000, [("h" * 9000, b"x" * 20_000)])]
    batch = only(build_batch(big, base_timestamp=TS))
    (rec,) = batch.records
    assert len(rec.key) == 10_000 and len(rec.value) == 70_000
    rec.headers.append(("more", b"y" * 9000))
    (again,) = only(batch.to_bytes()).records
    assert again.headers == [("h" * 9000, b"x" * 20_000), ("more", b"y" * 9000)]
    assert again.value == b"v" * 70_000


def test_overlong_varints_are_kept_when_untouched_and_spliced_correctly():
    # A record whose length and key length use redundant continuation bytes (legal varints).
    # attributes, timestampDelta, offsetDelta, key length 3 as 0x86 0x00, key, value, no headers
    body = b"\x00\x00\x00" + b"\x86\x00" + b"abc" + b"\x02z" + b"\x00"
    payload = bytes([len(body) << 1 | 0x80, 0x00]) + body  # length, also two bytes
    crc_part = struct.pack(">hiqqqhii", 0, 0, TS, TS, -1, -1, -1, 1)
    crc = crc32c(payload, crc32c(crc_part))
    data = struct.pack(">qiibI", 0, 49 + len(payload), -1, 2, crc) + crc_part + payload
    batch = only(data)
    (rec,) = batch.records
    assert rec.key == b"abc" and rec.value == b"z" and rec.headers == []
    assert batch.to_bytes() is data
    rec.headers.append(("h", b"1"))
    (again,) = only(batch.to_bytes()).records
    assert (again.key, again.value, again.headers) == (b"abc", b"z", [("h", b"1")])


# --- filtering --------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_remove_records_keeps_offsets(codec):
    data = sample(10, compression=codec)
    batch = only(data)
    assert batch.remove_records(lambda r: r.offset_delta % 3 == 0) == 4
    assert batch.record_count == 6
    again = only(batch.to_bytes())
    assert again.record_count == 6
    assert again.last_offset_delta == 9 and again.base_offset == 100
    assert [r.offset_delta for r in again.records] == [1, 2, 4, 5, 7, 8]
    assert again.compression == codec
    assert header_fields(again) == header_fields(batch)


def test_remove_nothing_leaves_bytes():
    data = sample(5)
    batch = only(data)
    assert batch.remove_records(lambda r: False) == 0
    assert batch.to_bytes() is data


@pytest.mark.parametrize("codec", CODECS)
def test_emptied_batch_stays_as_header(codec):
    batch = only(sample(5, compression=codec, producer_id=9, base_sequence=40))
    batch.remove_records(lambda r: True)
    out = batch.to_bytes()
    assert len(out) == HEADER_SIZE
    again = only(out)
    assert again.record_count == 0 and again.records == []
    assert again.last_offset_delta == 4 and again.base_offset == 100
    assert again.compression == NONE  # as the log cleaner writes empty batches
    assert (again.producer_id, again.base_sequence) == (9, 40)


def test_direct_list_mutation_is_refused():
    batch = only(sample(3))
    del batch.records[0]
    with pytest.raises(ValueError):
        batch.to_bytes()


# --- control batches --------------------------------------------------------------------------


def control_batch() -> bytes:
    marker = Record(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x09")
    return build_batch([marker], base_timestamp=TS, is_control=True, is_transactional=True)


def test_control_records_are_read_only():
    data = control_batch()
    batch = only(data)
    assert batch.is_control
    (rec,) = batch.records
    assert rec.key == b"\x00\x00\x00\x01"
    for field, value in (("key", b"x"), ("value", b"x"), ("headers", [])):
        with pytest.raises(ReadOnlyRecordError):
            setattr(rec, field, value)
    with pytest.raises(ReadOnlyRecordError):
        batch.remove_records(lambda r: True)
    assert batch.to_bytes() is data
    rec.headers.append(("sneaky", b"1"))
    with pytest.raises(ReadOnlyRecordError):
        batch.to_bytes()


# --- framing ----------------------------------------------------------------------------------


def legacy_message(offset: int, magic: int) -> bytes:
    body = struct.pack(">bb", magic, 0) + (struct.pack(">q", TS) if magic else b"")
    body += struct.pack(">i", -1) + struct.pack(">i", 3) + b"abc"
    message = struct.pack(">I", 0) + body  # crc not checked by the splitter
    return struct.pack(">qi", offset, len(message)) + message


def test_split_passes_legacy_and_partial_chunks_through():
    v2a, v2b = sample(3), sample(2, base_offset=103)
    legacy = legacy_message(0, 0) + legacy_message(1, 1)
    partial = sample(4, base_offset=105)[:-7]
    field = legacy + v2a + v2b + partial
    parts = split_batches(field)
    assert [type(p) for p in parts] == [bytes, RecordBatch, RecordBatch, bytes]
    assert parts[0] == legacy and parts[3] == partial
    assert parts[1].raw == v2a and parts[2].raw == v2b
    assert join_batches(parts) == field
    parts[2].records[0].headers.append(("h", b"v"))
    out = join_batches(parts)
    assert out.startswith(legacy + v2a) and out.endswith(partial)
    assert only(split_batches(out)[2].raw).records[0].headers[-1] == ("h", b"v")


@pytest.mark.parametrize("cut", [1, 11, 12, 16, 17, 60, 61])
def test_split_short_tail_is_raw(cut):
    data = sample(2)
    parts = split_batches(data + data[:cut])
    assert parts[-1] == data[:cut]
    assert isinstance(parts[0], RecordBatch)


def test_split_accepts_memoryview_and_bytearray():
    data = sample(2) + sample(3, base_offset=102)
    for view in (memoryview(data), bytearray(data)):
        parts = split_batches(view)
        assert join_batches(parts) == data
        assert [p.record_count for p in parts] == [2, 3]


def test_split_empty():
    assert split_batches(b"") == []
    assert join_batches([]) == b""


def test_batch_views_do_not_copy_until_needed():
    data = sample(3) + sample(3, base_offset=103)
    first, second = split_batches(data)
    assert second.raw == data[len(first) :]
    assert len(second) == len(data) - len(first)
    assert second.to_bytes() == second.raw


def test_build_with_own_offsets_for_gaps():
    recs = [Record(b"a", b"1", offset_delta=0), Record(b"b", b"2", offset_delta=5)]
    batch = only(build_batch(recs, base_timestamp=TS, assign_offsets=False, last_offset_delta=9))
    assert [r.offset_delta for r in batch.records] == [0, 5]
    assert batch.last_offset_delta == 9


def test_record_repr_and_equality():
    a = Record(b"k", b"v", [("h", b"1")])
    assert a == Record(b"k", b"v", [("h", b"1")])
    assert a != Record(b"k", b"v", [("h", b"2")])
    assert "h" in repr(a)


def test_max_decompressed_limit_applies():
    data = build_batch([Record(b"k", bytes(200_000))], compression=ZSTD, base_timestamp=TS)
    (batch,) = split_batches(data, max_decompressed=100_000)
    with pytest.raises(CodecError):
        _ = batch.records
    assert split_batches(data)[0].records[0].value == bytes(200_000)


def test_empty_batch_with_codec_bits_is_not_decompressed():
    crc_part = struct.pack(">hiqqqhii", LZ4, 4, TS, TS, 1, 0, 0, 0)
    data = struct.pack(">qiibI", 0, 49, -1, 2, crc32c(crc_part)) + crc_part
    batch = only(data)
    assert batch.records == [] and list(batch.iter_headers()) == []
    assert batch.to_bytes() is data


def test_attribute_flags():
    data = bytearray(sample(2, compression=SNAPPY, timestamp_type=1, is_transactional=True))
    batch = only(bytes(data))
    assert (batch.compression, batch.timestamp_type, batch.is_transactional) == (SNAPPY, 1, True)
    assert not batch.is_control and not batch.has_delete_horizon
    assert batch.last_offset == 101
    struct.pack_into(">h", data, 21, batch.attributes | 0x40)
    assert only(bytes(data)).has_delete_horizon


@pytest.mark.parametrize("codec", CODECS)
def test_a_batch_under_another_base_sequence_is_resealed_as_built(codec: int) -> None:
    """The bytes are those a batch built with that base sequence has: the header field and
    the CRC change, the (compressed) records do not."""
    raw = sample(compression=codec, base_sequence=5)
    moved = with_base_sequence(raw, 42)
    assert moved == sample(compression=codec, base_sequence=42)
    [batch] = split_batches(moved)
    assert batch.base_sequence == 42 and batch.crc_is_valid()
    assert with_base_sequence(memoryview(moved), -1)[HEADER_SIZE - 8:HEADER_SIZE - 4] == (
        b"\xff" * 4)
