"""An upstream cluster: where it is, how to reach it securely, and what Herald asks it itself.

Every connection to the cluster's brokers is made here: TCP, then TLS when configured, then,
in credential-injection mode, SASL with Herald's own credentials, so a session receives an
upstream connection that is ready for its client's requests. Herald's own requests (the
Metadata that learns the brokers, the probe behind /readyz) go through the same steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import trio

from configuration import ConfigError, HostPort
from protocol.api_keys import ApiKey
from protocol.errors import CodecError
from protocol.frame_headers import encode_request_header
from protocol.framing import FrameDecoder, frame
from protocol.messages import REQUESTS
from protocol.messages.request_header import RequestHeader
from proxy.net import wire
from proxy.net.descriptors import OutOfDescriptors, descriptor_shortage
from proxy.net.transport import PlainTransport, TlsTransport, Transport
from proxy.observability.logs import get_logger
from proxy.security.sasl import (
    SCRAM_HASHES,
    SaslError,
    ScramClient,
    oauthbearer_message,
    oauthbearer_principal,
    plain_message,
)
from proxy.security.tls import ReloadingContext
from proxy.security.tls_config import ClientTlsConfig
from proxy.upstream.config import UpstreamConfig

log = get_logger("cluster")

_CLIENT_ID = "herald"
_METADATA_VERSION = 12  # accepted by Kafka 3.x and 4.x alike
_HANDSHAKE_VERSION = 1
_AUTHENTICATE_VERSION = 2  # v1+ report session_lifetime_ms (KIP-368)


class UpstreamAuthError(Exception):
    """The cluster refused Herald's own credentials (credential injection)."""


class AuthRequired(Exception):
    """The cluster answered ApiVersions but closed on Metadata: clients must authenticate."""


class FrameIO(Protocol):
    """What Herald's own requests need of a connection: send bytes, read the next frame."""

    async def send_all(self, data: bytes) -> None: ...

    async def next_frame(self) -> bytes: ...


