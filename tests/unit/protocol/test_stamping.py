"""The batch stamping fast path: the native module and the Python reference agree, and the
records they write read back as the originals plus the appended headers."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import stamping
from protocol.compression import GZIP, NONE, ZSTD
from protocol.errors import CodecError
from protocol.records import Record, RecordBatch, build_batch
from tests.support.native_parts import STAMPER, needs
from tests.support.records import records_payload, reseal

needs_native = needs(STAMPER)

keys = st.sampled_from(["a", "traceparent", "herald.msg_id", "herald.", "x-é", "tr", ""])
values = st.none() | st.binary(max_size=300)
headers = st.lists(st.tuples(keys, values), max_size=5)
records = st.lists(
    st.builds(Record, st.none() | st.binary(max_size=20), st.none() | st.binary(max_size=2000),
              headers, timestamp_delta=st.integers(-5, 10**9)),
    min_size=1, max_size=12)


def batch(recs, codec=NONE) -> RecordBatch:
    return RecordBatch(build_batch(recs, compression=codec, producer_id=3, base_sequence=9))


def implementations():
    yield "python", stamping._py_watched, stamping._py_append
    if stamping.NATIVE:
        yield "native", stamping._native.watched, stamping._native.append


@settings(max_examples=300, deadline=None)
@given(records, st.lists(keys, max_size=3), st.lists(keys, max_size=2))
def test_watched_finds_records_with_a_watched_header(recs, watch_keys, watch_prefixes):
    buf, start, end = batch(recs).records_section()
    wk = stamping.wire_keys(watch_keys)
    wp = stamping.wire_keys(watch_prefixes)
    expected = [i for i, r in enumerate(recs)
                if any(k in watch_keys or k.startswith(tuple(watch_prefixes))
                       for k, _ in r.headers)]
    for _name, watched, _ in implementations():
        assert watched(buf, start, end, len(recs), wk, wp) == expected


@settings(max_examples=300, deadline=None)
@given(records, st.lists(st.tuples(keys, values), max_size=4), st.data())
def test_append_reads_back_as_originals_plus_headers(recs, added, data):
    original = batch(recs)
    buf, start, end = original.records_section()
    # Each appended header is shared by all records, made per record in wire form, or made
    # per record as values behind a shared key (a null value for every other record).
    columns, per_record = [], []
    for key, value in added:
        form = data.draw(st.sampled_from(["shared", "wire", "values"]))
        if form == "shared":
            columns.append(stamping.headers_wire([(key, value)]))
            per_record.append([(key, value)] * len(recs))
        elif form == "wire":
            own = [(key, b"%d" % i + (value or b"")) for i in range(len(recs))]
            columns.append([stamping.headers_wire([h]) for h in own])
            per_record.append(own)
        else:
            own = [(key, None if i % 2 else b"v" * (i * 40)) for i in range(len(recs))]
            columns.append(stamping.value_column(key, [v for _, v in own]))
            per_record.append(own)
    outputs = {name: append(buf, start, end, len(recs), len(added), tuple(columns))
               for name, _, append in implementations()}
    assert len(set(outputs.values())) == 1  # native and Python write the same bytes
    stamped = batch(recs)
    stamping.append(stamped, len(added), columns)
    again = RecordBatch(stamped.to_bytes())
    assert again.crc_is_valid()
    assert (again.producer_id, again.base_sequence, again.record_count) == (3, 9, len(recs))
    for i, (before, after) in enumerate(zip(recs, again.records, strict=True)):
        assert (after.key, after.value, after.timestamp_delta, after.offset_delta) == (
            before.key, before.value, before.timestamp_delta, i)
        assert after.headers == before.headers + [col[i] for col in per_record]


@pytest.mark.parametrize("codec", [NONE, GZIP, ZSTD])
def test_append_keeps_the_codec_and_records_can_be_read_and_edited_after(codec):
    recs = [Record(b"k", b"v" * 100, [("a", b"1")]) for _ in range(4)]
    b = batch(recs, codec)
    assert stamping.watched(b, (b"a",), ()) == [0, 1, 2, 3]
    assert stamping.watched(b, (b"b",), (b"x",)) == []
    stamping.append(b, 1, [stamping.headers_wire([("t", b"2")])])
    assert b.modified
    b.records[0].headers.append(("late", None))
    out = RecordBatch(b.to_bytes())
    assert out.compression == codec
    assert [r.headers for r in out.records] == (
        [[("a", b"1"), ("t", b"2"), ("late", None)]] + [[("a", b"1"), ("t", b"2")]] * 3)


def test_replacing_records_that_were_read_is_refused():
    b = batch([Record(b"k", b"v")])
    _ = b.records
    with pytest.raises(ValueError):
        stamping.append(b, 1, [stamping.headers_wire([("t", b"2")])])


def test_keys_that_are_not_text_are_left_to_the_record_path():
    assert stamping.wire_keys(["ok", "é"]) == (b"ok", "é".encode())
    assert stamping.wire_keys(["\udcff"]) is None


def test_header_head_is_the_wire_form_up_to_the_value():
    assert stamping.header_head("msg", 3) + b"abc" == stamping.headers_wire([("msg", b"abc")])


@pytest.mark.parametrize("columns", [
    ([b"x"],),  # a list shorter than the records
    ("text",),
    ([b"x", "y"],),
    ((b"\x02k", [b"x"]),),  # values for fewer records
    ((b"\x02k", [b"x", "y"]),),
    ((b"\x02k", [b"x", b"y"], b"z"),),
])
def test_bad_columns_are_refused_by_both(columns):
    buf, start, end = batch([Record(b"k", b"v"), Record(b"k", b"w")]).records_section()
    for _name, _, append in implementations():
        with pytest.raises(TypeError):
            append(buf, start, end, 2, 1, columns)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=300), st.integers(0, 4))
def test_hostile_records_fail_alike(blob, count):
    """Random record bytes: both implementations raise CodecError, or agree."""
    b = RecordBatch(records_payload(blob, count))
    results = []
    for _name, watched, append in implementations():
        try:
            buf, start, end = b.records_section()
            results.append((watched(buf, start, end, count, (b"a",), (b"h",)),
                            append(buf, start, end, count, 1, (b"\x02a\x00",))))
        except (CodecError, ValueError) as exc:
            results.append(type(exc))
    assert all(r == results[0] or {r, results[0]} <= {CodecError, ValueError} for r in results)


@settings(max_examples=300, deadline=None)
@given(records, st.data())
def test_mutated_batches_fail_alike(recs, data):
    raw = bytearray(batch(recs).to_bytes())
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(61, len(raw) - 1))
        raw[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(61, len(raw)))
    b = RecordBatch(reseal(raw[:cut]))
    outcomes = []
    for _name, watched, append in implementations():
        buf, start, end = b.records_section()
        try:
            outcomes.append((watched(buf, start, end, len(recs), (b"a",), ()),
                             append(buf, start, end, len(recs), 1, (b"\x02a\x00",))))
        except (CodecError, ValueError):
            outcomes.append("error")
    assert len(set(map(repr, outcomes))) == 1


@needs_native
def test_native_errors_become_codec_errors():
    b = RecordBatch(records_payload(b"\x09\x00", 1))
    with pytest.raises(CodecError):
        stamping.watched(b, (), ())
    with pytest.raises(CodecError):
        stamping.append(b, 0, [])


def hex_columns():
    yield stamping._py_hex_column
    if stamping.NATIVE:
        yield stamping._native.hex_column


spec_parts = st.tuples(st.binary(max_size=4), st.integers(-1, 6))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=6), st.integers(0, 6), st.integers(0, 8),
       st.lists(spec_parts, max_size=4), st.data())
def test_hex_column_cuts_values_from_the_digits(head, n, chunk, spec, data):
    raw = data.draw(st.binary(min_size=n * chunk, max_size=n * chunk))
    spec = tuple(spec)
    wanted = sum(1 if k < 0 else k for _, k in spec)
    results = []
    for hex_column in hex_columns():
        try:
            results.append(hex_column(head, raw, n, chunk, spec))
        except ValueError:
            results.append("error")
    assert len(set(map(repr, results))) == 1
    if wanted > 2 * chunk:
        assert results[0] == "error"
        return
    assert len(results[0]) == n
    for i, value in enumerate(results[0]):
        digits = raw[(n - 1 - i) * chunk:(n - i) * chunk].hex().encode()
        expected, d = [head], 0
        for literal, k in spec:
            if k < 0:
                expected.append(literal + b"89ab"[int(digits[d:d + 1], 16) % 4:][:1])
                d += 1
            else:
                expected.append(literal + digits[d:d + k])
                d += k
        assert value == b"".join(expected)


def test_hex_column_refuses_raw_of_the_wrong_size():
    for hex_column in hex_columns():
        with pytest.raises(ValueError):
            hex_column(b"", b"abc", 2, 2, ())
        with pytest.raises(ValueError):
            hex_column(b"", b"ab", 1, 2, ((b"", -2),))
