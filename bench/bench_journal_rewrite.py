"""What a routing journal rewrite costs the event loop, in one process pinned to one CPU.

A routing Herald books every batch of an idempotent producer in its journal (two short lines),
and rewrites the journal as a snapshot once it has doubled (at least 4 MiB). The rows are
taken on the event loop; the snapshot is encoded and written in a worker thread, which shares
the interpreter with the loop. This bench books batches round-robin over N producer
partitions (full windows: the largest snapshot) through the same `RememberedSequences` the
produce filter calls. It goes fast to just before a rewrite, then books `--rate` batches a
second (a slice every millisecond) from 2 s before the rewrite to 2 s after it, while a
ticker task sleeps 1 ms at a time and records how late it woke. The collector runs as in
Herald (`proxy/serving/collector.py`). Reported per N, over the paced parts:

* the longest booking call (the one that begins a rewrite takes the rows) and the median;
* how long a rewrite took from its first booking to its install (the worker thread's part,
  sharing the interpreter with the paced bookings);
* the ticker's lateness p50 / p99 / max while a rewrite ran, and while none did: what a
  request arriving then waits longer;
* the collector's full passes over the whole run, and the longest.

    python bench/bench_journal_rewrite.py [--partitions 1000 10000 100000] [--rewrites 3]
                                          [--rate 2000]
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.pinning import PROXY_CPU, can_pin  # noqa: E402
from proxy.observability.metrics import Metrics  # noqa: E402
from proxy.routing.remembered import RememberedSequences  # noqa: E402
from proxy.routing.sequences import WINDOW, SequenceMap  # noqa: E402
from proxy.serving.collector import CollectorKeeper  # noqa: E402

SLICE = 100  # batches booked between two checkpoints while going fast
TICK_S = 0.001
PACED_BEFORE_S = 2  # paced bookings measured before a rewrite begins
PACED_AFTER_S = 2  # and after it ended


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def _measure(remembered: RememberedSequences, keys: list[tuple[int, str, int]],
                   rewrites: int, rate: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"late_rewriting": [], "late_idle": [], "call_s": [],
                                   "worker_s": [], "full_gc_s": []}
    journal = remembered._file  # noqa: SLF001 - the bench watches the journal's size
    assert journal is not None
    bases = dict.fromkeys(keys, WINDOW * 10)
    state = {"paced": False, "done": False}

    def rewriting() -> bool:
        return remembered._tail is not None  # noqa: SLF001

    async def ticker() -> None:
        while not state["done"]:
            before = time.perf_counter()
            await trio.sleep(TICK_S)
            late = time.perf_counter() - before - TICK_S
            if state["paced"]:
                out["late_rewriting" if rewriting() else "late_idle"].append(late)

    i = 0

    def book() -> None:
        nonlocal i
        key = keys[i % len(keys)]
        i += 1
        base = bases[key]
        bases[key] = base + 10
        attempt = remembered.sequences.record(key, 0, base, 10, 5, None)
        t0 = time.perf_counter()
        remembered.attempt(key, 0, attempt)
        remembered.delivered(key, 0, attempt, "rule")
        if state["paced"]:
            out["call_s"].append(time.perf_counter() - t0)

    per_tick = max(1, rate // 1000)
    margin = rate * PACED_BEFORE_S * 100  # about 90 bytes a booking: this many s of bookings
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker)
        for _ in range(rewrites):
            # Fast to just before the next rewrite (not measured), then `rate` bookings a second
            # through the rewrite and PACED_AFTER_S beyond it.
            while journal._compact_at - journal.size > margin:  # noqa: SLF001
                for _ in range(SLICE):
                    book()
                await trio.sleep(0)
            state["paced"] = True
            started = ended = 0.0
            next_tick = time.perf_counter()
            while not ended or time.perf_counter() - ended < PACED_AFTER_S:
                for _ in range(per_tick):
                    was = rewriting()
                    book()
                    if not was and rewriting():
                        started = time.perf_counter()
                next_tick += TICK_S
                await trio.sleep(max(0.0, next_tick - time.perf_counter()))
                if started and not ended and not rewriting():
                    ended = time.perf_counter()
                    out["worker_s"].append(ended - started)
            state["paced"] = False
        state["done"] = True
    return out


async def _with_collector(remembered: RememberedSequences, keys: list[tuple[int, str, int]],
                          rewrites: int, rate: int) -> dict[str, list[float]]:
    # The collector as Herald runs it: what survives is frozen every few seconds, so the
    # long-lived map is not walked by every full pass.
    keeper = CollectorKeeper(Metrics(), lambda: (0, 0))
    keeper.install()
    began = [0.0]
    gc_pauses: list[float] = []

    def full_passes(phase: str, info: dict) -> None:  # the profile: where the loop stalls
        if phase == "start":
            began[0] = time.perf_counter()
        elif info["generation"] == 2:
            gc_pauses.append(time.perf_counter() - began[0])

    gc.callbacks.append(full_passes)
    out: dict[str, list[float]] = {}
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(keeper.run)
            out = await _measure(remembered, keys, rewrites, rate)
            nursery.cancel_scope.cancel()
    finally:
        gc.callbacks.remove(full_passes)
        keeper.uninstall()
    out["full_gc_s"] = gc_pauses
    return out


def run(partitions: int, rewrites: int, rate: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="herald-journal-bench-") as folder:
        keys = [(1000 + p // 50, f"topic-{p % 50}", p % 7) for p in range(partitions)]
        # Full windows everywhere: the largest snapshot N producer partitions can make. The
        # journal opened on that map starts as its snapshot, as after a restart.
        sequences = SequenceMap()
        for round_ in range(WINDOW):
            for key in keys:
                sequences.record(key, 0, round_ * 10, 10, 5, None)
        remembered = RememberedSequences(sequences, Path(folder) / "routing.journal")
        remembered.open("bench-cluster")
        size = remembered._file.size if remembered._file else 0  # noqa: SLF001
        out = trio.run(_with_collector, remembered, keys, rewrites, rate)
    calls = out["call_s"]
    return {
        "journal_mib": size / (1 << 20),
        "rewrites": len(out["worker_s"]),
        "max_call_ms": max(calls) * 1e3,
        "median_call_us": statistics.median(calls) * 1e6,
        "worker_ms": statistics.median(out["worker_s"]) * 1e3,
        "idle_p50_ms": _pct(out["late_idle"], 0.5) * 1e3,
        "idle_p99_ms": _pct(out["late_idle"], 0.99) * 1e3,
        "idle_max_ms": max(out["late_idle"]) * 1e3,
        "rw_p50_ms": _pct(out["late_rewriting"], 0.5) * 1e3,
        "rw_p99_ms": _pct(out["late_rewriting"], 0.99) * 1e3,
        "rw_max_ms": max(out["late_rewriting"], default=float("nan")) * 1e3,
        "rw_ticks": len(out["late_rewriting"]),
        "full_gc": len(out["full_gc_s"]),
        "full_gc_max_ms": max(out["full_gc_s"], default=0.0) * 1e3,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, nargs="+", default=[1000, 10_000, 100_000])
    parser.add_argument("--rewrites", type=int, default=3)
    parser.add_argument("--rate", type=int, default=2000,
                        help="batches booked per second around each rewrite")
    args = parser.parse_args(argv)
    if can_pin():
        os.sched_setaffinity(0, {PROXY_CPU})
        print(f"pinned to CPU {PROXY_CPU}")
    else:
        print("not pinned: this machine does not offer both CPUs")
    print(f"{args.rate} batches/s around each rewrite")
    print("producer partitions | journal snapshot | rewrites | longest booking | "
          "median booking | rewrite took | loop lateness idle p50/p99/max | "
          "while rewriting p50/p99/max (ticks) | full GC passes (longest)")
    for n in args.partitions:
        r = run(n, args.rewrites, args.rate)
        print(f"{n:>9,} | {r['journal_mib']:.1f} MiB | {r['rewrites']} | "
              f"{r['max_call_ms']:.1f} ms | {r['median_call_us']:.1f} us | "
              f"{r['worker_ms']:.0f} ms | {r['idle_p50_ms']:.2f}/{r['idle_p99_ms']:.2f}/"
              f"{r['idle_max_ms']:.2f} ms | {r['rw_p50_ms']:.2f}/{r['rw_p99_ms']:.2f}/"
              f"{r['rw_max_ms']:.2f} ms ({r['rw_ticks']}) | {r['full_gc']} "
              f"({r['full_gc_max_ms']:.0f} ms)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
