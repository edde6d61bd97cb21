"""Ending a test's child process: asked first (SIGTERM), killed if it does not go in time."""

from __future__ import annotations

import subprocess


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
