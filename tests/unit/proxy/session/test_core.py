"""The session core, driven by bytes and an injected clock alone: no sockets, no broker.

The helpers below do what the pumps do around the core (split a read into frames, peek each
request's correlation id, hand each response's payload over) and nothing more, so every rule
the core keeps is tested as a session meets it.
"""

from __future__ import annotations

import math
import struct

import pytest
import trio
import trio.testing

from protocol.errors import CodecError
from protocol.frame_headers import peek_request_header
from protocol.framing import FrameDecoder
from proxy.observability.metrics import Metrics
from proxy.session.closing import SessionClosed
from proxy.session.core import (
    CLIENT_CLOSED,
    FRAME_TIMEOUT,
    IDLE_TIMEOUT,
    NO_FETCH_END,
    REAUTH_TIMED_OUT,
    SHUTTING_DOWN,
    UPSTREAM_CLOSED,
    Close,
    Drain,
    SessionCore,
    SessionState,
    bad_upstream_frame,
    engine_ended,
    frame_timeout,
    frame_too_large,
    idle_timeout,
    internal_error,
    malformed_frame,
    malformed_request,
    reauth_failed,
    refused,
    socket_error,
    unreadable_version,
)
from proxy.session.correlation import CorrelationTable, InFlight
from proxy.session.wiring import DeadlineWatch


def request(corr: int, api_key: int = 3, api_version: int = 12, body: bytes = b"") -> bytes:
    """A request frame: size prefix, the fixed start of its header, a null client id."""
    payload = struct.pack(">hhih", api_key, api_version, corr, -1) + body
    return struct.pack(">i", len(payload)) + payload


def response(corr: int, body: bytes = b"\0\0\0\0") -> bytes:
    payload = struct.pack(">i", corr) + body
    return struct.pack(">i", len(payload)) + payload


class Client:
    """The request side of a session as the request pump drives the core."""

    def __init__(self, core: SessionCore[str]) -> None:
        self.core = core
        self.decoder = FrameDecoder(1 << 20)
        self.deadlines: list[float | None] = []

    def read(self, data: bytes, now: float) -> list[bool]:
        """One read from the client: whether each request found room in flight."""
        _, frames = self.decoder.split(data)
        self.deadlines.append(self.core.client_read(len(frames), self.decoder.buffered, now))
        queued = []
        for view in frames:
            _, _, corr = peek_request_header(view)
            queued.append(self.core.expect(corr, f"request {corr}"))
        return queued


def upstream(core: SessionCore[str], data: bytes) -> list[str]:
    """One read from the broker: the entries its responses answer, as the response pump
    sends them on."""
    _, frames = FrameDecoder(1 << 20).split(data)
    answered = [core.response(view)[1] for view in frames]
    core.settle()
    return answered


# States and transitions.


def test_a_new_session_is_served_by_python_with_nothing_in_flight() -> None:
    core: SessionCore[str] = SessionCore(4)
    assert core.state is SessionState.PYTHON
    assert core.idle and not core.full and not core.entries
    assert not core.watches_deadlines and not core.draining and core.reason is None


def test_hand_over_and_return_go_python_handing_over_native_python() -> None:
    core: SessionCore[str] = SessionCore(4)
    assert core.hand_over(0)
    assert core.state is SessionState.HANDING_OVER
    assert not core.hand_over(0)  # once is enough
    assert core.begin_native()
    assert core.state is SessionState.NATIVE
    assert not core.begin_native()
    core.native_returned()
    assert core.state is SessionState.PYTHON
    assert core.hand_over(0) and core.begin_native()  # and again, phase after phase
    core.native_returned()
    assert core.state is SessionState.PYTHON


def test_a_phase_that_never_begins_leaves_the_session_in_python() -> None:
    core: SessionCore[str] = SessionCore(4)
    assert core.hand_over(0) and core.begin_native()
    core.native_returned()  # the budget had no room, or re-authentication is due
    assert core.state is SessionState.PYTHON
    core.native_returned()  # returning twice changes nothing
    assert core.state is SessionState.PYTHON


