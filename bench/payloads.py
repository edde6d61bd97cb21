"""Record payloads for the producer benchmarks, and what lz4 makes of them.

ProducerPerformance's own payloads (`--record-size`) are random capital letters: lz4 shrinks
them by a few percent, while real records (JSON, Avro) shrink 2-5x, so a compressed figure
measured on them alone says little about the codec's share of real traffic. `json` events
come from a fixed seed, so every run sends the same records: one event per line of a payload
file, from which ProducerPerformance (`--payload-file`) picks one at random per record.

`lz4_ratio` compresses batches shaped like the producer's (records of the same payloads,
filling `batch_bytes`) with Herald's own codec (protocol/compression.py), so the ratio printed
is the one the broker and Herald see.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from protocol.compression import LZ4, NONE
from protocol.records import Record, build_batch

PAYLOADS = ("random", "json")
SEED = 20240613
BATCH_BYTES = 16_384  # the Java producer's default batch.size
_HEADER = 61  # a record batch's fixed header, before its records section


@dataclass(frozen=True)
class Payload:
    name: str
    file: Path | None  # the --payload-file, or None for ProducerPerformance's random records
    values: tuple[bytes, ...]  # what the records carry (a sample, for the random ones)

    @property
    def mean_size(self) -> float:
        """Bytes of payload per record: the file's lines are picked uniformly."""
        return sum(map(len, self.values)) / len(self.values)


def random_payload(record_size: int, count: int = 256, seed: int = SEED) -> Payload:
    """Records as ProducerPerformance makes them: `record_size` letters A-Z drawn at random
    (this sample stands in for them in `lz4_ratio` and the codec measurement)."""
    rng = random.Random(seed)
    letters = bytes(range(65, 91))
    values = tuple(bytes(rng.choices(letters, k=record_size)) for _ in range(count))
    return Payload("random", None, values)


def json_payload(folder: Path, record_size: int, count: int = 2000,
                 seed: int = SEED) -> Payload:
    """`count` JSON events of about `record_size` bytes (a page view with its context and a
    cart of items, the shape of a clickstream), one per line of a file in `folder`."""
    rng = random.Random(seed)
    values = tuple(_event(rng, record_size).encode() for _ in range(count))
    path = folder / "payload-json.txt"
    path.write_bytes(b"\n".join(values) + b"\n")
    return Payload("json", path, values)


_PAGES = ("/", "/search", "/cart", "/checkout", "/account", "/product/{}", "/category/{}")
_AGENTS = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/124.0 Safari/537.36",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, "
    "like Gecko) Version/17.4 Mobile/15E148 Safari/604.1",
    "Mozilla/5.0 (X11; Linux x86_64; rv:125.0) Gecko/20100101 Firefox/125.0",
)
_COUNTRIES = ("DE", "FR", "US", "GB", "NL", "ES", "IT", "PL", "SE", "BR", "JP", "IN")
_EVENTS = ("page_view", "add_to_cart", "remove_from_cart", "search", "purchase", "login")


def _event(rng: random.Random, size: int) -> str:
    event = {
        "event_id": f"{rng.getrandbits(128):032x}",
        "type": rng.choice(_EVENTS),
        "ts": 1_718_000_000_000 + rng.randrange(86_400_000),
        "user": {"id": f"u-{rng.randrange(1_000_000):07d}", "country": rng.choice(_COUNTRIES),
                 "logged_in": rng.random() < 0.6},
        "session": {"id": f"{rng.getrandbits(64):016x}", "agent": rng.choice(_AGENTS),
                    "page": rng.choice(_PAGES).format(rng.randrange(10_000)),
                    "referrer": rng.choice(("", "https://www.example.com/", "email", "ads"))},
        "items": [],
    }
    while len(json.dumps(event, separators=(",", ":"))) < size - 90:
        event["items"].append({"sku": f"SKU-{rng.randrange(100_000):06d}",
                               "qty": rng.randrange(1, 5),
                               "price_cents": rng.randrange(199, 99_999),
                               "currency": "EUR"})
    return json.dumps(event, separators=(",", ":"))


def batch_values(payload: Payload, count: int, batch_bytes: int = BATCH_BYTES,
                 seed: int = SEED) -> list[list[bytes]]:
    """The values of `count` batches as the Java producer fills them: the payload's values,
    picked at random, until the next would pass `batch_bytes`."""
    rng = random.Random(seed)
    batches = []
    for _ in range(count):
        values: list[bytes] = []
        size = 0
        while True:
            value = rng.choice(payload.values)
            if values and size + len(value) > batch_bytes:
                break
            values.append(value)
            size += len(value)
        batches.append(values)
    return batches


def producer_batches(values: list[list[bytes]], codec: int = LZ4) -> list[bytes]:
    """Record batches of `values` (from `batch_values`), compressed with `codec` by Herald's
    own encoder."""
    return [build_batch([Record(value=v) for v in batch], compression=codec, base_timestamp=0)
            for batch in values]


def records_section(batch: bytes) -> bytes:
    """The (compressed) records of a batch, after its fixed header."""
    return batch[_HEADER:]


def lz4_ratio(payload: Payload, batches: int = 64, batch_bytes: int = BATCH_BYTES) -> float:
    """How many times smaller lz4 makes the records of producer-shaped batches."""
    values = batch_values(payload, batches, batch_bytes)
    raw = producer_batches(values, codec=NONE)
    packed = producer_batches(values, codec=LZ4)
    return (sum(len(records_section(b)) for b in raw)
            / sum(len(records_section(b)) for b in packed))
