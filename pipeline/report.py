"""The HTML report: one self-contained file (inline CSS and SVG, no script, nothing fetched),
drawn from the JSON summary alone, so `herald pipeline report` needs no Spark.

What a person looks at first is the pathway graph: topics as boxes, left to right in flow
order, each edge labelled with its latency; then the latency distribution and its trend per
edge, the broken flows and who produced what.
"""

from __future__ import annotations

import json
import time
from html import escape
from pathlib import Path
from typing import Any

_CSS = """
body{font-family:'DejaVu Sans',Helvetica,Arial,sans-serif;margin:24px 32px;color:#1d2733;
background:#f6f7f9}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 10px}
.sub{color:#5b6775;font-size:13px}
.cards{display:flex;gap:12px;flex-wrap:wrap;margin-top:16px}
.card{background:#fff;border-radius:8px;padding:10px 16px;min-width:120px;
box-shadow:0 1px 2px rgba(0,0,0,.08)}
.card .v{font-size:24px;font-weight:bold}.card .l{font-size:12px;color:#5b6775}
.bad .v{color:#c0392b}.ok .v{color:#1e8449}
.panel{background:#fff;border-radius:8px;padding:12px 16px;box-shadow:0 1px 2px rgba(0,0,0,.08)}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(380px,1fr));gap:12px}
table{border-collapse:collapse;font-size:13px;width:100%}
th{text-align:left;color:#5b6775;font-weight:normal;border-bottom:1px solid #dde1e6;padding:4px 8px}
td{padding:4px 8px;border-bottom:1px solid #eef0f3}td.n{text-align:right;
font-variant-numeric:tabular-nums}
.mono{font-family:'DejaVu Sans Mono',monospace;font-size:12px}
.tag{display:inline-block;border-radius:4px;padding:0 6px;font-size:11px;color:#fff}
.stopped{background:#c0392b}.slow{background:#d68910}
"""
_GOOD, _WARN, _BAD = "#27ae60", "#e59400", "#c0392b"
_SERIES = (("p50_ms", "#2e86c1", "p50"), ("p90_ms", "#e59400", "p90"),
           ("p99_ms", "#c0392b", "p99"))


def fmt_ms(value: float | None) -> str:
    if value is None:
        return "–"
    if value < 1000:
        return f"{value:.0f} ms" if value >= 10 or value == int(value) else f"{value:.1f} ms"
    if value < 60_000:
        return f"{value / 1000:.1f} s"
    return f"{value / 60_000:.1f} min"


def fmt_count(value: int | None) -> str:
    return "–" if value is None else f"{value:,}"


def fmt_bytes(value: int | None) -> str:
    if value is None:
        return "–"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def _short_ms(ms: int) -> str:
    """A histogram bucket's bound, short enough to sit under a narrow bar."""
    return f"{ms}ms" if ms < 1000 else f"{ms // 1000}s"


def _utc(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))


def _latency_colour(value: float | None, limit: float) -> str:
    if value is None:
        return "#7f8c8d"
    return _GOOD if value <= limit / 4 else _WARN if value <= limit else _BAD


def _layers(topics: list[str], edges: list[dict[str, Any]]) -> dict[str, int]:
    """Each topic's column: the longest chain of edges leading to it (cycles are cut off
    after as many rounds as there are topics)."""
    depth = dict.fromkeys(topics, 0)
    for _ in range(len(topics)):
        changed = False
        for e in edges:
            a, b = e["from_topic"], e["to_topic"]
            if a != b and depth.get(b, 0) < depth.get(a, 0) + 1 <= len(topics):
                depth[b] = depth[a] + 1
                changed = True
        if not changed:
            break
    return depth