def test_no_hand_over_while_a_request_waits_for_its_answer() -> None:
    core: SessionCore[str] = SessionCore(4)
    Client(core).read(request(1), 0.0)
    assert not core.hand_over(0)
    assert core.state is SessionState.PYTHON
    assert upstream(core, response(1)) == ["request 1"]
    assert core.hand_over(0)


def test_no_hand_over_with_part_of_a_response_read() -> None:
    core: SessionCore[str] = SessionCore(4)
    assert not core.hand_over(3)
    assert core.state is SessionState.PYTHON


def test_draining_in_python_stops_reading_and_is_never_handed_over() -> None:
    core: SessionCore[str] = SessionCore(4)
    assert core.drain() is Drain.STOP_READING
    assert core.state is SessionState.DRAINING and core.draining
    assert not core.hand_over(0) and not core.begin_native()
    assert core.drain() is Drain.NOTHING


def test_draining_while_native_stops_the_engine_and_comes_back_draining() -> None:
    core: SessionCore[str] = SessionCore(4)
    assert core.hand_over(0) and core.begin_native()
    assert core.drain() is Drain.STOP_ENGINE
    core.native_returned()
    assert core.state is SessionState.DRAINING
    assert not core.hand_over(0)


def test_a_drain_during_the_hand_over_keeps_the_session_from_the_engine() -> None:
    core: SessionCore[str] = SessionCore(4)
    assert core.hand_over(0)
    assert core.drain() is Drain.STOP_READING
    assert not core.begin_native()
    core.native_returned()
    assert core.state is SessionState.DRAINING


@pytest.mark.parametrize("steps", [(), ("hand_over",), ("hand_over", "begin_native"), ("drain",)])
def test_a_session_closes_from_every_state_and_stays_closed(steps: tuple[str, ...]) -> None:
    core: SessionCore[str] = SessionCore(4)
    for step in steps:
        if step == "hand_over":
            assert core.hand_over(0)
        elif step == "begin_native":
            assert core.begin_native()
        else:
            core.drain()
    core.close(CLIENT_CLOSED.error())
    assert core.state is SessionState.CLOSED
    assert not core.hand_over(0) and not core.begin_native()
    assert core.drain() is Drain.NOTHING
    core.native_returned()
    assert core.state is SessionState.CLOSED


def test_a_session_may_end_with_nothing_to_log() -> None:
    core: SessionCore[str] = SessionCore(4)
    core.end()
    assert core.state is SessionState.CLOSED and core.take_reason() is None
    core.close(UPSTREAM_CLOSED.error())  # what ends it later is still the reason
    reason = core.take_reason()
    assert reason is not None and reason.reason == "upstream closed the connection"


# Close reasons.


def test_the_first_reason_is_kept() -> None:
    core: SessionCore[str] = SessionCore(4)
    core.close(CLIENT_CLOSED.error())
    core.close(UPSTREAM_CLOSED.error())
    reason = core.take_reason()
    assert reason is not None and reason.reason == "client closed the connection"
    assert core.take_reason() is None  # handed out once


def test_a_later_bug_replaces_the_reason_but_not_an_earlier_bug() -> None:
    core: SessionCore[str] = SessionCore(4)
    core.close(SHUTTING_DOWN.error())
    bug = SessionClosed("internal error: boom", "error", RuntimeError("boom"))
    core.close(bug)
    core.close(SessionClosed("internal error: again", "error"))
    assert core.take_reason() is bug


