"""Keep a batch the chain enlarged under the size limit the broker enforces.

A client sizes its batches for the broker's limit (librdkafka's default batch is 1,000,000
bytes, the broker's limit 1,048,588), and headers the chain adds can push a full batch over
it: the broker would refuse it with MESSAGE_TOO_LARGE, and the client, which did nothing
wrong, would lose its records. Compression is the lever that changes nothing the broker
checks (record count, offsets, sequences, timestamps, flags) and enriched headers compress
very well, so such a batch is re-encoded with stronger codecs until one fits. Only when none
does is the partition refused, with a message that says by how much and what to change.
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol.compression import GZIP, LZ4, ZSTD
from protocol.records import RecordBatch

ZSTD_MIN_PRODUCE_VERSION = 7
"""Brokers refuse zstd batches in Produce requests older than v7 (KIP-110)."""


def attempts(produce_version: int) -> tuple[tuple[int, int | None], ...]:
    """(codec, level) pairs to try, cheapest first."""
    if produce_version >= ZSTD_MIN_PRODUCE_VERSION:
        return ((ZSTD, 3), (ZSTD, 12), (GZIP, 9))
    return ((LZ4, None), (GZIP, 9))


@dataclass(frozen=True, slots=True)
class TooLarge:
    """No encoding brought the batch under the limit."""

    limit: int
    before: int  # the batch as the client sent it
    after: int  # with the chain's headers, as the client encoded it
    best: int  # the smallest re-encoding tried

    def message(self, topic: str) -> str:
        # The client batch size that would have fitted, at the growth this batch saw.
        suggested = max(1, self.before * self.limit // max(self.best, 1) * 9 // 10)
        return (
            f"record batch of {self.before} bytes grew to {self.after} bytes with the headers "
            f"Herald adds ({self.best} bytes at best recompressed), over the limit of "
            f"{self.limit} bytes of topic {topic} (max.message.bytes); lower the producer's "
            f"batch.size (and message.max.bytes for librdkafka) to about {suggested} bytes, "
            "or raise the topic's max.message.bytes"
        )


def fit(batch: RecordBatch, encoded: bytes, limit: int, produce_version: int
        ) -> tuple[bytes, int | None] | TooLarge:
    """`encoded` (the changed batch in its own codec) if it fits or the client's batch did
    not fit either; else a re-encoding that fits and its codec; else `TooLarge`."""
    before = len(batch)
    if len(encoded) <= limit or before > limit:
        return encoded, None
    best = len(encoded)
    for codec, level in attempts(produce_version):
        if codec == batch.compression and level is None:
            continue
        data = batch.to_bytes(codec=codec, level=level)
        if len(data) <= limit:
            return data, codec
        best = min(best, len(data))
    return TooLarge(limit, before, len(encoded), best)