def pathway_graph(summary: dict[str, Any]) -> str:
    edges = summary["edges"]
    by_topic = {t["topic"]: t for t in summary["records"]["by_topic"]}
    terminal = set(summary["config"]["terminal_topics"])
    topics = sorted(set(by_topic) | {e["from_topic"] for e in edges}
                    | {e["to_topic"] for e in edges})
    if not topics:
        return "<p class='sub'>No records were read.</p>"
    depth = _layers(topics, edges)
    columns: dict[int, list[str]] = {}
    for t in topics:
        columns.setdefault(depth[t], []).append(t)
    box_w, box_h, col_gap, row_gap = 200, 58, 200, 34
    pos: dict[str, tuple[float, float]] = {}
    rows = max(len(c) for c in columns.values())
    height = rows * (box_h + row_gap) + 40
    for col, names in sorted(columns.items()):
        offset = (height - len(names) * (box_h + row_gap)) / 2
        for i, name in enumerate(names):
            pos[name] = (20 + col * (box_w + col_gap), offset + i * (box_h + row_gap) + 10)
    width = 40 + (max(columns) + 1) * (box_w + col_gap) - col_gap
    limit = summary["config"]["max_wait_ms"]
    most = max((e["count"] for e in edges), default=1)
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
             f"viewBox='0 0 {width} {height}' role='img' aria-label='pathway graph'>",
             "<defs><marker id='arrow' viewBox='0 0 10 10' refX='9' refY='5' markerWidth='12' "
             "markerHeight='12' markerUnits='userSpaceOnUse' orient='auto-start-reverse'>"
             "<path d='M0,0L10,5L0,10z' fill='#5b6775'/></marker></defs>"]
    for e in edges:
        a, b = pos[e["from_topic"]], pos[e["to_topic"]]
        x1, y1 = a[0] + box_w, a[1] + box_h / 2
        x2, y2 = b[0], b[1] + box_h / 2
        if x2 <= x1:  # a back edge (cycle): loop above the boxes
            y_top = min(a[1], b[1]) - 12
            path = (f"M{a[0] + box_w / 2},{a[1]} C{a[0] + box_w / 2},{y_top - 30} "
                    f"{b[0] + box_w / 2},{y_top - 30} {b[0] + box_w / 2},{b[1]}")
            lx, ly = (a[0] + b[0] + box_w) / 2, y_top - 18
        else:
            mx = (x1 + x2) / 2
            path = f"M{x1},{y1} C{mx},{y1} {mx},{y2} {x2 - 2},{y2}"
            lx, ly = mx, (y1 + y2) / 2
        colour = _latency_colour(e["p99_ms"], limit)
        stroke = 2 + 6 * e["count"] / most
        parts.append(f"<path d='{path}' fill='none' stroke='{colour}' stroke-width='{stroke:.1f}'"
                     f" stroke-opacity='.75' marker-end='url(#arrow)'/>")
        label = f"p50 {fmt_ms(e['p50_ms'])} · p99 {fmt_ms(e['p99_ms'])}"
        parts.append(f"<rect x='{lx - 88}' y='{ly - 24}' width='176' height='36' rx='5' "
                     f"fill='#fff' stroke='{colour}'/>")
        parts.append(f"<text x='{lx}' y='{ly - 9}' text-anchor='middle' font-size='12' "
                     f"font-weight='bold' fill='#1d2733'>{escape(label)}</text>")
        parts.append(f"<text x='{lx}' y='{ly + 6}' text-anchor='middle' font-size='11' "
                     f"fill='#5b6775'>{fmt_count(e['count'])} hops · max "
                     f"{fmt_ms(e['max_ms'])}</text>")
    for t in topics:
        x, y = pos[t]
        info = by_topic.get(t, {"records": 0, "untraced": 0})
        fill = "#1f3a5f" if t in terminal else "#2e86c1"
        parts.append(f"<rect x='{x}' y='{y}' width='{box_w}' height='{box_h}' rx='8' "
                     f"fill='{fill}'/>")
        name = t if len(t) <= 24 else t[:23] + "…"
        font = 15 if len(name) <= 18 else 12
        parts.append(f"<text x='{x + box_w / 2}' y='{y + 24}' text-anchor='middle' "
                     f"font-size='{font}' font-weight='bold' fill='#fff'>{escape(name)}</text>")
        extra = f" · {fmt_count(info['untraced'])} untraced" if info["untraced"] else ""
        parts.append(f"<text x='{x + box_w / 2}' y='{y + 44}' text-anchor='middle' "
                     f"font-size='11' fill='#dbe7f3'>{fmt_count(info['records'])} records"
                     f"{escape(extra)}</text>")
    parts.append("</svg>")
    return "".join(parts)