@pytest.mark.parametrize(("close", "reason", "level", "limit"), [
    (CLIENT_CLOSED, "client closed the connection", "info", None),
    (SHUTTING_DOWN, "proxy shutting down", "info", None),
    (UPSTREAM_CLOSED, "upstream closed the connection", "warning", None),
    (idle_timeout(30.0), "limits.idle_timeout_s: idle for 30 s", "info", IDLE_TIMEOUT),
    (frame_timeout(5.0), "limits.frame_timeout_s: a frame was not complete 5 s after it began",
     "warning", FRAME_TIMEOUT),
    (frame_too_large("70000 > 65536"), "frame too large: 70000 > 65536", "warning", None),
    (malformed_frame("negative size"), "malformed frame: negative size", "warning", None),
    (malformed_request("short"), "malformed request: short", "warning", None),
    (bad_upstream_frame("negative size"), "upstream sent a bad frame: negative size", "warning",
     None),
    (refused("not allowed"), "not allowed", "warning", None),
    (unreadable_version("Produce", 99),
     "unreadable version: Produce v99 is outside the versions Herald reads and advertised",
     "warning", None),
    (NO_FETCH_END, "upstream sent a Fetch response with no end", "warning", None),
    (REAUTH_TIMED_OUT, "re-authentication to the broker timed out", "warning", None),
    (reauth_failed("denied"), "re-authentication to the broker failed: denied", "warning", None),
    (socket_error(ConnectionResetError("reset")), "socket error: ConnectionResetError: reset",
     "info", None),
    (engine_ended("idle", IDLE_TIMEOUT, False), "idle", "info", IDLE_TIMEOUT),
    (engine_ended("slow", FRAME_TIMEOUT, False), "slow", "warning", FRAME_TIMEOUT),
    (engine_ended("gone", None, True), "gone", "warning", None),
    (engine_ended("bye", None, False), "bye", "info", None),
])
def test_each_close_says_why_at_its_level(close: Close, reason: str, level: str,
                                          limit: str | None) -> None:
    assert (close.reason, close.level, close.limit) == (reason, level, limit)
    error = close.error()
    assert isinstance(error, SessionClosed)
    assert (error.reason, error.level, str(error)) == (reason, level, reason)


def test_a_bug_is_logged_as_an_error_with_its_traceback() -> None:
    bug = ValueError("boom")
    error = internal_error(bug)
    assert (error.reason, error.level, error.exc) == ("internal error: ValueError('boom')",
                                                      "error", bug)


# The correlation queue and the in-flight limit.


def test_responses_answer_the_requests_in_the_order_they_went() -> None:
    core: SessionCore[str] = SessionCore(8)
    assert Client(core).read(request(7) + request(3) + request(9), 0.0) == [True] * 3
    assert list(core.entries) == [7, 3, 9]
    assert not core.idle
    assert upstream(core, response(7) + response(3)) == ["request 7", "request 3"]
    assert not core.idle  # 9 is outstanding
    assert upstream(core, response(9)) == ["request 9"]
    assert core.idle and not core.entries


def test_a_response_out_of_order_is_a_protocol_error() -> None:
    core: SessionCore[str] = SessionCore(8)
    Client(core).read(request(1) + request(2), 0.0)
    with pytest.raises(SessionClosed) as closed:
        upstream(core, response(2))
    assert closed.value.reason == "upstream answered correlation id 2, expected 1"
    assert closed.value.level == "warning"
    assert list(core.entries) == [1, 2]  # nothing was retired


def test_a_response_to_nothing_is_a_protocol_error() -> None:
    core: SessionCore[str] = SessionCore(8)
    with pytest.raises(SessionClosed, match="correlation id 5, expected None"):
        upstream(core, response(5))


def test_a_response_too_short_for_a_correlation_id_is_malformed() -> None:
    core: SessionCore[str] = SessionCore(8)
    Client(core).read(request(1), 0.0)
    with pytest.raises(CodecError):
        core.response(b"\0\0")


def test_a_correlation_id_reused_while_in_flight_ends_the_session() -> None:
    core: SessionCore[str] = SessionCore(8)
    client = Client(core)
    client.read(request(4), 0.0)
    with pytest.raises(SessionClosed, match="correlation id 4 reused while in flight"):
        client.read(request(4), 0.0)
    upstream(core, response(4))
    assert client.read(request(4), 0.0) == [True]  # answered: free to use again