class TransportIO:
    """Frames read straight from a transport nothing else reads (before a session starts)."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self._decoder = FrameDecoder()
        self._frames: list[bytes] = []

    async def send_all(self, data: bytes) -> None:
        await self.transport.send_all(data)

    async def next_frame(self) -> bytes:
        while not self._frames:
            data, _ = await self.transport.receive(65536)
            if not data:
                raise EOFError("broker closed the connection before answering")
            self._decoder.feed(data)
            self._frames = self._decoder.frames()
        return self._frames.pop(0)


@dataclass
class Upstream:
    """A ready upstream connection; `session_lifetime_ms` > 0 when the broker wants Herald's
    own SASL session renewed within that time (KIP-368)."""

    transport: Transport
    address: str
    session_lifetime_ms: int = 0


_PROBE_ERRORS = (OSError, EOFError, trio.TooSlowError, trio.BrokenResourceError,
                 trio.ClosedResourceError, CodecError, UpstreamAuthError, SaslError, ConfigError,
                 ValueError)
_PROBE_RENEW_AT = 0.8  # of the broker's SASL session lifetime: then a fresh connection


@dataclass
class _Probe:
    io: TransportIO
    renew_at: float  # trio time


class UpstreamCluster:
    def __init__(self, config: UpstreamConfig, name: str = "upstream") -> None:
        self.name = name
        self.config = config
        self.tls = ReloadingContext(config.tls) if config.tls is not None else None
        # Set once Herald has seen the cluster insist on authentication it cannot give.
        self.needs_client_auth = False
        self._probe: _Probe | None = None  # the connection `fetch_brokers` keeps
        self._probe_lock = trio.Lock()
        self._correlation = 1

    @property
    def bootstrap(self) -> list[HostPort]:
        return self.config.bootstrap

    def identity(self) -> str | None:
        """Herald's own principal (`User:name`) in credential-injection mode, else None."""
        sasl = self.config.sasl
        if sasl is None:
            return None
        try:
            if sasl.mechanism == "OAUTHBEARER":
                assert sasl.token is not None
                return "User:" + oauthbearer_principal(oauthbearer_message(sasl.token.read()))
            assert sasl.username is not None
            return "User:" + sasl.username.read()
        except (ConfigError, SaslError):
            return None

    def check_tls(self) -> str | None:
        return self.tls.check() if self.tls is not None else None

    async def connect(self, addrs: list[HostPort]) -> Upstream | None:
        """The first of `addrs` that accepts a ready connection, or None (each failure is
        logged at info: the caller decides what to tell the client).

        Raises `OutOfDescriptors` when Herald had no descriptor for the socket: the broker
        may be fine, and no other address would fare better."""
        for addr in addrs:
            try:
                with trio.fail_after(self.config.connect_timeout_s):
                    transport, lifetime = await self._open(addr)
                return Upstream(transport, str(addr), lifetime)
            except trio.TooSlowError:
                log.info("upstream_connect_failed", cluster=self.name, upstream=str(addr),
                         error="timed out")
            except (OSError, EOFError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                _raise_if_out_of_descriptors(exc)
                log.info("upstream_connect_failed", cluster=self.name, upstream=str(addr),
                         error=_describe(exc))
            except (UpstreamAuthError, CodecError, SaslError, ConfigError) as exc:
                log.warning("upstream_auth_failed", cluster=self.name, upstream=str(addr),
                            error=str(exc))
        return None

    async def _open(self, addr: HostPort) -> tuple[Transport, int]:
        stream = await trio.open_tcp_stream(addr.host, addr.port)
        transport: Transport
        if self.tls is None:
            transport = PlainTransport(stream)
        else:
            tls = self.tls.config
            assert isinstance(tls, ClientTlsConfig)  # made from `config.tls` in `__init__`
            transport = TlsTransport(stream, self.tls.context, server_side=False,
                                     server_hostname=tls.server_name or addr.host)
            try:
                await transport.handshake()
            except BaseException:
                await transport.aclose()
                raise
        lifetime = 0
        if self.config.sasl is not None:
            try:
                lifetime = await self.authenticate(TransportIO(transport))
            except BaseException:
                await transport.aclose()
                raise
        return transport, lifetime

    async def authenticate(self, io: FrameIO) -> int:
        """Herald's own SASL exchange (also KIP-368 re-authentication on a live connection);
        returns the session lifetime the broker granted in ms (0: no limit)."""
        sasl = self.config.sasl
        assert sasl is not None
        mechanism = sasl.mechanism
        handshake = REQUESTS[ApiKey.SASL_HANDSHAKE](mechanism=mechanism)
        reply = await call(io, ApiKey.SASL_HANDSHAKE, _HANDSHAKE_VERSION, handshake)
        if reply.error_code:
            raise UpstreamAuthError(
                f"broker does not offer {mechanism} (offers {', '.join(reply.mechanisms)})"
            )
        if mechanism in SCRAM_HASHES:
            assert sasl.username is not None and sasl.password is not None
            scram = ScramClient(mechanism, sasl.username.read(), sasl.password.read())
            server_first, _ = await self._sasl_round(io, scram.first())
            server_final, lifetime = await self._sasl_round(io, scram.final(server_first))
            scram.verify(server_final)
            return lifetime
        elif mechanism == "PLAIN":
            assert sasl.username is not None and sasl.password is not None
            _, lifetime = await self._sasl_round(
                io, plain_message(sasl.username.read(), sasl.password.read()))
            return lifetime
        else:
            assert sasl.token is not None
            challenge, lifetime = await self._sasl_round(
                io, oauthbearer_message(sasl.token.read()))
            if challenge:  # RFC 7628: an error report instead of success
                await self._sasl_round(io, b"\x01")
                raise UpstreamAuthError("broker refused the OAUTHBEARER token")
            return lifetime

    async def _sasl_round(self, io: FrameIO, auth_bytes: bytes) -> tuple[bytes, int]:
        msg = REQUESTS[ApiKey.SASL_AUTHENTICATE](auth_bytes=auth_bytes)
        reply = await call(io, ApiKey.SASL_AUTHENTICATE, _AUTHENTICATE_VERSION, msg)
        if reply.error_code:
            # The broker's message names the failure (wrong password, unknown user); it never
            # contains the credentials themselves.
            raise UpstreamAuthError(
                f"SASL {self.config.sasl.mechanism} refused: "  # type: ignore[union-attr]
                f"{reply.error_message or 'error code ' + str(reply.error_code)}"
            )
        return bytes(reply.auth_bytes), reply.session_lifetime_ms

    async def request_once(self, payload: bytes) -> bytes:
        """One of Herald's own requests (a complete request payload) on a fresh, ready
        connection to the first bootstrap address that answers; the response payload."""
        errors: list[str] = []
        for addr in self.bootstrap:
            try:
                with trio.fail_after(self.config.connect_timeout_s):
                    transport, _ = await self._open(addr)
                    try:
                        io = TransportIO(transport)
                        await io.send_all(frame(payload))
                        return await io.next_frame()
                    finally:
                        await transport.aclose()
            except (OSError, EOFError, trio.TooSlowError, trio.BrokenResourceError,
                    trio.ClosedResourceError, CodecError, UpstreamAuthError, SaslError,
                    ConfigError) as exc:
                errors.append(f"{addr}: {_describe(exc)}")
        raise ConnectionError("; ".join(errors) or "no bootstrap address")

    async def fetch_brokers(self) -> list[tuple[int, str, int]]:
        """The cluster's brokers from a Metadata request.

        Asked every few seconds (it is also how Herald knows the cluster is up), so the
        connection is kept between calls: a new one each time cost a TCP handshake, an
        ApiVersions exchange and, with credentials, a SASL exchange, on Herald and on the
        broker. A kept connection that fails, times out or whose SASL session is due for
        renewal is closed, and the question asked again on a fresh one.

        Raises `AuthRequired` when the cluster answers but wants clients to authenticate
        (SASL passthrough without credentials of Herald's own): the brokers are then learned
        from the clients' Metadata responses instead; `ConnectionError` when it does not
        answer, `OutOfDescriptors` (one) when Herald had no descriptor to ask.
        """
        async with self._probe_lock:
            probe, self._probe = self._probe, None
            if probe is not None:
                try:
                    if trio.current_time() < probe.renew_at:
                        with trio.fail_after(self.config.connect_timeout_s):
                            brokers = await self._brokers(probe.io)
                        self._probe, probe = probe, None  # kept for the next call
                        return brokers
                except _PROBE_ERRORS:
                    pass
                finally:
                    if probe is not None:
                        with trio.CancelScope(shield=True):
                            await probe.io.transport.aclose()
            return await self._fresh_probe()

    async def _fresh_probe(self) -> list[tuple[int, str, int]]:
        errors: list[str] = []
        for addr in self.bootstrap:
            try:
                with trio.fail_after(self.config.connect_timeout_s):
                    transport, lifetime = await self._open(addr)
                    try:
                        io = TransportIO(transport)
                        brokers = await self._metadata(io)
                    except BaseException:
                        with trio.CancelScope(shield=True):
                            await transport.aclose()
                        raise
                renew_at = (trio.current_time() + lifetime * _PROBE_RENEW_AT / 1000
                            if lifetime > 0 else math.inf)
                self._probe = _Probe(io, renew_at)
                return brokers
            except AuthRequired:
                raise
            except _PROBE_ERRORS as exc:
                _raise_if_out_of_descriptors(exc)
                errors.append(f"{addr}: {_describe(exc)}")
        raise ConnectionError("; ".join(errors) or "no bootstrap address")

    async def _brokers(self, io: FrameIO) -> list[tuple[int, str, int]]:
        self._correlation = self._correlation % 0x7FFFFFFF + 1
        request = REQUESTS[ApiKey.METADATA](topics=[], allow_auto_topic_creation=False)
        msg = await call(io, ApiKey.METADATA, _METADATA_VERSION, request, self._correlation)
        return [(b.node_id, b.host, b.port) for b in msg.brokers]

    async def _metadata(self, io: FrameIO) -> list[tuple[int, str, int]]:
        """The brokers, on a connection just opened."""
        if self.config.sasl is None:
            # Always allowed before authentication: tells "up" from "down" on a SASL listener.
            await call(io, ApiKey.API_VERSIONS, 0, REQUESTS[ApiKey.API_VERSIONS]())
        try:
            return await self._brokers(io)
        except (trio.BrokenResourceError, OSError, EOFError) as exc:
            if self.config.sasl is None:
                if not self.needs_client_auth:
                    log.info("upstream_requires_client_auth", cluster=self.name)
                self.needs_client_auth = True
                raise AuthRequired() from exc
            raise


async def call(io: FrameIO, api_key: int, version: int, msg: Any,
               correlation_id: int = 1) -> Any:
    """Send one of Herald's own requests and read its response (nothing else is in flight)."""
    header = RequestHeader(request_api_key=api_key, request_api_version=version,
                           correlation_id=correlation_id, client_id=_CLIENT_ID)
    out = bytearray()
    encode_request_header(header, out)
    msg.encode_into(out, version)
    await io.send_all(frame(bytes(out)))
    _, reply = wire.decode_response(api_key, version, await io.next_frame())
    return reply


def _raise_if_out_of_descriptors(exc: BaseException) -> None:
    code = descriptor_shortage(exc)
    if code is not None:
        raise OutOfDescriptors(code) from exc


def _describe(exc: BaseException) -> str:
    return f"{exc.__class__.__name__}: {exc}" if str(exc) else exc.__class__.__name__
