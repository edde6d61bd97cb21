"""The `limits:` section: defaults, machine-dependent defaults, and errors with YAML paths."""

from __future__ import annotations

import resource

import pytest

from configuration import ConfigError
from proxy.config.proxy_yaml import parse_config
from proxy.limits.config import (
    FDS_KEPT,
    FDS_PER_CONNECTION,
    MIB,
    connections_within,
    default_memory_budget,
    machine_memory,
    raise_descriptor_limit,
)


def doc(**limits: object) -> dict:
    return {
        "upstream": {"bootstrap": "127.0.0.1:9092"},
        "listen": {"bootstrap": "0.0.0.0:19092"},
        "limits": limits,
    }


def test_defaults() -> None:
    limits = parse_config(doc()).limits
    assert limits.idle_timeout_s == 600
    assert limits.frame_timeout_s == 60
    assert limits.max_connections_per_source == 1000
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)  # raised to the hard limit on load
    assert 16 <= limits.max_connections <= min(10_000, soft // FDS_PER_CONNECTION)
    assert limits.memory_budget_bytes == default_memory_budget()
    assert 256 * MIB <= limits.memory_budget_bytes <= max(256 * MIB, machine_memory() // 4)
    assert limits.max_batch_records == 200_000
    assert limits.max_batch_decompressed_bytes == 64 * MIB


def test_connections_within_a_descriptor_limit() -> None:
    """Four descriptors a connection, after those Herald keeps: what fd_limit_low reports."""
    assert (FDS_PER_CONNECTION, FDS_KEPT) == (4, 128)
    assert connections_within(256) == 32
    assert connections_within(1024) == 224
    assert connections_within(100) == 0


def test_the_limit_is_raised_to_the_hard_one_and_what_it_was_is_kept() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    first = raise_descriptor_limit()
    again = raise_descriptor_limit()
    assert first.hard == again.hard == hard
    assert first.soft == again.soft == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert again.inherited == first.inherited <= first.soft
    assert first.soft >= soft


def test_explicit_values_win() -> None:
    limits = parse_config(doc(max_connections=7, memory_budget_bytes=512 * MIB,
                              idle_timeout_s=1.5)).limits
    assert (limits.max_connections, limits.memory_budget_bytes, limits.idle_timeout_s) == (
        7, 512 * MIB, 1.5)


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"idle_timeout_s": 0}, r"^limits\.idle_timeout_s: must be >= 0.1"),
        ({"frame_timeout_s": "5s"}, r"^limits\.frame_timeout_s: expected float"),
        ({"max_connections": 0}, r"^limits\.max_connections: must be >= 1"),
        ({"max_connections_per_source": 2.5}, r"^limits\.max_connections_per_source: expected int"),
        ({"memory_budget_bytes": 1000}, r"^limits\.memory_budget_bytes: must be at least twice"),
        ({"max_batch_records": 10, "max_request_records": 5},
         r"^limits\.max_request_records: must be >= limits\.max_batch_records"),
        ({"max_batch_decompressed_bytes": 4096, "max_request_decompressed_bytes": 2048},
         r"^limits\.max_request_decompressed_bytes: must be >="),
        ({"big_batch_workers": 0}, r"^limits\.big_batch_workers: must be >= 1"),
        ({"idle_timeout": 5}, r"^limits\.idle_timeout: unknown key$"),
    ],
)
def test_errors_name_the_yaml_path(limits: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(doc(**limits))
