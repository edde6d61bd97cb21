"""The root-to-leaf paths of a graph of hops, walked in plain Python (`pipeline.graph.
branches_of` runs it on the executors, one walk per partition of connected hops).

Walking a whole connected part of the graph in one place finds every branch in one pass, where
growing branches level by level in Spark costs a job or two per level. The rules are those of
the level-by-level walk, which the batch job's branches have always followed:

* a root is a node that no link points to; each root row starts its own branches;
* a branch grows by every link out of its last hop whose child it has not visited (so forged
  headers cannot loop it); a hop none of whose children is new ends it (a leaf);
* links are taken as rows: the same link twice makes the same branch twice;
* along a branch: the longest single wait (a missing wait is ignored), the inferred links
  counted, the lost parents summed, their reasons joined without repeats (the root's own are
  kept as they are on a branch of the root alone).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

Key = tuple[str, int, int]


@dataclass(frozen=True)
class Node:
    """A hop the graph holds: its key, trace, topic, time and lost parents."""

    key: Key
    trace_id: str
    topic: str
    event_ms: int | None
    parents_lost: int
    lost_reasons: Sequence[str]


@dataclass(frozen=True)
class Link:
    """One parent → child link, with the child's side of it (as `links_of` gives it)."""

    parent: Key
    child: Key
    topic: str
    event_ms: int | None
    wait_ms: int | None
    inferred: bool
    parents_lost: int
    lost_reasons: Sequence[str]


@dataclass(frozen=True)
class Branch:
    """One root-to-leaf path (`pipeline.graph.branches_of` gives its derived columns)."""

    trace_id: str
    root: Key
    leaf: Key
    start_ms: int | None
    end_ms: int | None
    topics: list[str]
    max_wait_ms: int | None
    inferred_edges: int
    parents_lost: int
    lost_reasons: list[str]
    lost_root: bool


@dataclass
class _Step:
    """A branch walked as far as one of its hops: what it has gathered up to there."""

    key: Key
    topic: str
    end_ms: int | None
    max_wait_ms: int | None
    inferred_edges: int
    parents_lost: int
    lost_reasons: list[str]


def _greatest(a: int | None, b: int | None) -> int | None:
    """Spark's `greatest`: the larger, a null ignored."""
    if a is None:
        return b
    return a if b is None else max(a, b)


def _then(at: _Step, link: Link) -> _Step:
    return _Step(link.child, link.topic, link.event_ms, _greatest(at.max_wait_ms, link.wait_ms),
                 at.inferred_edges + int(link.inferred), at.parents_lost + link.parents_lost,
                 list(dict.fromkeys([*at.lost_reasons, *link.lost_reasons])))


def walk(nodes: Iterable[Node], links: Iterable[Link]) -> Iterator[Branch]:
    """Every branch of the graph of `nodes` and `links`. Every link into a node must be
    among `links` (a root is told by none pointing to it)."""
    children: dict[Key, list[Link]] = {}
    for link in links:
        children.setdefault(link.parent, []).append(link)
    has_parent = {link.child for out in children.values() for link in out}
    for node in nodes:
        if node.key not in has_parent:
            yield from _branches_from(node, children)


def _branches_from(root: Node, children: dict[Key, list[Link]]) -> Iterator[Branch]:
    """Depth first, without recursion (a retry loop makes a branch as long as it ran)."""
    path = [_Step(root.key, root.topic, root.event_ms, None, 0, root.parents_lost,
                  list(root.lost_reasons))]
    visited = {root.key}
    pending = [iter(children.get(root.key, ()))]
    grew = [False]  # whether the branch at each depth went on to a new hop
    while pending:
        link = next((x for x in pending[-1] if x.child not in visited), None)
        if link is not None:
            grew[-1] = True
            path.append(_then(path[-1], link))
            visited.add(link.child)
            pending.append(iter(children.get(link.child, ())))
            grew.append(False)
            continue
        if not grew[-1]:
            end = path[-1]
            yield Branch(root.trace_id, root.key, end.key, root.event_ms, end.end_ms,
                         [s.topic for s in path], end.max_wait_ms, end.inferred_edges,
                         end.parents_lost, end.lost_reasons, root.parents_lost > 0)
        visited.discard(path.pop().key)
        pending.pop()
        grew.pop()
