"""The per-record path: a batch's records one by one, changes tracked per record.

Two ways through a record:

* the append path (`_stamp_record`): when every member stamps and the record carries no
  header any member watches, each member's row (`Columns.row`) is appended to a plain list,
  without a `Headers` wrapper or a call per member;
* the record path (`_run_record`): the record goes through each member in turn, in a
  `Headers` wrapper that tracks changes (a stamping member that does not look at it gets its
  row, the others their `on_record`). A chain built with ``fast_paths=False`` takes it for
  every record: it is the reference the fast paths are held to.

Changes are applied at the end of the batch (`_commit`), only for records that really
changed, so a batch nobody changed keeps its original bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from interceptors.api import DROP, FETCH, KEEP
from interceptors.chain.failures import bad_verdict
from interceptors.chain.planning import Plan, looks
from interceptors.chain.run import BatchWork, Run
from interceptors.chain.shadow import ShadowMembers
from interceptors.headers import Header, Headers


class RecordPath(ShadowMembers):
    """Runs the members over one record, and commits and counts what a batch's records got."""

    def _stamp_record(self, plan: Plan, run: Run, work: BatchWork, columns: list[Any],
                      record: Any, index: int, current: list[Header]) -> None:
        """A record no member watches: each member's row is appended to a plain list."""
        ctx = run.ctx
        ctx.record = record
        ctx.index = index
        new = current[:]
        for i, cols in enumerate(columns):
            try:
                new += cols.row(ctx)
            except Exception as exc:
                self._failure(plan, run, i, exc, index)  # returns on "drop"
                work.drops.add(index)
                run.of(i).add_dropped("error")
                changed, added = plan.fast.counts(1, i)  # type: ignore[union-attr]
                for j in range(i):  # the members before i did append
                    work.changed[j] += changed[j]
                    work.added[j] += added[j]
                break
        else:
            work.stamped += 1
        if len(new) != len(current):
            work.appended.append((record, new))

    def _run_record(self, plan: Plan, run: Run, work: BatchWork, columns: list[Any],
                    item: Any, index: int, headers_only: bool, readonly: bool) -> None:
        """A record that goes through each member in turn, in a `Headers` wrapper."""
        ctx = run.ctx
        if headers_only:
            record = None
            headers = Headers(item, readonly=True)
        else:
            record = item
            # Wrapped without a copy: Headers copies on the first change.
            headers = Headers(item.current_headers(), readonly=readonly)
        ctx.record = record
        ctx.index = index
        fetch = self.path == FETCH
        calls = plan.calls
        # What the members before member i did to this record, to tell what i did.
        mutations = added = removed = 0
        for i in range(len(calls)):
            if plan.shadow[i]:
                if i not in run.muted and i not in work.muted:
                    self._shadow_record(plan, run, work, i, columns[i], headers)
                continue
            try:
                cols = columns[i]
                # A member with columns always has stamps.
                if (cols is not None and (stamps := plan.stamps[i]) is not None
                        and not looks(stamps, headers)):
                    headers.extend(cols.row(ctx))
                    verdict = None
                else:
                    verdict = calls[i](ctx, headers)
                    if verdict is not None and verdict is not KEEP:
                        if not (fetch and verdict is DROP):
                            bad_verdict(verdict, fetch)
            except Exception as exc:
                self._failure(plan, run, i, exc, index)  # returns on "drop"
                work.drops.add(index)
                run.of(i).add_dropped("error")
                break
            if headers.mutations != mutations:
                mutations = headers.mutations
                work.changed[i] += 1
                work.added[i] += headers.added - added
                work.removed[i] += headers.removed - removed
                added = headers.added
                removed = headers.removed
            if verdict is DROP:
                work.drops.add(index)
                run.of(i).add_dropped("filtered")
                break
        if headers.mutations or ctx.staged is not None:
            work.edits.append((record, headers, ctx.staged))
            ctx.staged = None

    def _commit(self, batch: Any, records: Sequence[object] | None, work: BatchWork) -> bool:
        """Give the changed records their new headers, keys and values; remove the dropped
        ones. True when anything changed."""
        changed = False
        for record, new in work.appended:
            record.take_headers(new)
            changed = True
        for record, headers, staged in work.edits:
            if headers.commit_to(record):
                changed = True
            if staged:
                for name, data in staged.items():
                    setattr(record, name, data)
                changed = True
        if work.drops:
            if records is None:
                records = batch.records
            doomed = {id(records[j]) for j in work.drops}
            batch.remove_records(lambda r: id(r) in doomed)
            changed = True
        return changed

    def _account(self, run: Run, count: int, changed: list[int], added: list[int],
                 removed: list[int], batch_changed: bool) -> None:
        """Add one batch of `count` records to the run's counters."""
        for i in range(len(changed)):
            run.changed[i] += changed[i]
            run.added[i] += added[i]
            run.removed[i] += removed[i]
        run.seen += count
        run.batches += 1
        if batch_changed:
            run.batches_changed += 1
