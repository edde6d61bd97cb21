"""A page rendered to PNG by headless Chromium, as a reader's browser would show it, and kept
as an artifact of the test run (`ARTIFACTS`, or `HERALD_TEST_ARTIFACTS`) for a person to look
at: what the tests assert of a picture is coarse, a look is not."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ARTIFACTS = Path(os.environ.get("HERALD_TEST_ARTIFACTS") or
                 Path(__file__).resolve().parents[3] / "build" / "test-artifacts")

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


def screenshot(html: Path, png: Path, profile: Path, size: tuple[int, int],
               keep_as: str | None = None) -> None:
    """`html` rendered into `png` at `size`; `keep_as`: also copied to ARTIFACTS under this
    name."""
    chromium = shutil.which("chromium")
    assert chromium, "chromium is missing: scripts/setup.sh installs Debian's package"
    cmd = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
           f"--window-size={size[0]},{size[1]}", f"--screenshot={png}", html.as_uri()]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and png.exists(), result.stderr[-2000:]
    if keep_as is not None:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(png, ARTIFACTS / keep_as)
