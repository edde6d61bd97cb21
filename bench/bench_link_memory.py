"""Bytes per entry of the link memory (`trace_context` ``link``), to size its defaults from.

Fills a memory with `--entries` (scope, trace) entries of one parent each (then, with
`--parents`, more per entry), then as many again, so that the first ones are evicted and
their keys fill the bounded set of dropped keys, and prints what each costs:

* the C memory (protocol/link_memory.c, `NativeFetchedTraces`): the heap glibc reports
  allocated (`mallinfo2`), its hash tables included;
* the Python reference (`FetchedTraces`): what tracemalloc traces.

Then what a memory of the default capacity costs when both are full. Not a timing: the
figures do not depend on the machine's load.

    .venv/bin/python bench/bench_link_memory.py [--entries 100000] [--parents 1]
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from interceptors.trace_links import (  # noqa: E402
    FetchedTraces,
    LinkConfig,
    LinkMemory,
    NativeFetchedTraces,
)

SCOPE = "10.244.17.203"  # a pod address, the `host` scope of a sidecar or gateway
TOPIC = "payments.authorised"


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def c_heap() -> Callable[[], int]:
    """Bytes glibc has handed out (small chunks and mmapped ones), headers included."""
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = _MallInfo2

    def used() -> int:
        info = libc.mallinfo2()
        return info.uordblks + info.hblkhd
    return used


def py_heap() -> int:
    return tracemalloc.get_traced_memory()[0]


def measure(make: Callable[[int], object], scope: object, n: int, parents: int,
            used: Callable[[], int]) -> tuple[float, float]:
    """(bytes per entry, bytes per dropped key) for a memory of capacity `n`."""
    gc.collect()
    traces = [b"%032x" % (i * 2654435761 + 1) for i in range(2 * n)]
    base = used()
    mem = make(n)
    for i in range(n):
        for p in range(parents):
            mem.remember(scope, traces[i], (TOPIC, p, 1_000_000 + i))  # type: ignore[attr-defined]
    full = used()
    for i in range(n, 2 * n):
        for p in range(parents):
            mem.remember(scope, traces[i], (TOPIC, p, 1_000_000 + i))  # type: ignore[attr-defined]
    both = used()
    assert len(mem) == n  # type: ignore[arg-type]
    per_entry = (full - base) / n
    per_gone = (both - full) / n
    del mem
    return per_entry, per_gone


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--parents", type=int, default=1, help="parents per entry")
    args = parser.parse_args()
    n, parents = args.entries, args.parents
    default = LinkConfig()
    config = lambda cap: LinkConfig(capacity=cap, ttl_s=1e9,  # noqa: E731
                                    max_parents=max(parents, default.max_parents))
    rows = []
    if LinkMemory is not None:
        native = NativeFetchedTraces(config(1))
        scope = native.scope(type("C", (), {"address": SCOPE + ":40000",
                                            "client_id": "svc"})())  # type: ignore[arg-type]
        rows.append(("C (link_memory.c)", *measure(lambda cap: NativeFetchedTraces(config(cap)),
                                                   scope, n, parents, c_heap())))
    tracemalloc.start()
    rows.append(("Python (FetchedTraces)", *measure(lambda cap: FetchedTraces(config(cap)),
                                                    (SCOPE,), n, parents, py_heap)))
    tracemalloc.stop()
    print(f"{n} entries of {parents} parent(s), scope {SCOPE!r}, topic {TOPIC!r}")
    print(f"{'memory':24} {'B/entry':>8} {'B/dropped key':>14} "
          f"{'MB full at capacity ' + format(default.capacity, ','):>30}")
    for name, entry, gone in rows:
        full_mb = default.capacity * (entry + gone) / 1e6
        print(f"{name:24} {entry:8.0f} {gone:14.0f} {full_mb:30.1f}")


if __name__ == "__main__":
    main()
