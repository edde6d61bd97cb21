"""Reload when the config file changes on disk (`reload.watch_s`).

Kubernetes updates a mounted ConfigMap by writing the new files into a fresh folder and
swapping a `..data` symlink, so the file's inode and mtime are no guide; and no signal
reaches the container. Polling the file's content every few seconds sees every way a file can
change (symlink swap, rename over, in-place write), costs one small read per period, and a
rewrite with the same content reloads nothing. A file that cannot be read for a moment (in
the middle of a swap) is simply looked at again next period.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import trio

from proxy.observability.logs import get_logger

log = get_logger("config_watch")


def _fingerprint(path: Path) -> bytes | None:
    try:
        return hashlib.sha256(path.read_bytes()).digest()
    except OSError:
        return None


async def watch_file(path: Path, period_s: float, on_change: Callable[[], object]) -> None:
    """Call `on_change` each time the content of `path` differs from the last content seen."""
    seen = _fingerprint(path)
    unreadable = False
    while True:
        await trio.sleep(period_s)
        current = _fingerprint(path)
        if current is None:
            if not unreadable:
                log.warning("config_unreadable", path=str(path))
            unreadable = True
            continue
        unreadable = False
        if current != seen:
            seen = current
            log.info("config_changed", path=str(path))
            on_change()
