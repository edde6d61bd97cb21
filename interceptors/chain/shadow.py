"""Shadow members: evaluated and counted as if live, nothing they do applied.

A shadow member (`ChainMember.shadow`) runs on a copy of each record's headers as the members
before it left them, and is counted as if live (records it would have changed, headers added
and removed, records dropped, partitions refused), but nothing it does reaches the records,
the traces or the outcome. Where a live member's failure or refusal would have ended the batch
or the partition, the shadow member stops counting there too.
"""

from __future__ import annotations

from typing import Any

from interceptors.api import DROP, FETCH, KEEP, PRODUCE
from interceptors.chain.failures import FailurePolicy, bad_verdict
from interceptors.chain.planning import Plan, looks
from interceptors.chain.run import BatchWork, Run
from interceptors.errors import RejectRecord
from interceptors.headers import Headers


class ShadowMembers(FailurePolicy):
    """Runs a shadow member over one record, or counts what its failure would have done."""

    def _shadow_record(self, plan: Plan, run: Run, work: BatchWork, i: int, cols: Any,
                       headers: Headers) -> None:
        """Run shadow member i on a copy of the record's headers as the members before it
        left them; count what it would have done, then forget it (headers, key and value,
        traces)."""
        ctx = run.ctx
        st = run.of(i)
        view = Headers(headers.to_list())
        staged = ctx.staged
        ctx.staged = None
        mark = len(ctx.traces)
        try:
            stamps = plan.stamps[i]  # set for every member with columns
            if cols is not None and stamps is not None and not looks(stamps, view):
                view.extend(cols.row(ctx))
                verdict = None
            else:
                verdict = plan.calls[i](ctx, view)
                if verdict is not None and verdict is not KEEP:
                    if not (self.path == FETCH and verdict is DROP):
                        bad_verdict(verdict, self.path == FETCH)
            would_stage = ctx.staged is not None
        except Exception as exc:
            self._shadow_failure(plan, run, i, exc, 1, work)
            return
        finally:
            del ctx.traces[mark:]
            ctx.staged = staged
        if view.mutations or would_stage:
            work.changed[i] += 1
            work.added[i] += view.added
            work.removed[i] += view.removed
        if verdict is DROP:
            st.add_dropped("filtered")

    def _shadow_failure(self, plan: Plan, run: Run, i: int, exc: Exception, records: int,
                        work: BatchWork | None = None) -> None:
        """Count what a live member's failure or refusal would have done to `records` (1, or
        the batch's when `on_batch` failed). Where the live member would have ended the batch
        or the partition, the shadow member stops too and its changes to the batch are not
        counted, as a live member's would not be."""
        st = run.of(i)
        refused = isinstance(exc, RejectRecord) and self.path == PRODUCE
        if not refused:
            self._log_failure(plan.members[i], st, exc, run.ctx)
        policy = plan.members[i].on_error
        if not refused and policy == "drop":
            st.add_dropped("error", records)
            return
        if refused or policy == "reject":
            reason = exc.reason if refused else "member_error"  # type: ignore[attr-defined]
            st.add_rejected(reason, run.records)
            run.muted.add(i)  # the partition would have ended here
        if work is not None:
            work.changed[i] = work.added[i] = work.removed[i] = 0
            work.muted.add(i)  # the batch would have ended here
