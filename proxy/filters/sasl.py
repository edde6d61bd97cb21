"""SASL on the client side of Herald, as filter-chain members.

Passthrough (`SaslPrincipalLearner`): the client authenticates to the broker through Herald;
the SaslHandshake and SaslAuthenticate frames pass unchanged, in every version, and the client
sees the broker's answers unchanged, failures included. Herald reads the name the client
claims from its first mechanism message and takes it as the connection's principal only when
the broker has accepted the exchange. KIP-368 re-authentication is the same exchange again on
the same connection, so it is read the same way.

Credential injection (`SaslRefusal`): Herald authenticated the upstream connection itself, so a
client that starts SASL is answered by Herald with an error saying so, and the connection is
closed, as a broker closes a connection whose authentication failed.
"""

from __future__ import annotations

from collections.abc import Callable

from protocol.api_keys import ApiKey
from protocol.contracts.kafka_errors import ILLEGAL_SASL_STATE, NONE, UNSUPPORTED_SASL_MECHANISM
from protocol.message import Message
from protocol.messages import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from proxy.filters.chain import NATIVE_NOTHING, AnswerAndClose, Exchange, Filter, SessionContext
from proxy.observability.logs import get_logger
from proxy.security.principal import KAFKA_USER
from proxy.security.sasl import (
    SCRAM_HASHES,
    SaslError,
    is_scram_client_final,
    oauthbearer_principal,
    plain_user,
    scram_user,
)

log = get_logger("sasl")

_SASL_APIS = (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)
_MECHANISM = "sasl_mechanism"
_SCRAM_USER = "sasl_scram_user"


class SaslPrincipalLearner(Filter):
    name = "sasl_principal"
    # The engine takes over nothing this member reads: authentication exchanges are read in
    # Python.
    native = NATIVE_NOTHING

    def __init__(
        self,
        oauthbearer_claim: str = "sub",
        count: Callable[[str, str], None] | None = None,
    ) -> None:
        self.oauthbearer_claim = oauthbearer_claim
        self._count = count or (lambda mechanism, outcome: None)

    def wants_request(self, api_key: int, version: int) -> bool:
        return api_key in _SASL_APIS

    async def on_request(
        self, ctx: SessionContext, exchange: Exchange, api_key: int, version: int, msg: Message
    ) -> bool:
        if isinstance(msg, SaslHandshakeRequest):
            if version == 0:
                # v0 is followed by bare mechanism tokens that are not Kafka frames: Herald
                # would misread them. Herald advertises v1 only; clients since Kafka 1.0 use it.
                raise AnswerAndClose(
                    None, "SaslHandshake v0 (unframed SASL tokens) is not supported"
                )
            ctx.attributes[_MECHANISM] = msg.mechanism
            ctx.attributes.pop(_SCRAM_USER, None)
            return False
        assert isinstance(msg, SaslAuthenticateRequest), "wants_request asks for no other"
        claim = self._claim(ctx, bytes(msg.auth_bytes))
        if claim is not None:
            exchange.notes[self] = claim
        return False

    def _claim(self, ctx: SessionContext, auth: bytes) -> tuple[str, str] | None:
        """(mechanism, user) when this message completes an exchange whose user is known."""
        mechanism = ctx.attributes.get(_MECHANISM)
        try:
            if mechanism == "PLAIN":
                return mechanism, plain_user(auth)
            if mechanism == "OAUTHBEARER":
                if auth == b"\x01":  # the client acknowledging an error report
                    return None
                return mechanism, oauthbearer_principal(auth, self.oauthbearer_claim)
            if mechanism in SCRAM_HASHES:
                if is_scram_client_final(auth):
                    user = ctx.attributes.get(_SCRAM_USER)
                    return (mechanism, user) if user else None
                ctx.attributes[_SCRAM_USER] = scram_user(auth)
        except SaslError:
            pass  # the broker will refuse it; nothing to learn
        return None

    async def on_response(
        self, ctx: SessionContext, exchange: Exchange, api_key: int, version: int, msg: Message
    ) -> bool:
        claim = exchange.notes.pop(self, None)
        if claim is None:
            return False
        assert isinstance(msg, SaslAuthenticateResponse), "only SaslAuthenticate leaves a note"
        mechanism, user = claim
        if msg.error_code != NONE:
            self._count(mechanism, "failed")
            log.info("client_auth_failed", client=ctx.client_address, mechanism=mechanism,
                     error_code=msg.error_code)
            return False
        if mechanism == "OAUTHBEARER" and msg.auth_bytes:
            self._count(mechanism, "failed")
            return False  # an error report (RFC 7628); the broker closes after it
        self._count(mechanism, "ok")
        principal = KAFKA_USER + user
        if principal != ctx.principal:
            ctx.principal = principal
            log.info("client_authenticated", client=ctx.client_address, mechanism=mechanism,
                     principal=principal)
        return False

    def on_abandoned(self, ctx: SessionContext, exchange: Exchange) -> None:
        exchange.notes.pop(self, None)


class SaslRefusal(Filter):
    name = "sasl_refusal"
    # The engine takes over nothing this member reads: it answers SASL requests itself, in Python.
    native = NATIVE_NOTHING

    def wants_request(self, api_key: int, version: int) -> bool:
        return api_key in _SASL_APIS

    async def on_request(
        self, ctx: SessionContext, exchange: Exchange, api_key: int, version: int, msg: Message
    ) -> bool:
        reason = ("client attempted SASL on a listener where Herald authenticates to the "
                  "cluster itself (credential injection); connect without SASL")
        body: Message
        if api_key == ApiKey.SASL_HANDSHAKE:
            body = SaslHandshakeResponse(error_code=UNSUPPORTED_SASL_MECHANISM, mechanisms=[])
        else:
            body = SaslAuthenticateResponse(
                error_code=ILLEGAL_SASL_STATE, error_message=f"Herald: {reason}",
            )
        raise AnswerAndClose(body, reason)
