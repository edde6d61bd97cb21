"""Resource requests for a Herald sidecar, from the throughput it is expected to carry.

The figures are Herald's CPU time per MB moved, measured with `bench/bench_proxy.py` (which
logs the CPU seconds Herald spent on each run): about 2.3 ms per MB produced and 0.4 ms per MB
consumed with no interceptors, 3.8 and 0.6 with `trace_context` + `audit`; with links on (the
sidecar's chain) 4.4 and 1.5 (4.30 and 1.46 measured), pinned with `bench/bench_cost.py
--client-traces --interceptors trace_audit_link` (every record traced: the Fetch scan that
remembers them is most of the consume figure; docs/performance.md). At low steady rates
the per-request work dominates instead: about 50 millicores at 5,000 records/s of 1 KiB, several
times what the per-MB figure gives, which is why there is a floor.

The causal links' memory (`trace_context` `link.capacity`) is sized from the pod's own traffic,
not a gateway's: a record the pod fetched is linked to what the pod writes of its trace only
while its entry is held, and entries leave least recently fetched first, so a capacity of
C entries links a continuation written up to C / R seconds after the fetch, R the pod's traced
records fetched per second. `link_capacity` gives the entries for `LINK_WINDOW_S` at the
declared consume rate (in 1 KiB records, the figures' record size), at least `MIN_LINK_CAPACITY`
and at most the shipped capacity; a continuation later than the window is declared lost by
Herald (`herald.parents_lost`, `evicted`), never linked wrongly. `bench/bench_sidecar_footprint.py`
measures the sidecar's memory idle, under load and with the links' memory full.

A CPU *limit* is deliberately not set: CFS throttling turns a short burst into added latency
for every request queued behind it, which is the one thing a proxy must not add.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from interceptors.trace_links import LinkConfig

# ms of CPU per MB moved: (produce, consume)
CPU_MS_PER_MB = {"none": (2.3, 0.4), "trace_audit": (3.8, 0.6), "trace_audit_link": (4.4, 1.5)}
FLOOR_MILLICORES = 50
HEADROOM = 1.5  # bursts above the expected mean, and a loaded node's slower cores
MEMORY_REQUEST_MI = 128
MEMORY_LIMIT_MI = 512  # a full frame (limits.max_frame_bytes, 100 MiB) plus its copies
RECORD_BYTES = 1024  # the record size the per-MB figures were measured with
LINK_WINDOW_S = 60  # how long after its fetch a pod's continuation is still linked
MIN_LINK_CAPACITY = 10_000  # about 4 MB full: below it the saving is not worth a lost link


@dataclass(frozen=True)
class Throughput:
    produce_mb_s: float = 5.0
    consume_mb_s: float = 5.0
    interceptors: str = "trace_audit_link"  # a key of CPU_MS_PER_MB: which figures apply

    def __post_init__(self) -> None:
        if self.interceptors not in CPU_MS_PER_MB:
            raise ValueError(f"interceptors: expected one of {sorted(CPU_MS_PER_MB)}, "
                             f"got {self.interceptors!r}")
        for name in ("produce_mb_s", "consume_mb_s"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name}: expected a number >= 0, got {value!r}")


def cpu_millicores(load: Throughput) -> int:
    """The CPU request: per-MB cost of the expected load with headroom, never below the floor."""
    produce, consume = CPU_MS_PER_MB[load.interceptors]
    # ms of CPU per second of wall time is millicores.
    busy = load.produce_mb_s * produce + load.consume_mb_s * consume
    return max(FLOOR_MILLICORES, math.ceil(busy * HEADROOM))


def link_capacity(load: Throughput) -> int:
    """The sidecar's `link.capacity`: entries for `LINK_WINDOW_S` of the declared consume rate
    (every fetched record its own trace, the most the memory can be asked to hold), within
    [`MIN_LINK_CAPACITY`, the shipped capacity]."""
    per_second = load.consume_mb_s * 1_000_000 / RECORD_BYTES
    wanted = math.ceil(per_second * LINK_WINDOW_S)
    return max(MIN_LINK_CAPACITY, min(LinkConfig().capacity, wanted))


def resources(load: Throughput) -> dict[str, dict[str, str]]:
    """The container's `resources`: CPU and memory requests, a memory limit, no CPU limit."""
    return {
        "requests": {"cpu": f"{cpu_millicores(load)}m", "memory": f"{MEMORY_REQUEST_MI}Mi"},
        "limits": {"memory": f"{MEMORY_LIMIT_MI}Mi"},
    }
