"""The HTML report, rendered by headless Chromium (Debian's package) to a PNG: a real,
non-blank picture of the pathway graph and charts, from a file that fetches nothing."""

from __future__ import annotations

import re
from html import escape
from pathlib import Path

from PIL import Image

from pipeline.report import fmt_count, fmt_ms, pathway_graph, render
from tests.support.pipeline.screenshot import screenshot

NODE_BLUE = (0x2E, 0x86, 0xC1)


def test_report_is_self_contained(batch_run) -> None:
    config, summary = batch_run
    html = (Path(config.output) / "report.html").read_text()
    assert html == render(summary)
    assert not re.search(r"(src|href)\s*=|@import|url\(\s*['\"]?http|<script", html)
    assert set(re.findall(r"https?://[^'\" ]+", html)) == {"http://www.w3.org/2000/svg"}


def test_graph_labels_every_edge_and_dashes_the_inferred(batch_run) -> None:
    _config, summary = batch_run
    graph = pathway_graph(summary)
    for e in summary["edges"]:  # the graph's edge labels carry count and latency
        assert f"p50 {fmt_ms(e['p50_ms'])} · p99 {fmt_ms(e['p99_ms'])}" in graph
        assert f"{fmt_count(e['count'])} hops" in graph
    inferred = [e for e in summary["edges"] if e["link"] != "linked"]
    assert inferred  # the fraud service, which the tests' Herald leaves out of the links
    assert graph.count("stroke-dasharray='10 6'") == len(inferred)
    assert graph.count(" inferred</text>") == len(inferred)
    # The edge table marks them too, one row per edge.
    html = render(summary)
    table = html[html.index("<th>edge</th>"):html.index("<h2>Pathways</h2>")]
    assert table.count("</tr>") == len(summary["edges"]) + 1
    assert table.count("class='tag inferred'") == len(inferred)
    # The lag of every group is drawn.
    for row in summary["lag"]:
        assert escape(row["group"] or "no group (assign)") in html


def test_report_renders_to_a_real_picture(batch_run, tmp_path: Path) -> None:
    config, summary = batch_run
    png = Path(config.output) / "report.png"
    size = (1400, 2000)
    screenshot(Path(config.output) / "report.html", png, tmp_path / "profile", size,
               keep_as="batch-report.png")
    image = Image.open(png).convert("RGB")
    assert image.size == size
    small = image.resize((350, 500))
    pixels = list(small.get_flattened_data())
    background = max(set(pixels), key=pixels.count)
    drawn = sum(1 for p in pixels if p != background) / len(pixels)
    assert drawn > 0.15, f"only {drawn:.0%} of the picture differs from the background"
    assert len(set(image.get_flattened_data())) > 200  # text, bars, lines: not a flat page
    # The topic boxes of the graph are drawn (their fill colour covers an area): one box
    # for each topic that is not terminal (those are darker).
    top = image.crop((0, 0, size[0], 900))
    blue = sum(1 for p in top.get_flattened_data()
               if all(abs(a - b) <= 6 for a, b in zip(p, NODE_BLUE, strict=True)))
    boxes = len(set(config.topics) - set(config.terminal_topics))
    assert boxes == 2 and blue > boxes * 170 * 50, blue
