"""One batch: the members' batch hooks and columns, then the batch stamped whole or its records
one by one.

When no record of a batch is watched and every per-record column can be made in bulk
(`PerRecord.many`), the batch is *stamped*: it is never parsed into records, the columns are
made for all records at once in wire form (`Columns.wire`), and `protocol.stamping` writes
the batch anew in one pass (`_stamp_batch`). Bytes, counters and traces are those of the
record path; only when a member fails midway do the counts of the members before it differ
(they stamped the whole batch, not the records before the failing one). Any other batch goes
record by record (`RecordPath`).
"""

from __future__ import annotations

from typing import Any

from interceptors.chain.planning import Plan
from interceptors.chain.record_path import RecordPath
from interceptors.chain.run import BatchWork, Run
from protocol import stamping
from protocol.records import RecordBatch


class BatchPath(RecordPath):
    """Runs a plan over one batch and commits its changes."""

    def _run_batch(self, plan: Plan, batch: Any, run: Run) -> None:
        """Run the plan over one batch and commit its changes; raise `Failed` to stop early.

        Stamping members get their columns first; then the batch is stamped whole if it can
        be, else its records go one by one (`_stamp_record` or `_run_record`)."""
        ctx = run.ctx
        ctx.batch = batch
        run.traces_mark = len(ctx.traces)
        muted: set[int] = set()
        columns = self._start_batch(plan, batch, run, muted)
        if columns is None or self._stamp_batch(plan, batch, run, columns):
            return
        work = BatchWork(len(plan.members), muted)
        readonly = plan.mode == "read"
        iter_headers = getattr(batch, "iter_headers", None) if readonly else None
        if iter_headers is not None:
            records = None
            source = iter_headers()
        else:
            records = source = batch.records
        fast = plan.fast if records is not None else None
        for index, item in enumerate(source):
            work.count += 1
            if fast is not None:
                current = item.current_headers()
                if not current or not fast.watches(current):
                    self._stamp_record(plan, run, work, columns, item, index, current)
                    continue
            self._run_record(plan, run, work, columns, item, index, records is None, readonly)
        changed = self._commit(batch, records, work)
        if work.stamped:
            counts = fast.counts(work.stamped)  # type: ignore[union-attr]
            for i in range(len(plan.members)):
                work.changed[i] += counts[0][i]
                work.added[i] += counts[1][i]
        self._account(run, work.count, work.changed, work.added, work.removed, changed)

    def _start_batch(self, plan: Plan, batch: Any, run: Run, muted: set[int]
                     ) -> list[Any] | None:
        """Call the members' `on_batch` and take the stamping members' columns (None for the
        others). Shadow members that fail here are added to `muted`. None when the batch was
        dropped (a member failed under ``on_error: drop``)."""
        ctx = run.ctx
        columns: list[Any] = [None] * len(plan.members)
        for i, m in enumerate(plan.members):
            if i in run.muted or (not plan.hooks[i] and plan.stamps[i] is None):
                continue
            icpt = m.interceptor
            try:
                if plan.hooks[i]:
                    icpt.on_batch(ctx)
                if plan.stamps[i] is not None:
                    columns[i] = plan.columns_for(i, ctx)
            except Exception as exc:
                if plan.shadow[i]:
                    self._shadow_failure(plan, run, i, exc, batch.record_count)
                    muted.add(i)
                    continue
                self._failure(plan, run, i, exc, -1)  # returns on "drop"
                run.of(i).add_dropped("error", batch.remove_records(lambda _r: True))
                return None
        return columns

    def _stamp_batch(self, plan: Plan, batch: Any, run: Run, columns: list[Any]) -> bool:
        """Stamp every record of the batch in one pass, if none has a watched header; return
        False to have the batch go record by record instead.

        The result, counters and traces are those of the record path, except when a member
        fails midway: the members before it stamped the whole batch, not the records before
        the failing one.
        """
        fast = plan.fast
        if (fast is None or fast.wire_keys is None or fast.wire_prefixes is None
                or type(batch) is not RecordBatch or batch.parsed):
            return False
        for cols in columns:
            if not cols.bulk:
                return False
        n = batch.record_count
        if not n or stamping.watched(batch, fast.wire_keys, fast.wire_prefixes):
            return False
        ctx = run.ctx
        ctx.record = None
        ctx.index = -1
        wire: list[stamping.Column] = []
        zeros = [0] * len(columns)
        for i, cols in enumerate(columns):
            try:
                wire += cols.wire(ctx, n)
            except Exception as exc:
                self._failure(plan, run, i, exc, -1)  # returns on "drop"
                run.of(i).add_dropped("error", batch.remove_records(lambda _r: True))
                self._account(run, n, *fast.counts(n, i), zeros, True)
                return True
        total = sum(fast.sizes)
        if total:  # members may append nothing (an audit with no fields)
            stamping.append(batch, total, wire)
        self._account(run, n, *fast.counts(n), zeros, bool(total))
        return True
