"""Which members run where: a member's scope, and the plan of one (topic, client id).

A chain filters its members once per (topic, client id) into a `Plan` (cached by the chain),
so a partition no member wants costs a dict lookup and touches no batch. The plan also holds
what the engine derives from the members' declarations: the most any of them needs (`mode`),
the enforcing ones, whether runs must be serial, and, when every member stamps, the
`FastPath`: the keys any member watches, in Python and in wire form, which is what the native
scan (`protocol.stamping.watched`) is handed to decide whether a batch can be stamped whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from interceptors.api import NEEDS, Interceptor, Stamps
from interceptors.chain.columns import Columns
from interceptors.context import RecordContext
from interceptors.headers import Header, Headers
from interceptors.patterns import NameMatcher
from protocol import stamping


@dataclass(eq=False)
class ChainMember:
    """One configured member: the interceptor plus where it applies and how it fails.

    `topics` / `client_ids` of None match everything; a request without a client id never
    matches a `client_ids` list. `on_error` of None means the interceptor's default. A
    `shadow` member is evaluated and counted but changes nothing.
    """

    name: str
    interceptor: Interceptor
    topics: NameMatcher | None = None
    client_ids: NameMatcher | None = None
    on_error: str | None = None
    type: str = ""
    shadow: bool = False

    def __post_init__(self) -> None:
        if self.on_error is None:
            self.on_error = self.interceptor.default_on_error
        if not self.type:
            self.type = type(self.interceptor).__name__

    def applies(self, topic: str, client_id: str | None) -> bool:
        """Does the member run for records of `topic` sent or read by `client_id`?"""
        if self.topics is not None and not self.topics(topic):
            return False
        if self.client_ids is not None and (client_id is None or not self.client_ids(client_id)):
            return False
        return True


class Plan:
    """The members that apply to one (topic, client id), with what the engine needs to know."""

    __slots__ = ("members", "calls", "hooks", "stamps", "shadow", "mode", "enforcing", "serial",
                 "fast", "columns", "by_interceptor")

    def __init__(self, members: list[ChainMember]) -> None:
        self.members = tuple(members)
        self.calls = tuple(m.interceptor.on_record for m in members)
        # Per member: does it override on_batch, its Stamps (None unless it stamps), shadow?
        self.hooks = tuple(type(m.interceptor).on_batch is not Interceptor.on_batch
                           for m in members)
        self.stamps = tuple(m.interceptor.stamps for m in members)
        self.shadow = tuple(m.shadow for m in members)
        ranks = [NEEDS.index(m.interceptor.needs) for m in members]
        self.mode = NEEDS[max(ranks)] if ranks else None
        self.enforcing = tuple(m for m in members if m.interceptor.enforcing and not m.shadow)
        self.serial = not all(m.interceptor.concurrent for m in members)
        self.fast = fast_path(self) if self.mode in ("headers", "read") else None
        self.columns: list[Columns | None] = [None] * len(members)  # the last, per member
        self.by_interceptor = {m.interceptor: m for m in members}

    def columns_for(self, i: int, ctx: RecordContext) -> Columns:
        """Member i's `Columns` for this batch; the last one again when the member gave the
        very same values object (built-ins keep theirs while nothing changes)."""
        values = self.members[i].interceptor.columns(ctx)
        last = self.columns[i]
        if last is not None and last.values is values:
            return last
        cols = self.columns[i] = Columns(self.stamps[i], values)  # type: ignore[arg-type]
        return cols


class FastPath:
    """What a plan whose members all stamp (and none in shadow) needs for its fast paths.

    `keys` and `prefixes` are what any member watches; `sizes` how many headers each appends.
    `wire_keys` / `wire_prefixes` are the same as bytes, for the whole-batch check, or None
    when they cannot be compared as bytes.
    """

    __slots__ = ("keys", "prefixes", "sizes", "wire_keys", "wire_prefixes")

    def __init__(self, stamps: Sequence[Stamps]) -> None:
        self.keys = frozenset().union(*(s.watches for s in stamps))
        self.prefixes = tuple(p for s in stamps for p in s.watch_prefixes)
        self.sizes = tuple(len(s.appends) for s in stamps)
        self.wire_keys = stamping.wire_keys(sorted(self.keys))
        self.wire_prefixes = stamping.wire_keys(self.prefixes)

    def watches(self, headers: list[Header]) -> bool:
        """Does any member watch one of `headers`? (Then the record takes the record path.)"""
        keys = self.keys
        prefixes = self.prefixes
        for key, _ in headers:
            if key in keys or key.startswith(prefixes):
                return True
        return False

    def counts(self, records: int, members: int = -1) -> tuple[list[int], list[int]]:
        """(changed, added) per member when the first `members` (all by default) stamped
        `records` records: every header appended is one added, and a record appended to is
        changed."""
        changed = [0] * len(self.sizes)
        added = [0] * len(self.sizes)
        for i, size in enumerate(self.sizes if members < 0 else self.sizes[:members]):
            if size:
                changed[i] = records
                added[i] = size * records
        return changed, added


def fast_path(plan: Plan) -> FastPath | None:
    """The plan's `FastPath`, if every member stamps, none is in shadow, and none appends a
    key that a later member watches (which would make that member look). Members that only
    read (``needs = "read"``) have one when they only watch (append nothing): a batch in
    which no record carries a watched key is then passed over after one native scan, and the
    others go record by record over their headers, without record objects."""
    stamps = plan.stamps
    if not stamps or any(s is None for s in stamps) or any(plan.shadow):
        return None
    if plan.mode == "read" and any(s.appends for s in stamps):  # type: ignore[union-attr]
        return None
    for j, earlier in enumerate(stamps):
        for later in stamps[j + 1:]:
            if any(later.watched(key) for key in earlier.appends):  # type: ignore[union-attr]
                return None
    return FastPath(stamps)  # type: ignore[arg-type]


def looks(stamps: Stamps, headers: Headers) -> bool:
    """Does a stamping member look at this record (does it carry a header it watches)?"""
    watched = stamps.watched
    for key, _ in headers:
        if watched(key):
            return True
    return False
