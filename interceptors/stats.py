"""Counters of the interceptor chains, as plain ints and dicts.

The observability layer reads them (directly or through `snapshot`) and exports them; nothing
here knows about Prometheus. Keys of the dicts are short fixed labels (a reason, an event, an
exception class name) so label cardinality stays bounded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def _bump(counter: dict[str, int], key: str, n: int = 1) -> None:
    counter[key] = counter.get(key, 0) + n


@dataclass
class MemberStats:
    """What one chain member did.

    `records_seen` counts the records of the batches the member ran on; `records_changed` the
    records whose headers it changed (only in batches that were committed); `records_rejected`
    the records of partitions it refused, by reason; `records_dropped` the records it removed
    on the fetch path, by reason; `errors` its failures by exception class; `events` what the
    member itself counts (e.g. ``forged_stripped``, ``trace_new``). A `shadow` member's
    counters say what it would have done: nothing of it was applied.
    """

    name: str
    type: str
    records_seen: int = 0
    records_changed: int = 0
    headers_added: int = 0
    headers_removed: int = 0
    records_rejected: dict[str, int] = field(default_factory=dict)
    records_dropped: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    events: dict[str, int] = field(default_factory=dict)
    last_error: str | None = None
    shadow: bool = False

    def count(self, event: str, n: int = 1) -> None:
        """Count a member-specific event (members may call this per record: kept inline)."""
        events = self.events
        events[event] = events.get(event, 0) + n

    def add_rejected(self, reason: str, n: int) -> None:
        _bump(self.records_rejected, reason, n)

    def add_dropped(self, reason: str, n: int = 1) -> None:
        _bump(self.records_dropped, reason, n)

    def add_error(self, exc: BaseException) -> None:
        _bump(self.errors, type(exc).__name__)
        self.last_error = f"{type(exc).__name__}: {exc}"

    def merge(self, other: MemberStats) -> None:
        """Add the counters of `other` (one run's) to these."""
        self.records_seen += other.records_seen
        self.records_changed += other.records_changed
        self.headers_added += other.headers_added
        self.headers_removed += other.headers_removed
        for mine, theirs in ((self.records_rejected, other.records_rejected),
                             (self.records_dropped, other.records_dropped),
                             (self.errors, other.errors), (self.events, other.events)):
            for key, n in theirs.items():
                _bump(mine, key, n)
        if other.last_error is not None:
            self.last_error = other.last_error

    def snapshot(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "shadow": self.shadow,
            "records_seen": self.records_seen,
            "records_changed": self.records_changed,
            "headers_added": self.headers_added,
            "headers_removed": self.headers_removed,
            "records_rejected": dict(self.records_rejected),
            "records_dropped": dict(self.records_dropped),
            "errors": dict(self.errors),
            "events": dict(self.events),
        }


@dataclass
class ChainStats:
    """Totals of one chain (``produce`` or ``fetch``) and its members' counters by name."""

    path: str
    members: dict[str, MemberStats] = field(default_factory=dict)
    batches_seen: int = 0
    batches_changed: int = 0
    records_seen: int = 0
    partitions_rejected: int = 0

    def merge(self, other: ChainStats) -> None:
        """Add the counters of `other` (one run's) to these, member by member."""
        self.batches_seen += other.batches_seen
        self.batches_changed += other.batches_changed
        self.records_seen += other.records_seen
        self.partitions_rejected += other.partitions_rejected
        for name, theirs in other.members.items():
            self.members[name].merge(theirs)

    def snapshot(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "batches_seen": self.batches_seen,
            "batches_changed": self.batches_changed,
            "records_seen": self.records_seen,
            "partitions_rejected": self.partitions_rejected,
            "members": [m.snapshot() for m in self.members.values()],
        }
