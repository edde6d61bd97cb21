"""The interface every chain member implements, built-in or plugin.

A member is a class with a config dataclass and one hot method::

    @dataclass
    class StampConfig:
        header: str
        value: str = "yes"

    class Stamp(Interceptor):
        Config = StampConfig

        def __init__(self, config: StampConfig, env: ProxyInfo) -> None:
            super().__init__(config, env)
            self._value = config.value.encode()      # precompute: on_record runs per record

        def on_record(self, ctx: RecordContext, headers: Headers) -> Verdict | None:
            headers.set(self.config.header, self._value)
            return None                              # None means KEEP

Class attributes tell the engine what the member needs, so it does no work nobody asked for:

* `needs`: ``"read"`` (reads headers only: the engine scans headers without building record
  objects, and the headers are read-only), ``"headers"`` (reads and writes headers; the
  default) or ``"key_value"`` (also reads or replaces the record key and value).
* `paths`: which chains the member may sit in (``"produce"``, ``"fetch"``).
* `default_on_error`: the failure policy when the YAML sets none.
* `enforcing`: a policy that record batches without headers (magic 0/1) would slip past; the
  produce chain refuses such batches while an enforcing member applies.
* `stamps`: set by a *stamping* member, one that appends header columns to records it need
  not look at (`Stamps`, `columns`); the engine then runs it on its fast paths.
* `concurrent`: whether runs may overlap (below).
* `uses`: the services the member asks the proxy for (`interceptors.services`: the consumer
  groups clients read for, Kafka clients towards a cluster of its own); the proxy supplies
  them through `ProxyInfo` and does the work behind one only while a member uses it.
* `fetch_member`: a produce member that must see what clients fetch sets it (in
  ``__init__``) to a member of its own making; the chains builder appends that member to the
  fetch chain (``trace_context`` with ``link`` remembers the traced records clients fetched).

Runs. The proxy runs a chain over large batches in worker threads while it keeps running it
over small ones on its event loop, so several runs of one member may overlap. A member that
says ``concurrent = True`` keeps no per-run state on ``self``: what lasts a batch goes in
``ctx.memo[self]`` (set in `on_batch`), what lasts the member's life is immutable or swapped
whole. Counting through ``self.stats`` is always safe (each run counts into its own
counters). Runs of chains with a member that leaves `concurrent` False (the default, so
plugins written for one run at a time keep working) are serialised with each other.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from interceptors.stats import MemberStats
from protocol.contracts.native_relay import (
    COLUMN_CLIENT_ID,
    COLUMN_CONST,
    COLUMN_KINDS,
    COLUMN_TIME_MS_TEXT,
    COLUMN_TRACEPARENT,
    COLUMN_UUID7,
)

# The chain run in progress on this thread, whose counters members count into (see `stats`).
_RUN = threading.local()

if TYPE_CHECKING:
    from interceptors.context import ConnectionInfo, ProxyInfo, RecordContext
    from interceptors.errors import RejectRecord
    from interceptors.headers import Headers


class _Counting(Protocol):
    """What `Interceptor.stats` asks of the run in `_RUN` (`interceptors.chain.run.Run`,
    which this layer does not import)."""

    def counter(self, interceptor: Interceptor) -> MemberStats | None: ...


PRODUCE = "produce"
FETCH = "fetch"
BOTH_PATHS = frozenset({PRODUCE, FETCH})

NEEDS = ("read", "headers", "key_value")
ON_ERROR = {PRODUCE: ("reject", "pass"), FETCH: ("pass", "drop")}


class Verdict(enum.Enum):
    """What becomes of a record. Returning None is the same as KEEP."""

    KEEP = "keep"
    DROP = "drop"  # fetch path only: the record is removed before the client sees it


KEEP = Verdict.KEEP
DROP = Verdict.DROP


@dataclass(frozen=True, slots=True)
class Stamps:
    """The declaration of a *stamping* member: what it reads and which headers it appends.

    A stamping member appends the same header columns to every record it has no reason to
    look at. It declares:

    * `appends`: the keys of the headers it appends, in order (one column each);
    * `watches` / `watch_prefixes`: the header keys (exact, or by prefix) that make it look at
      a record. Only records carrying such a header reach its `on_record`; every other record
      gets the columns `Interceptor.columns` gives for the batch, appended by the engine.

    From that the engine derives its fast paths, for built-ins and plugins alike: records
    nobody watches are stamped without a `Headers` wrapper or any call per member, and when
    no record of a batch is watched and every per-record column has a bulk maker
    (`PerRecord.many`), the whole batch is stamped in one pass without parsing its records.
    A chain takes these paths only when all its members stamp and no member watches a key an
    earlier one appends; otherwise each record goes through each member in turn, with the
    same result.
    """

    appends: tuple[str, ...]
    watches: frozenset[str] = frozenset()
    watch_prefixes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "appends", tuple(self.appends))
        object.__setattr__(self, "watches", frozenset(self.watches))
        object.__setattr__(self, "watch_prefixes", tuple(self.watch_prefixes))
        for key in (*self.appends, *self.watches, *self.watch_prefixes):
            if type(key) is not str or not key:
                raise TypeError(f"header keys must be non-empty str, not {key!r}")

    def watched(self, key: str) -> bool:
        """Does a header with this key make the member look at its record?"""
        return key in self.watches or key.startswith(self.watch_prefixes)


@dataclass(frozen=True, slots=True)
class PerRecord:
    """A column whose value is made per record (an id, a new trace context).

    `each(ctx)` makes the value for one record. `many(ctx, n)`, when given, makes the values
    of `n` records at once (first record first) with the side effects of `n` calls of `each`:
    it is what lets the engine stamp a whole batch in one pass. Neither may look at the record
    (`ctx.record` is not set for `many`): a column is what a member appends to records it
    does not look at. Per-batch state is in ``ctx.memo``.
    """

    each: Callable[[RecordContext], bytes | None]
    many: Callable[[RecordContext, int], Sequence[bytes | None]] | None = None


ColumnValue = bytes | None | PerRecord
"""One column of a batch: a value shared by all its records, or a `PerRecord` maker."""

# The column kinds (protocol/contracts/native_relay.py, where each is explained, and which
# the engine's C reads too).
CONST = COLUMN_CONST
CLIENT_ID = COLUMN_CLIENT_ID
TIME_MS_TEXT = COLUMN_TIME_MS_TEXT
UUID7 = COLUMN_UUID7
TRACEPARENT = COLUMN_TRACEPARENT
NATIVE_KINDS = COLUMN_KINDS


@dataclass(frozen=True, slots=True)
class NativeColumn:
    """How the native relay can make one column of a stamping member without Python
    (`Interceptor.native_columns`): the member's `columns` stay the reference, and tests
    hold the two to the same bytes with the same random draws.

    `event`, when set, is the member's counter (`MemberStats.count`) of values made: one per
    record, or one per batch with `per_batch`.

    `keeps_valid` (kind `TRACEPARENT` only) declares the W3C pass-through: a record that
    carries exactly one valid traceparent under the column's key (`interceptors.tracing.
    valid_traceparent`), and beside it only valid ``tracestate`` headers (`parse_tracestate`),
    keeps them, and the column appends nothing to it; the member counts nothing for it, and
    with `per_batch` a batch whose records all keep theirs makes no value. The engine then
    stamps such records itself (the other columns as usual) instead of handing the request to
    Python, provided no other member watches those two keys. Any other record carrying a
    header the member watches still goes to Python.

    `links` (with `keeps_valid`): ``(memory, scope, header key)``, the C memory of fetched
    traces (`protocol._stamp.LinkMemory`), the connection's scope key in it and the link
    header: a record that keeps its own traceparent gets, in this column's place, one header
    per parent the memory holds for its trace (`interceptors.trace_links`); the member's
    ``link_made``, ``link_parents`` and ``link_missed_*`` counters count them. A later member
    that watches the link header says what it does with such a record
    (`Interceptor.native_links`), or linked records go to Python.
    """

    kind: str
    value: bytes | None = None
    sampled: bool = True
    per_batch: bool = False
    event: str | None = None
    keeps_valid: bool = False
    links: tuple[Any, bytes, str] | None = None

    def __post_init__(self) -> None:
        if self.kind not in NATIVE_KINDS:
            raise ValueError(f"unknown native column kind {self.kind!r}")
        if self.keeps_valid and self.kind != TRACEPARENT:
            raise ValueError("only a traceparent column keeps a record's own")


@dataclass
class NoConfig:
    """For members without settings of their own."""


class Interceptor:
    """Base class of chain members. Subclasses set `Config` and implement `on_record`."""

    Config: ClassVar[type] = NoConfig
    needs: ClassVar[str] = "headers"
    paths: ClassVar[frozenset[str]] = BOTH_PATHS
    default_on_error: ClassVar[str] = "pass"
    enforcing: ClassVar[bool] = False
    concurrent: ClassVar[bool] = False
    uses: ClassVar[frozenset[str]] = frozenset()  # of interceptors.services.SERVICES
    stamps: Stamps | None = None  # set (usually in __init__) by a stamping member
    fetch_member: Interceptor | None = None  # set in __init__ by a member that needs one

    def __init__(self, config: Any, env: ProxyInfo) -> None:
        self.config = config
        self.env = env
        # Replaced by the chain with this member's own counters; count custom events with
        # ``self.stats.count("name")``.
        self.stats = MemberStats("unbound", type(self).__name__)

    @property
    def stats(self) -> MemberStats:
        """This member's counters; during a run, the run's own (merged into the chain's when
        the run ends, so runs in several threads never count into the same object)."""
        run: _Counting | None = getattr(_RUN, "run", None)
        if run is not None:
            mine = run.counter(self)  # made on first use; None if not a member of the run
            if mine is not None:
                return mine
        return self._stats

    @stats.setter
    def stats(self, value: MemberStats) -> None:
        self._stats = value

    def on_batch(self, ctx: RecordContext) -> None:
        """Called once per record batch before its records (`ctx.batch` is set).

        Override to compute what is the same for every record of the batch (time, per-
        connection values, a per-batch trace context); keep it in ``ctx.memo[self]``. The
        engine skips the call for members that do not override it.
        """

    def columns(self, ctx: RecordContext) -> Sequence[ColumnValue]:
        """For a stamping member (`stamps` set): the values of its columns for this batch,
        one per key of `stamps.appends`. Called once per batch, after `on_batch`.

        Return the very same sequence object while the values do not change (build it once,
        or once per `on_batch` state): the engine then reuses what it prepared from it."""
        raise NotImplementedError

    def native_columns(self, conn: ConnectionInfo) -> Sequence[NativeColumn] | None:
        """For a stamping member: its columns for records of this connection as the native
        relay makes them, one per key of `stamps.appends`; None (the default) when they
        cannot be made there, and the connection's Produce requests then stay in Python."""
        return None

    def native_links(self, conn: ConnectionInfo, key: str) -> dict[str, int] | None:
        """For a stamping member placed after the one whose native column writes Herald's
        link headers under `key` (`NativeColumn.links`), and that watches `key`: what it
        does to a record of this connection whose only watched headers are those links.

        A dict declares that it treats such a record as one it does not look at (it appends
        its columns and changes nothing else) and counts these events (`MemberStats.count`)
        for each: the native relay then stamps linked records itself. None (the default):
        linked records go to Python, which runs `on_record` on them."""
        return None

    def gauges(self) -> dict[str, float]:
        """Levels of what the member holds (the size of a bounded memory), by a short fixed
        name, read when metrics are scraped: counters say what happened, these what is kept
        now. Read from another thread than the runs: return plain numbers, take no lock."""
        return {}

    def on_record(self, ctx: RecordContext, headers: Headers) -> Verdict | RejectRecord | None:
        """Look at (and possibly change) one record. Runs per record: keep it lean.

        Return None or KEEP to keep the record, DROP to remove it (fetch path), or raise or
        return `RejectRecord` to refuse the whole partition (produce path). A stamping member
        is called only for records carrying a header it watches.
        """
        raise NotImplementedError