def test_the_in_flight_limit_holds_the_next_request_until_an_answer() -> None:
    core: SessionCore[str] = SessionCore(2)
    client = Client(core)
    assert client.read(request(1) + request(2), 0.0) == [True, True]
    assert core.full
    assert client.read(request(3), 0.0) == [False]
    assert list(core.entries) == [1, 2]  # not queued: the adapter waits and asks again
    upstream(core, response(1))
    assert not core.full
    assert core.expect(3, "request 3")
    assert list(core.entries) == [2, 3]


def test_oldest_peeks_and_retire_frees_the_slot() -> None:
    core: SessionCore[str] = SessionCore(1)
    core.expect(10, "fetch")
    assert core.oldest(10) == "fetch" and core.full  # a streamer looks before it takes
    core.retire(10)
    assert not core.full and not core.entries
    assert not core.idle  # until the responses of the read are sent on
    assert core.settle()


def test_requests_the_engine_hands_back_are_restored_past_nothing() -> None:
    core: SessionCore[str] = SessionCore(2)
    core.restore(5, "a")
    core.restore(6, "b")
    core.unlisted()
    assert core.full and not core.idle
    assert not core.hand_over(0)
    assert upstream(core, response(5) + response(6)) == ["a", "b"]
    assert core.idle


def test_an_answer_the_engine_began_keeps_the_session_busy_until_settled() -> None:
    core: SessionCore[str] = SessionCore(2)
    core.unlisted()
    assert not core.idle
    assert core.settle()


def test_settle_with_requests_outstanding_is_not_idle() -> None:
    core: SessionCore[str] = SessionCore(2)
    core.expect(1, "x")
    assert not core.settle()


# Deadlines, on an injected clock.


def test_an_idle_client_times_out_after_idle_s() -> None:
    core: SessionCore[str] = SessionCore(4, idle_s=30.0, now=100.0)
    assert core.watches_deadlines
    assert core.deadlines(100.0, busy=False) == 130.0
    assert core.deadlines(129.9, busy=False) == 130.0
    assert core.deadlines(130.0, busy=False) == idle_timeout(30.0)


def test_each_read_pushes_the_idle_deadline_on() -> None:
    core: SessionCore[str] = SessionCore(4, idle_s=30.0, now=0.0)
    Client(core).read(request(1), 20.0)
    upstream(core, response(1))
    assert core.deadlines(49.0, busy=False) == 50.0
    assert core.deadlines(50.0, busy=False) == idle_timeout(30.0)


def test_a_request_in_flight_keeps_the_session_from_idling() -> None:
    core: SessionCore[str] = SessionCore(4, idle_s=30.0, now=0.0)
    assert core.deadlines(29.0, busy=True) == 30.0  # looks again within a second
    assert core.deadlines(40.0, busy=True) == 41.0  # pushed on: 40 is not past 70
    assert core.deadlines(69.0, busy=False) == 70.0
    assert core.deadlines(70.0, busy=False) == idle_timeout(30.0)


def test_a_partial_frame_must_complete_within_frame_s() -> None:
    core: SessionCore[str] = SessionCore(4, idle_s=60.0, frame_s=5.0, now=0.0)
    client = Client(core)
    frame = request(1)
    client.read(frame[:6], 10.0)
    assert client.deadlines == [15.0]  # the watch wakes for it
    client.read(frame[6:8], 12.0)
    assert client.deadlines[-1] is None  # the same frame: same deadline
    assert core.deadlines(14.0, busy=False) == 15.0
    assert core.deadlines(15.0, busy=False) == frame_timeout(5.0)


def test_a_completed_frame_stops_its_clock_and_the_next_one_starts_its_own() -> None:
    core: SessionCore[str] = SessionCore(4, frame_s=5.0, now=0.0)
    client = Client(core)
    first, second = request(1), request(2)
    client.read(first[:5], 0.0)
    client.read(first[5:] + second[:3], 4.0)  # one frame done, the next begun
    assert client.deadlines == [5.0, 9.0]
    assert core.deadlines(6.0, busy=True) == 7.0
    client.read(second[3:], 8.0)
    assert client.deadlines[-1] is None
    assert core.frame_started == math.inf
    assert core.deadlines(100.0, busy=False) == math.inf  # no deadline kept but the frame's


