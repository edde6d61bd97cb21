"""Builds that scripts/test.sh runs beside the suite (the container image, the Kubernetes API
server), and how a test waits for one.

Each build writes a status file: `building <pid>` while it runs, then `built` or
`failed <code>`. The tests that need a build are scheduled last (tests/support/parallel.py),
so the build has had the whole suite's time by then; they wait only for what is left.
"""

from __future__ import annotations

import os
import time
from pathlib import Path


def building(status: Path) -> bool:
    """Whether a build is running now: its status file names a live process."""
    try:
        word, pid = status.read_text().split()
        os.kill(int(pid), 0)
    except (OSError, ValueError):
        return False
    return word == "building"


def wait_for_build(status: Path, timeout_s: float) -> None:
    """Return once the build `status` records is no longer running (or `timeout_s` passed)."""
    deadline = time.monotonic() + timeout_s
    while building(status) and time.monotonic() < deadline:
        time.sleep(5)
