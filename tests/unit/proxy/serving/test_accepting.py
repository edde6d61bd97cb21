"""The accept loop's episodes and back-off: one pause from the first failed accept to the
next one that works, whichever listener they happen on; waits 0.1 s doubling to 1 s."""

from __future__ import annotations

from proxy.serving.accepting import FIRST_DELAY_S, MAX_DELAY_S, PauseEpisode, next_delay


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_backoff_doubles_from_a_tenth_of_a_second_to_one() -> None:
    delays = []
    delay = 0.0
    for _ in range(7):
        delay = next_delay(delay)
        delays.append(delay)
    assert delays == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]
    assert (FIRST_DELAY_S, MAX_DELAY_S) == (0.1, 1.0)


def test_an_episode_begins_once_and_ends_with_its_length_and_failures() -> None:
    clock = Clock()
    episode = PauseEpisode(clock)
    assert episode.succeeded() is None  # accepting as usual: nothing to report
    assert episode.failed() is True
    clock.now += 1.5
    assert [episode.failed() for _ in range(4)] == [False] * 4
    clock.now += 0.25
    assert episode.succeeded() == (1.75, 5)
    assert episode.succeeded() is None


def test_a_new_episode_after_one_ended_counts_afresh() -> None:
    clock = Clock()
    episode = PauseEpisode(clock)
    episode.failed()
    episode.failed()
    assert episode.succeeded() == (0.0, 2)
    clock.now += 10
    assert episode.failed() is True
    clock.now += 3
    assert episode.succeeded() == (3.0, 1)
