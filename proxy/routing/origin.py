"""Herald's origin mark: how a record that Herald routed once is told from one a client wrote.

Every record Herald writes elsewhere carries the origin header (`rules.ORIGIN_HEADER`), and
move and mirror rules never apply to a record that arrives with it again: that is what stops
two Heralds (or one Herald and a mirroring job) from passing records back and forth forever.
A header alone would also let any client opt out of every move and mirror rule, by adding it
to its records; so the header's value is sealed::

    <cluster id>;<tag>

where the tag is a keyed BLAKE2b MAC over the cluster id, the record key and the record value
(each length-prefixed, a null key or value distinct from an empty one). Only a Herald holding
the key can make one; a client's header, whatever its value, does not verify, and the record
is routed like any other. The key and value are what stays the same between Heralds: topics
change (a move), headers change (the next Herald's chains add and strip them), timestamps
may be set by the broker.

The key is `routing.origin_key` (a secret from a file or an environment variable), the same
on every Herald whose routed records can reach another one. Without it, each Herald process
draws a random key at start: it recognises the records it wrote itself (those that come back
through it), and trusts no other Herald's mark, nor its own from before a restart.

What a client can still do: copy a sealed header, with the very key and value it covers, from
a record it can read (a routed copy on a destination), and produce that record again; it then
stays where it is sent. It is a copy of a record that was routed once already.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import struct

_PERSON = b"herald.route.v1"  # BLAKE2b personalisation: these tags and no other use of the key
_TAG_BYTES = 16
_LENGTHS = struct.Struct(">iii")
_SEPARATOR = b";"
_TAG_TEXT = 22  # base64 of the 16-byte tag, without its padding

MIN_SECRET_CHARS = 16
"""The shortest `routing.origin_key` accepted: a short key could be guessed from marks."""


class OriginSeal:
    """Makes and checks origin marks under one key. Equal seals have the same key; neither
    `repr` nor `==` reveals it."""

    __slots__ = ("_base", "_id")

    def __init__(self, secret: bytes) -> None:
        key = hashlib.sha256(secret).digest()  # a secret of any length, a 32-byte key
        self._base = hashlib.blake2b(key=key, digest_size=_TAG_BYTES, person=_PERSON)
        self._id = hashlib.sha256(b"herald.route.origin-key-id" + key).hexdigest()[:12]

    def mark(self, cluster: bytes, key: bytes | None, value: bytes | None) -> bytes:
        """The origin header's value for a record Herald writes, first produced to `cluster`."""
        return cluster + _SEPARATOR + self._tag(cluster, key, value)

    def verifies(self, mark: bytes, key: bytes | None, value: bytes | None) -> bool:
        """Whether `mark` is one this seal made for a record with this key and value."""
        cluster, sep, tag = mark.rpartition(_SEPARATOR)
        if not sep or len(tag) != _TAG_TEXT:
            return False
        return hmac.compare_digest(tag, self._tag(cluster, key, value))

    def _tag(self, cluster: bytes, key: bytes | None, value: bytes | None) -> bytes:
        h = self._base.copy()  # the key block is hashed once, not per record
        h.update(_LENGTHS.pack(len(cluster), -1 if key is None else len(key),
                               -1 if value is None else len(value)))
        h.update(cluster)
        if key:
            h.update(key)
        if value:
            h.update(value)
        return base64.urlsafe_b64encode(h.digest())[:_TAG_TEXT]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OriginSeal) and other._id == self._id

    def __hash__(self) -> int:
        return hash(self._id)

    def __repr__(self) -> str:
        return f"OriginSeal(key id {self._id})"

PROCESS_SEAL = OriginSeal(secrets.token_bytes(32))
"""The seal of a Herald without `routing.origin_key`: drawn once per process, so that reloads
keep it and records Herald wrote itself are recognised while it runs."""
