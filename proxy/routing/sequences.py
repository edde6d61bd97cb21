"""Sequence numbers of idempotent producers whose batches lose records to routing.

The broker checks each idempotent batch against the producer's last sequence on that
partition: the next batch must start where the last one ended. When Herald moves records out
of a batch, the client's sequences count records the upstream partition never receives, so
Herald rewrites them: per (producer id, epoch, topic, partition) it keeps `shift`, how many
records it has taken out so far, and sends each batch with `base_sequence - shift` and its
kept records renumbered from zero. Upstream, the partition then sees a gapless sequence, and
the broker's own duplicate check keeps working for the records that stay.

Client retries reuse the first attempt's plan: the last `WINDOW` batches per partition are
remembered by their base sequence, with which records moved and how their delivery went, so a
retry sends the same kept batch under the same upstream sequence (the broker recognises the
duplicate) and routes the moved records again only if their first delivery failed. This is
the broker's own bookkeeping (it remembers five batches per producer) done for the records
that leave.

What Herald cannot know: the shift of a producer it did not see from its first batch (Herald
restarted without its journal while the producer kept going, routing began after it started,
or its state was forgotten to bound memory). Guessing would be wrong both ways: assuming no
shift, the broker refuses the kept records as out of order after the moved ones were already
written elsewhere, and the client's retry writes those again. So such a batch is refused
before anything of it is written (see `knows`), with UNKNOWN_PRODUCER_ID: the Java and
librdkafka idempotent producers answer that by bumping their epoch and sending the batch
again from sequence 0, which starts a fresh, correctly numbered state here.

A Herald restarted with its journal (`journal.py`) restores the map (`restore`): attempts
come back without their plan, which is made again from the retried batch and checked against
the journaled count of records kept.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from proxy.routing.journal import ATTEMPT, DELIVERED, STATE, Entry

SEQUENCE_MODULUS = 1 << 31  # sequences wrap after Integer.MAX_VALUE, as in the Java client
WINDOW = 8  # more than the five in-flight batches an idempotent producer may have
MAX_PARTITIONS = 200_000  # producer partitions remembered (least recently used go first)

Key = tuple[int, str, int]  # producer id, topic, partition


@dataclass(slots=True)
class Attempt:
    """One client batch as Herald handled it the first time."""

    base: int  # the client's base sequence
    count: int  # the client's record count
    upstream_base: int  # the sequence its kept records carry upstream
    plan: Any  # which records went where (the produce filter's own object); None: restored
    kept: int = 0  # how many of its records stay upstream
    delivered: set[str] = field(default_factory=set)  # rules whose destination acknowledged


@dataclass(slots=True)
class _PartitionState:
    epoch: int
    next_base: int
    shift: int = 0
    window: OrderedDict[int, Attempt] = field(default_factory=OrderedDict)


Row = tuple[Key, int, int, int, tuple[Attempt, ...]]  # key, epoch, next base, shift, window


def entries(rows: list[Row]) -> Iterator[Entry]:
    """Journal entries of `SequenceMap.rows`."""
    for (pid, topic, partition), epoch, next_base, shift, window in rows:
        yield Entry(STATE, pid, epoch, topic, partition, next_base, shift=shift)
        for a in window:
            yield Entry(ATTEMPT, pid, epoch, topic, partition, a.base, a.count, a.kept,
                        a.upstream_base)
            for rule in sorted(tuple(a.delivered)):  # tuple(): one step, whole
                yield Entry(DELIVERED, pid, epoch, topic, partition, a.base, text=rule)


class SequenceMap:
    def __init__(self, max_partitions: int = MAX_PARTITIONS) -> None:
        self._states: OrderedDict[Key, _PartitionState] = OrderedDict()
        self._max = max_partitions

    def __len__(self) -> int:
        return len(self._states)

    def retry(self, key: Key, epoch: int, base: int, count: int) -> Attempt | None:
        """The earlier attempt of this very batch, if it is a retry Herald remembers."""
        state = self._states.get(key)
        if state is None or state.epoch != epoch:
            return None
        attempt = state.window.get(base)
        if attempt is None or attempt.count != count:
            return None
        self._states.move_to_end(key)
        return attempt

    def knows(self, key: Key, epoch: int, base: int) -> bool:
        """Whether the shift of this batch is known: Herald saw the producer's epoch on this
        partition from its first batch, or this batch is that first one (sequence 0)."""
        if base == 0:
            return True
        state = self._states.get(key)
        return state is not None and state.epoch == epoch

    def is_stale(self, key: Key, epoch: int, base: int) -> bool:
        """A batch from before the remembered window: already written, a duplicate."""
        state = self._states.get(key)
        if state is None or state.epoch != epoch or not state.window:
            return False
        oldest = next(iter(state.window))
        behind = (oldest - base) % SEQUENCE_MODULUS
        return 0 < behind < SEQUENCE_MODULUS // 2

    def record(self, key: Key, epoch: int, base: int, count: int, kept: int,
               plan: Any) -> Attempt:
        """Book a new batch of which `kept` records stay; its attempt (with the upstream
        base sequence) is returned."""
        state = self._states.get(key)
        if state is None or state.epoch != epoch:
            state = _PartitionState(epoch, base)
            self._states[key] = state
        self._states.move_to_end(key)  # least recently used first: a new epoch is a use too
        if len(self._states) > self._max:
            self._states.popitem(last=False)
        attempt = Attempt(base, count, (base - state.shift) % SEQUENCE_MODULUS, plan, kept)
        self._book(state, attempt)
        return attempt

    @staticmethod
    def _book(state: _PartitionState, attempt: Attempt) -> None:
        state.shift = (attempt.base - attempt.upstream_base + attempt.count - attempt.kept
                       ) % SEQUENCE_MODULUS
        state.next_base = (attempt.base + attempt.count) % SEQUENCE_MODULUS
        state.window[attempt.base] = attempt
        if len(state.window) > WINDOW:
            state.window.popitem(last=False)

    def restore(self, entries: list[Entry], keep_live: bool = False) -> None:
        """Replay a journal (`journal.replay`): the states and attempts it holds, in order.
        `keep_live`: producer partitions the map holds already are newer than the journal's
        and are left as they are."""
        states = self._states
        live = set(states) if keep_live else set()
        for e in entries:
            key = (e.producer_id, e.topic, e.partition)
            if key in live:
                continue
            state = states.get(key)
            if e.kind == STATE:
                states[key] = _PartitionState(e.epoch, e.base, e.shift)
            elif e.kind == ATTEMPT:
                if state is None or state.epoch != e.epoch:
                    state = states[key] = _PartitionState(e.epoch, e.base)
                self._book(state, Attempt(e.base, e.count, e.upstream_base, None, e.kept))
            elif e.kind == DELIVERED:  # not a use of the partition: its order stays
                attempt = state.window.get(e.base) if state and state.epoch == e.epoch else None
                if attempt is not None:
                    attempt.delivered.add(e.text)
                continue
            else:
                continue
            states.move_to_end(key)
            if len(states) > self._max:
                states.popitem(last=False)

    def rows(self) -> list[Row]:
        """The map as it is now, cheaply: a row per producer partition with its window's
        attempts. What `entries` reads of them does not change after this (an attempt's
        numbers are fixed when it is booked; its `delivered` only grows, and is read whole),
        so `entries` may run in a worker thread while the map goes on."""
        return [(key, s.epoch, s.next_base, s.shift, tuple(s.window.values()))
                for key, s in self._states.items()]

    def snapshot(self) -> list[Entry]:
        """The map as journal entries, from which `restore` makes it again."""
        return list(entries(self.rows()))

    def shift(self, key: Key, epoch: int) -> int:
        state = self._states.get(key)
        return state.shift if state is not None and state.epoch == epoch else 0
