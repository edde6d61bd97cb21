"""The counters of one run of a chain and of one batch in it.

`process` may run in several threads at once (the proxy runs large partitions in worker
threads and small ones on its event loop). Each run counts into a `Run` of its own, merged
into the chain's counters under a lock when it ends (`_Chain._end` in chains.py), so runs
never share a counter; what the record path finds in one batch is a `BatchWork`, committed
at the batch's end. `Failed` is how a batch ends early.
"""

from __future__ import annotations

from typing import Any

from interceptors.api import Interceptor
from interceptors.chain.planning import Plan
from interceptors.context import RecordContext
from interceptors.errors import RejectRecord
from interceptors.headers import Header, Headers, TakesHeaders
from interceptors.stats import ChainStats, MemberStats


class Run:
    """One `process` call: its context and its own counters, merged into the chain's when it
    ends, so that runs in several threads never share a counter.

    Every member of the plan sees the same records, so `seen` is one count; `changed`,
    `added` and `removed` are per member (plan order); the rest of a member's counters are
    in `counted` (`of`)."""

    __slots__ = ("ctx", "plan", "counted", "seen", "changed", "added", "removed", "batches",
                 "batches_changed", "rejected", "records", "muted", "traces_mark")

    def __init__(self, plan: Plan, ctx: RecordContext, records: int) -> None:
        n = len(plan.members)
        self.ctx = ctx
        self.plan = plan
        self.counted: dict[Interceptor, MemberStats] = {}
        self.seen = 0
        self.changed = [0] * n
        self.added = [0] * n
        self.removed = [0] * n
        self.batches = self.batches_changed = self.rejected = 0
        self.records = records  # in the whole partition, for rejections
        self.muted: set[int] = set()  # shadow members that would have refused the partition
        self.traces_mark = 0

    def of(self, i: int) -> MemberStats:
        """Member i's counters of this run."""
        return self.counter(self.plan.members[i].interceptor)  # type: ignore[return-value]

    def counter(self, interceptor: Interceptor) -> MemberStats | None:
        """The counters of a member of this run (made on first use), None for others."""
        st = self.counted.get(interceptor)
        if st is None:
            m = self.plan.by_interceptor.get(interceptor)
            if m is None:
                return None
            st = self.counted[interceptor] = MemberStats(m.name, m.type, shadow=m.shadow)
        return st

    def totals(self, path: str) -> ChainStats:
        """This run's counters as a `ChainStats`."""
        stats = ChainStats(path, {}, self.batches, self.batches_changed, self.seen,
                           self.rejected)
        for i, m in enumerate(self.plan.members):
            st = MemberStats(m.name, m.type, self.seen, self.changed[i], self.added[i],
                             self.removed[i], shadow=m.shadow)
            if m.interceptor in self.counted:
                st.merge(self.counted[m.interceptor])
            stats.members[m.name] = st
        return stats


class BatchWork:
    """What the record path found in one batch, committed at its end."""

    __slots__ = ("changed", "added", "removed", "edits", "appended", "drops", "stamped",
                 "count", "muted")

    def __init__(self, members: int, muted: set[int]) -> None:
        self.changed = [0] * members
        self.added = [0] * members
        self.removed = [0] * members
        # (record, its headers, its staged key and value) of the record path; the record is
        # None when the batch was read as headers only.
        self.edits: list[tuple[Any, Headers, dict[str, bytes | None] | None]] = []
        # (record, new headers) of the append path
        self.appended: list[tuple[TakesHeaders, list[Header]]] = []
        self.drops: set[int] = set()  # indexes of records to remove
        self.stamped = 0  # records stamped by every member on the append path
        self.count = 0
        self.muted = muted  # shadow members that would have ended the batch


class Failed(Exception):
    """Internal: a batch ended early; `outcome` is a RejectRecord or None (pass through)."""

    def __init__(self, outcome: tuple[int, RejectRecord, int] | None) -> None:
        self.outcome = outcome
