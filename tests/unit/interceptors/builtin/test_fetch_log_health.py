"""`DeliveryHealth`: a failing observations cluster is one logged episode, whatever the number
of failed observations, and its end is logged once observations are delivered again."""

from __future__ import annotations

import logging

import pytest

from interceptors.builtin.fetch_log import DeliveryHealth


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _events(caplog: pytest.LogCaptureFixture) -> list[tuple[str, dict]]:
    return [(r.getMessage(), r.fields) for r in caplog.records
            if r.getMessage().startswith("fetch_log_")]


def test_one_failed_event_per_episode_with_the_clusters_last_error(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    health = DeliveryHealth("10.0.0.1:9092", "herald.fetches", clock)
    caplog.set_level(logging.WARNING, "herald.interceptors")
    health.cluster_error("10.0.0.1:9092/bootstrap: Connect failed: Connection refused")
    for n in range(1, 51):
        health.failed("Local: Message timed out", failed=n)
        health.delivered(failed=n, delivered=7)  # nothing delivered meanwhile
    assert health.failing
    [(event, fields)] = _events(caplog)
    assert event == "fetch_log_delivery_failed"
    assert fields["error"] == "Local: Message timed out"
    assert fields["cluster_error"].endswith("Connection refused")
    assert (fields["bootstrap"], fields["topic"]) == ("10.0.0.1:9092", "herald.fetches")


def test_recovery_is_logged_once_deliveries_resume_without_failures(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    health = DeliveryHealth("b:9092", "t", clock)
    caplog.set_level(logging.WARNING, "herald.interceptors")
    health.failed("timed out", failed=1)
    health.failed("timed out", failed=2)
    health.delivered(failed=2, delivered=10)  # the count after the failures
    clock.now += 1
    health.delivered(failed=2, delivered=12)  # some delivered, but a failure 1 s ago
    assert health.failing
    health.failed("timed out", failed=3)  # still the same episode
    health.delivered(failed=3, delivered=12)
    clock.now += DeliveryHealth.QUIET_S
    health.delivered(failed=3, delivered=12)  # quiet, but nothing more delivered
    assert health.failing
    health.delivered(failed=3, delivered=13)
    assert not health.failing
    events = _events(caplog)
    assert [e for e, _ in events] == ["fetch_log_delivery_failed", "fetch_log_delivery_recovered"]
    assert events[1][1]["failed"] == 3  # the episode's failures
    # A new failure is a new episode, logged again.
    health.failed("timed out", failed=4)
    assert [e for e, _ in _events(caplog)][-1] == "fetch_log_delivery_failed"
