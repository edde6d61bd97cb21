"""``audit``: stamp who produced each record, from where, through which proxy (produce path).

Headers, under a reserved prefix (default ``herald.``), appended after the client's own (their
names are shared with their readers in `protocol.contracts.headers`):

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

The causal links ``trace_context`` writes with ``link`` (``herald.parent``, and
``herald.parents_lost`` for the parents it cannot name) are Herald's own: whether that member
runs before or after this one, they are kept, and a client's own header with one of those keys
is forged like any other (stripped or rejected). `interceptors.trace_links`
says which headers of the record the proxy made in this run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from configuration import InvalidConfig
from interceptors.api import (
    CLIENT_ID,
    CONST,
    PRODUCE,
    TIME_MS_TEXT,
    UUID7,
    ColumnValue,
    Interceptor,
    NativeColumn,
    PerRecord,
    Stamps,
)
from interceptors.context import ConnectionInfo, ProxyInfo, RecordContext
from interceptors.errors import INVALID_RECORD, RejectRecord
from interceptors.headers import HeaderBlock, Headers
from interceptors.ids import uuid7, uuid7_many, uuid7_prefix
from interceptors.patterns import NameMatcher, matcher
from interceptors.trace_links import LINKED_MEMO
from protocol.contracts.headers import (
    AUDIT_CLIENT_ID,
    AUDIT_CLUSTER,
    AUDIT_FIELDS,
    AUDIT_MESSAGE_FIELDS,
    AUDIT_MSG_ID,
    AUDIT_ORIGIN,
    AUDIT_PRINCIPAL,
    AUDIT_PROXY,
    AUDIT_SOURCE,
    AUDIT_TIME,
    RESERVED_PREFIX,
    audit_header,
)

FIELDS = AUDIT_FIELDS
_MESSAGE_FIELDS = AUDIT_MESSAGE_FIELDS


@dataclass
class TrustedSources:
    principals: list[str] = field(default_factory=list)
    client_ids: list[str] = field(default_factory=list)


@dataclass
class AuditConfig:
    prefix: str = RESERVED_PREFIX
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


@dataclass(frozen=True, slots=True)
class _Stamp:
    """What one batch is stamped with (made per connection, millisecond and cluster)."""

    conn: ConnectionInfo
    moment: tuple[int, str | None]  # (time, cluster id)
    trusted: bool
    hop: HeaderBlock  # the hop-level headers
    uuid_prefix: bytes
    origin: bytes | None
    columns: list[ColumnValue]  # for `Audit.columns`


class Audit(Interceptor):
    Config = AuditConfig
    paths = frozenset({PRODUCE})
    default_on_error = "reject"
    enforcing = True
    concurrent = True

    def __init__(self, config: AuditConfig, env: ProxyInfo) -> None:
        super().__init__(config, env)
        prefix = self._prefix = config.prefix
        wanted = set(config.fields)
        self._hop_fields = [f for f in FIELDS if f in wanted and f not in _MESSAGE_FIELDS]
        self._k = {f: audit_header(f, prefix) for f in FIELDS}
        self._k_msg = self._k[AUDIT_MSG_ID] if AUDIT_MSG_ID in wanted else None
        self._k_origin = self._k[AUDIT_ORIGIN] if AUDIT_ORIGIN in wanted else None
        message_keys = frozenset(self._k[f] for f in _MESSAGE_FIELDS)
        self._reserved: Callable[[str], bool] = lambda key: key.startswith(prefix)
        self._hop_key: Callable[[str], bool] = (
            lambda key: key.startswith(prefix) and key not in message_keys)
        self._trusted_principals: NameMatcher | None = (
            matcher(config.trusted.principals, "trusted.principals")
            if config.trusted.principals else None
        )
        self._trusted_clients: NameMatcher | None = (
            matcher(config.trusted.client_ids, "trusted.client_ids")
            if config.trusted.client_ids else None
        )
        # The last batch's stamp, swapped whole: the next batch of the same connection in
        # the same millisecond and cluster reuses it.
        self._last: _Stamp | None = None
        # A record with no header under the prefix gets the stamp, and nothing else happens.
        appends = [self._k[f] for f in self._hop_fields]
        appends += [k for k in (self._k_msg, self._k_origin) if k is not None]
        self.stamps = Stamps(tuple(appends), watch_prefixes=(prefix,))

    @staticmethod
    def _drop_forged_links(headers: Headers, key: str, own: int, forged: int) -> int:
        """Remove the client's headers under the link key, keep Herald's (the last `own`)."""
        values = headers.all(key)[forged:]
        headers.remove(key)
        for value in values:
            headers.add(key, value)
        return forged

    def _is_trusted(self, conn: ConnectionInfo) -> bool:
        if self._trusted_principals is not None and conn.principal is not None:
            if self._trusted_principals(conn.principal):
                return True
        if self._trusted_clients is not None and conn.client_id is not None:
            return self._trusted_clients(conn.client_id)
        return False

    def on_batch(self, ctx: RecordContext) -> None:
        conn = ctx.conn
        moment = (self.env.time_ms(), self.env.cluster_id)
        last = self._last
        if last is None or last.conn is not conn or last.moment != moment:
            last = self._last = self._stamp(conn, moment)
        ctx.memo[self] = last

    def _stamp(self, conn: ConnectionInfo, moment: tuple[int, str | None]) -> _Stamp:
        now, cluster_id = moment
        cluster = _utf8(cluster_id)
        values = {
            AUDIT_CLIENT_ID: _utf8(conn.client_id),
            AUDIT_PRINCIPAL: _utf8(conn.principal or self.config.anonymous),
            AUDIT_SOURCE: _utf8(conn.address or None),
            AUDIT_PROXY: _utf8(self.env.instance_id),
            AUDIT_CLUSTER: cluster,
            AUDIT_TIME: str(now).encode(),
        }
        hop = HeaderBlock((self._k[f], values[f]) for f in self._hop_fields)
        prefix = uuid7_prefix(now)
        # The hop headers are the same for the batch; the message id is made per record.
        columns: list[ColumnValue] = [value for _, value in hop]
        if self._k_msg is not None:
            columns.append(PerRecord(lambda _ctx: uuid7(prefix),
                                     lambda _ctx, n: uuid7_many(prefix, n)))
        if self._k_origin is not None:
            columns.append(cluster)
        return _Stamp(conn, moment, self._is_trusted(conn), hop, prefix, cluster, columns)

    def columns(self, ctx: RecordContext) -> list[ColumnValue]:
        stamp: _Stamp = ctx.memo[self]
        return stamp.columns

    def native_columns(self, conn: ConnectionInfo) -> list[NativeColumn] | None:
        cluster_id = self.env.cluster_id
        if cluster_id is None:  # not learnt yet: the next native phase asks again
            return None
        cluster = NativeColumn(CONST, _utf8(cluster_id))
        kinds = {
            AUDIT_CLIENT_ID: NativeColumn(CLIENT_ID),
            AUDIT_PRINCIPAL: NativeColumn(CONST, _utf8(conn.principal or self.config.anonymous)),
            AUDIT_SOURCE: NativeColumn(CONST, _utf8(conn.address or None)),
            AUDIT_PROXY: NativeColumn(CONST, _utf8(self.env.instance_id)),
            AUDIT_CLUSTER: cluster,
            AUDIT_TIME: NativeColumn(TIME_MS_TEXT),
        }
        columns = [kinds[f] for f in self._hop_fields]
        if self._k_msg is not None:
            columns.append(NativeColumn(UUID7))
        if self._k_origin is not None:
            columns.append(cluster)
        return columns

    def native_links(self, conn: ConnectionInfo, key: str) -> dict[str, int] | None:
        # Herald's own links alone: `on_record` strips and refuses nothing (`_own_links`),
        # appends the stamp as to any record, and counts a trusted source's record as passed.
        # Trust by client id goes by each request's, which the plan does not follow; a link
        # key audit appends itself would be kept from a trusted source (`keep_msg`).
        if self.stamps is None or key in self.stamps.appends:
            return None
        principals = self._trusted_principals
        if principals is not None and conn.principal is not None and principals(conn.principal):
            return {"trusted_passed": 1}
        return None if self._trusted_clients is not None else {}

    def _own_links(self, ctx: RecordContext, headers: Headers
                   ) -> list[tuple[str, int, int]] | None:
        """Per key under the prefix, (key, Herald's own link headers, forged ones with that
        key) when `trace_context` linked this record in this run (`interceptors.trace_links.
        LINKED_MEMO`): its headers are the last ones with that key, anything before them
        under the key is forged."""
        linked = ctx.memo.get(LINKED_MEMO)
        if linked is None or linked[0] is not headers:
            return None
        prefix = self._prefix
        own = [(key, n, headers.count(key) - n) for key, n in linked[1]
               if key.startswith(prefix)]
        return own or None

    def on_record(self, ctx: RecordContext, headers: Headers) -> None:
        # Called for records with a header under the prefix only (see `stamps`).
        stamp: _Stamp = ctx.memo[self]
        prefix = self._prefix
        keep_msg = keep_origin = False
        links = self._own_links(ctx, headers)
        reserved, hop_key = self._reserved, self._hop_key
        forged_links: list[tuple[str, int, int]] = []
        if links is not None:  # Herald's own links are not forged: every check skips them
            own_keys = frozenset(link[0] for link in links)
            reserved = lambda key: key not in own_keys and key.startswith(prefix)  # noqa: E731
            hop_key = lambda key: key not in own_keys and self._hop_key(key)  # noqa: E731
            forged_links = [link for link in links if link[2]]
        if stamp.trusted:
            headers.remove_if(hop_key)
            keep_msg = self._k_msg is not None and self._k_msg in headers
            keep_origin = self._k_origin is not None and self._k_origin in headers
            self.stats.count("trusted_passed")
            for link in forged_links:
                self._drop_forged_links(headers, *link)
        elif self.config.forged == "reject":
            key = next((k for k, _ in headers if reserved(k)), None)
            if key is None and forged_links:
                key = forged_links[0][0]
            if key is not None:
                raise RejectRecord(
                    INVALID_RECORD,
                    f"header '{key}' is reserved for the proxy (prefix '{prefix}')",
                    "forged_header",
                )
        else:
            stripped = headers.remove_if(reserved)
            for link in forged_links:
                stripped += self._drop_forged_links(headers, *link)
            if stripped:
                self.stats.count("forged_stripped", stripped)
        # The hop headers are one block built per batch; then the message-level ones.
        headers.extend(stamp.hop)
        if self._k_msg is not None and not keep_msg:
            headers.add(self._k_msg, uuid7(stamp.uuid_prefix))
        if self._k_origin is not None and not keep_origin:
            headers.add(self._k_origin, stamp.origin)
