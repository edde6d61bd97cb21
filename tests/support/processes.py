"""A test's child server: waited for until it is ready, and ended (asked first with SIGTERM,
killed if it does not go in time)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path


def stop(proc: subprocess.Popen, timeout_s: float) -> None:
    """End `proc`: SIGTERM, then SIGKILL if it is still there after `timeout_s`."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wait_ready(proc: subprocess.Popen, log: Path, ready: Callable[[], bool], what: str,
               timeout_s: float = 60) -> None:
    """Return once `ready()` holds (an OSError counts as not yet); fail with the end of `log`
    if `proc` exits first, or after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        assert proc.poll() is None, f"{what} exited: {log.read_text()[-3000:]}"
        try:
            if ready():
                return
        except OSError:
            pass
        assert time.monotonic() < deadline, f"{what} was not ready within {timeout_s:.0f} s"
        time.sleep(0.2)
