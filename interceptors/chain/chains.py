"""The chain classes: `ProduceChain` and `FetchChain`, and `Chains`, the pair the proxy holds.

A chain checks its members once, keeps the plans of the (topic, client id) pairs it has seen
(`planning`), and runs a partition as one run (`run`): each batch goes through `BatchPath`
(whole-batch stamping, else `RecordPath` with `ShadowMembers`, failures by `FailurePolicy`).
What the produce chain adds is its outcome (`PartitionOutcome`): a refused partition, and the
refusal of legacy (magic 0/1) batches, which cannot carry headers, while an enforcing member
applies. Control batches (transaction markers) and legacy chunks are never touched.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from interceptors.api import _RUN, FETCH, NEEDS, ON_ERROR, PRODUCE, Stamps
from interceptors.chain.batch_path import BatchPath
from interceptors.chain.planning import ChainMember, Plan
from interceptors.chain.run import Failed, Run
from interceptors.context import ConnectionInfo, RecordContext, TraceInfo
from interceptors.errors import INVALID_RECORD, NONE, RejectRecord
from interceptors.stats import ChainStats, MemberStats

_PLAN_CACHE_LIMIT = 10_000
_RAW = (bytes, bytearray, memoryview)


@dataclass(frozen=True, slots=True)
class PartitionOutcome:
    """The produce chain's answer for one partition.

    `error_code` 0 means: forward the (possibly modified) batches. Anything else means: write
    nothing of this partition and answer the client with this code and `error_message`;
    `record_errors` holds ``(batch_index, message)`` for Produce v8+ responses. `traces` lists
    the trace contexts the chain wrote (only when ok).
    """

    error_code: int = NONE
    error_message: str | None = None
    record_errors: tuple[tuple[int, str], ...] = ()
    traces: tuple[TraceInfo, ...] = ()

    @property
    def ok(self) -> bool:
        return self.error_code == NONE


OK = PartitionOutcome()


class _Chain(BatchPath):
    """What both chains share: their members checked once, the plan cache, a run's start and
    end, and the questions the proxy asks before it runs a chain."""

    path: ClassVar[str]

    def __init__(self, members: Sequence[ChainMember] = (), *, fast_paths: bool = True
                 ) -> None:
        names: set[str] = set()
        for m in members:
            icpt = m.interceptor
            if self.path not in icpt.paths:
                raise ValueError(f"{m.name}: {m.type} cannot run on the {self.path} path")
            if m.on_error not in ON_ERROR[self.path]:
                raise ValueError(
                    f"{m.name}: on_error {m.on_error!r} is not allowed on the {self.path} path"
                )
            if icpt.needs not in NEEDS:
                raise ValueError(f"{m.name}: needs must be one of {NEEDS}, not {icpt.needs!r}")
            if icpt.stamps is not None and not isinstance(icpt.stamps, Stamps):
                raise ValueError(f"{m.name}: stamps must be a Stamps, not {icpt.stamps!r}")
            if m.name in names:
                raise ValueError(f"duplicate member name {m.name!r}")
            names.add(m.name)
        self.members = tuple(members)
        self.stats = ChainStats(self.path, {m.name: MemberStats(m.name, m.type, shadow=m.shadow)
                                            for m in members})
        for m in self.members:
            m.interceptor.stats = self.stats.members[m.name]
        # False runs every record through every member: the reference the fast paths match.
        self.fast_paths = fast_paths
        self._plans: dict[tuple[str, str | None], Plan] = {}
        self._merging = threading.Lock()

    def __len__(self) -> int:
        return len(self.members)

    def _plan(self, topic: str, client_id: str | None) -> Plan:
        key = (topic, client_id)
        plan = self._plans.get(key)
        if plan is None:
            if len(self._plans) >= _PLAN_CACHE_LIMIT:
                self._plans.clear()
            plan = Plan([m for m in self.members if m.applies(topic, client_id)])
            if not self.fast_paths:
                plan.fast = None
            self._plans[key] = plan
        return plan

    def applies(self, topic: str, conn: ConnectionInfo) -> bool:
        """Does any member apply? If not, the proxy need not even split the batches."""
        return bool(self._plan(topic, conn.client_id).members)

    def needs(self, topic: str, conn: ConnectionInfo) -> str | None:
        """The most any applicable member needs: None, "read", "headers" or "key_value"."""
        return self._plan(topic, conn.client_id).mode

    def bulk(self, topic: str, conn: ConnectionInfo) -> bool:
        """Does the chain take the whole-batch path for this topic and client (every member
        declares what it watches and appends)? Then a batch no member watches costs one native
        scan, and the stamping, if any, one native pass."""
        return self._plan(topic, conn.client_id).fast is not None

    def serial(self, topic: str, conn: ConnectionInfo) -> bool:
        """Must runs for this topic and client wait for each other? (A member that is not
        `concurrent` applies.) Other runs may overlap, in any threads."""
        return self._plan(topic, conn.client_id).serial

    # -- a run: counters of its own, merged at the end ------------------------------------------

    def _start(self, plan: Plan, ctx: RecordContext, batches: list[Any]) -> Run:
        records = sum(b.record_count for b in batches if not isinstance(b, _RAW))
        run = Run(plan, ctx, records)
        _RUN.run = run
        return run

    def _end(self, run: Run, counts: Callable[[ChainStats], None] | None) -> None:
        """Merge the run's counters into the chain's (`counts` sees the run's alone first)."""
        _RUN.run = None
        if counts is not None:
            counts(run.totals(self.path))
        members = self.stats.members
        with self._merging:
            stats = self.stats
            stats.batches_seen += run.batches
            stats.batches_changed += run.batches_changed
            stats.records_seen += run.seen
            stats.partitions_rejected += run.rejected
            for i, m in enumerate(run.plan.members):
                st = members[m.name]
                st.records_seen += run.seen
                st.records_changed += run.changed[i]
                st.headers_added += run.added[i]
                st.headers_removed += run.removed[i]
                counted = run.counted.get(m.interceptor)
                if counted is not None:
                    st.merge(counted)

    def add_run(self, run: ChainStats) -> None:
        """Add counters of work done outside `process` (the native relay stamping for this
        chain: proxy/native/stamp_plan.py) to the chain's, as a run's would be."""
        with self._merging:
            self.stats.merge(run)



def _is_batch(b: Any) -> bool:
    return not isinstance(b, _RAW) and not b.is_control


_LEGACY = RejectRecord(
    INVALID_RECORD,
    "record format v0/v1 cannot carry headers, which a policy on this topic needs",
    "legacy_format",
)


class ProduceChain(_Chain):
    """The chain over records a client produces, before they reach the broker."""

    path = PRODUCE

    def process(
        self, topic: str, partition: int, batches: list[Any], conn: ConnectionInfo, *,
        traces: bool = True, counts: Callable[[ChainStats], None] | None = None,
    ) -> PartitionOutcome:
        """Run the chain over one partition of a Produce request.

        On success the batches may have been modified in place (forward each with
        `to_bytes()`). On rejection nothing of the partition may be written: the batches may
        be half-edited and must be dropped. With `traces` False the outcome lists no traces
        (tracing is off), which spares the members the work of noting them. `counts`, if
        given, is shown this run's own counters before they are merged into the chain's.
        """
        plan = self._plan(topic, conn.client_id)
        if not plan.members:
            return OK
        ctx = RecordContext(PRODUCE, topic, partition, conn, key_value=plan.mode == "key_value",
                            notes_traces=traces)
        run = self._start(plan, ctx, batches)
        try:
            return self._run(plan, run, batches)
        finally:
            self._end(run, counts)

    def _run(self, plan: Plan, run: Run, batches: list[Any]) -> PartitionOutcome:
        if any(isinstance(b, _RAW) for b in batches):
            if plan.enforcing:
                blamed = [plan.members.index(m) for m in plan.enforcing]
                return self._reject(plan, run, _LEGACY, blamed)
            for i, m in enumerate(plan.members):
                if m.shadow and m.interceptor.enforcing:
                    run.of(i).add_rejected(_LEGACY.reason, run.records)
        for batch in batches:
            if _is_batch(batch):
                try:
                    self._run_batch(plan, batch, run)
                except Failed as failed:
                    if failed.outcome is not None:
                        i, rejection, index = failed.outcome
                        return self._reject(plan, run, rejection, [i], index)
        if run.ctx.traces:
            return PartitionOutcome(traces=tuple(run.ctx.traces))
        return OK

    def _reject(self, plan: Plan, run: Run, rejection: RejectRecord, blamed: list[int],
                index: int = -1) -> PartitionOutcome:
        """The outcome refusing the partition; `index` is the culprit record's, if known."""
        run.rejected += 1
        for i in blamed:
            run.of(i).add_rejected(rejection.reason, run.records)
        message = (rejection.message
                   or f"record refused by interceptor '{plan.members[blamed[0]].name}'")
        record_errors = ((index, message),) if index >= 0 else ()
        return PartitionOutcome(rejection.error_code, message, record_errors)


class FetchChain(_Chain):
    """The chain over records the broker returns, before the client sees them."""

    path = FETCH

    def process(
        self, topic: str, partition: int, batches: list[Any], conn: ConnectionInfo, *,
        counts: Callable[[ChainStats], None] | None = None,
    ) -> None:
        """Run the chain over one partition of a Fetch response, editing batches in place.

        Records may lose headers or be removed (`remove_records`: offsets stay valid and
        consumers step over the gap, as after compaction).
        """
        plan = self._plan(topic, conn.client_id)
        if not plan.members:
            return
        ctx = RecordContext(FETCH, topic, partition, conn, key_value=plan.mode == "key_value")
        run = self._start(plan, ctx, batches)
        try:
            for batch in batches:
                if _is_batch(batch):
                    try:
                        self._run_batch(plan, batch, run)
                    except Failed:
                        pass  # the batch goes out as it came
        finally:
            self._end(run, counts)


@dataclass
class Chains:
    """Both chains, as built from the ``interceptors`` section of the configuration."""

    produce: ProduceChain = field(default_factory=ProduceChain)
    fetch: FetchChain = field(default_factory=FetchChain)

    def uses(self, service: str) -> bool:
        """Does a member of either chain use `service` (`Interceptor.uses`)? The proxy does
        the work behind a service only while one does (the chains change on reload)."""
        return any(service in m.interceptor.uses
                   for chain in (self.produce, self.fetch) for m in chain.members)

    def snapshot(self) -> dict[str, Any]:
        return {"produce": self.produce.stats.snapshot(), "fetch": self.fetch.stats.snapshot()}
