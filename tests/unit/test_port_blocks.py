"""Ports for brokers and Heralds a test starts later: two taken before either is bound differ."""

from __future__ import annotations

import collections

import pytest

from proxy.devtools import embedded_kafka


@pytest.fixture
def few_candidates(monkeypatch: pytest.MonkeyPatch) -> None:
    # The same candidates every time, as a small share of the port range can offer: the first
    # free one was handed to every caller until it was bound.
    monkeypatch.setattr(embedded_kafka, "unassigned_ports",
                        lambda step=1: list(range(40000, 40000 + 64 * step, step)))
    monkeypatch.setattr(embedded_kafka, "_HANDED", collections.deque(maxlen=1024))


def _disjoint(spans: list[tuple[int, int]]) -> None:
    for i, (lo, hi) in enumerate(spans):
        for lo2, hi2 in spans[i + 1:]:
            assert hi <= lo2 or hi2 <= lo, spans


@pytest.mark.usefixtures("few_candidates")
def test_blocks_taken_before_binding_do_not_overlap() -> None:
    sidecars = [embedded_kafka.free_port_block() for _ in range(4)]
    admin = embedded_kafka.free_port_block(1)
    _disjoint([(b, b + 16) for b in sidecars] + [(admin, admin + 1)])


@pytest.mark.usefixtures("few_candidates")
def test_a_brokers_ports_taken_one_by_one_differ_from_each_other_and_from_blocks() -> None:
    # A secured broker takes five ports before any is bound (plaintext, controller, SSL,
    # SASL_SSL, SASL_PLAINTEXT); the same port twice fails the broker's config check.
    block = embedded_kafka.free_port_block()
    singles = [embedded_kafka.free_port() for _ in range(5)]
    _disjoint([(block, block + 16)] + [(p, p + 1) for p in singles])
