"""The filter chain: proxy features and interceptors as ordinary members with one interface.

A member says which (API key, version) pairs it wants to see decoded; everything nobody asked
for is forwarded as the bytes that arrived. The chain caches the answer per pair, so the hot
path does one dict lookup per frame to learn that a frame is opaque.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from protocol.message import Message
from protocol.messages import REQUESTS

if TYPE_CHECKING:
    from interceptors import Chains, ConnectionInfo

_CACHED_PAIRS = 4096
"""The most (API key, version) pairs the chain remembers its lookups for: a client picks the
versions it sends, so an unbounded cache would let one client grow it without limit."""


def decodable(api_key: int, version: int) -> bool:
    """Whether Herald's codec reads requests and responses of this API at this version."""
    cls = REQUESTS.get(api_key)
    return cls is not None and cls.MIN_VERSION <= version <= cls.MAX_VERSION


@dataclass
class SessionContext:
    """What a filter may know about the client connection a message belongs to."""

    client_address: str
    listener: str  # "bootstrap" or "broker-N"
    upstream_address: str
    client_id: str | None = None
    principal: str | None = None
    attributes: dict[str, Any] = field(default_factory=dict)


class Exchange:
    """One request and its response, as filters see them.

    A filter that must finish on the response what it started on the request (merging the
    partitions it refused into the broker's answer, say) leaves a note here; the response is
    then decoded for it even if it does not want every response of that API.

    `traces` carries what one member learns for a later one on the same request: the trace
    contexts the produce chain wrote, by (topic, partition), which the tracing member turns
    into spans. It stays None unless tracing is on.
    """

    __slots__ = ("notes", "traces")

    def __init__(self) -> None:
        self.notes: dict[Filter, Any] = {}
        self.traces: dict[tuple[str, int], Any] | None = None


class AnswerAndClose(Exception):
    """Raised by a member's `on_request`: answer this request from Herald, then close.

    For requests the broker must not see on this connection (a client starting SASL where
    Herald authenticated itself). `body` is the response message (None: close without an
    answer); it is sent after every earlier response, as Kafka answers in order.
    """

    def __init__(self, body: Message | None, reason: str) -> None:
        super().__init__(reason)
        self.body = body
        self.reason = reason
        self.head: Any = None  # the request's header, filled in by the session


class NativeWork(Protocol):
    """What the native engine needs of a member whose interceptor chains it runs in the
    member's place (`NativeTakeover.work`): the plans (proxy/native/stamp_plan.py,
    fetch_plan.py) are built from this alone, so the engine follows the member's limits and
    counts into its counters without knowing the member's type."""

    @property
    def chains(self) -> Chains:
        """The member's interceptor chains, as configured now (a reload replaces them)."""
        ...

    @property
    def reports_spans(self) -> bool:
        """Whether the member hands on trace contexts for spans (which need Python)."""
        ...

    @property
    def counts_topics(self) -> bool:
        """Whether the member keeps per-topic counters (which need Python)."""
        ...

    def connection(self, ctx: SessionContext) -> ConnectionInfo:
        """The interceptors' view of the session's connection."""
        ...

    def topic_names(self) -> Mapping[bytes, str]:
        """The topic names the member has learnt, by topic id."""
        ...

    def record_limits(self) -> tuple[int, int]:
        """The most records one batch, one request may hold."""
        ...

    def batch_limit(self) -> int:
        """The smallest batch size limit a stamped batch must keep to (-1: none)."""
        ...

    def decompression_limits(self) -> tuple[int, int]:
        """What the engine may decompress: one batch, one request (or one response)."""
        ...

    def count_reencoded(self, codec: int, batches: int) -> None:
        """Add `batches` batches the engine re-encoded with `codec` (0: uncompressed)."""
        ...


@dataclass(frozen=True, slots=True)
class NativeTakeover:
    """What the native engine may do in a member's place, for the frames the member reads.

    Frames no member reads pass through the engine whatever the members declare; a member
    that reads a frame keeps it in Python unless it declares here what the engine may do
    instead. `stamp`: the engine may stamp the Produce requests it reads; `scan`: the engine
    may scan the Fetch and ShareFetch responses it reads; either with a plan built from `work`.
    A member that declares `scan` and reads the requests of an API the engine scans reads them
    only to carry what the session owes the broker (`Filter.owes`): the engine passes them
    while the session owes nothing. The path choice (proxy/native/path_choice.py) asks the
    chain's members this and nothing else, once per session phase, never per frame."""

    stamp: bool = False
    scan: bool = False
    work: NativeWork | None = None


NATIVE_NOTHING = NativeTakeover()
"""The engine takes over nothing a member reads: those frames stay in Python."""


