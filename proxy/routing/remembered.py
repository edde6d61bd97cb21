"""The sequence map and its journal together: what the produce filter calls to book a batch
(`attempt`) and a delivery (`delivered`), and the one place that decides what happens when
the journal cannot be used.

The journal is opened at the first routed batch, once the primary cluster's id is known
(a journal is only replayed for the cluster it was written for). A journal that cannot be
opened, or a write that fails, is logged once and dropped (the file removed with it): Herald
then routes as it does without one, refusing after a restart the batches whose shift it does
not know. `herald_routing_journal_state` says which of the two holds.
"""

from __future__ import annotations

from pathlib import Path

import trio

from proxy.observability.logs import get_logger
from proxy.routing.journal import (
    ATTEMPT,
    DELIVERED,
    Entry,
    JournalError,
    JournalFile,
    encode,
    replay,
    with_header,
)
from proxy.routing.sequences import Attempt, Key, Row, SequenceMap, entries
from proxy.routing.stats import RoutingStats

log = get_logger("routing")

OFF, WAITING, ON, FAILED = "off", "waiting", "on", "failed"
STATES = (OFF, WAITING, ON, FAILED)


class RememberedSequences:
    """`SequenceMap` plus, when configured and usable, its journal."""

    def __init__(self, sequences: SequenceMap, path: Path | None,
                 stats: RoutingStats | None = None) -> None:
        self.sequences = sequences
        self.path = path
        self.state = OFF if path is None else WAITING
        self.cluster_id = ""
        self._file: JournalFile | None = None
        self._tail: list[bytes] | None = None  # appended while a rewrite is prepared
        if stats is not None:
            for state in STATES:
                def holds(state: str = state) -> float:
                    return float(self.state == state)

                stats.journal_state.labels(state).set_function(holds)
            stats.journal_bytes.set_function(
                lambda: float(self._file.size) if self._file is not None else 0.0)

    def open(self, cluster_id: str | None) -> None:
        """Open and replay the journal, once the cluster id is known (a no-op after that)."""
        if self.state != WAITING or not cluster_id:
            return
        assert self.path is not None
        journal = JournalFile(self.path)
        try:
            found = replay(journal.open(), cluster_id)
        except JournalError as exc:
            self._drop(str(exc))
            return
        self.sequences.restore(found.entries, keep_live=True)
        self._file = journal
        self.state = ON
        self.cluster_id = cluster_id
        log.info("routing_journal_open", path=str(self.path), entries=len(found.entries),
                 producer_partitions=len(self.sequences), note=found.note or None)
        self._rewrite()

    def attempt(self, key: Key, epoch: int, attempt: Attempt) -> None:
        if self._file is not None:
            pid, topic, partition = key
            self._append(Entry(ATTEMPT, pid, epoch, topic, partition, attempt.base,
                               attempt.count, attempt.kept, attempt.upstream_base))

    def delivered(self, key: Key, epoch: int, attempt: Attempt, rule: str) -> None:
        attempt.delivered.add(rule)
        if self._file is not None:
            pid, topic, partition = key
            self._append(Entry(DELIVERED, pid, epoch, topic, partition, attempt.base, text=rule))

    def _append(self, entry: Entry) -> None:
        assert self._file is not None
        data = encode(entry)
        try:
            full = self._file.append(data)
        except JournalError as exc:
            self._drop(str(exc))
            return
        if self._tail is not None:
            self._tail.append(data)
        elif full:
            # Rewritten in a worker thread from rows taken now: taking them costs the loop
            # about 8 ms per 10,000 producer partitions with full windows (measured by
            # bench/bench_journal_rewrite.py). What is appended meanwhile goes to the old
            # file and, after the snapshot, to the new one.
            self._tail = []
            trio.lowlevel.spawn_system_task(self._rewrite_aside, self._file,
                                            self.sequences.rows())

    async def _rewrite_aside(self, journal: JournalFile, rows: list[Row]) -> None:
        prepared = None
        try:
            prepared = await trio.to_thread.run_sync(
                journal.prepare, with_header(self.cluster_id, entries(rows)))
            if self._file is journal:  # not dropped or closed meanwhile
                journal.install(prepared, b"".join(self._tail or ()))
                prepared = None
        except JournalError as exc:
            prepared = None  # prepare and install discard what they made
            if self._file is journal:
                self._drop(str(exc))
        except Exception as exc:  # a system task must not end the process
            if self._file is journal:
                self._drop(f"rewrite failed: {exc!r}")
        finally:
            if prepared is not None:
                journal.discard(prepared)
            self._tail = None

    def _rewrite(self) -> None:
        assert self._file is not None
        try:
            self._file.rewrite(with_header(self.cluster_id, entries(self.sequences.rows())))
        except JournalError as exc:
            self._drop(str(exc))

    def _drop(self, error: str) -> None:
        """Go on without the journal. A file this process held is removed: it misses what
        is booked from now on, and a Herald started from it would be confident and wrong."""
        log.error("routing_journal_failed", path=str(self.path), error=error,
                  note="routing goes on without a journal: after a restart, batches whose "
                  "sequence shift is unknown are refused (UNKNOWN_PRODUCER_ID)")
        if self._file is not None:
            self._file.remove()
            self._file = None
        self.state = FAILED

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
