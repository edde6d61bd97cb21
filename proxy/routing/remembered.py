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

from proxy.observability.logs import get_logger
from proxy.routing.journal import (
    ATTEMPT,
    DELIVERED,
    Entry,
    JournalError,
    JournalFile,
    encode,
    replay,
    snapshot_entries,
)
from proxy.routing.sequences import Attempt, Key, SequenceMap
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
        if stats is not None:
            for state in STATES:
                stats.journal_state.labels(state).set_function(
                    lambda state=state: float(self.state == state))
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
        try:
            full = self._file.append(encode(entry))
        except JournalError as exc:
            self._drop(str(exc))
            return
        if full:
            self._rewrite()

    def _rewrite(self) -> None:
        assert self._file is not None
        try:
            self._file.rewrite(snapshot_entries(self.cluster_id, self.sequences.snapshot()))
        except JournalError as exc:
            self._drop(str(exc))

    def _drop(self, error: str) -> None:
        log.error("routing_journal_failed", path=str(self.path), error=error,
                  note="routing goes on without a journal: after a restart, batches whose "
                  "sequence shift is unknown are refused (UNKNOWN_PRODUCER_ID)")
        if self._file is not None:
            self._file.close()
            self._file = None
        self.state = FAILED

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
