"""CPU pinning for the benchmarks: the broker and the load tools on one core, the proxy on the
other, so the proxy's CPU time is its own and nothing it does is paid for by the broker.

The benchmark pins itself to the load core before starting anything, so the broker and every
tool it starts inherit it; the proxy process is moved to the proxy core thread by thread (the
threads it starts later inherit that), and `verify` checks every thread before each run.
"""

from __future__ import annotations

import os

LOAD_CPU = 0
PROXY_CPU = 1


def can_pin() -> bool:
    return hasattr(os, "sched_setaffinity") and {LOAD_CPU, PROXY_CPU} <= os.sched_getaffinity(0)


def pin_self_to_load_cpu() -> None:
    os.sched_setaffinity(0, {LOAD_CPU})


def pin(pid: int, cpus: set[int]) -> None:
    """Every thread of `pid` onto `cpus`."""
    for task in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(task), cpus)


def verify(pid: int, cpus: set[int]) -> None:
    """Fail unless every thread of `pid` may run on `cpus` only."""
    for task in os.listdir(f"/proc/{pid}/task"):
        got = os.sched_getaffinity(int(task))
        if got != cpus:
            raise RuntimeError(f"thread {task} of process {pid} may run on {sorted(got)}, "
                               f"not {sorted(cpus)}")
