"""The accept loop's episodes and back-off: one pause from the first failed accept until a
connection was accepted and no accept failed for a second after, whichever listener they
happen on; retries wait 0.1 s doubling to 1 s."""

from __future__ import annotations

import math

from proxy.serving.accepting import (
    FIRST_DELAY_S,
    MAX_DELAY_S,
    QUIET_S,
    PauseEpisode,
    next_delay,
)


def test_backoff_doubles_from_a_tenth_of_a_second_to_one() -> None:
    delays = []
    delay = 0.0
    for _ in range(7):
        delay = next_delay(delay)
        delays.append(delay)
    assert delays == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]
    assert (FIRST_DELAY_S, MAX_DELAY_S, QUIET_S) == (0.1, 1.0, 1.0)


def test_no_episode_while_accepts_work() -> None:
    episode = PauseEpisode()
    episode.accepted(5.0)
    assert episode.ends_at() == math.inf
    assert episode.ended(100.0) is None


def test_an_episode_begins_once_and_ends_a_quiet_second_after_an_accept() -> None:
    episode = PauseEpisode()
    assert episode.failed(100.0) is True
    assert [episode.failed(t) for t in (100.1, 100.3, 100.7, 101.5)] == [False] * 4
    assert episode.ends_at() == math.inf  # nothing accepted yet: not over however long
    assert episode.ended(200.0) is None
    episode.accepted(101.75)
    assert episode.ends_at() == 102.75
    assert episode.ended(102.7) is None
    assert episode.ended(102.75) == (1.75, 5)
    assert episode.ended(103.0) is None
    assert episode.failed(110.0) is True  # the next failure is a new episode


def test_failures_between_accepts_are_one_episode() -> None:
    """At the limit each closed connection lets one in and the next accept fails again."""
    episode = PauseEpisode()
    assert episode.failed(10.0) is True
    for t in (11.0, 12.0, 13.0):
        episode.accepted(t)
        assert episode.ended(t) is None
        assert episode.failed(t + 0.01) is False
        assert episode.ends_at() == math.inf
    episode.accepted(20.0)
    episode.accepted(20.5)  # the episode's end is timed from the first accept after failing
    assert episode.ended(20.9) is None
    assert episode.ended(21.0) == (10.0, 4)


def test_an_accept_long_after_the_last_failure_still_waits_a_quiet_second() -> None:
    """Descriptors came back while nobody connected: the next connection ends the episode
    only if the accept after it does not fail at once."""
    episode = PauseEpisode()
    episode.failed(1.0)
    episode.accepted(9.0)
    assert episode.ended(9.0) is None
    assert episode.ended(10.0) == (8.0, 1)


def test_still_short_at_the_end_of_the_quiet_second_keeps_the_episode() -> None:
    """Nobody connected during the quiet second, but no descriptor is free: not over."""
    episode = PauseEpisode()
    episode.failed(1.0)
    episode.accepted(2.0)
    episode.still_short()
    assert episode.ends_at() == math.inf
    assert episode.ended(10.0) is None
    assert episode.failed(10.0) is False
    episode.accepted(11.0)
    assert episode.ended(12.0) == (10.0, 2)
