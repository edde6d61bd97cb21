"""The report's graph layout (pure Python): every forward edge points right, cycles are cut
into back edges and loops, long edges get a waypoint in each column they cross."""

from __future__ import annotations

from pipeline.layout import is_waypoint, layout


def test_fan_out_and_fan_in_are_layered() -> None:
    edges = [("orders", "payments"), ("orders", "fraud"), ("orders", "stock"),
             ("payments", "shipments"), ("stock", "shipments")]
    plan = layout(["orders", "audit"], edges)
    assert plan.layer == {"orders": 0, "payments": 1, "fraud": 1, "stock": 1,
                          "shipments": 2, "audit": 0}
    assert plan.back == [] and plan.loops == [] and plan.waypoints == {}
    assert sorted(plan.forward) == sorted(edges)
    for a, b in edges:
        assert plan.layer[b] > plan.layer[a]
    # Barycentres keep shipments' two inputs next to each other in their column.
    column = plan.rows[1]
    assert abs(column.index("payments") - column.index("stock")) == 1


def test_retries_become_back_edges_and_loops() -> None:
    edges = [("orders", "payments"), ("payments", "retry"), ("retry", "payments"),
             ("payments", "payments"), ("payments", "shipments")]
    plan = layout([], edges)
    assert plan.loops == ["payments"]
    assert plan.back == [("retry", "payments")]
    assert plan.layer["orders"] < plan.layer["payments"] < plan.layer["retry"]
    for a, b in plan.forward:
        assert plan.layer[b] > plan.layer[a]
    # A cycle with no way in still gets a start (no topic is left out).
    ring = layout([], [("a", "b"), ("b", "c"), ("c", "a")])
    assert set(ring.layer) == {"a", "b", "c"} and len(ring.back) == 1


def test_long_edges_bend_around_the_columns_they_cross() -> None:
    plan = layout([], [("a", "b"), ("b", "c"), ("c", "d"), ("a", "d")])
    points = plan.waypoints[("a", "d")]
    assert len(points) == 2 and all(is_waypoint(p) for p in points)
    assert [plan.slot(p)[0] for p in points] == [1, 2]
    assert [n for row in plan.rows for n in row if not is_waypoint(n)] == ["a", "b", "c", "d"]
