"""CPU pinning for the benchmarks: the broker and the load tools on one core, the proxy on the
other, so the proxy's CPU time is its own and nothing it does is paid for by the broker.

The benchmark pins itself to the load core before starting anything, so the broker and every
tool it starts inherit it; the proxy processes are moved to the proxy core thread by thread (the
threads they start later inherit that). `verify_tree` checks every thread of every process the
benchmark started, and `PinWatch` keeps checking during a run, which catches the short-lived
perf tools (a JVM per run) that a check before the run cannot see.

On a shared machine the load core is shared with whatever else runs there; `RunQueueWait`
measures how long the benchmark's own threads waited for a CPU, which is what turns a
proxy's microseconds into a load generator's milliseconds.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable

LOAD_CPU = 0
PROXY_CPU = 1


def can_pin() -> bool:
    return hasattr(os, "sched_setaffinity") and {LOAD_CPU, PROXY_CPU} <= os.sched_getaffinity(0)


def pin_self_to_load_cpu() -> None:
    for task in _threads(os.getpid()):
        os.sched_setaffinity(task, {LOAD_CPU})


def pin(pid: int, cpus: set[int]) -> None:
    """Every thread of `pid` onto `cpus`."""
    for task in _threads(pid):
        os.sched_setaffinity(task, cpus)


def verify(pid: int, cpus: set[int]) -> None:
    """Fail unless every thread of `pid` may run on `cpus` only."""
    for task in _threads(pid):
        got = _affinity(task)
        if got is not None and got != cpus:
            raise RuntimeError(f"thread {task} of process {pid} may run on {sorted(got)}, "
                               f"not {sorted(cpus)}")


def verify_tree(proxy_pids: Iterable[int]) -> int:
    """Check every thread of this process and of every process below it: those of
    `proxy_pids` (and below them) on the proxy CPU, all others on the load CPU. Returns how
    many threads were checked; raises on the first one that is off its CPU."""
    proxies = set(proxy_pids)
    checked = 0
    for pid, on_proxy in _tree(os.getpid(), proxies):
        cpus = {PROXY_CPU} if on_proxy else {LOAD_CPU}
        for task in _threads(pid):
            got = _affinity(task)
            if got is not None and got != cpus:
                raise RuntimeError(f"thread {task} of process {pid} ({_name(pid)}) may run on "
                                   f"{sorted(got)}, not {sorted(cpus)}")
            checked += 1
    return checked


class PinWatch:
    """Re-runs `verify_tree` every `interval` seconds in a thread until stopped; `stop()`
    raises the first failure seen, so no run's figure is kept when a thread was off its CPU."""

    def __init__(self, proxy_pids: Iterable[int], interval: float = 0.5) -> None:
        self._proxies = list(proxy_pids)
        self._interval = interval
        self._stop = threading.Event()
        self._error: RuntimeError | None = None
        self.checks = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PinWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if self._error is not None and exc[0] is None:
            raise self._error

    def _run(self) -> None:
        while True:
            try:
                verify_tree(self._proxies)
                self.checks += 1
            except RuntimeError as error:
                self._error = self._error or error
            if self._stop.wait(self._interval):
                return


class RunQueueWait:
    """Seconds the threads of some processes spent runnable but waiting for a CPU
    (/proc/PID/task/TID/schedstat, second field), over a window."""

    def __init__(self, pids: Iterable[int]) -> None:
        self.pids = list(pids)
        self._start = self._read()

    def _read(self) -> int:
        total = 0
        for pid in self.pids:
            for task in _threads(pid):
                try:
                    with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                        total += int(f.read().split()[1])
                except (OSError, IndexError, ValueError):
                    pass  # the thread ended meanwhile, or no schedstats on this kernel
        return total

    def seconds(self) -> float:
        """Waited since this object was made (threads that ended meanwhile are not counted)."""
        return max(0, self._read() - self._start) / 1e9


def _threads(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except FileNotFoundError:
        return []


def _affinity(task: int) -> set[int] | None:
    try:
        return os.sched_getaffinity(task)
    except (ProcessLookupError, OSError):
        return None  # ended between the listing and the check


def _name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


def _tree(root: int, proxies: set[int]) -> list[tuple[int, bool]]:
    """(pid, under a proxy) for `root` and every process below it."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out: list[tuple[int, bool]] = []
    stack = [(root, root in proxies)]
    while stack:
        pid, on_proxy = stack.pop()
        out.append((pid, on_proxy))
        stack.extend((c, on_proxy or c in proxies) for c in children.get(pid, ()))
    return out
