"""Port blocks for Heralds a test starts later: two taken before either is bound differ."""

from __future__ import annotations

import collections

import pytest

from tests.support import herald_process


def test_blocks_taken_before_binding_do_not_overlap(monkeypatch: pytest.MonkeyPatch) -> None:
    # The same candidates every time, as a small share of the port range can offer: the first
    # free one was handed to every caller until it was bound.
    monkeypatch.setattr(herald_process, "unassigned_ports",
                        lambda step: list(range(40000, 40000 + 64 * step, step)))
    monkeypatch.setattr(herald_process, "_HANDED", collections.deque(maxlen=256))
    sidecars = [herald_process.free_port_block() for _ in range(4)]
    admin = herald_process.free_port_block(1)
    spans = [(b, b + 16) for b in sidecars] + [(admin, admin + 1)]
    for i, (lo, hi) in enumerate(spans):
        for lo2, hi2 in spans[i + 1:]:
            assert hi <= lo2 or hi2 <= lo, spans
