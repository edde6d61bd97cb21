"""Compressed Produce requests for the engine's codecs, and the comparison of what the engine
and Python make of them batch by batch."""

from __future__ import annotations

import random

from protocol.compression import LZ4
from protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from protocol.records import RecordBatch, build_batch, split_batches
from proxy.net.wire import decode_request, parse_request_header
from tests.support.native import stamp as stamp_tests

SAME_BYTES = (LZ4,)


def compressed_request(rng: random.Random, codec: int, traced: float, partitions: int = 2,
                       batches: int = 1, mixed: bool = False) -> ProduceRequest:
    """Batches of `codec` (with `mixed`, every other partition uncompressed)."""
    parts = []
    for p in range(partitions):
        codec_here = 0 if mixed and p % 2 else codec
        chunk = b"".join(
            build_batch(stamp_tests.records(rng, rng.randrange(1, 60), traced),
                        compression=codec_here, producer_id=rng.choice((-1, 42)),
                        producer_epoch=1, base_sequence=rng.choice((-1, 100)),
                        is_transactional=rng.random() < 0.3,
                        base_timestamp=stamp_tests.NOW - 5)
            for _ in range(batches))
        parts.append(PartitionProduceData(index=p, records=chunk))
    return ProduceRequest(acks=-1, timeout_ms=30_000, topic_data=[
        TopicProduceData(name="topic-0", topic_id=stamp_tests.topic_id(0),
                         partition_data=parts)])


HEADER_FIELDS = ("base_offset", "partition_leader_epoch", "magic", "attributes",
                 "last_offset_delta", "base_timestamp", "max_timestamp", "producer_id",
                 "producer_epoch", "base_sequence", "record_count")


def batches_of(data: bytes) -> list[RecordBatch]:
    payload = data[4:]
    _, msg = decode_request(parse_request_header(payload), payload)
    return [b for t in msg.topic_data for p in t.partition_data
            for b in split_batches(p.records or b"")]


def assert_same_batches(native: bytes, python: bytes, codec: int) -> None:
    """The same batches: every header field but length and CRC, valid CRCs, the same records
    once decompressed; for the codecs that write the same bytes, the same frame."""
    got, want = batches_of(native), batches_of(python)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert [getattr(g, f) for f in HEADER_FIELDS] == [getattr(w, f) for f in HEADER_FIELDS]
        assert g.crc_is_valid() and w.crc_is_valid()
        gb, gs, ge = g.records_section()
        wb, ws, we = w.records_section()
        assert bytes(gb[gs:ge]) == bytes(wb[ws:we])
    if codec in SAME_BYTES:
        assert native == python
