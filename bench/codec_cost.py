"""The codec's share of a compressed producer's cost through Herald, measured apart.

A relay passes compressed batches as they are; Herald, stamping headers into every record,
decompresses each batch and compresses it again. Here that work alone runs on batches shaped
like the producer's (bench/payloads.py: the same payloads, the producer's batch size), with
the native engine's own codec (`codec_decompress` / `codec_compress` of `proxy.native._relay`,
what the data plane calls), or Herald's Python codec where the engine is not built. The figure
is CPU milliseconds per MB of record payload, the unit of bench_production.py's table, so the
two compare: the codec's share of `production` is this figure over production's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from bench.payloads import Payload, batch_values, producer_batches, records_section
from protocol import compression
from protocol.compression import LZ4

try:
    from proxy.native import _relay
except ImportError:  # the engine not built: Herald's Python codec does the work instead
    _relay = None

_LIMIT = 64 << 20


@dataclass(frozen=True)
class CodecCost:
    payload: str
    engine: str  # "native" or "python": whose codec was measured
    decompress_ms_per_mb: float
    compress_ms_per_mb: float

    @property
    def total_ms_per_mb(self) -> float:
        return self.decompress_ms_per_mb + self.compress_ms_per_mb


def _codec() -> tuple[str, Callable[[bytes], bytes], Callable[[bytes], bytes]]:
    if _relay is not None:
        def unpack(data: bytes) -> bytes:
            out = _relay.codec_decompress(LZ4, data, _LIMIT)
            if not isinstance(out, bytes):
                raise RuntimeError(f"the engine could not read a batch: {out[1]}")
            return out
        return "native", unpack, lambda data: _relay.codec_compress(LZ4, data)
    return ("python", lambda data: compression.decompress(LZ4, data, _LIMIT),
            lambda data: compression.compress(LZ4, data))


def codec_cost(payload: Payload, min_seconds: float = 1.0, batches: int = 64) -> CodecCost:
    """Decompress then recompress `batches` lz4 batches of `payload`, over and over for at
    least `min_seconds` of CPU; each direction timed on its own with this process's CPU
    clock."""
    engine, unpack, pack = _codec()
    values = batch_values(payload, batches)
    sections = [records_section(b) for b in producer_batches(values)]
    plain = [unpack(s) for s in sections]
    for data in plain:  # the engine's own output must read back as the same records
        if unpack(pack(data)) != data:
            raise RuntimeError("lz4 round trip changed the records")
    mb = sum(len(v) for batch in values for v in batch) / 1e6
    unpack_cpu = pack_cpu = 0.0
    passes = 0
    while unpack_cpu + pack_cpu < min_seconds:
        start = time.process_time()
        for s in sections:
            unpack(s)
        middle = time.process_time()
        for data in plain:
            pack(data)
        unpack_cpu += middle - start
        pack_cpu += time.process_time() - middle
        passes += 1
    return CodecCost(payload.name, engine, unpack_cpu * 1000 / (mb * passes),
                     pack_cpu * 1000 / (mb * passes))