def histogram(edge: dict[str, Any], bounds: list[int]) -> str:
    counts = edge.get("histogram") or []
    if not counts:
        return ""
    # Show the buckets from the first to the last one that holds anything.
    used = [i for i, c in enumerate(counts) if c]
    lo, hi = used[0], used[-1]
    shown = counts[lo:hi + 1]
    w, h, pad = 360, 140, 28
    bar = (w - pad) / len(shown)
    most = max(shown)
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h + 34}'>"]
    for i, c in enumerate(shown):
        bh = 0 if not c else max(2, (h - 20) * c / most)
        x = pad + i * bar
        parts.append(f"<rect x='{x + 2:.1f}' y='{h - bh:.1f}' width='{bar - 4:.1f}' "
                     f"height='{bh:.1f}' fill='#2e86c1'/>")
        if c:
            parts.append(f"<text x='{x + bar / 2:.1f}' y='{h - bh - 4:.1f}' font-size='10' "
                         f"text-anchor='middle' fill='#1d2733'>{c}</text>")
        k = lo + i
        label = f"≤{_short_ms(bounds[k])}" if k < len(bounds) else f">{_short_ms(bounds[-1])}"
        parts.append(f"<text x='{x + bar / 2:.1f}' y='{h + 14}' font-size='9' "
                     f"text-anchor='middle' fill='#5b6775'>{escape(label)}</text>")
    parts.append(f"<line x1='{pad}' y1='{h}' x2='{w}' y2='{h}' stroke='#aab2bd'/>")
    parts.append(f"<text x='{pad}' y='{h + 30}' font-size='10' fill='#5b6775'>wait per hop "
                 "(count per latency bucket)</text></svg>")
    return "".join(parts)


def trend(points: list[dict[str, Any]]) -> str:
    """p50/p90/p99 of one edge per time bucket, as lines over time."""
    if not points:
        return ""
    w, h, left, bottom = 360, 150, 52, 22
    xs = [p["bucket_ms"] for p in points]
    top = max(p["p99_ms"] or 0 for p in points) or 1
    x0, x1 = min(xs), max(xs)

    def px(t: float) -> float:
        return left + (0.5 if x0 == x1 else (t - x0) / (x1 - x0)) * (w - left - 10)

    def py(v: float) -> float:
        return 10 + (1 - v / top) * (h - bottom - 10)

    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h + 16}'>"]
    for frac in (0, 0.5, 1):
        y = py(top * frac)
        parts.append(f"<line x1='{left}' y1='{y:.1f}' x2='{w - 10}' y2='{y:.1f}' "
                     "stroke='#eef0f3'/>")
        parts.append(f"<text x='{left - 4}' y='{y + 4:.1f}' font-size='10' text-anchor='end' "
                     f"fill='#5b6775'>{fmt_ms(top * frac)}</text>")
    for key, colour, _name in _SERIES:
        pts = " ".join(f"{px(p['bucket_ms']):.1f},{py(p[key] or 0):.1f}" for p in points)
        parts.append(f"<polyline points='{pts}' fill='none' stroke='{colour}' "
                     "stroke-width='2'/>")
        for p in points:
            parts.append(f"<circle cx='{px(p['bucket_ms']):.1f}' cy='{py(p[key] or 0):.1f}' "
                         f"r='2.5' fill='{colour}'/>")
    for i, (_, colour, name) in enumerate(_SERIES):
        parts.append(f"<rect x='{left + i * 52}' y='{h + 2}' width='10' height='10' "
                     f"fill='{colour}'/><text x='{left + 14 + i * 52}' y='{h + 11}' "
                     f"font-size='10' fill='#1d2733'>{name}</text>")
    span = f"{time.strftime('%H:%M', time.gmtime(x0 / 1000))}–" \
           f"{time.strftime('%H:%M', time.gmtime(x1 / 1000))} UTC"
    parts.append(f"<text x='{w - 10}' y='{h + 11}' font-size='10' text-anchor='end' "
                 f"fill='#5b6775'>{span}</text></svg>")
    return "".join(parts)


