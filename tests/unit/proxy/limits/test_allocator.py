"""glibc's thresholds, set where glibc is, left to the operator where the environment says."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from proxy.limits import allocator

MIB = 1 << 20


def _tune_in_child(keep: int, env: dict[str, str]) -> dict[str, int]:
    code = ("import json; from proxy.limits import allocator; "
            f"print(json.dumps(allocator.tune({keep})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, **env})
    return json.loads(out.stdout)


@pytest.mark.skipif(allocator._mallopt() is None, reason="not glibc")
def test_thresholds_are_set_unless_the_environment_sets_them() -> None:
    assert _tune_in_child(16 * MIB, {}) == {"malloc_mmap_threshold": 16 * MIB,
                                            "malloc_trim_threshold": 16 * MIB}
    # the mmap threshold cannot go above glibc's ceiling (glibc would refuse it)
    assert _tune_in_child(64 * MIB, {})["malloc_mmap_threshold"] == 32 * MIB
    assert _tune_in_child(16 * MIB, {"MALLOC_TRIM_THRESHOLD_": "1000000"}) == {
        "malloc_mmap_threshold": 16 * MIB}


def test_what_is_kept_follows_the_memory_budget_within_bounds() -> None:
    assert allocator.keep_bytes_for(128 * MIB) == 16 * MIB
    assert allocator.keep_bytes_for(8 * MIB) == 4 * MIB
    assert allocator.keep_bytes_for(6 << 30) == 64 * MIB
