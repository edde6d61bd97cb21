"""The HTML report, rendered by headless Chromium (Debian's package) to a PNG: a real,
non-blank picture of the pathway graph and charts, from a file that fetches nothing."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from PIL import Image

from pipeline.report import render

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--hide-scrollbars"]
NODE_BLUE = (0x2E, 0x86, 0xC1)


def screenshot(html: Path, png: Path, profile: Path, size: tuple[int, int]) -> None:
    chromium = shutil.which("chromium")
    assert chromium, "chromium is missing: scripts/setup.sh installs Debian's package"
    cmd = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
           f"--window-size={size[0]},{size[1]}", f"--screenshot={png}", html.as_uri()]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and png.exists(), result.stderr[-2000:]


def test_report_is_self_contained(batch_run) -> None:
    config, summary = batch_run
    html = (Path(config.output) / "report.html").read_text()
    assert html == render(summary)
    assert not re.search(r"(src|href)\s*=|@import|url\(\s*['\"]?http|<script", html)
    assert set(re.findall(r"https?://[^'\" ]+", html)) == {"http://www.w3.org/2000/svg"}
    for e in summary["edges"]:  # the graph's edge labels carry the latency
        assert f"{e['from_topic']}" in html and "p50 " in html


def test_report_renders_to_a_real_picture(batch_run, tmp_path: Path) -> None:
    config, summary = batch_run
    png = Path(config.output) / "report.png"
    size = (1400, 2000)
    screenshot(Path(config.output) / "report.html", png, tmp_path / "profile", size)
    image = Image.open(png).convert("RGB")
    assert image.size == size
    small = image.resize((350, 500))
    pixels = list(small.get_flattened_data())
    background = max(set(pixels), key=pixels.count)
    drawn = sum(1 for p in pixels if p != background) / len(pixels)
    assert drawn > 0.15, f"only {drawn:.0%} of the picture differs from the background"
    assert len(set(image.get_flattened_data())) > 200  # text, bars, lines: not a flat page
    # The topic boxes of the pathway graph are drawn (their fill colour covers an area).
    top = image.crop((0, 0, size[0], 700))
    blue = sum(1 for p in top.get_flattened_data()
               if all(abs(a - b) <= 6 for a, b in zip(p, NODE_BLUE, strict=True)))
    assert blue > 3 * 170 * 50, blue
