"""What a member's failure does: its `on_error` policy, the count, the log line.

A member that raises never takes the proxy down; it is counted and its `on_error` policy
decides:

* ``reject`` (produce): the partition is refused with UNKNOWN_SERVER_ERROR;
* ``pass``: the batch passes through exactly as it arrived, with no member's changes (a
  half-stamped batch would be worse than an untouched one);
* ``drop`` (fetch): the record is removed before the client sees it.

A `RejectRecord` a member raises or returns on the produce path is not a failure but its
verdict: the partition is refused with the member's own code. Record-level errors of the
protocol layer (a corrupt batch raising `CodecError` when its records are read) are not member
failures and propagate to the caller.
"""

from __future__ import annotations

import logging
from typing import ClassVar

from interceptors.api import DROP, PRODUCE
from interceptors.chain.planning import ChainMember, Plan
from interceptors.chain.run import Failed, Run
from interceptors.context import RecordContext
from interceptors.errors import UNKNOWN_SERVER_ERROR, RejectRecord
from interceptors.stats import ChainStats, MemberStats

log = logging.getLogger("herald.interceptors")


class FailurePolicy:
    """The failure handling every path of a chain shares (`path` and `stats` are the
    chain's)."""

    path: ClassVar[str]
    stats: ChainStats

    def _failure(self, plan: Plan, run: Run, i: int, exc: Exception, index: int) -> None:
        """Apply member i's policy to `exc`: return for "drop", raise `Failed` otherwise."""
        member = plan.members[i]
        ctx = run.ctx
        if isinstance(exc, RejectRecord) and self.path == PRODUCE:
            raise Failed((i, exc, index))
        self._log_failure(member, run.of(i), exc, ctx)
        policy = member.on_error
        if policy == "drop":
            return
        del ctx.traces[run.traces_mark:]
        ctx.staged = None
        if policy == "reject":
            message = f"interceptor '{member.name}' failed ({type(exc).__name__})"
            raise Failed((i, RejectRecord(UNKNOWN_SERVER_ERROR, message, "member_error"), -1))
        raise Failed(None)

    def _log_failure(self, member: ChainMember, st: MemberStats, exc: Exception,
                     ctx: RecordContext) -> None:
        """Count a failure; log the member's first at warning level, later ones at debug."""
        st.add_error(exc)
        earlier = sum(self.stats.members[member.name].errors.values())
        if earlier + sum(st.errors.values()) == 1:
            log.warning(
                "interceptor %r%s failed on %s %s-%d (on_error=%s; later failures are counted"
                " and logged at debug level)",
                member.name, " (shadow)" if member.shadow else "", self.path, ctx.topic,
                ctx.partition, member.on_error, exc_info=exc,
            )
        else:
            log.debug("interceptor %r failed: %r", member.name, exc)


def bad_verdict(verdict: object, fetch: bool) -> None:
    """Raise what a verdict other than None or KEEP means on this path: the member's
    `RejectRecord` (produce), or a `TypeError` for a verdict the path does not allow."""
    if isinstance(verdict, RejectRecord):
        if fetch:
            raise TypeError("RejectRecord is only allowed on the produce path")
        raise verdict
    if verdict is DROP:
        raise TypeError("DROP is only allowed on the fetch path (records of a produce batch "
                        "cannot be removed without breaking idempotent producers)")
    raise TypeError(f"on_record returned {verdict!r}; expected None, KEEP, DROP or RejectRecord")
