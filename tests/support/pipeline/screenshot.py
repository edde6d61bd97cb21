"""A page rendered to PNG by headless Chromium, as a reader's browser would show it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


def screenshot(html: Path, png: Path, profile: Path, size: tuple[int, int]) -> None:
    chromium = shutil.which("chromium")
    assert chromium, "chromium is missing: scripts/setup.sh installs Debian's package"
    cmd = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
           f"--window-size={size[0]},{size[1]}", f"--screenshot={png}", html.as_uri()]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and png.exists(), result.stderr[-2000:]
