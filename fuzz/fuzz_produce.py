"""Mutation fuzzing of the produce path: record batches through the chain and back out.

Seeds are record batches as producers write them (every codec, with and without headers,
idempotent and transactional, control batches, several batches in one field). Each round
mutates one, either as bytes on the wire (CRC and all) or inside its records, re-sealed with
a valid CRC so the records parser and the chain are reached, and runs it the way Herald does
a Produce partition: the record and decompression limits, the chain `[trace_context, audit,
insert_header]`, re-encoding, and fitting to a small size limit. It checks that:

* nothing but CodecError escapes (a refusal by a limit is an answer, not a failure);
* a partition the chain accepts comes out with the same record count, offsets, producer id,
  epoch, sequence and flags in every batch; a batch it changed has a valid CRC, every record
  stamped, and is no larger than the limit unless the client's batch already was (a batch
  it did not change leaves byte-identical, even with a bad CRC: the broker judges it);
* no input costs more than a second of CPU.

A failing input is written to ``--crash-dir`` and the run exits with status 1.

    python fuzz/fuzz_produce.py --inputs 1000000 [--seed N] [--crash-dir fuzz/crashes]
"""

from __future__ import annotations

import argparse
import pathlib
import random
import struct
import sys
import time
import traceback
from typing import Any

REPO = pathlib.Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from crc32c import crc32c  # noqa: E402

from fuzz.fuzz_decoders import mutate, save_crash  # noqa: E402
from interceptors import ConnectionInfo, build_chains  # noqa: E402
from protocol.compression import CODEC_NAMES, compress  # noqa: E402
from protocol.errors import CodecError  # noqa: E402
from protocol.records import Record, RecordBatch, build_batch, split_batches  # noqa: E402
from proxy.filters.interception import (  # noqa: E402
    RequestAllowance,
    _count_records,
    _decompress,
    _join,
    _Refused,
)

SLOW_SECONDS = 1.0
LIMIT = 2048  # a small topic limit, so fitting and refusing both happen
PER_BATCH = 1 << 20
CHAIN = {"produce": [{"type": "trace_context"}, {"type": "audit"},
                     {"type": "insert_header", "header": "app.id", "value": "fuzz"}]}
_HEAD = struct.Struct(">qiibIhiqqqhii")  # the 61-byte batch header
_BROKER_FIELDS = ("base_offset", "last_offset_delta", "base_timestamp", "max_timestamp",
                  "producer_id", "producer_epoch", "base_sequence", "record_count",
                  "is_transactional", "is_control", "timestamp_type")


