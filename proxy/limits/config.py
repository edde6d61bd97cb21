"""The `limits:` section of proxy.yaml: every bound Herald puts on what clients can make it
hold or do, with defaults a real deployment can keep.

Defaults that depend on the machine (the connection cap on the descriptor limit, the memory
budget on the memory Herald may use) are computed once, when the configuration is loaded.
Each limit, its metric and what to do when it trips are listed in docs/operations.md.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from configuration import Node
from protocol.compression import DEFAULT_MAX_DECOMPRESSED
from protocol.framing import DEFAULT_MAX_FRAME_BYTES

MIB = 1024 * 1024

FDS_PER_CONNECTION = 4
"""A client socket, its upstream socket, and the pipe pair of a streamed response."""

FDS_KEPT = 128
"""Descriptors kept for Herald itself: listeners, the admin endpoint, its own broker and
destination connections, logs, the journal."""


@dataclass(frozen=True)
class DescriptorLimit:
    """The open-files limit: the soft one the process was started with, the soft one in force
    now, and the hard one."""

    inherited: int
    soft: int
    hard: int


_inherited_soft: int | None = None


def raise_descriptor_limit() -> DescriptorLimit:
    """Raise the soft limit on open files to the hard one (as Go and the JVM do on start);
    the limits before and after (the first call's `inherited` is kept for later ones)."""
    global _inherited_soft
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if _inherited_soft is None:
        _inherited_soft = soft
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return DescriptorLimit(_inherited_soft, soft, hard)


def connections_within(descriptors: int) -> int:
    """How many client connections `descriptors` open files can serve (none below the ones
    Herald keeps for itself)."""
    return max(0, (descriptors - FDS_KEPT) // FDS_PER_CONNECTION)


def default_max_connections() -> int:
    """As many client connections as the descriptor limit allows, at most 10,000."""
    return max(16, min(10_000, connections_within(raise_descriptor_limit().soft)))


def machine_memory() -> int:
    """Bytes of memory this process may use: the cgroup limit when there is one, else the
    machine's physical memory."""
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < physical:
            return int(text)
    return physical


def default_memory_budget() -> int:
    """A quarter of the memory Herald may use, between 256 MiB and 8 GiB: the rest stays for
    the interpreter, socket buffers and whatever shares the machine or pod."""
    return max(256 * MIB, min(8 * 1024 * MIB, machine_memory() // 4))


@dataclass(frozen=True)
class LimitsConfig:
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    max_in_flight: int = 1000
    # Connections
    idle_timeout_s: float = 600.0  # Kafka's broker default connections.max.idle.ms
    frame_timeout_s: float = 60.0
    max_connections: int = field(default_factory=default_max_connections)
    max_connections_per_source: int = 1000
    # Amplification
    max_batch_records: int = 200_000
    max_request_records: int = 1_000_000
    max_batch_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED
    max_request_decompressed_bytes: int = 256 * MIB
    big_batch_workers: int = 2
    # Memory
    memory_budget_bytes: int = field(default_factory=default_memory_budget)


_MINIMUM = {"max_frame_bytes": 1024, "idle_timeout_s": 0.1, "frame_timeout_s": 0.1,
            "max_batch_decompressed_bytes": 1024, "max_request_decompressed_bytes": 1024}
"""Lowest accepted values; every other limit must be at least 1."""

_MACHINE_DEFAULTS = {"max_connections": default_max_connections,
                     "memory_budget_bytes": default_memory_budget}


def _machine_default(node: Node, key: str, default: Callable[[], int]) -> int:
    """A positive int, or the machine-dependent default when the key is absent (or wrong,
    once that is recorded: the checks that compare limits then see a sensible value)."""
    if node.get(key) is None:
        return default()
    return node.number(key, 0, int, 1) or default()


def parse_limits(node: Node) -> LimitsConfig:
    """Validate the `limits` mapping; every bad key is recorded with its YAML path.

    The keys are the fields of `LimitsConfig`, with its defaults: the dataclass is the one
    list of limits.
    """
    values: dict[str, Any] = {}
    for f in fields(LimitsConfig):
        machine = _MACHINE_DEFAULTS.get(f.name)
        if machine is not None:
            values[f.name] = _machine_default(node, f.name, machine)
        else:
            default = f.default
            assert isinstance(default, int | float)  # every other limit has a plain default
            values[f.name] = node.number(f.name, default, type(default),
                                         _MINIMUM.get(f.name, 1))
    limits = LimitsConfig(**values)
    node.done()
    need = 2 * limits.max_frame_bytes
    if limits.memory_budget_bytes < need:
        node.errors.add(
            f"{node.key_path('memory_budget_bytes')}: must be at least twice "
            f"limits.max_frame_bytes ({need}), got {limits.memory_budget_bytes}"
        )
    if limits.max_request_records < limits.max_batch_records:
        node.errors.add(
            f"{node.key_path('max_request_records')}: must be >= limits.max_batch_records")
    if limits.max_request_decompressed_bytes < limits.max_batch_decompressed_bytes:
        node.errors.add(f"{node.key_path('max_request_decompressed_bytes')}: must be >= "
                        "limits.max_batch_decompressed_bytes")
    return limits
