"""Keep large freed buffers in the process instead of handing them back to the kernel.

Herald holds whole frames (a Fetch response a chain reads, a Produce request it stamps) in
buffers of up to several megabytes, many times a second. glibc serves allocations that size
from fresh mappings, or trims the heap top as soon as a couple of them are freed, so every
frame pays page faults for memory it had a moment ago: measured on a consumer reading through
a fetch chain, half of Herald's system time. Raising the mmap threshold to glibc's maximum and
keeping a bounded amount of freed memory at the heap top makes those buffers reusable.

What is kept is bounded by `keep_bytes` (derived from the memory budget by the caller), so the
resident size a sidecar pays for this stays small and known. An operator's own
``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` in the environment win. Elsewhere
than glibc (musl, macOS) nothing is done.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

from proxy.observability.logs import get_logger

log = get_logger("allocator")

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_MAX = 32 * 1024 * 1024  # glibc's ceiling on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX)

_ENV = {M_MMAP_THRESHOLD: "MALLOC_MMAP_THRESHOLD_", M_TRIM_THRESHOLD: "MALLOC_TRIM_THRESHOLD_"}


def keep_bytes_for(memory_budget_bytes: int) -> int:
    """How much freed memory the heap may keep: an eighth of the memory budget, 4 to 64 MiB."""
    return max(4 << 20, min(64 << 20, memory_budget_bytes // 8))


def tune(keep_bytes: int) -> dict[str, int]:
    """Set glibc's mmap and trim thresholds; returns the settings glibc accepted, by name
    (empty where there is no glibc or the environment already sets them)."""
    mallopt = _mallopt()
    if mallopt is None:
        return {}
    wanted = {M_MMAP_THRESHOLD: min(MMAP_THRESHOLD_MAX, keep_bytes),
              M_TRIM_THRESHOLD: keep_bytes}
    applied = {}
    for param, value in wanted.items():
        name = _ENV[param]
        if name in os.environ:
            continue
        if mallopt(param, value) == 1:
            applied[name.strip("_").lower()] = value
    if applied:
        log.debug("allocator_tuned", **applied)
    return applied


def _mallopt() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        if not hasattr(libc, "gnu_get_libc_version"):
            return None  # not glibc: its parameters mean other things, or nothing
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return mallopt