def test_frame_age_is_what_the_engine_carries_on() -> None:
    core: SessionCore[str] = SessionCore(4, frame_s=5.0, now=0.0)
    assert core.frame_age(3.0) == 0.0
    Client(core).read(request(1)[:3], 2.0)
    assert core.frame_age(3.5) == 1.5


def test_back_from_the_engine_the_same_frame_keeps_its_clock() -> None:
    core: SessionCore[str] = SessionCore(4, frame_s=5.0, now=0.0)
    core.resume_frame(3, 2.0, 50.0)
    assert core.frame_started == 48.0 and core.last_active == 50.0
    assert core.deadlines(53.0, busy=False) == frame_timeout(5.0)
    core.resume_frame(3, -1.0, 60.0)  # the engine does not know the age: from now
    assert core.frame_started == 60.0
    core.resume_frame(0, 2.0, 70.0)  # nothing partial: no frame to time
    assert core.frame_started == math.inf


def test_a_session_without_deadlines_times_nothing() -> None:
    core: SessionCore[str] = SessionCore(4)
    assert not core.watches_deadlines
    core.resume_frame(3, 2.0, 50.0)
    assert core.frame_age(51.0) == 0.0
    assert core.deadlines(1e9, busy=False) == math.inf


# The trio adapters, on trio's mock clock.


def test_the_table_waits_for_a_free_slot_and_for_the_connection_to_be_idle() -> None:
    async def main() -> list[str]:
        metrics = Metrics().for_api(3, 12)
        core: SessionCore[InFlight] = SessionCore(1)
        calls = CorrelationTable(core)
        seen: list[str] = []
        await calls.add(1, InFlight(3, 12, 0.0, metrics))
        assert calls.full and not calls.idle and calls.entries is core.entries

        async def second() -> None:
            await calls.add(2, InFlight(3, 12, 0.0, metrics))
            seen.append("2 queued")

        async def idle() -> None:
            await calls.wait_idle()
            seen.append("idle")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(second)
            nursery.start_soon(idle)
            await trio.testing.wait_all_tasks_blocked()
            assert seen == []  # no room for 2, and 1 is outstanding
            calls.response(response(1)[4:])
            await trio.testing.wait_all_tasks_blocked()
            assert seen == ["2 queued"]
            calls.settle()  # 2 is outstanding: not idle yet
            await trio.testing.wait_all_tasks_blocked()
            assert seen == ["2 queued"]
            calls.retire(2, calls.oldest(2))
            calls.settle()
        return seen

    assert trio.run(main) == ["2 queued", "idle"]


def test_the_watch_wakes_for_a_frame_deadline_sooner_than_its_sleep() -> None:
    async def main() -> Close:
        core: SessionCore[str] = SessionCore(4, idle_s=60.0, frame_s=5.0,
                                             now=trio.current_time())
        watch = DeadlineWatch(core)
        async with trio.open_nursery() as nursery:
            async def partial_frame() -> None:
                await trio.sleep(10.0)
                watch.client_read(0, 3)
            nursery.start_soon(partial_frame)
            close = await watch.expired(lambda: False)
            assert trio.current_time() == pytest.approx(15.0)
        return close

    clock = trio.testing.MockClock(autojump_threshold=0)
    assert trio.run(main, clock=clock) == frame_timeout(5.0)


def test_the_watch_ends_an_idle_session_after_idle_s() -> None:
    async def main() -> tuple[Close, float]:
        core: SessionCore[str] = SessionCore(4, idle_s=30.0, now=trio.current_time())
        close = await DeadlineWatch(core).expired(lambda: False)
        return close, trio.current_time()

    clock = trio.testing.MockClock(autojump_threshold=0)
    assert trio.run(main, clock=clock) == (idle_timeout(30.0), pytest.approx(30.0))
