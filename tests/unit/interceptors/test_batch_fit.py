"""`interceptors.batch_fit`: an enlarged batch is re-encoded to fit without changing what
the broker checks, or refused with a message that says what to change."""

from __future__ import annotations

import os
import uuid

import pytest

from interceptors.batch_fit import TooLarge, fit
from protocol.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD
from protocol.records import Record, RecordBatch, build_batch


def client_batch(n: int = 2000, compression: int = NONE) -> RecordBatch:
    records = [Record(b"k-%06d" % i, b'{"order": %d, "status": "created"}' % i,
                      offset_delta=i, timestamp_delta=i) for i in range(n)]
    return RecordBatch(build_batch(records, compression=compression, producer_id=4242,
                                   producer_epoch=3, base_sequence=777, is_transactional=True))


def enrich(batch: RecordBatch) -> bytes:
    """Headers like trace_context + audit: about 300 bytes a record, random ids included."""
    for rec in batch.records:
        rec.headers = [
            ("traceparent", f"00-{os.urandom(16).hex()}-{os.urandom(8).hex()}-01".encode()),
            ("herald.msg_id", str(uuid.uuid4()).encode()),
            ("herald.client_id", b"checkout-service"),
            ("herald.principal", b"User:ANONYMOUS"),
            ("herald.source", b"10.0.3.17:51234"),
            ("herald.proxy", b"herald-7c9f8d6b5-x2x9q"),
            ("herald.cluster", b"Hk3oXbq5S8W0gGkZbY9cQw"),
            ("herald.time", b"1795508318476"),
        ]
    return batch.to_bytes()


def same_for_the_broker(a: RecordBatch, b: RecordBatch) -> None:
    for field in ("base_offset", "last_offset_delta", "base_timestamp", "max_timestamp",
                  "producer_id", "producer_epoch", "base_sequence", "record_count",
                  "is_transactional", "timestamp_type"):
        assert getattr(a, field) == getattr(b, field), field
    assert b.crc_is_valid()
    assert [(r.key, r.value, r.headers, r.offset_delta, r.timestamp_delta) for r in a.records] \
        == [(r.key, r.value, r.headers, r.offset_delta, r.timestamp_delta) for r in b.records]


@pytest.mark.parametrize("codec", [NONE, GZIP, SNAPPY, LZ4])
def test_an_enlarged_batch_is_recompressed_to_fit(codec: int) -> None:
    batch = client_batch(compression=codec)
    encoded = enrich(batch)
    # 2000 records: about 105 KB uncompressed as the client sent them, 740 KB with the
    # headers; zstd brings them back under 130 KB (the random ids do not compress).
    limit = 130_000
    assert len(batch) < limit < len(encoded)
    result = fit(batch, encoded, limit, produce_version=9)
    assert not isinstance(result, TooLarge)
    data, new_codec = result
    assert new_codec == ZSTD and len(data) <= limit
    fitted = RecordBatch(data)
    assert fitted.compression == ZSTD
    same_for_the_broker(batch, fitted)


def test_before_produce_v7_zstd_is_not_used() -> None:
    batch = client_batch()
    encoded = enrich(batch)
    data, codec = fit(batch, encoded, 150_000, produce_version=6)
    assert codec == GZIP and len(data) <= 150_000
    same_for_the_broker(batch, RecordBatch(data))


def test_a_batch_that_fits_or_never_fitted_is_left_as_encoded() -> None:
    batch = client_batch()
    encoded = enrich(batch)
    assert fit(batch, encoded, len(encoded), 9) == (encoded, None)
    assert fit(batch, encoded, len(batch) - 1, 9) == (encoded, None)  # the client's own fault


def test_when_nothing_fits_the_refusal_says_by_how_much_and_what_to_change() -> None:
    batch = client_batch()
    before = len(batch)
    encoded = enrich(batch)
    result = fit(batch, encoded, before, 9)
    assert isinstance(result, TooLarge)
    assert (result.limit, result.before, result.after) == (before, before, len(encoded))
    assert before < result.best < len(encoded)
    message = result.message("orders")
    assert f"record batch of {before} bytes grew to {len(encoded)} bytes" in message
    assert f"over the limit of {before} bytes of topic orders (max.message.bytes)" in message
    assert "batch.size" in message and "raise the topic's max.message.bytes" in message
