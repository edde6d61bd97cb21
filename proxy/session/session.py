"""One client connection and its upstream connection, from accept to close.

Each client connection gets its own upstream connection to the broker its listener stands
for. What the connection is (its state, the requests awaiting answers, the client's deadlines,
when it may go to the native relay, why it ended) is its sans-I/O core (`core`); a `Session`
composes the trio parts around it that serve the pair: two pumps (`request_pump`,
`response_pump`) over two lanes (`lanes`), the correlation table between them
(`correlation`), the streamer of large responses (`streaming`), and, when they apply,
re-authentication of the upstream connection (`reauth`) and the native relay's phases
(`native_phases`). It runs them, turns however one of them ends into the end of the session,
and logs that reason once.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TypedDict

import trio

from protocol.contracts.native_relay import (
    CLIENT_TO_PROXY,
    PROXY_TO_CLIENT,
    PROXY_TO_UPSTREAM,
    UPSTREAM_TO_PROXY,
)
from protocol.errors import CodecError
from protocol.framing import FrameDecoder
from proxy.filters.chain import SessionContext
from proxy.limits.connection_guard import awaiting_answer
from proxy.limits.memory_budget import Holder
from proxy.native.path_choice import NATIVE_RELAY_OFF, SessionPath, session_reason, tls_refusal
from proxy.net.splice import Splicer
from proxy.net.transport import Transport
from proxy.observability.logs import get_logger
from proxy.session.closing import SessionClosed
from proxy.session.core import (
    Drain,
    SessionCore,
    SessionState,
    internal_error,
    malformed_frame,
    socket_error,
)
from proxy.session.correlation import CorrelationTable, InFlight
from proxy.session.environment import SessionEnvironment
from proxy.session.lanes import Lane
from proxy.session.native_phases import HandBack, NativePhases
from proxy.session.reauth import UpstreamReauth
from proxy.session.request_pump import RequestPump
from proxy.session.response_filters import ResponseFilters
from proxy.session.response_pump import ResponsePump
from proxy.session.streaming import ResponseStreamer
from proxy.session.wiring import DeadlineWatch, Wiring

log = get_logger("session")


class _ClosedFields(TypedDict):
    """The fields of `connection_closed`, spelled out so that passing them as keywords
    provably leaves the logger's own `exc_info` alone."""

    reason: str
    client: str
    client_id: str | None
    upstream: str


