"""Time-bounded mutation fuzzing of every generated decoder (and the header/peek helpers).

Seeds are deterministic sample messages of every API and version (with and without unknown
tagged fields) and a few random bodies. Each round picks a decoder, mutates a seed (bit flips,
byte changes, insertions, deletions, absurd lengths, truncation, splices of other seeds) and
checks that:

* decoding raises nothing but CodecError, and takes well under a second;
* whatever decodes re-encodes, and that encoding is a fixed point (encode(decode(e)) == e);
* inputs that decode are kept as new seeds, so the corpus drifts towards valid structure.

A failing input is written to ``--crash-dir`` and the run exits with status 1.

    python fuzz/fuzz_decoders.py --seconds 60 [--seed N] [--crash-dir fuzz/crashes]
"""

from __future__ import annotations

import argparse
import hashlib
import pathlib
import random
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

REPO = pathlib.Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from protocol.errors import CodecError  # noqa: E402
from protocol.frame_headers import decode_request_header, peek_request_header  # noqa: E402
from protocol.peek import produce_acks  # noqa: E402
from proxy.devtools.codegen import load_messages  # noqa: E402
from tests.support.message_strategies import all_message_versions, module_for, sample_message  # noqa: E402

SLOW_SECONDS = 1.0
MAX_CORPUS = 64  # inputs kept per decoder
HUGE = [
    b"\x7f\xff\xff\xff",
    b"\xff\xff\xff\xff",
    b"\x80\x00\x00\x00",
    b"\x7f\xff",
    b"\xff\xff\xff\xff\x07",
    b"\xff\xff\xff\xff\x0f",
    b"\x80\x80\x80\x80\x80\x01",
]


class Target:
    """One decoder under test, with its growing corpus of inputs."""

    def __init__(self, name: str, version: int, cls: Any) -> None:
        self.name = name
        self.version = version
        self.cls = cls
        self.corpus: list[bytes] = []

    def label(self) -> str:
        return f"{self.name}-v{self.version}"

    def check(self, data: bytes) -> bool:
        """Decode ``data``; return whether it decoded. Raises on any property violation."""
        try:
            msg = self.cls.decode(data, self.version)
        except CodecError:
            return False
        once = msg.encode(self.version)
        twice = self.cls.decode(once, self.version).encode(self.version)
        if once != twice:
            raise AssertionError("re-encoding is not stable")
        return True


def build_targets() -> list[Target]:
    targets = []
    for name, version in all_message_versions():
        cls = getattr(module_for(load_messages()[name]), name)
        target = Target(name, version, cls)
        for unknown in (False, True):
            target.corpus.append(sample_message(name, version, unknown).encode(version))
        target.corpus.append(cls().encode(version) if _encodes(cls, version) else b"")
        targets.append(target)
    return targets


def _encodes(cls: Any, version: int) -> bool:
    try:
        cls().encode(version)
    except CodecError:
        return False
    return True


def mutate(rng: random.Random, data: bytes, other: bytes) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(9)
        pos = rng.randint(0, len(buf))
        if op == 0 and buf:  # flip a bit
            i = rng.randrange(len(buf))
            buf[i] ^= 1 << rng.randrange(8)
        elif op == 1 and buf:  # set a byte to an interesting value
            buf[rng.randrange(len(buf))] = rng.choice([0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)])
        elif op == 2:  # insert random bytes
            buf[pos:pos] = rng.randbytes(rng.randint(1, 8))
        elif op == 3 and buf:  # delete a range
            del buf[pos : pos + rng.randint(1, 8)]
        elif op == 4:  # splice an absurd length
            huge = rng.choice(HUGE)
            buf[pos : pos + (len(huge) if rng.random() < 0.5 else 0)] = huge
        elif op == 5:  # truncate
            del buf[pos:]
        elif op == 6 and other:  # splice part of another input
            a = rng.randrange(len(other))
            buf[pos:pos] = other[a : a + rng.randint(1, 32)]
        elif op == 7 and buf:  # duplicate a chunk
            a = rng.randrange(len(buf))
            buf[pos:pos] = buf[a : a + rng.randint(1, 16)]
        elif op == 8:  # replace everything with noise
            buf = bytearray(rng.randbytes(rng.randint(0, 64)))
    return bytes(buf)


def check_helpers(data: bytes, version: int) -> None:
    """The hand-written peeks must also raise only CodecError."""
    for call in (
        lambda: peek_request_header(data),
        lambda: decode_request_header(data),
        lambda: produce_acks(data, version % 14),
    ):
        try:
            call()
        except CodecError:
            pass


def run(seconds: float, seed: int, crash_dir: pathlib.Path, log: Callable[[str], None],
        inputs: int | None = None) -> int:
    """Fuzz until `seconds` have passed or, with `inputs`, that many inputs were run."""
    rng = random.Random(seed)
    targets = build_targets()
    started_at = time.monotonic()
    deadline = started_at + seconds
    executions = decoded = 0
    while (executions < inputs) if inputs is not None else (time.monotonic() < deadline):
        target = rng.choice(targets)
        base = rng.choice(target.corpus)
        other = rng.choice(rng.choice(targets).corpus)
        data = mutate(rng, base, other)
        # CPU time, not wall time: a loaded machine must not look like a slow decoder.
        started = time.thread_time()
        try:
            ok = target.check(data)
            check_helpers(data, target.version)
        except Exception:
            return report(crash_dir, target, data, traceback.format_exc(), log)
        elapsed = time.thread_time() - started
        if elapsed > SLOW_SECONDS:
            return report(crash_dir, target, data, f"slow: {elapsed:.2f} s", log)
        executions += 1
        if ok:
            decoded += 1
            if len(target.corpus) < MAX_CORPUS:
                target.corpus.append(data)
            else:
                target.corpus[rng.randrange(3, MAX_CORPUS)] = data
    took = time.monotonic() - started_at
    log(
        f"fuzz: {executions} inputs over {len(targets)} decoders in {took:.0f} s "
        f"(seed {seed}), {decoded} decoded, no failures"
    )
    return 0


def save_crash(crash_dir: pathlib.Path, label: str, data: bytes) -> pathlib.Path:
    """Write a failing input where it can be replayed from; return its path."""
    crash_dir.mkdir(parents=True, exist_ok=True)
    path = crash_dir / f"{label}-{hashlib.sha256(data).hexdigest()[:12]}.bin"
    path.write_bytes(data)
    return path


def report(
    crash_dir: pathlib.Path, target: Target, data: bytes, reason: str, log: Callable[[str], None]
) -> int:
    path = save_crash(crash_dir, target.label(), data)
    log(f"fuzz: FAILURE in {target.label()}, input saved to {path}\n{reason}")
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--inputs", type=int, default=None,
                        help="run this many inputs instead of for --seconds")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: random)")
    parser.add_argument("--crash-dir", type=pathlib.Path, default=REPO / "fuzz" / "crashes")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    return run(args.seconds, seed, args.crash_dir, print, args.inputs)


if __name__ == "__main__":
    sys.exit(main())