def bars(rows: list[dict[str, Any]], key: str) -> str:
    """Horizontal bars of records per `key`, with bytes beside them."""
    if not rows:
        return "<p class='sub'>None.</p>"
    w, row_h, label_w = 380, 24, 130
    most = max(r["records"] for r in rows) or 1
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{w}' "
             f"height='{len(rows) * row_h + 4}'>"]
    for i, r in enumerate(rows):
        y = i * row_h + 2
        name = r[key] if r[key] is not None else "(not via Herald)"
        bw = (w - label_w - 100) * r["records"] / most
        text = str(name)
        short = text if len(text) <= 16 else text[:15] + "\u2026"  # fits the label column
        parts.append(f"<text x='{label_w - 6}' y='{y + 15}' font-size='12' text-anchor='end' "
                     f"fill='#1d2733'><title>{escape(text)}</title>{escape(short)}</text>")
        parts.append(f"<rect x='{label_w}' y='{y + 3}' width='{max(bw, 1):.1f}' height='16' "
                     f"rx='3' fill='{'#2e86c1' if r[key] is not None else '#95a5a6'}'/>")
        parts.append(f"<text x='{label_w + bw + 6:.1f}' y='{y + 15}' font-size='11' "
                     f"fill='#5b6775'>{fmt_count(r['records'])} · "
                     f"{fmt_bytes(r['bytes'])}</text>")
    parts.append("</svg>")
    return "".join(parts)


def _card(value: str, label: str, cls: str = "") -> str:
    return f"<div class='card {cls}'><div class='v'>{value}</div><div class='l'>{label}</div></div>"


