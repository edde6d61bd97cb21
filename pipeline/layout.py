"""A layered layout of the topic graph, for the report to draw (pure Python, no Spark).

The graph of topics has fan-out, fan-in and, with retries, cycles; drawn as a row of boxes in
time order it would hide all three. The layout is the usual layered one (Sugiyama's), kept
small:

1. cycles are broken by a depth-first search from the sources (topics nothing leads to, in
   name order): an edge back to a topic still on the search's stack is a *back* edge, drawn
   apart (under the boxes), and a topic's edge to itself is a *loop*;
2. each topic's layer is the longest chain of forward edges leading to it, so every forward
   edge points right;
3. a forward edge that spans several layers gets a waypoint in each layer it crosses, so it
   bends around the boxes in between instead of running through them;
4. the order within each layer is improved by a few sweeps of the barycentre heuristic (each
   node moves to the mean position of its neighbours in the layer before, then after), which
   untangles most crossings of graphs this size.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SWEEPS = 4


@dataclass
class Layout:
    layer: dict[str, int]                       # topic -> column
    rows: list[list[str]]                       # per column, top to bottom: topics and waypoints
    forward: list[tuple[str, str]] = field(default_factory=list)
    back: list[tuple[str, str]] = field(default_factory=list)
    loops: list[str] = field(default_factory=list)
    waypoints: dict[tuple[str, str], list[str]] = field(default_factory=dict)  # long edges

    def slot(self, name: str) -> tuple[int, int]:
        """(column, row) of a topic or waypoint."""
        for col, names in enumerate(self.rows):
            if name in names:
                return col, names.index(name)
        raise KeyError(name)


def _back_edges(topics: list[str], edges: list[tuple[str, str]]) -> set[tuple[str, str]]:
    out: dict[str, list[str]] = {t: [] for t in topics}
    incoming = {t: 0 for t in topics}
    for a, b in edges:
        if a != b:
            out[a].append(b)
            incoming[b] += 1
    for t in out:
        out[t].sort()
    back: set[tuple[str, str]] = set()
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    starts = [t for t in topics if incoming[t] == 0] + topics  # then whatever is left (cycles)
    for start in starts:
        if start in state:
            continue
        state[start] = 1
        stack = [(start, iter(out[start]))]
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                state[node] = 2
                stack.pop()
            elif state.get(child) == 1:
                back.add((node, child))
            elif child not in state:
                state[child] = 1
                stack.append((child, iter(out[child])))
    return back


def layout(topics: list[str], edges: list[tuple[str, str]]) -> Layout:
    """Columns, rows and edge kinds for `topics` joined by `edges` (from, to)."""
    topics = sorted(set(topics) | {a for a, _ in edges} | {b for _, b in edges})
    back = _back_edges(topics, edges)
    loops = sorted({a for a, b in edges if a == b})
    forward = sorted({(a, b) for a, b in edges if a != b and (a, b) not in back})
    layer = dict.fromkeys(topics, 0)
    for _ in range(len(topics)):  # longest path; forward edges form a DAG, so this settles
        changed = False
        for a, b in forward:
            if layer[b] < layer[a] + 1:
                layer[b] = layer[a] + 1
                changed = True
        if not changed:
            break
    columns = max(layer.values(), default=0) + 1
    rows: list[list[str]] = [[] for _ in range(columns)]
    for t in topics:
        rows[layer[t]].append(t)
    # Waypoints of long edges, and the adjacency between neighbouring columns.
    waypoints: dict[tuple[str, str], list[str]] = {}
    pairs: list[tuple[str, str]] = []
    for a, b in forward:
        chain = [a]
        for col in range(layer[a] + 1, layer[b]):
            point = f"\0{a}\0{b}\0{col}"
            rows[col].append(point)
            chain.append(point)
        chain.append(b)
        if len(chain) > 2:
            waypoints[(a, b)] = chain[1:-1]
        pairs += list(zip(chain, chain[1:], strict=False))
    before: dict[str, list[str]] = {}
    after: dict[str, list[str]] = {}
    for a, b in pairs:
        after.setdefault(a, []).append(b)
        before.setdefault(b, []).append(a)

    def sweep(order: range, neighbours: dict[str, list[str]], ref: int) -> None:
        for col in order:
            index = {n: i for i, n in enumerate(rows[col + ref])}
            current = {n: i for i, n in enumerate(rows[col])}

            def centre(n: str, index: dict[str, int] = index,
                       current: dict[str, int] = current) -> float:
                near = [index[m] for m in neighbours.get(n, []) if m in index]
                return sum(near) / len(near) if near else current[n]

            rows[col].sort(key=lambda n: (centre(n), current[n]))

    for _ in range(SWEEPS):
        sweep(range(1, columns), before, -1)
        sweep(range(columns - 2, -1, -1), after, 1)
    return Layout(layer=layer, rows=rows, forward=forward, back=sorted(back), loops=loops,
                  waypoints=waypoints)


def is_waypoint(name: str) -> bool:
    return name.startswith("\0")