def seeds(rng: random.Random) -> list[bytes]:
    out = []
    for codec in CODEC_NAMES:
        for n in (1, 3, 40):
            records = []
            for i in range(n):
                headers = rng.choice([
                    [],
                    [("traceparent", b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")],
                    [("herald.principal", b"User:admin"), ("k", None), ("k", b"v")],
                    [("tracestate", b"a=1,b=2"), ("traceparent", b"ff-00")],
                ])
                records.append(Record(rng.choice([None, b"key-%d" % i]),
                                      rng.choice([None, b"", b"value-%d" % i * 5]), headers,
                                      offset_delta=i, timestamp_delta=i))
            out.append(build_batch(records, compression=codec, producer_id=7, producer_epoch=1,
                                   base_sequence=rng.randrange(1000),
                                   is_transactional=rng.random() < 0.3))
    out.append(build_batch([Record(b"\x00\x00", b"\x00\x00\x00\x00\x00\x00")], is_control=True,
                           is_transactional=True))
    out.append(out[0] + out[4])
    return out


def reseal(data: bytes) -> bytes:
    """Give the first batch of `data` a length and CRC that match its bytes."""
    if len(data) < 61 or data[16] != 2:
        return data
    buf = bytearray(data)
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    struct.pack_into(">I", buf, 17, crc32c(bytes(buf[21:])))
    return bytes(buf)


def mutate_records(rng: random.Random, data: bytes, other: bytes) -> bytes:
    """Mutate the uncompressed records of a valid batch, then compress and seal them."""
    try:
        batch = RecordBatch(data[: 12 + struct.unpack_from(">i", data, 8)[0]])
        buf, start, end = batch.records_section()
    except (CodecError, struct.error):
        return mutate(rng, data, other)
    payload = mutate(rng, bytes(buf[start:end]), other)
    body = compress(batch.compression, payload) if batch.compression else payload
    count = batch.record_count if rng.random() < 0.8 else rng.choice([0, 1, 2, 1000, -1])
    head = bytearray(data[:61])
    struct.pack_into(">i", head, 57, count)
    return reseal(bytes(head) + body)


def check(chain: Any, data: bytes, version: int) -> str:
    """Run one partition the way Herald does; return what happened, raise on a violation."""
    try:
        batches = split_batches(data, max_decompressed=PER_BATCH)
        allowance = RequestAllowance(10_000, 4 * PER_BATCH)
        _count_records(batches, 5_000, allowance)
        _decompress(batches, PER_BATCH, allowance)
        originals = [(b.raw, {f: getattr(b, f) for f in _BROKER_FIELDS})
                     for b in batches if isinstance(b, RecordBatch)]
        conn = ConnectionInfo("fuzz", "127.0.0.1:9", None)
        outcome = chain.process("orders", 0, batches, conn, traces=True)
    except (CodecError, _Refused):
        return "refused"
    if not outcome.ok:
        return "rejected"
    try:
        joined = _join(batches, LIMIT, version)
    except CodecError:
        return "refused"
    if joined.too_large is not None:
        return "too_large"
    if joined.records is None:
        return "unchanged"
    out = [b for b in split_batches(joined.records) if isinstance(b, RecordBatch)]
    assert len(out) == len(originals), "batch count changed"
    for b, (raw, fields) in zip(out, originals, strict=True):
        for name, value in fields.items():
            assert getattr(b, name) == value, f"{name} changed"
        if b.raw == raw:
            continue  # untouched batches (control ones, say) leave as they came, CRC and all
        assert b.crc_is_valid(), "invalid CRC"
        assert len(b) <= LIMIT or len(raw) > LIMIT, "grew past the limit"
        if not b.is_control:
            for headers in b.iter_headers():
                assert any(k == "traceparent" for k, _ in headers), "record not stamped"
    return "changed"


def run(inputs: int, seed: int, crash_dir: pathlib.Path) -> int:
    rng = random.Random(seed)
    chain = build_chains(CHAIN).produce
    corpus = seeds(rng)
    outcomes: dict[str, int] = {}
    started_at = time.monotonic()
    for _ in range(inputs):
        base = rng.choice(corpus)
        other = rng.choice(corpus)
        data = mutate_records(rng, base, other) if rng.random() < 0.6 else \
            reseal(mutate(rng, base, other)) if rng.random() < 0.5 else mutate(rng, base, other)
        version = rng.choice([3, 7, 9, 11])
        started = time.thread_time()
        try:
            result = check(chain, data, version)
        except Exception:
            return report(crash_dir, data, version, traceback.format_exc())
        if time.thread_time() - started > SLOW_SECONDS:
            return report(crash_dir, data, version, "slow")
        outcomes[result] = outcomes.get(result, 0) + 1
        done = sum(outcomes.values())
        if done % 250_000 == 0:
            print(f"fuzz_produce: {done} inputs, no failures so far", flush=True)
        if result == "changed" and len(corpus) < 200:
            corpus.append(data)
    took = time.monotonic() - started_at
    print(f"fuzz_produce: {inputs} inputs in {took:.0f} s (seed {seed}), no failures; "
          + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())))
    return 0


def report(crash_dir: pathlib.Path, data: bytes, version: int, why: str) -> int:
    path = save_crash(crash_dir, f"produce-v{version}", data)
    print(f"fuzz_produce: FAILURE, input saved to {path}\n{why}")
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: random)")
    parser.add_argument("--crash-dir", type=pathlib.Path, default=REPO / "fuzz" / "crashes")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 32)
    return run(args.inputs, seed, args.crash_dir)


if __name__ == "__main__":
    sys.exit(main())