def render(summary: dict[str, Any]) -> str:
    rec, flows, cfg = summary["records"], summary["flows"], summary["config"]
    out = ["<!doctype html><html><head><meta charset='utf-8'><title>Herald pipeline report"
           f"</title><style>{_CSS}</style></head><body>"]
    out.append("<h1>Herald pipeline report</h1>")
    out.append(f"<div class='sub'>{escape(', '.join(cfg['topics']))} · generated "
               f"{_utc(summary['generated_ms'])} · {escape(summary.get('mode', ''))} · "
               f"terminal: {escape(', '.join(cfg['terminal_topics']) or 'none')} · broken "
               f"when a hop waits over {fmt_ms(cfg['max_wait_ms'])}</div>")
    out.append("<div class='cards'>")
    out.append(_card(fmt_count(rec["total"]), "records"))
    out.append(_card(fmt_count(rec["untraced"]), "without trace context",
                     "bad" if rec["untraced"] else ""))
    out.append(_card(fmt_count(flows["total"]), "flows"))
    out.append(_card(fmt_count(flows["complete"]), "complete", "ok"))
    out.append(_card(fmt_count(flows["stopped"]), "stopped before a terminal topic",
                     "bad" if flows["stopped"] else ""))
    out.append(_card(fmt_count(flows["slow"]), "waited too long",
                     "bad" if flows["slow"] else ""))
    if flows.get("open"):
        out.append(_card(fmt_count(flows["open"]), "open (within the watermark)"))
    out.append("</div>")

    out.append("<h2>Pathways</h2><div class='panel'>")
    out.append(pathway_graph(summary))
    out.append("<table><tr><th>pathway</th><th>flows</th><th>broken</th><th>p50</th>"
               "<th>p90</th><th>p99</th><th>max</th></tr>")
    for p in sorted(summary["pathways"], key=lambda p: -p["count"]):
        out.append(f"<tr><td>{escape(p['path'])}</td><td class='n'>{fmt_count(p['count'])}</td>"
                   f"<td class='n'>{fmt_count(p['broken'])}</td>"
                   + "".join(f"<td class='n'>{fmt_ms(p[k])}</td>"
                             for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms")) + "</tr>")
    out.append("</table></div>")

    over_time: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for p in summary["over_time"]:
        over_time.setdefault((p["from_topic"], p["to_topic"]), []).append(p)
    if summary["edges"]:
        out.append("<h2>Latency per edge</h2><div class='grid'>")
        for e in summary["edges"]:
            key = (e["from_topic"], e["to_topic"])
            out.append(f"<div class='panel'><b>{escape(key[0])} → {escape(key[1])}</b> "
                       f"<span class='sub'>{fmt_count(e['count'])} hops · p50 "
                       f"{fmt_ms(e['p50_ms'])} · p90 {fmt_ms(e['p90_ms'])} · p99 "
                       f"{fmt_ms(e['p99_ms'])} · max {fmt_ms(e['max_ms'])}</span><br>")
            out.append(histogram(e, summary["histogram_bounds_ms"]))
            out.append(trend(over_time.get(key, [])))
            out.append("</div>")
        out.append("</div>")

    out.append(f"<h2>Broken flows ({fmt_count(flows['broken'])})</h2><div class='panel'>")
    if summary["broken_branches"]:
        out.append("<table><tr><th>trace id</th><th>path</th><th>why</th><th>started</th>"
                   "<th>longest wait</th></tr>")
        for f in summary["broken_branches"]:
            why = "".join(f"<span class='tag {k}'>{k}</span> " for k in ("stopped", "slow")
                          if f[k])
            out.append(f"<tr><td class='mono'>{escape(f['trace_id'])}</td>"
                       f"<td>{escape(f['path'])}</td><td>{why}</td>"
                       f"<td>{_utc(f['start_ms'])}</td>"
                       f"<td class='n'>{fmt_ms(f['max_wait_ms'])}</td></tr>")
        out.append("</table>")
    else:
        out.append("<p class='sub'>None.</p>")
    out.append("</div>")

    if summary.get("transit"):
        out.append("<h2>Produce-to-consume latency</h2><div class='panel'><table><tr>"
                   "<th>topic</th><th>consumer group</th><th>consumers</th><th>records</th>"
                   "<th>p50</th><th>p90</th><th>p99</th><th>max</th></tr>")
        for t in summary["transit"]:
            group = (escape(t["group"]) if t["group"] is not None
                     else "<span class='sub'>no group (assign)</span>")
            consumers = ", ".join(escape(str(c)) for c in t.get("consumers") or [])
            out.append(f"<tr><td>{escape(t['topic'])}</td><td>{group}</td>"
                       f"<td class='mono'>{consumers}</td>"
                       f"<td class='n'>{fmt_count(t['count'])}</td>"
                       + "".join(f"<td class='n'>{fmt_ms(t[k])}</td>"
                                 for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms")) + "</tr>")
        out.append("</table></div>")

    audit = summary["audit"]
    out.append("<h2>Top producers</h2><div class='grid'>")
    for key, title in (("client_id", "client id"), ("principal", "principal"),
                       ("origin", "origin cluster")):
        out.append(f"<div class='panel'><b>by {title}</b><br>"
                   f"{bars(audit['by_' + key], key)}</div>")
    out.append("</div>")
    out.append("<h2>Records per hour</h2><div class='panel'><table><tr><th>hour</th>"
               "<th>records</th><th>bytes</th></tr>")
    for h in audit["by_hour"]:
        out.append(f"<tr><td>{_utc(h['hour_ms'])}</td><td class='n'>"
                   f"{fmt_count(h['records'])}</td><td class='n'>{fmt_bytes(h['bytes'])}</td>"
                   "</tr>")
    out.append("</table></div></body></html>")
    return "\n".join(out)


def write_report(summary: dict[str, Any], path: Path) -> None:
    path.write_text(render(summary))


def report_from_summary(summary_path: Path, html_path: Path) -> None:
    write_report(json.loads(summary_path.read_text()), html_path)
