"""The branch walk on hand-made graphs: every expectation is worked out here by hand."""

from __future__ import annotations

from pipeline.branch_paths import Link, Node, walk


def node(topic: str, ms: int, trace: str = "t1", lost: int = 0,
         reasons: tuple[str, ...] = ()) -> Node:
    return Node((topic, 0, ms), trace, topic, ms, lost, reasons)


def link(parent: Node, child: Node, inferred: bool = False, wait: int | None = -1) -> Link:
    wait_ms = child.event_ms - parent.event_ms if wait == -1 else wait
    return Link(parent.key, child.key, child.topic, child.event_ms, wait_ms, inferred,
                child.parents_lost, child.lost_reasons)


def paths(nodes: list[Node], links: list[Link]) -> list[str]:
    return sorted(" > ".join(b.topics) for b in walk(nodes, links))


def test_fan_out_and_fan_in_make_one_branch_per_root_to_leaf_path() -> None:
    o, p, f, s = node("orders", 0), node("pay", 5), node("fraud", 7), node("ship", 30)
    links = [link(o, p), link(o, f), link(p, s), link(f, s)]
    assert paths([o, p, f, s], links) == ["orders > fraud > ship", "orders > pay > ship"]
    (b,) = [b for b in walk([o, p, f, s], links) if "pay" in b.topics]
    assert (b.root, b.leaf, b.start_ms, b.end_ms, b.max_wait_ms) == (o.key, s.key, 0, 30, 25)


def test_a_lone_root_is_a_branch_of_one_hop_without_a_wait() -> None:
    (b,) = walk([node("orders", 3)], [])
    assert (b.topics, b.max_wait_ms, b.inferred_edges, b.end_ms) == (["orders"], None, 0, 3)


def test_forged_headers_cannot_loop_a_branch() -> None:
    """a → b → c → b: the walk stops where its next hop is one it has visited; a loop with
    no hop outside it has no root and so no branch."""
    a, b, c = node("a", 0), node("b", 1), node("c", 2)
    assert paths([a, b, c], [link(a, b), link(b, c), link(c, b)]) == ["a > b > c"]
    assert paths([b, c], [link(b, c), link(c, b)]) == []


def test_the_same_link_twice_makes_the_same_branch_twice() -> None:
    a, b = node("a", 0), node("b", 1)
    assert paths([a, b], [link(a, b), link(a, b)]) == ["a > b", "a > b"]


def test_a_node_that_is_a_child_is_no_root_even_of_another_trace() -> None:
    """Fan-in across traces: the join hop continues both traces' branches, each with its
    own root's trace."""
    a, b = node("a", 0, "t1"), node("b", 1, "t2")
    j = node("join", 9, "t3")
    got = sorted((x.trace_id, " > ".join(x.topics)) for x in walk(
        [a, b, j], [link(a, j), link(b, j)]))
    assert got == [("t1", "a > join"), ("t2", "b > join")]


def test_waits_inferred_links_and_lost_parents_add_up_along_a_branch() -> None:
    r = node("r", 0, lost=2, reasons=("evicted", "evicted"))
    m = node("m", 10, lost=1, reasons=("expired", "evicted"))
    e = node("e", 15)
    bs = list(walk([r, m, e], [link(r, m, inferred=True), link(m, e, wait=None)]))
    (b,) = bs
    assert (b.max_wait_ms, b.inferred_edges, b.parents_lost, b.lost_root) == (10, 1, 3, True)
    assert b.lost_reasons == ["evicted", "expired"]  # joined without repeats
    (alone,) = walk([r], [])  # the root's own reasons as they are
    assert alone.lost_reasons == ["evicted", "evicted"]


def test_a_branch_as_long_as_a_retry_loop_ran_needs_no_recursion() -> None:
    hops = [node("retry", i) for i in range(5000)]
    (b,) = walk(hops, [link(x, y) for x, y in zip(hops, hops[1:], strict=False)])
    assert (len(b.topics), b.leaf, b.max_wait_ms) == (5000, hops[-1].key, 1)
