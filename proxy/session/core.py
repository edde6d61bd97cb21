"""The rules of one Kafka connection, apart from sockets, tasks and clocks.

A session's pumps, streamer and native phases do the I/O; what a connection *is* lives here:
which state it is in (served by Python, handing over to the native relay, held by the engine,
draining, closed), which requests wait for an answer and in what order, how many may, when
the client has idled or dawdled over a frame too long, when the session may go to the engine
and what it comes back as, and why it ended. The adapters tell the core what happened (a
request forwarded, a response read, a read from the client, the time, the engine handing
back, a drain) and do what it answers; the core never waits, so its rules are tested by
feeding it frames and times alone (tests/unit/proxy/session/test_core.py).

Per frame the adapters make one call here at most (`expect` for a request that waits for an
answer, `response` for an answer); the correlation queue is the very `OrderedDict` they read.
A broken rule on that path raises `SessionClosed`, which costs nothing while no rule breaks;
every other decision is returned as a value.
"""

from __future__ import annotations

import enum
import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Generic, TypeVar

from protocol.contracts import native_relay
from protocol.frame_headers import peek_correlation_id
from protocol.primitives import Buffer
from proxy.session.closing import SessionClosed

E = TypeVar("E")
"""What the queue holds per request (the session's `InFlight`; anything, in tests)."""

IDLE_TIMEOUT = native_relay.IDLE_TIMEOUT
FRAME_TIMEOUT = native_relay.FRAME_TIMEOUT


class SessionState(enum.Enum):
    """Where a session is; one value, so no two parts can disagree about it."""

    PYTHON = "python"  # the Python pumps serve it
    HANDING_OVER = "handing over"  # the pumps stop so that the native relay takes it
    NATIVE = "native"  # the engine holds both connections
    DRAINING = "draining"  # no new request is read; it ends once every answer is sent
    CLOSED = "closed"  # it ended, for `SessionCore.reason`


class Drain(enum.Enum):
    """What a drain asks of the adapters."""

    STOP_READING = "stop reading"  # the request pump stops reading the client
    STOP_ENGINE = "stop engine"  # the engine ends its phase at the next frame boundary
    NOTHING = "nothing"  # drained or closed already


@dataclass(frozen=True, slots=True)
class Close:
    """An end the core decided: the reason to log, its level, and the limit it counts
    (`herald_connection_limit_hits`), if it is one."""

    reason: str
    level: str = "info"
    limit: str | None = None

    def error(self, exc: BaseException | None = None) -> SessionClosed:
        """The exception by which a session's tasks end; `exc`: the bug it is, logged with
        its traceback."""
        return SessionClosed(self.reason, self.level, exc)


# Every reason a session ends for, in one place: the level says whose fault it is (info:
# nobody's; warning: a peer's, or bad input; error: a bug of Herald's).
CLIENT_CLOSED = Close("client closed the connection")
SHUTTING_DOWN = Close("proxy shutting down")
UPSTREAM_CLOSED = Close("upstream closed the connection", "warning")
NO_FETCH_END = Close("upstream sent a Fetch response with no end", "warning")
REAUTH_TIMED_OUT = Close("re-authentication to the broker timed out", "warning")


def frame_too_large(detail: object) -> Close:
    return Close(f"frame too large: {detail}", "warning")


def malformed_frame(detail: object) -> Close:
    return Close(f"malformed frame: {detail}", "warning")


def malformed_request(detail: object) -> Close:
    return Close(f"malformed request: {detail}", "warning")


def bad_upstream_frame(detail: object) -> Close:
    return Close(f"upstream sent a bad frame: {detail}", "warning")


def refused(reason: str) -> Close:
    """A chain member refused a request and ends the session (`AnswerAndClose`)."""
    return Close(reason, "warning")


def unreadable_version(api: str, version: int) -> Close:
    """A request chain members would read, in a version Herald neither reads nor can
    answer: the session ends as a broker ends one that sends a version it does not know."""
    return Close(f"unreadable version: {api} v{version} is outside the versions Herald reads "
                 "and advertised", "warning")


def reauth_failed(detail: object) -> Close:
    return Close(f"re-authentication to the broker failed: {detail}", "warning")


