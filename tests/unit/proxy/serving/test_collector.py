"""The collector keeper's policy: what it freezes, when it thaws, and how it backs off."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from proxy.observability.metrics import Metrics
from proxy.serving import collector
from proxy.serving.collector import CollectorKeeper


class Sessions:
    """The counts the keeper reads from the proxy's connections."""

    def __init__(self) -> None:
        self.open = 0
        self.closed = 0

    def __call__(self) -> tuple[int, int]:
        return self.open, self.closed


@pytest.fixture
def keeper() -> Iterator[tuple[CollectorKeeper, Sessions, Metrics]]:
    metrics = Metrics()
    sessions = Sessions()
    made = CollectorKeeper(metrics, sessions)
    yield made, sessions, metrics
    made.uninstall()
    gc.unfreeze()


def _sample(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels or None) or 0.0


def test_install_freezes_what_starting_made_and_times_the_passes(keeper) -> None:
    made, _, metrics = keeper
    gc.unfreeze()
    made.install()
    assert gc.get_freeze_count() > 0
    gc.collect(0)
    assert _sample(metrics, "herald_gc_pause_seconds_count", generation="0") >= 1
    made.uninstall()
    assert gc.get_freeze_count() == 0  # a proxy run inside a longer process leaves none


def test_a_settle_collects_the_unfrozen_then_freezes_the_survivors(keeper) -> None:
    made, _, metrics = keeper
    made.install()

    class Node:
        def __init__(self) -> None:
            self.me = self

    held = [Node() for _ in range(50)]
    Node()  # a cycle nothing holds
    assert any(o is held[0] for o in gc.get_objects())
    assert made.settle() >= 1  # the cycle, collected
    assert not any(o is held[0] for o in gc.get_objects())  # out of every pass now
    assert _sample(metrics, "herald_gc_settles_total") == 1
    assert _sample(metrics, "herald_gc_pause_seconds_count", generation="settle") == 1
    assert _sample(metrics, "herald_gc_pause_seconds_count", generation="2") == 0


def test_thaws_come_after_as_many_closes_as_open_sessions_and_back_off_while_empty(
    keeper, monkeypatch: pytest.MonkeyPatch
) -> None:
    made, sessions, metrics = keeper
    monkeypatch.setattr(collector, "THAW_MIN_CLOSED", 10)
    made.install()
    sessions.open, sessions.closed = 20, 19
    made.settle()
    assert _sample(metrics, "herald_gc_thaws_total") == 0
    sessions.closed = 20  # as many closed as are open
    made.settle()
    assert _sample(metrics, "herald_gc_thaws_total") == 1
    sessions.closed = 59  # it found nothing: the next waits for twice as many
    made.settle()
    assert _sample(metrics, "herald_gc_thaws_total") == 1
    sessions.closed = 60
    made.settle()
    assert _sample(metrics, "herald_gc_thaws_total") == 2

    class Node:
        def __init__(self) -> None:
            self.me = self

    kept = Node()
    made.settle()  # frozen with the rest
    del kept  # now a cycle among frozen objects: only a thaw finds it
    sessions.closed = 60 + 4 * 20
    made.settle()
    assert _sample(metrics, "herald_gc_thaws_total") == 3
    assert _sample(metrics, "herald_gc_thaw_collected_objects_total") >= 1
    sessions.closed += 20  # it found something: back to one population of closes
    made.settle()
    assert _sample(metrics, "herald_gc_thaws_total") == 4