class Filter:
    """Base class: override `wants_*` and the matching `on_*` coroutine.

    `on_request` / `on_response` get the decoded message and return True when they changed it,
    so the frame is re-encoded only when some member actually modified something. The message
    is typed `Message`, as one signature serves every API; it is the API's generated class
    (`protocol.messages.REQUESTS` / `RESPONSES` by API key; an ApiVersions v0 fallback body
    only reads as one, see `protocol.api_versions`), which a member narrows to, once per frame,
    for the APIs it asked for.
    """

    name = "filter"
    native: NativeTakeover = NATIVE_NOTHING
    """What the native engine may take over of the frames this member reads."""

    def wants_request(self, api_key: int, version: int) -> bool:
        return False

    def wants_response(self, api_key: int, version: int) -> bool:
        return False

    async def on_request(
        self, ctx: SessionContext, exchange: Exchange, api_key: int, version: int, msg: Message
    ) -> bool:
        return False

    async def on_response(
        self, ctx: SessionContext, exchange: Exchange, api_key: int, version: int, msg: Message
    ) -> bool:
        return False

    def tail_only(self, api_key: int, version: int) -> bool:
        """True when this member reads only the top-level tagged fields of these responses.

        A large Fetch response then streams to the client as it arrives, and the member gets
        a message that holds those fields and no topics (see `protocol.fetch_tail`).
        """
        return False

    def tagged_only(self, api_key: int, version: int) -> bool:
        """True when this member reads nothing of the response but its leader hints (the
        top-level tagged fields of Produce and Fetch, the node endpoints of ShareFetch), so a
        response without any may pass unread (the native relay checks)."""
        return False

    def owes(self, ctx: SessionContext) -> bool:
        """Whether the session owes the broker something this member adds to a request it
        reads (a share group's acknowledgements): until a request carries it, the session's
        requests stay in Python."""
        return False

    def answer_unreadable(self, api_key: int, version: int) -> tuple[Message, int] | None:
        """A request this member reads came in a version Herald's codec cannot decode: the
        response Herald gives instead of forwarding it (the message and the version it is
        written in), or None when this member has none to give."""
        return None

    def on_abandoned(self, ctx: SessionContext, exchange: Exchange) -> None:
        """The connection closed before the response to an exchange this filter left a note
        on arrived: finish what the note started (no response will come)."""


class FilterChain:
    """An ordered list of filters with per-(API, version) member lookup cached.

    Members read frames only in versions Herald's codec decodes; for a version beyond it
    (newer than the Kafka releases Herald was generated from, or older than both), the members
    that would read it are `unreadable` instead, and the session asks them for an answer
    (`answer_unreadable`) rather than decoding what it cannot.
    """

    def __init__(self, filters: list[Filter]) -> None:
        self.filters = list(filters)
        self._members: dict[
            tuple[int, int], tuple[tuple[Filter, ...], tuple[Filter, ...], tuple[Filter, ...]]
        ] = {}

    def members(
        self, api_key: int, version: int
    ) -> tuple[tuple[Filter, ...], tuple[Filter, ...], tuple[Filter, ...]]:
        """The members that read the requests, those that read the responses, and those
        that would read either but cannot at this version (see `unreadable`): one lookup,
        for the session's per-frame path."""
        key = (api_key, version)
        found = self._members.get(key)
        if found is None:
            requests = tuple(f for f in self.filters if f.wants_request(api_key, version))
            responses = tuple(f for f in self.filters if f.wants_response(api_key, version))
            if (requests or responses) and not decodable(api_key, version):
                readers = requests + tuple(f for f in responses if f not in requests)
                found = ((), (), readers)
            else:
                found = (requests, responses, ())
            if len(self._members) < _CACHED_PAIRS:
                self._members[key] = found
        return found

    def for_request(self, api_key: int, version: int) -> tuple[Filter, ...]:
        return self.members(api_key, version)[0]

    def for_response(self, api_key: int, version: int) -> tuple[Filter, ...]:
        return self.members(api_key, version)[1]

    def unreadable(self, api_key: int, version: int) -> tuple[Filter, ...]:
        """The members that would read this request or its response, which Herald's codec
        cannot decode at this version (empty for every version it can)."""
        return self.members(api_key, version)[2]

    def answer_unreadable(self, api_key: int, version: int) -> tuple[Message, int] | None:
        """What Herald answers a request its members cannot read (see `unreadable`): the
        first answer a member gives, or None when none has one."""
        for f in self.unreadable(api_key, version):
            answer = f.answer_unreadable(api_key, version)
            if answer is not None:
                return answer
        return None

    def reset(self) -> None:
        """Forget the cached lookups (after a member's configuration changed)."""
        self._members.clear()
