"""``audit``: stamp who produced each record, from where, through which proxy (produce path).

Headers, under a reserved prefix (default ``herald.``), appended after the client's own:

==============  ============================================================================
``client_id``   the client id of the Produce request (null header value when it had none)
``principal``   the authenticated principal, or ``anonymous`` (default ``User:ANONYMOUS``,
                Kafka's own name for an unauthenticated principal)
``source``      the client's address, ``host:port``
``proxy``       this proxy's instance id
``cluster``     the upstream cluster id (null until the proxy has learnt it)
``time``        the proxy's receive time, ms since the epoch, as decimal text
``msg_id``      a unique message id: a UUIDv7 (time-ordered, so ids sort by creation)
``origin``      the cluster the record was first produced into
==============  ============================================================================

``fields`` selects which of them are written (default: all).

Audit data cannot be forged. Any client header under the prefix is stripped (``forged:
strip``, counted as ``forged_stripped``) or makes the whole partition fail with
INVALID_RECORD (``forged: reject``). That includes ``origin`` and ``msg_id``: a client could
forge those too. The one exception is a *trusted source*, listed under ``trusted`` by
principal or client id: typically the mirroring job copying records between clusters. From a
trusted source the message-level headers ``msg_id`` and ``origin`` are kept (first cluster
wins, and the id stays the same across clusters, so duplicates can be found); the hop-level
ones are still replaced by this hop's values. Client ids are chosen by clients, so trusting
by client id is only as safe as the network; prefer principals on authenticated listeners.

The headers that are the same for a whole batch are built once per batch (and the
per-connection ones once per connection); only ``msg_id`` is made per record.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from interceptors.api import PRODUCE, Appends, Interceptor
from interceptors.context import ConnectionInfo, ProxyInfo, RecordContext
from interceptors.errors import INVALID_RECORD, InvalidConfig, RejectRecord
from interceptors.headers import HeaderBlock, Headers
from interceptors.ids import uuid7, uuid7_many, uuid7_prefix
from interceptors.patterns import NameMatcher, matcher
from protocol.stamping import Column, header_head, headers_wire

FIELDS = ("client_id", "principal", "source", "proxy", "cluster", "time", "msg_id", "origin")
_MESSAGE_FIELDS = ("msg_id", "origin")


@dataclass
class TrustedSources:
    principals: list[str] = field(default_factory=list)
    client_ids: list[str] = field(default_factory=list)


@dataclass
class AuditConfig:
    prefix: str = "herald."
    fields: list[str] = field(default_factory=lambda: list(FIELDS))
    forged: Literal["strip", "reject"] = "strip"
    trusted: TrustedSources = field(default_factory=TrustedSources)
    anonymous: str = "User:ANONYMOUS"

    def __post_init__(self) -> None:
        if not self.prefix:
            raise InvalidConfig("prefix", "must not be empty")
        for i, name in enumerate(self.fields):
            if name not in FIELDS:
                raise InvalidConfig(f"fields[{i}]", f"unknown field {name!r} (known: "
                                                    + ", ".join(FIELDS) + ")")
        if len(set(self.fields)) != len(self.fields):
            raise InvalidConfig("fields", "lists a field twice")


def _utf8(text: str | None) -> bytes | None:
    return None if text is None else text.encode()


class Audit(Interceptor):
    Config = AuditConfig
    paths = frozenset({PRODUCE})
    default_on_error = "reject"
    enforcing = True

    def __init__(self, config: AuditConfig, env: ProxyInfo) -> None:
        super().__init__(config, env)
        prefix = self._prefix = config.prefix
        wanted = set(config.fields)
        self._hop_fields = [f for f in FIELDS if f in wanted and f not in _MESSAGE_FIELDS]
        self._k = {f: prefix + f for f in FIELDS}
        self._k_msg = self._k["msg_id"] if "msg_id" in wanted else None
        self._k_origin = self._k["origin"] if "origin" in wanted else None
        message_keys = frozenset((self._k["msg_id"], self._k["origin"]))
        self._reserved = lambda key: key.startswith(prefix)
        self._hop_key = lambda key: key.startswith(prefix) and key not in message_keys
        self._trusted_principals: NameMatcher | None = (
            matcher(config.trusted.principals, "trusted.principals")
            if config.trusted.principals else None
        )
        self._trusted_clients: NameMatcher | None = (
            matcher(config.trusted.client_ids, "trusted.client_ids")
            if config.trusted.client_ids else None
        )
        self._conn: ConnectionInfo | None = None
        self._conn_values: dict[str, bytes | None] = {}
        self._trusted = False
        self._hop = HeaderBlock()
        self._hop_wire = b""  # _hop in wire form; then the message-level headers, for stamp
        self._msg_head = b""
        self._origin_wire = b""
        self._uuid_prefix = b""
        self._origin: bytes | None = None
        self._origin_tail: tuple[tuple[str, bytes | None], ...] = ()
        self._stamped_for: tuple[int, str | None] | None = None  # (time, cluster) of _hop

    def _is_trusted(self, conn: ConnectionInfo) -> bool:
        if self._trusted_principals is not None and conn.principal is not None:
            if self._trusted_principals(conn.principal):
                return True
        if self._trusted_clients is not None and conn.client_id is not None:
            return self._trusted_clients(conn.client_id)
        return False

    def on_batch(self, ctx: RecordContext) -> None:
        conn = ctx.conn
        if conn is not self._conn:
            self._conn = conn
            self._trusted = self._is_trusted(conn)
            self._conn_values = {
                "client_id": _utf8(conn.client_id),
                "principal": _utf8(conn.principal or self.config.anonymous),
                "source": _utf8(conn.address or None),
                "proxy": _utf8(self.env.instance_id),
            }
            self._stamped_for = None
        now = self.env.time_ms()
        cluster_id = self.env.cluster_id
        if (now, cluster_id) == self._stamped_for:
            return  # same connection, millisecond and cluster as the last batch: same stamp
        cluster = _utf8(cluster_id)
        values = {**self._conn_values, "cluster": cluster, "time": str(now).encode()}
        self._hop = HeaderBlock((self._k[f], values[f]) for f in self._hop_fields)
        self._uuid_prefix = uuid7_prefix(now)
        self._origin = cluster
        self._origin_tail = () if self._k_origin is None else ((self._k_origin, cluster),)
        self._stamped_for = (now, cluster_id)
        self._hop_wire = headers_wire(self._hop)
        self._origin_wire = headers_wire(self._origin_tail)
        if self._k_msg is not None:
            self._msg_head = header_head(self._k_msg, 36) + self._uuid_prefix

    def _appends(self) -> Appends:
        # A record with no header under the prefix gets the stamp, and nothing else happens.
        adds = frozenset(self._k[f] for f in self.config.fields)
        return Appends(frozenset(), (self._prefix,), adds, len(adds), self._stamp,
                       self._stamp_wire)

    def _stamp_wire(self, ctx: RecordContext, n: int) -> list[Column]:
        """`_stamp` for n records, in wire form: the per-batch headers are one shared column,
        the message ids one per record."""
        if self._k_msg is None:
            return [self._hop_wire, self._origin_wire]
        return [self._hop_wire, uuid7_many(self._msg_head, n), self._origin_wire]

    def _stamp(self, ctx: RecordContext) -> list[tuple[str, bytes | None]]:
        """What `on_record` appends to a record without headers under the prefix."""
        if self._k_msg is None:
            return [*self._hop, *self._origin_tail]
        return [*self._hop, (self._k_msg, uuid7(self._uuid_prefix)), *self._origin_tail]

    def on_record(self, ctx: RecordContext, headers: Headers) -> None:
        prefix = self._prefix
        keep_msg = keep_origin = False
        for key, _ in headers:
            if key.startswith(prefix):
                if self._trusted:
                    headers.remove_if(self._hop_key)
                    keep_msg = self._k_msg is not None and self._k_msg in headers
                    keep_origin = self._k_origin is not None and self._k_origin in headers
                    self.stats.count("trusted_passed")
                elif self.config.forged == "reject":
                    raise RejectRecord(
                        INVALID_RECORD,
                        f"header '{key}' is reserved for the proxy (prefix '{prefix}')",
                        "forged_header",
                    )
                else:
                    self.stats.count("forged_stripped", headers.remove_if(self._reserved))
                break
        # The hop headers are one block built per batch; then the message-level ones.
        headers.extend(self._hop)
        if self._k_msg is not None and not keep_msg:
            headers.add(self._k_msg, uuid7(self._uuid_prefix))
        if self._k_origin is not None and not keep_origin:
            headers.add(self._k_origin, self._origin)
