"""SASL mechanism messages, sans-I/O: what a client sends, and who it says it is.

Two uses. In passthrough, Herald reads the client's own first message to learn the name it
authenticates as, and believes it only once the broker has accepted it. In credential
injection, Herald is the client: PLAIN (RFC 4616), SCRAM-SHA-256/512 (RFC 5802, 7677) and
OAUTHBEARER (RFC 7628, as Kafka frames it).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass, field

SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


class SaslError(ValueError):
    """A mechanism message that does not parse, or a server that failed to prove itself."""


# ---- who a client says it is (passthrough) ------------------------------------------------


def plain_user(message: bytes) -> str:
    """PLAIN `authzid NUL authcid NUL passwd`: Kafka's principal is the authcid (it refuses an
    authzid that differs from it)."""
    parts = message.split(b"\0")
    if len(parts) != 3 or not parts[1]:
        raise SaslError("not a PLAIN message")
    return parts[1].decode("utf-8", "replace")


def scram_user(client_first: bytes) -> str:
    """The user name of a SCRAM client-first message (`n,,n=user,r=nonce`)."""
    text = client_first.decode("utf-8", "replace")
    parts = text.split(",")
    if len(parts) < 4 or parts[0] not in ("n", "y") and not parts[0].startswith("p="):
        raise SaslError("not a SCRAM client-first message")
    name = parts[2]
    if not name.startswith("n="):
        raise SaslError("SCRAM client-first message without a user name")
    return _scram_unescape(name[2:])


def is_scram_client_final(message: bytes) -> bool:
    return message.startswith(b"c=") and b",p=" in message


def oauthbearer_principal(message: bytes, claim: str = "sub") -> str:
    """The principal claim of the token in an OAUTHBEARER initial response."""
    token = None
    for item in message.split(b"\x01"):
        if item.startswith(b"auth="):
            scheme, _, value = item[5:].decode("utf-8", "replace").partition(" ")
            if scheme.lower() == "bearer":
                token = value.strip()
    if not token:
        raise SaslError("not an OAUTHBEARER initial response")
    pieces = token.split(".")
    if len(pieces) != 3:
        raise SaslError("OAUTHBEARER token is not a JWT")
    try:
        payload = json.loads(_b64url(pieces[1]))
    except (ValueError, binascii.Error):
        raise SaslError("OAUTHBEARER token payload is not base64url JSON") from None
    claimed = payload.get(claim) if isinstance(payload, dict) else None
    if not isinstance(claimed, str) or not claimed:
        raise SaslError(f"OAUTHBEARER token has no {claim!r} claim")
    return claimed


def _b64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _scram_unescape(name: str) -> str:
    return name.replace("=2C", ",").replace("=3D", "=")


def _scram_escape(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


# ---- Herald as the client (credential injection) ------------------------------------------


def plain_message(username: str, password: str) -> bytes:
    return b"\0" + username.encode() + b"\0" + password.encode()


def oauthbearer_message(token: str) -> bytes:
    return b"n,,\x01auth=Bearer " + token.encode() + b"\x01\x01"


@dataclass
class ScramClient:
    """One SCRAM exchange: `first()`, then `final(server_first)`, then `verify(server_final)`."""

    mechanism: str
    username: str
    password: str
    nonce: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    _auth_message: bytes = b""
    _server_key: bytes = b""

    @property
    def _hash(self) -> str:
        return SCRAM_HASHES[self.mechanism]

    def _bare(self) -> str:
        return f"n={_scram_escape(self.username)},r={self.nonce}"

    def first(self) -> bytes:
        return ("n,," + self._bare()).encode()

    def final(self, server_first: bytes) -> bytes:
        attrs = _scram_attrs(server_first)
        nonce, salt, iterations = attrs.get("r", ""), attrs.get("s"), attrs.get("i")
        if not nonce.startswith(self.nonce) or salt is None or iterations is None:
            raise SaslError("SCRAM server-first message is malformed or has a foreign nonce")
        try:
            salted = hashlib.pbkdf2_hmac(self._hash, self.password.encode(),
                                         base64.b64decode(salt), int(iterations))
        except (ValueError, binascii.Error):
            raise SaslError("SCRAM server-first message has a bad salt or count") from None
        without_proof = f"c=biws,r={nonce}"
        self._auth_message = ",".join(
            (self._bare(), server_first.decode(), without_proof)
        ).encode()
        client_key = self._hmac(salted, b"Client Key")
        stored_key = hashlib.new(self._hash, client_key).digest()
        signature = self._hmac(stored_key, self._auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_key = self._hmac(salted, b"Server Key")
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        attrs = _scram_attrs(server_final)
        if "e" in attrs:
            raise SaslError(f"SCRAM server refused: {attrs['e']}")
        expected = self._hmac(self._server_key, self._auth_message)
        try:
            got = base64.b64decode(attrs.get("v", ""))
        except binascii.Error:
            got = b""
        if not hmac.compare_digest(expected, got):
            raise SaslError("SCRAM server signature does not verify: not the real broker")

    def _hmac(self, key: bytes, msg: bytes) -> bytes:
        return hmac.new(key, msg, self._hash).digest()


def _scram_attrs(message: bytes) -> dict[str, str]:
    out = {}
    for part in message.decode("utf-8", "replace").split(","):
        key, sep, value = part.partition("=")
        if sep:
            out[key] = value
    return out
