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
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from interceptors.stats import MemberStats

if TYPE_CHECKING:
    from interceptors.context import ProxyInfo, RecordContext
    from interceptors.errors import RejectRecord
    from interceptors.headers import Headers

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
class Appends:
    """What a built-in member does to a record it has no reason to look at: append headers.

    The promise: on a record none of whose headers is *watched* (a key in `keys`, or starting
    with one of `prefixes`), `on_record` does exactly this: append the pairs ``make(ctx)``
    returns, with the same side effects (events counted, traces noted) in the same order,
    and returns None. `make` returns `size` checked pairs (str keys, bytes or None values),
    always that many, with keys from `adds` only.

    The chain engine then runs such records without a `Headers` wrapper or `on_record` calls,
    which is most of the per-record cost of stamping members (see `interceptors.chain`).

    `stamp`, when given, does for `n` such records at once what `n` calls of `make` would do,
    side effects included, but returns the headers in wire form, as columns for
    `protocol.stamping.append`: each column is one `bytes` for all records or a list of `n`.
    When every member of a chain can stamp and no record of a batch has a watched header, the
    engine stamps the whole batch in one pass and never parses its records into objects.
    """

    keys: frozenset[str]
    prefixes: tuple[str, ...]
    adds: frozenset[str]
    size: int
    make: Callable[[RecordContext], Sequence[tuple[str, bytes | None]]]
    stamp: Callable[[RecordContext, int], Sequence[bytes | list[bytes]]] | None = None


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

    def __init__(self, config: Any, env: ProxyInfo) -> None:
        self.config = config
        self.env = env
        # Replaced by the chain with this member's own counters; count custom events with
        # ``self.stats.count("name")``.
        self.stats: MemberStats = MemberStats("unbound", type(self).__name__)

    def on_batch(self, ctx: RecordContext) -> None:
        """Called once per record batch before its records (`ctx.batch` is set).

        Override to compute what is the same for every record of the batch (time, per-
        connection values, a per-batch trace context). The engine skips the call for members
        that do not override it.
        """

    def _appends(self) -> Appends | None:
        """Internal, for built-in members: how this member treats records it need not look at
        (`Appends`), if it only appends to them; None otherwise. Asked when the chain plans a
        topic; an override of `on_record` in a subclass switches it off."""
        return None

    def on_record(self, ctx: RecordContext, headers: Headers) -> Verdict | RejectRecord | None:
        """Look at (and possibly change) one record. Runs per record: keep it lean.

        Return None or KEEP to keep the record, DROP to remove it (fetch path), or raise or
        return `RejectRecord` to refuse the whole partition (produce path).
        """
        raise NotImplementedError