def socket_error(exc: BaseException) -> Close:
    return Close(f"socket error: {exc.__class__.__name__}: {exc}")


def internal_error(exc: BaseException) -> SessionClosed:
    """A bug (in a filter, most likely): logged at error with its traceback."""
    return Close(f"internal error: {exc!r}", "error").error(exc)


def engine_ended(detail: str, limit: str | None, upstream: bool) -> Close:
    """The engine ended a phase with the session: `limit`, a deadline it keeps (the engine's
    names for them are the limits'), or the upstream's side failed, or the session is over."""
    if limit is not None:
        return Close(detail, "info" if limit == IDLE_TIMEOUT else "warning", limit)
    return Close(detail, "warning" if upstream else "info")


def idle_timeout(idle_s: float) -> Close:
    return Close(native_relay.IDLE_TIMEOUT_MESSAGE % idle_s, "info", IDLE_TIMEOUT)


def frame_timeout(frame_s: float) -> Close:
    return Close(native_relay.FRAME_TIMEOUT_MESSAGE % frame_s, "warning", FRAME_TIMEOUT)


def out_of_order(corr: int, expected: int | None) -> Close:
    return Close(f"upstream answered correlation id {corr}, expected {expected}", "warning")


def reused(corr: int) -> Close:
    return Close(f"correlation id {corr} reused while in flight", "warning")


