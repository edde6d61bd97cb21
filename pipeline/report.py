"""The HTML report: one self-contained file (inline CSS and SVG, no script, nothing fetched),
drawn from the JSON summary alone, so `herald pipeline report` needs no Spark.

What a person looks at first is the flow graph: topics as boxes in a layered layout
(`pipeline.layout`), fan-out drawn as branches, retries as loops, each edge labelled with its
count, p50 and p99 and dashed where its hops were inferred rather than linked; then the
pathways, the latency distribution and its trend per edge, the broken branches, transit and
lag over time per consumer group, and who produced what. Where records declared parents
Herald could not name, the report says so before anything else (a line under the cards, the
edges and pathways they touch marked *incomplete*, a table by reason): figures that leave out
an input nobody can see must not look complete.
"""

from __future__ import annotations

import json
import time
from html import escape
from pathlib import Path
from typing import Literal

from pipeline.graph import LOST_REASONS
from pipeline.layout import layout
from pipeline.summary_shape import Edge, Lag, OverTime, ReasonCounts, Summary

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
.stopped{background:#c0392b}.slow{background:#d68910}.inferred{background:#7d5ba6}
.incomplete{background:#a04000}
.warn .v{color:#7d5ba6}.lost .v{color:#a04000}
.links{margin-top:14px;font-size:14px;padding:8px 14px;border-radius:8px;background:#fff;
box-shadow:0 1px 2px rgba(0,0,0,.08)}.links.lossy{border-left:6px solid #a04000;background:#fdf2e9}
"""
_GOOD, _WARN, _BAD = "#27ae60", "#e59400", "#c0392b"
_PALETTE = ("#2e86c1", "#c0392b", "#27ae60", "#8e44ad", "#e59400", "#16a085", "#7f8c8d")
_SERIES: tuple[tuple[Literal["p50_ms", "p90_ms", "p99_ms"], str, str], ...] = (
    ("p50_ms", "#2e86c1", "p50"), ("p90_ms", "#e59400", "p90"), ("p99_ms", "#c0392b", "p99"))


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


def _edge_label(parts: list[str], e: Edge, x: float, y: float, colour: str) -> None:
    """The label on an edge: p50 and p99, then how many hops, and whether any was inferred;
    a third line when some led into hops with lost parents."""
    label = f"p50 {fmt_ms(e['p50_ms'])} · p99 {fmt_ms(e['p99_ms'])}"
    if e.get("link") == "inferred":
        second = f"{fmt_count(e['count'])} hops · inferred"
    elif e.get("link") == "mixed":
        second = f"{fmt_count(e['count'])} hops · {fmt_count(e['inferred'])} inferred"
    else:
        second = f"{fmt_count(e['count'])} hops · max {fmt_ms(e['max_ms'])}"
    dash = "" if e.get("link", "linked") == "linked" else " stroke-dasharray='4 3'"
    incomplete = e.get("incomplete") or 0
    parts.append(f"<rect x='{x - 86:.1f}' y='{y - 20:.1f}' width='172' "
                 f"height='{50 if incomplete else 36}' rx='5' fill='#fff' stroke='{colour}'"
                 f"{dash}/>")
    parts.append(f"<text x='{x:.1f}' y='{y - 5:.1f}' text-anchor='middle' font-size='12' "
                 f"font-weight='bold' fill='#1d2733'>{escape(label)}</text>")
    parts.append(f"<text x='{x:.1f}' y='{y + 10:.1f}' text-anchor='middle' font-size='11' "
                 f"fill='#5b6775'>{escape(second)}</text>")
    if incomplete:
        parts.append(f"<text x='{x:.1f}' y='{y + 24:.1f}' text-anchor='middle' font-size='11' "
                     f"font-weight='bold' fill='#a04000'>{fmt_count(incomplete)} incomplete "
                     "(parents lost)</text>")


def pathway_graph(summary: Summary) -> str:
    """The topic graph, drawn as a graph: a layered layout (`pipeline.layout`) with edges
    left to right, fan-out as branches, retries as arcs under the boxes (back to an earlier
    topic) or loops over them (back to the same one). Each edge carries its count, p50 and
    p99, is as thick as its share of hops and coloured by p99 against `max_wait_ms`; an edge
    any of whose hops was inferred rather than linked is dashed."""
    edges = summary["edges"]
    by_topic = {t["topic"]: t for t in summary["records"]["by_topic"]}
    terminal = set(summary["config"]["terminal_topics"])
    plan = layout(list(by_topic), [(e["from_topic"], e["to_topic"]) for e in edges])
    if not plan.layer:
        return "<p class='sub'>No records were read.</p>"
    # Rows are further apart when a loop has to fit over a box (with its label).
    box_w, box_h, col_gap, pitch = 190, 58, 230, 140 if plan.loops else 100
    top = 90 if plan.loops else 30
    most_rows = max(len(r) for r in plan.rows)
    bottom = top + most_rows * pitch
    width = 40 + len(plan.rows) * (box_w + col_gap) - col_gap
    height = bottom + 30 + 56 * len(plan.back)
    centre: dict[str, tuple[float, float]] = {}  # topic or waypoint -> (left x, centre y)
    for col, names in enumerate(plan.rows):
        y0 = top + (most_rows - len(names)) * pitch / 2
        for i, name in enumerate(names):
            centre[name] = (20 + col * (box_w + col_gap), y0 + i * pitch + pitch / 2)
    limit = summary["config"]["max_wait_ms"]
    most = max((e["count"] for e in edges), default=1)
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
             f"viewBox='0 0 {width} {height}' role='img' aria-label='pathway graph'>",
             "<defs><marker id='arrow' viewBox='0 0 10 10' refX='9' refY='5' markerWidth='12' "
             "markerHeight='12' markerUnits='userSpaceOnUse' orient='auto-start-reverse'>"
             "<path d='M0,0L10,5L0,10z' fill='#5b6775'/></marker></defs>"]
    labels: list[str] = []
    back_rank = {edge: i for i, edge in enumerate(plan.back)}
    for e in edges:
        a, b = e["from_topic"], e["to_topic"]
        (ax, ay), (bx, by) = centre[a], centre[b]
        if a == b:  # a retry into the same topic: a loop over the box
            left, right, y = ax + box_w * 0.35, ax + box_w * 0.65, ay - box_h / 2
            path = (f"M{right:.1f},{y:.1f} C{right + 14:.1f},{y - 62:.1f} "
                    f"{left - 14:.1f},{y - 62:.1f} {left:.1f},{y:.1f}")
            lx, ly = ax + box_w / 2, y - 46
        elif (a, b) in back_rank:  # back to an earlier topic: under the boxes, in the gaps
            low = bottom + 20 + 56 * back_rank[(a, b)]
            x1, x2, r = ax + box_w + 14, bx - 14, 10
            path = (f"M{ax + box_w:.1f},{ay + 10:.1f} L{x1 - r:.1f},{ay + 10:.1f} "
                    f"Q{x1:.1f},{ay + 10:.1f} {x1:.1f},{ay + 10 + r:.1f} L{x1:.1f},{low - r:.1f} "
                    f"Q{x1:.1f},{low:.1f} {x1 - r:.1f},{low:.1f} L{x2 + r:.1f},{low:.1f} "
                    f"Q{x2:.1f},{low:.1f} {x2:.1f},{low - r:.1f} L{x2:.1f},{by + 10 + r:.1f} "
                    f"Q{x2:.1f},{by + 10:.1f} {x2 + r:.1f},{by + 10:.1f} "
                    f"L{bx - 2:.1f},{by + 10:.1f}")
            lx, ly = (x1 + x2) / 2, low
        else:  # forward, around the boxes of the columns it crosses
            points = [(ax + box_w, ay)]
            for w in plan.waypoints.get((a, b), []):
                wx, wy = centre[w]
                points += [(wx, wy), (wx + box_w, wy)]
            points.append((bx - 2, by))
            path = f"M{points[0][0]:.1f},{points[0][1]:.1f}"
            for i, (x2, y2) in enumerate(points[1:], start=1):
                x1, y1 = points[i - 1]
                if i % 2:  # between columns: an S-curve
                    mx = (x1 + x2) / 2
                    path += f" C{mx:.1f},{y1:.1f} {mx:.1f},{y2:.1f} {x2:.1f},{y2:.1f}"
                else:      # through a column it crosses: straight
                    path += f" L{x2:.1f},{y2:.1f}"
            (x1, y1), (x2, y2) = points[0], points[1]
            lx, ly = (x1 + x2) / 2, (y1 + y2) / 2
        colour = _latency_colour(e["p99_ms"], limit)
        stroke = 2 + 6 * e["count"] / most
        dash = "" if e.get("link", "linked") == "linked" else " stroke-dasharray='10 6'"
        parts.append(f"<path d='{path}' fill='none' stroke='{colour}' stroke-width='{stroke:.1f}'"
                     f" stroke-opacity='.75'{dash} marker-end='url(#arrow)'/>")
        _edge_label(labels, e, lx, ly, colour)
    for t, col in plan.layer.items():
        x, cy = centre[t]
        y = cy - box_h / 2
        info = by_topic.get(t, {"records": 0, "untraced": 0})
        fill = "#1f3a5f" if t in terminal else "#2e86c1"
        parts.append(f"<rect x='{x}' y='{y:.1f}' width='{box_w}' height='{box_h}' rx='8' "
                     f"fill='{fill}'><title>{escape(t)} (column {col + 1})</title></rect>")
        name = t if len(t) <= 24 else t[:23] + "…"
        font = 15 if len(name) <= 17 else 12
        parts.append(f"<text x='{x + box_w / 2}' y='{y + 24:.1f}' text-anchor='middle' "
                     f"font-size='{font}' font-weight='bold' fill='#fff'>{escape(name)}</text>")
        extra = f" · {fmt_count(info['untraced'])} untraced" if info["untraced"] else ""
        parts.append(f"<text x='{x + box_w / 2}' y='{y + 44:.1f}' text-anchor='middle' "
                     f"font-size='11' fill='#dbe7f3'>{fmt_count(info['records'])} records"
                     f"{escape(extra)}</text>")
    parts += labels  # over the edges and boxes, so none is hidden
    parts.append("</svg>")
    return "".join(parts)


def histogram(edge: Edge, bounds: list[int]) -> str:
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


def _lines(series: list[tuple[str, list[tuple[int, float]]]], w: int, h: int,
           left: int = 52, bottom: int = 22) -> list[str]:
    """Grid and one polyline per (colour, [(time ms, value ms)]) series, time across and the
    value up from zero; the caller opens the <svg> and adds its legend."""
    xs = [t for _, points in series for t, _ in points]
    top = max((v for _, points in series for _, v in points), default=0) or 1
    x0, x1 = min(xs), max(xs)

    def px(t: float) -> float:
        return left + (0.5 if x0 == x1 else (t - x0) / (x1 - x0)) * (w - left - 10)

    def py(v: float) -> float:
        return 10 + (1 - v / top) * (h - bottom - 10)

    parts = []
    for frac in (0, 0.5, 1):
        y = py(top * frac)
        parts.append(f"<line x1='{left}' y1='{y:.1f}' x2='{w - 10}' y2='{y:.1f}' "
                     "stroke='#eef0f3'/>")
        parts.append(f"<text x='{left - 4}' y='{y + 4:.1f}' font-size='10' text-anchor='end' "
                     f"fill='#5b6775'>{fmt_ms(top * frac)}</text>")
    for colour, points in series:
        pts = " ".join(f"{px(t):.1f},{py(v):.1f}" for t, v in points)
        parts.append(f"<polyline points='{pts}' fill='none' stroke='{colour}' "
                     "stroke-width='2'/>")
        parts += [f"<circle cx='{px(t):.1f}' cy='{py(v):.1f}' r='2.5' fill='{colour}'/>"
                  for t, v in points]
    return parts


def _span(xs: list[int], fmt: str) -> str:
    return (f"{time.strftime(fmt, time.gmtime(min(xs) / 1000))}–"
            f"{time.strftime(fmt, time.gmtime(max(xs) / 1000))} UTC")


def trend(points: list[OverTime]) -> str:
    """p50/p90/p99 of one edge per time bucket, as lines over time."""
    if not points:
        return ""
    w, h, left = 360, 150, 52
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h + 16}'>"]
    parts += _lines([(colour, [(p["bucket_ms"], p[key] or 0) for p in points])
                     for key, colour, _ in _SERIES], w, h, left)
    for i, (_, colour, name) in enumerate(_SERIES):
        parts.append(f"<rect x='{left + i * 52}' y='{h + 2}' width='10' height='10' "
                     f"fill='{colour}'/><text x='{left + 14 + i * 52}' y='{h + 11}' "
                     f"font-size='10' fill='#1d2733'>{name}</text>")
    parts.append(f"<text x='{w - 10}' y='{h + 11}' font-size='10' text-anchor='end' "
                 f"fill='#5b6775'>{_span([p['bucket_ms'] for p in points], '%H:%M')}</text></svg>")
    return "".join(parts)


def bars(rows: list[tuple[str | None, int, int]]) -> str:
    """Horizontal bars of records per producer (None: not via Herald), with bytes beside
    them; one function for the client ids, principals and origins alike, so rows come as
    (producer, records, bytes)."""
    if not rows:
        return "<p class='sub'>None.</p>"
    w, row_h, label_w = 380, 24, 130
    most = max(records for _, records, _ in rows) or 1
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{w}' "
             f"height='{len(rows) * row_h + 4}'>"]
    for i, (producer, records, size) in enumerate(rows):
        y = i * row_h + 2
        name = producer if producer is not None else "(not via Herald)"
        bw = (w - label_w - 100) * records / most
        text = str(name)
        short = text if len(text) <= 16 else text[:15] + "\u2026"  # fits the label column
        parts.append(f"<text x='{label_w - 6}' y='{y + 15}' font-size='12' text-anchor='end' "
                     f"fill='#1d2733'><title>{escape(text)}</title>{escape(short)}</text>")
        parts.append(f"<rect x='{label_w}' y='{y + 3}' width='{max(bw, 1):.1f}' height='16' "
                     f"rx='3' fill='{'#2e86c1' if producer is not None else '#95a5a6'}'/>")
        parts.append(f"<text x='{label_w + bw + 6:.1f}' y='{y + 15}' font-size='11' "
                     f"fill='#5b6775'>{fmt_count(records)} · {fmt_bytes(size)}</text>")
    parts.append("</svg>")
    return "".join(parts)


def _link_tag(e: Edge) -> str:
    """How an edge's hops were joined: linked, inferred, or how many of them were inferred."""
    kind = e.get("link", "linked")
    if kind == "linked":
        return "<span class='sub'>linked</span>"
    if kind == "inferred":
        return "<span class='tag inferred'>inferred</span>"
    return f"<span class='tag inferred'>{fmt_count(e['inferred'])} of {fmt_count(e['count'])}" \
           " inferred</span>"


def _inferred_count(value: int | None) -> str:
    return (f"<span class='tag inferred'>{fmt_count(value)}</span>" if value
            else fmt_count(value))


def _incomplete_count(value: int | None) -> str:
    return (f"<span class='tag incomplete'>{fmt_count(value)}</span>" if value
            else fmt_count(value))


def _by_reason(by_reason: dict[str, ReasonCounts]) -> list[tuple[str, ReasonCounts]]:
    """The reasons in the header's order (`summary.json` is written with sorted keys)."""
    rank = {r: i for i, r in enumerate(LOST_REASONS)}
    return sorted(by_reason.items(), key=lambda rc: (rank.get(rc[0], len(rank)), rc[0]))


def _reasons(by_reason: dict[str, ReasonCounts], key: Literal["hops", "links", "branches"]
             ) -> str:
    return ", ".join(f"{reason} {fmt_count(c[key])}" for reason, c in _by_reason(by_reason)
                     if c.get(key))


def _n(count: int | None, one: str, many: str = "") -> str:
    return f"{fmt_count(count)} {one if count == 1 else many or one + 's'}"


def links_line(summary: Summary) -> str:
    """One sentence on how the graph was joined, and what it cannot see: the first thing to
    read before trusting any figure below it. A summary without `incomplete` (written before
    lost parents were declared) says nothing about them."""
    links = summary.get("links", {})
    text = (f"Links: {fmt_count(links.get('linked'))} linked (herald.parent), "
            f"{fmt_count(links.get('inferred'))} inferred, "
            f"{fmt_count(links.get('unresolved'))} unresolved")
    lost = summary.get("incomplete")
    if lost is None:
        return f"<div class='links'>{escape(text)}.</div>"
    if not lost.get("hops"):
        return f"<div class='links'>{escape(text)}; no record declared lost parents.</div>"
    roots = lost.get("roots") or 0
    parts = [f"{fmt_count(lost['hops'])} hops are incomplete: they declared "
             f"{fmt_count(lost['parents_lost'])} parents Herald knew of but could not name "
             f"({_reasons(lost.get('by_reason', {}), 'hops')} hops)",
             f"{_n(lost.get('links'), 'link')} into them on {_n(lost.get('edges'), 'edge')}, "
             f"{_n(lost.get('branches'), 'branch', 'branches')} on "
             f"{_n(lost.get('pathways'), 'pathway')} and {_n(lost.get('flows'), 'flow')}"
             " are incomplete"]
    if roots:
        parts.append(f"{fmt_count(roots)} of these hops start their branches with no parent "
                     "named: their real start is upstream, unseen")
    return (f"<div class='links lossy'><b>{escape(text)}; incomplete.</b> "
            f"{escape('; '.join(parts))}. Latencies and counts of what they touch leave "
            "those inputs out.</div>")


def incomplete_table(summary: Summary) -> str:
    """Per reason a parent was lost: the hops that declared it, the links into them and the
    branches through them (empty when nothing was lost)."""
    lost = summary.get("incomplete") or {}
    if not lost.get("hops"):
        return ""
    out = ["<h2>Incomplete: parents Herald could not name</h2><div class='panel'><table><tr>"
           "<th>reason</th><th>hops</th><th>links into them</th><th>branches through them"
           "</th></tr>"]
    for reason, c in _by_reason(lost.get("by_reason", {})):
        out.append(f"<tr><td>{escape(reason)}</td><td class='n'>{fmt_count(c['hops'])}</td>"
                   f"<td class='n'>{fmt_count(c['links'])}</td>"
                   f"<td class='n'>{fmt_count(c['branches'])}</td></tr>")
    out.append("</table><p class='sub'>expired: remembered longer than Herald's link memory "
               "keeps a fetch; evicted: pushed out of a full memory; overflow: more inputs "
               "than it names per record. A hop may carry several reasons. Nothing is guessed "
               "in place of a lost parent.</p></div>")
    return "".join(out)


def lag_chart(rows: list[Lag]) -> str:
    """One topic's lag over time: a line per consumer group (worst lag per bucket)."""
    w, h, left = 380, 150, 52
    groups: dict[str | None, list[Lag]] = {}
    for r in sorted(rows, key=lambda r: r["bucket_ms"]):
        groups.setdefault(r["group"], []).append(r)
    colours = {g: _PALETTE[i % len(_PALETTE)] for i, g in enumerate(groups)}
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{w}' "
             f"height='{h + 20 + 14 * len(groups)}'>"]
    parts += _lines([(colours[g], [(p["bucket_ms"], (p["max_s"] or 0) * 1000) for p in points])
                     for g, points in groups.items()], w, h, left)
    for i, (group, points) in enumerate(groups.items()):
        worst = max(p["max_s"] or 0 for p in points)
        name = group if group is not None else "no group (assign)"
        y = h + 20 + 14 * i
        parts.append(f"<rect x='{left}' y='{y - 9}' width='10' height='10' "
                     f"fill='{colours[group]}'/><text x='{left + 14}' y='{y}' font-size='11' "
                     f"fill='#1d2733'>{escape(name)} · worst {fmt_ms(worst * 1000)} · "
                     f"{fmt_count(sum(p['fetches'] for p in points))} records</text>")
    parts.append(f"<text x='{w - 10}' y='{h + 4}' font-size='10' text-anchor='end' "
                 f"fill='#5b6775'>{_span([r['bucket_ms'] for r in rows], '%H:%M:%S')}</text></svg>")
    return "".join(parts)


def _card(value: str, label: str, cls: str = "") -> str:
    return f"<div class='card {cls}'><div class='v'>{value}</div><div class='l'>{label}</div></div>"


def render(summary: Summary) -> str:
    rec, flows, cfg = summary["records"], summary["flows"], summary["config"]
    out = ["<!doctype html><html><head><meta charset='utf-8'><title>Herald pipeline report"
           f"</title><style>{_CSS}</style></head><body>"]
    out.append("<h1>Herald pipeline report</h1>")
    out.append(f"<div class='sub'>{escape(', '.join(cfg['topics']))} · generated "
               f"{_utc(summary['generated_ms'])} · {escape(summary.get('mode', ''))} · "
               f"terminal: {escape(', '.join(cfg['terminal_topics']) or 'none')} · broken "
               f"when a hop waits over {fmt_ms(cfg['max_wait_ms'])}</div>")
    branches, links = summary.get("branches", {}), summary.get("links", {})
    out.append("<div class='cards'>")
    out.append(_card(fmt_count(rec["total"]), "records"))
    out.append(_card(fmt_count(rec["untraced"]), "without trace context",
                     "bad" if rec["untraced"] else ""))
    out.append(_card(fmt_count(flows["total"]), "flows (trace ids)"))
    out.append(_card(fmt_count(flows["complete"]), "complete", "ok"))
    out.append(_card(fmt_count(branches.get("total")), "branches (root to leaf)"))
    out.append(_card(fmt_count(branches.get("stopped")), "branches stopped before a terminal",
                     "bad" if branches.get("stopped") else ""))
    out.append(_card(fmt_count(branches.get("slow")), "branches that waited too long",
                     "bad" if branches.get("slow") else ""))
    if flows.get("open"):
        out.append(_card(fmt_count(flows["open"]), "open flows (within the watermark)"))
    out.append(_card(fmt_count(links.get("linked")), "edges linked (herald.parent)", "ok"))
    out.append(_card(fmt_count(links.get("inferred")), "edges inferred",
                     "warn" if links.get("inferred") else ""))
    if links.get("unresolved"):
        out.append(_card(fmt_count(links["unresolved"]), "links to records not read", "warn"))
    lost = summary.get("incomplete") or {}
    if lost.get("hops"):
        out.append(_card(fmt_count(lost["hops"]), "hops with lost parents", "lost"))
        out.append(_card(fmt_count(lost.get("branches")), "branches incomplete", "lost"))
    out.append("</div>")
    out.append(links_line(summary))

    out.append("<h2>Flow graph</h2><div class='panel'>")
    out.append(pathway_graph(summary))
    out.append("<p class='sub'>Topics left to right in causal order; fan-out branches, "
               "retries loop back. Dashed: some or all of the edge's hops were inferred "
               "(the record named no parent), not linked. A brown third line counts the hops the "
               "edge leads into that declared parents Herald could not name (incomplete). "
               "Dark boxes are terminal topics."
               "</p>")
    out.append("<table><tr><th>edge</th><th>hops</th><th>link</th><th>incomplete</th>"
               "<th>p50</th><th>p90</th><th>p99</th><th>max</th></tr>")
    for e in summary["edges"]:
        out.append(f"<tr><td>{escape(e['from_topic'])} → {escape(e['to_topic'])}</td>"
                   f"<td class='n'>{fmt_count(e['count'])}</td><td>{_link_tag(e)}</td>"
                   f"<td class='n'>{_incomplete_count(e.get('incomplete'))}</td>"
                   + "".join(f"<td class='n'>{fmt_ms(e[k])}</td>"
                             for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms")) + "</tr>")
    out.append("</table></div>")
    out.append("<h2>Pathways</h2><div class='panel'>")
    out.append("<table><tr><th>pathway (root to leaf)</th><th>branches</th><th>broken</th>"
               "<th>inferred</th><th>incomplete</th><th>p50</th><th>p90</th><th>p99</th>"
               "<th>max</th></tr>")
    for p in sorted(summary["pathways"], key=lambda p: (-p["count"], p["path"])):
        out.append(f"<tr><td>{escape(p['path'])}</td><td class='n'>{fmt_count(p['count'])}</td>"
                   f"<td class='n'>{fmt_count(p['broken'])}</td>"
                   f"<td class='n'>{_inferred_count(p.get('inferred'))}</td>"
                   f"<td class='n'>{_incomplete_count(p.get('incomplete'))}</td>"
                   + "".join(f"<td class='n'>{fmt_ms(p[k])}</td>"
                             for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms")) + "</tr>")
    out.append("</table><p class='sub'>inferred: branches resting on at least one inferred "
               "edge; incomplete: branches through a hop with parents Herald could not name."
               "</p></div>")
    out.append(incomplete_table(summary))

    over_time: dict[tuple[str, str], list[OverTime]] = {}
    for point in summary["over_time"]:
        over_time.setdefault((point["from_topic"], point["to_topic"]), []).append(point)
    if summary["edges"]:
        out.append("<h2>Latency per edge</h2><div class='grid'>")
        for e in summary["edges"]:
            key = (e["from_topic"], e["to_topic"])
            out.append(f"<div class='panel'><b>{escape(key[0])} → {escape(key[1])}</b> "
                       f"{_link_tag(e) if e.get('link', 'linked') != 'linked' else ''} "
                       f"<span class='sub'>{fmt_count(e['count'])} hops · p50 "
                       f"{fmt_ms(e['p50_ms'])} · p90 {fmt_ms(e['p90_ms'])} · p99 "
                       f"{fmt_ms(e['p99_ms'])} · max {fmt_ms(e['max_ms'])}</span><br>")
            out.append(histogram(e, summary["histogram_bounds_ms"]))
            out.append(trend(over_time.get(key, [])))
            out.append("</div>")
        out.append("</div>")

    # A summary written before branches (`herald pipeline report` on an old folder) names its
    # broken flows instead.
    broken = summary.get("broken_branches", summary.get("broken_flows", []))
    out.append(f"<h2>Broken branches ({fmt_count(branches.get('broken'))}, in "
               f"{fmt_count(flows['broken'])} flows)</h2><div class='panel'>")
    if broken:
        out.append("<table><tr><th>trace id</th><th>branch</th><th>why</th><th>started</th>"
                   "<th>longest wait</th></tr>")
        for f in broken:
            why = "".join(f"<span class='tag {k}'>{k}</span> " for k in ("stopped", "slow")
                          if f[k])
            if f.get("inferred_edges"):
                why += "<span class='tag inferred'>inferred</span> "
            if f.get("incomplete"):
                why += "<span class='tag incomplete'>incomplete</span>"
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
    if summary.get("lag"):
        out.append("<h2>Consumer lag over time</h2><p class='sub'>How far behind the newest "
                   "record of the partition each group's fetches were (its newest record's "
                   "time minus the fetched record's), worst per "
                   f"{cfg.get('time_bucket_s', 60)} s bucket.</p><div class='grid'>")
        by_topic: dict[str, list[Lag]] = {}
        for row in summary["lag"]:
            by_topic.setdefault(row["topic"], []).append(row)
        for topic, rows in by_topic.items():
            out.append(f"<div class='panel'><b>{escape(topic)}</b><br>{lag_chart(rows)}</div>")
        out.append("</div>")

    audit = summary["audit"]
    out.append("<h2>Top producers</h2><div class='grid'>")
    producers = (
        ("client id", [(r["client_id"], r["records"], r["bytes"]) for r in audit["by_client_id"]]),
        ("principal", [(r["principal"], r["records"], r["bytes"]) for r in audit["by_principal"]]),
        ("origin cluster", [(r["origin"], r["records"], r["bytes"]) for r in audit["by_origin"]]))
    for title, ranked in producers:
        out.append(f"<div class='panel'><b>by {title}</b><br>{bars(ranked)}</div>")
    out.append("</div>")
    out.append("<h2>Records per hour</h2><div class='panel'><table><tr><th>hour</th>"
               "<th>records</th><th>bytes</th></tr>")
    for h in audit["by_hour"]:
        out.append(f"<tr><td>{_utc(h['hour_ms'])}</td><td class='n'>"
                   f"{fmt_count(h['records'])}</td><td class='n'>{fmt_bytes(h['bytes'])}</td>"
                   "</tr>")
    out.append("</table></div></body></html>")
    return "\n".join(out)


def write_report(summary: Summary, path: Path) -> None:
    path.write_text(render(summary))


def report_from_summary(summary_path: Path, html_path: Path) -> None:
    # The file may be an older version's, lacking keys `Summary` declares: `render` reads
    # those with a default.
    summary: Summary = json.loads(summary_path.read_text())
    write_report(summary, html_path)