class Session:
    """Runs until either side closes, a frame is bad, or the proxy drains."""

    def __init__(
        self,
        client: Transport,
        upstream: Transport,
        ctx: SessionContext,
        env: SessionEnvironment,
        session_lifetime_ms: int = 0,
    ) -> None:
        """`env`: what the proxy's sessions share; `session_lifetime_ms` > 0: the upstream
        connection's authentication expires after that long (KIP-368), and Herald renews
        it."""
        self.client = client
        self.upstream = upstream
        self.ctx = ctx
        self.metrics = metrics = env.metrics
        chain = env.chain
        memory = env.memory
        native = env.native
        limits = env.limits
        max_frame_bytes = limits.max_frame_bytes
        watched = limits.watches_deadlines
        self._core = core = SessionCore[InFlight](
            limits.max_in_flight, limits.idle_timeout_s, limits.frame_timeout_s,
            trio.current_time() if watched else 0.0)
        self._watch = DeadlineWatch(core) if watched else None
        # What this connection holds of the global memory budget: request bytes read and
        # not yet forwarded, response bytes read and not yet sent on; and each lane's bytes,
        # counted by direction.
        counted = metrics.bytes.labels
        requests = Lane(
            FrameDecoder(max_frame_bytes), memory.holder() if memory is not None else None,
            read=counted(CLIENT_TO_PROXY), sent=counted(PROXY_TO_UPSTREAM),
        )
        responses = Lane(
            FrameDecoder(max_frame_bytes),
            Holder(memory, always_small=True) if memory is not None else None,
            read=counted(UPSTREAM_TO_PROXY), sent=counted(PROXY_TO_CLIENT),
        )
        self._lanes = (requests, responses)
        self._calls = CorrelationTable(core)
        self._reauth = UpstreamReauth(
            upstream, ctx, self._calls, env.reauthenticate, session_lifetime_ms,
            env.reauth_timeout_s,
        ) if session_lifetime_ms > 0 else None
        # Where this session runs: path_choice decides, and counts what Python handles. The
        # engine carries on the TLS connections made here (proxy/native/relay_tls.c) unless
        # the connection is one it must not adopt.
        self._path = SessionPath(metrics, session_reason(
            (env.no_engine or NATIVE_RELAY_OFF) if native is None else None,
            client.tls, upstream.tls, client_refusal=tls_refusal(client),
            upstream_refusal=tls_refusal(upstream)), chain)
        wiring = Wiring(client, upstream, ctx, core, self._calls, requests, responses,
                        self._path, chain, metrics, self._watch)
        self._native = NativePhases(env, wiring, self._reauth) \
            if native is not None and self._path.python_reason is None else None
        filters = ResponseFilters(chain, ctx)
        self._streamer = ResponseStreamer(wiring, filters)
        self._requests = RequestPump(
            wiring, self._reauth.turn if self._reauth is not None else None, self._native)
        self._responses = ResponsePump(wiring, filters, self._streamer, self._reauth)

    @property
    def state(self) -> SessionState:
        """Where the session is (see `core`)."""
        return self._core.state

    @property
    def in_flight(self) -> OrderedDict[int, InFlight]:
        """The requests awaiting a response, oldest first."""
        return self._calls.entries

    @property
    def _splicer(self) -> Splicer | None:
        """The pipe large responses are spliced through, once one was."""
        return self._streamer.splicer

    async def run(self) -> None:
        """Serve the pair until the session ends, alternating between the Python pumps and
        the native relay where it serves; then close both connections and log why."""
        try:
            while await self._run_pumps():
                assert self._native is not None  # only its offer stops the pumps to hand back
                self._responses.begun = await self._native.relay()
        except SessionClosed as exc:
            self._close_reason(exc)
        finally:
            with trio.CancelScope(shield=True):
                await self.client.aclose()
                await self.upstream.aclose()
            self._streamer.close()
            for lane in self._lanes:
                lane.release()
            if self._native is not None:
                self._native.release()
            self._calls.abandon(self.ctx)
        reason = self._core.take_reason()
        if reason is not None:
            fields: _ClosedFields = {
                "reason": reason.reason,
                "client": self.ctx.client_address,
                "client_id": self.ctx.client_id,
                "upstream": self.ctx.upstream_address,
            }
            if reason.level == "error":
                log.error("connection_closed", exc_info=reason.exc, **fields)
            elif reason.level == "warning":
                log.warning("connection_closed", **fields)
            else:
                log.info("connection_closed", **fields)

    def drain(self) -> None:
        """Stop reading new requests; the session ends once every outstanding one is answered."""
        action = self._core.drain()
        if action is Drain.STOP_READING:
            self._requests.drain()
        elif action is Drain.STOP_ENGINE and self._native is not None:
            self._native.stop()

    async def _run_pumps(self) -> bool:
        """Run the Python pumps; True when they stopped to hand the session to the native
        relay, False when the session is over."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._guard, self._requests.run, nursery)
            nursery.start_soon(self._guard, self._responses.run, nursery)
            if self._reauth is not None:
                nursery.start_soon(self._guard, self._reauth.run, nursery)
            if self._watch is not None:
                nursery.start_soon(self._guard, self._watch_deadlines, nursery)
        # Every end of a task closed the core, but the one that stops them for a hand-over
        # (after which a drain may have come: the pumps then run again to end the session).
        return self._core.state is not SessionState.CLOSED

    async def _guard(self, pump: Callable[[], Awaitable[None]], nursery: trio.Nursery) -> None:
        """Turn any end of a pump into the end of the session, with one reason to log."""
        try:
            await pump()
            self._core.end()  # a task that returns ends the session all the same
        except HandBack:
            pass  # the core is handing over already
        except SessionClosed as exc:
            self._close_reason(exc)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self._close_reason(socket_error(exc).error())
        except CodecError as exc:
            self._close_reason(malformed_frame(exc).error())
        except Exception as exc:  # a bug in a filter must not reach the listener
            self._close_reason(internal_error(exc))
        nursery.cancel_scope.cancel()

    def _close_reason(self, reason: SessionClosed) -> None:
        self._core.close(reason)

    async def _watch_deadlines(self) -> None:
        """End the session when the client idles or dawdles over a frame past its limits."""
        assert self._watch is not None
        core = self._core
        idle_s = core.idle_s
        sock = self.client.sock
        close = await self._watch.expired(lambda: awaiting_answer(core.entries, idle_s, sock))
        assert close.limit is not None
        self.metrics.connection_limit_hits.labels(close.limit).inc()
        raise close.error()