class SessionCore(Generic[E]):
    """One connection's state: `state`, the correlation queue `entries` (oldest first), the
    in-flight limit, the client's idle and frame deadlines, and the reason it ended.

    Times are on the clock the adapter passes in (trio's, in a session); `idle_s` and
    `frame_s` math.inf: that deadline is not kept.
    """

    __slots__ = ("state", "entries", "max_in_flight", "idle", "idle_s", "frame_s",
                 "last_active", "frame_started", "reason")

    def __init__(self, max_in_flight: int, idle_s: float = math.inf, frame_s: float = math.inf,
                 now: float = 0.0) -> None:
        self.state = SessionState.PYTHON
        self.entries: OrderedDict[int, E] = OrderedDict()
        self.max_in_flight = max_in_flight
        self.idle = True  # no answer outstanding, nor one the engine began and Python ends
        self.idle_s = idle_s
        self.frame_s = frame_s
        self.last_active = now
        self.frame_started = math.inf  # when the first bytes of a partial frame came
        self.reason: SessionClosed | None = None

    # The correlation queue and the in-flight limit.

    @property
    def full(self) -> bool:
        """Every slot is taken: the next request waits for an answer first."""
        return len(self.entries) >= self.max_in_flight

    def expect(self, corr: int, entry: E) -> bool:
        """A request that waits for an answer is about to go upstream: queue it, or return
        False when the in-flight limit leaves no room yet (the adapter waits for an answer
        and asks again). A client cannot make Herald hold more unanswered requests for it."""
        entries = self.entries
        if corr in entries:
            raise reused(corr).error()
        if len(entries) >= self.max_in_flight:
            return False
        entries[corr] = entry
        self.idle = False
        return True

    def restore(self, corr: int, entry: E) -> None:
        """A request the engine forwarded and handed back unanswered; the engine kept to the
        same limit, so there is room."""
        self.entries[corr] = entry

    def oldest(self, corr: int) -> E:
        """The entry the answer `corr` is for, which must be the oldest one: Kafka answers in
        order on a connection, so any other id means the upstream is broken."""
        entries = self.entries
        oldest = next(iter(entries), None)
        if corr != oldest:
            raise out_of_order(corr, oldest).error()
        return entries[corr]

    def retire(self, corr: int) -> None:
        """The answer to `corr` has begun: its slot is free."""
        del self.entries[corr]

    def response(self, frame: Buffer) -> tuple[int, E]:
        """A whole response read from upstream (its payload, after the size prefix): the
        correlation id and the entry it answers, which leaves the queue."""
        corr = peek_correlation_id(frame)
        entries = self.entries
        oldest = next(iter(entries), None)  # `oldest`, inlined: this runs for every response
        if corr != oldest:
            raise out_of_order(corr, oldest).error()
        return corr, entries.pop(corr)

    def unlisted(self) -> None:
        """An answer is outstanding that has no entry: one the engine began."""
        self.idle = False

    def settle(self) -> bool:
        """The responses of a read are sent on: whether nothing is outstanding now."""
        if not self.entries:
            self.idle = True
        return self.idle

    # The client's deadlines.

    @property
    def watches_deadlines(self) -> bool:
        """Whether this session keeps any deadline (then a task watches them)."""
        return self.idle_s != math.inf or self.frame_s != math.inf

    def client_read(self, frames: int, partial: int, now: float) -> float | None:
        """A read from the client brought `frames` whole frames and left `partial` bytes of
        the next: the deadline of a frame that began now (to wake the watch for), or None."""
        self.last_active = now
        if not partial:
            self.frame_started = math.inf
        elif frames or self.frame_started == math.inf:
            self.frame_started = now
            return now + self.frame_s
        return None

    def deadlines(self, now: float, busy: bool) -> Close | float:
        """At `now`, the deadline that passed, or when to look again. `busy`: a request is
        outstanding that the broker may still answer and the client still wants answered,
        which keeps the connection from being idle; while it is, the idle clock is pushed on
        at every look, at least once a second."""
        frame_deadline = self.frame_started + self.frame_s
        if now >= frame_deadline:
            return frame_timeout(self.frame_s)
        if busy:
            self.last_active = now
        idle_deadline = self.last_active + self.idle_s
        if now >= idle_deadline:
            return idle_timeout(self.idle_s)
        return min(frame_deadline, idle_deadline, now + 1.0 if busy else math.inf)

    def frame_age(self, now: float) -> float:
        """How long the partial frame has been arriving (0.0: none is), which the engine
        carries on."""
        started = self.frame_started
        return now - started if started != math.inf else 0.0

    def resume_frame(self, partial: int, frame_age: float, now: float) -> None:
        """Back from the engine with `partial` bytes of a frame that has been arriving for
        `frame_age` seconds (negative: unknown); its clock carries on."""
        if not self.watches_deadlines:
            return  # no frame is timed, and the engine gets no age to carry on
        self.frame_started = math.inf
        self.client_read(0, partial, now)
        if frame_age >= 0 and partial:
            self.frame_started = now - frame_age

    # Hand-over to the native relay and back.

    def hand_over(self, responses_buffered: int) -> bool:
        """After a read, with every answer Python waited for sent: whether the session goes
        to the engine now. It goes only from Python, with nothing in flight and no part of a
        response read: what the engine takes must be the whole of the connection's state."""
        if self.state is not SessionState.PYTHON or self.entries or responses_buffered:
            return False
        self.state = SessionState.HANDING_OVER
        return True

    def begin_native(self) -> bool:
        """The pumps stopped for the hand-over: whether the engine's phase begins (not when a
        drain or a close came meanwhile)."""
        if self.state is not SessionState.HANDING_OVER:
            return False
        self.state = SessionState.NATIVE
        return True

    def native_returned(self) -> None:
        """The engine handed the session back, or its phase never began: Python serves it
        again (it drains, if a drain came meanwhile)."""
        if self.state is SessionState.NATIVE or self.state is SessionState.HANDING_OVER:
            self.state = SessionState.PYTHON

    # The end.

    def drain(self) -> Drain:
        """The proxy drains: no new request is read, and the session is not handed over
        again; it ends once every answer is sent."""
        state = self.state
        if state is SessionState.DRAINING or state is SessionState.CLOSED:
            return Drain.NOTHING
        self.state = SessionState.DRAINING
        return Drain.STOP_ENGINE if state is SessionState.NATIVE else Drain.STOP_READING

    @property
    def draining(self) -> bool:
        return self.state is SessionState.DRAINING

    def close(self, reason: SessionClosed) -> None:
        """The session ends: keep the first reason, unless a later one is a bug, which must
        reach the log."""
        self.state = SessionState.CLOSED
        kept = self.reason
        if kept is None or (reason.level == "error" and kept.level != "error"):
            self.reason = reason

    def end(self) -> None:
        """The session ends with nothing to log (a task of it finished, and so it does)."""
        self.state = SessionState.CLOSED

    def take_reason(self) -> SessionClosed | None:
        """The reason to log, handed out once: its traceback holds frames that hold the
        session, which reference counting frees only once the reason is let go of."""
        reason, self.reason = self.reason, None
        return reason
