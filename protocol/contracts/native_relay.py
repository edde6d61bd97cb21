"""What the native relay's C (``proxy/native``) and Herald's Python both name: why the engine
hands a session back and what each reason means, the byte directions it counts, the record
headers it reads, the link counts it returns, in their order, and the kinds of column it
stamps (with the codec names of ``protocol/compression.py``).

Written once, here: ``protocol.codegen`` renders them for C into ``native_relay.h`` (the
engine includes it), and the Python that reads what the engine says imports them from here.
A test checks that the committed header is what the generator renders, and that neither side
spells a name of these out again.
"""

from __future__ import annotations

from protocol.contracts.headers import PARENTS_LOST_REASONS, TRACEPARENT, TRACESTATE

# What a hand-over reason means to Python: carry on in Python (`RESUME`), a deadline of the
# client's passed (`DEADLINE`: the limit of the same name ended the session), the broker's
# side failed (`UPSTREAM`), or the session is over (`CLOSE`).
RESUME = "resume"
DEADLINE = "deadline"
UPSTREAM = "upstream"
CLOSE = "close"

# The reasons a native phase ends, as the engine names them.
REQUEST = "request"
"""A request the engine does not serve (its table marks it Python's, or it declined it)."""
CLIENT_EOF = "client_eof"
DRAIN = "drain"
IDLE_TIMEOUT = "idle_timeout"
"""The client sent nothing for `limits.idle_timeout_s` (the limit's own name)."""
FRAME_TIMEOUT = "frame_timeout"
"""A frame was not complete within `limits.frame_timeout_s` (the limit's own name)."""
CLIENT_CLOSED = "client_closed"
UPSTREAM_CLOSED = "upstream_closed"
UPSTREAM_BAD = "upstream_bad"
SOCKET_ERROR = "socket_error"
DETACHED = "detached"
RESPONSE = "response"
"""A response Python must handle, to a request the engine forwarded."""
REAUTH = "reauth"
"""Herald's own re-authentication to the broker is due."""

# What a session ended by a client deadline says, with the limit's YAML path, as printf
# formats (`%g`: the limit in seconds) that C's `snprintf` and Python's `%` read alike.
IDLE_TIMEOUT_MESSAGE = "limits.idle_timeout_s: idle for %g s"
FRAME_TIMEOUT_MESSAGE = "limits.frame_timeout_s: a frame was not complete %g s after it began"
MESSAGES = {"IDLE_TIMEOUT": IDLE_TIMEOUT_MESSAGE, "FRAME_TIMEOUT": FRAME_TIMEOUT_MESSAGE}
"""C macro suffix (``MESSAGE_<suffix>``) -> the message format."""

HANDOVER_REASONS = (
    (REQUEST, RESUME),
    (CLIENT_EOF, RESUME),
    (DRAIN, RESUME),
    (IDLE_TIMEOUT, DEADLINE),
    (FRAME_TIMEOUT, DEADLINE),
    (CLIENT_CLOSED, CLOSE),
    (UPSTREAM_CLOSED, UPSTREAM),
    (UPSTREAM_BAD, UPSTREAM),
    (SOCKET_ERROR, CLOSE),
    (DETACHED, CLOSE),
    (RESPONSE, RESUME),
    (REAUTH, RESUME),
)
"""Every hand-over reason with its kind, in the engine's order (its codes count from 1; 0 is
no reason)."""

# The four byte counts of a session, one per direction and side, in the order the engine
# counts them (its byte counters and its per-turn totals).
CLIENT_TO_PROXY = "client_to_proxy"
"""Read from the client."""
PROXY_TO_UPSTREAM = "proxy_to_upstream"
"""Written to the broker."""
UPSTREAM_TO_PROXY = "upstream_to_proxy"
"""Read from the broker."""
PROXY_TO_CLIENT = "proxy_to_client"
"""Written to the client."""
BYTE_DIRECTIONS = (CLIENT_TO_PROXY, PROXY_TO_UPSTREAM, UPSTREAM_TO_PROXY, PROXY_TO_CLIENT)
"""The directions in the engine's order (C: ``BYTES_<DIRECTION>``): the `direction` label of
``herald_bytes_total`` and ``herald_native_tls_bytes_total``."""
BYTE_COUNT = {direction: at for at, direction in enumerate(BYTE_DIRECTIONS)}
"""A direction's place in the engine's byte counts (`Engine.collect()`'s first tuple,
`Engine.tls_bytes`), by direction."""

# What a column the engine stamps holds (`interceptors.api.NativeColumn.kind`), in the order of
# its codes.
COLUMN_CONST = "const"
"""A value fixed for the connection (`NativeColumn.value`, None: null)."""
COLUMN_CLIENT_ID = "client_id"
"""The Produce request's client id (null when it has none)."""
COLUMN_TIME_MS_TEXT = "time_ms_text"
"""The receive time, ms since the epoch, as decimal text."""
COLUMN_UUID7 = "uuid7"
"""A UUIDv7 per record, as `interceptors.ids.uuid7_many` makes them."""
COLUMN_TRACEPARENT = TRACEPARENT
"""A new W3C traceparent per record (or per batch)."""
COLUMN_KINDS = (COLUMN_CONST, COLUMN_CLIENT_ID, COLUMN_TIME_MS_TEXT, COLUMN_UUID7,
                COLUMN_TRACEPARENT)

# Record headers the engine reads by name.
HEADERS = {"TRACEPARENT": TRACEPARENT, "TRACESTATE": TRACESTATE}
"""C macro suffix -> the header key (``protocol/contracts/headers.py``)."""

# The links (``trace_context``'s ``link``): why a parent is not named, and the counters the
# linking and remembering members count under.
UNSEEN = "unseen"
MISS_REASONS = (UNSEEN, *PARENTS_LOST_REASONS[:2])
"""Why a record's parents were not found: never seen, expired, evicted."""
FETCH_COUNTERS = ("link_remembered", "link_evicted", "link_expired")
"""The remembering member's counters, in the order the C memory's `counters` gives them."""
LINK_MADE = "link_made"
"""Records given link headers."""
LINK_PARENTS = "link_parents"
"""Parent headers written."""
MISSED_COUNTERS = tuple("link_missed_" + reason for reason in MISS_REASONS)
LOST_COUNTERS = tuple("link_lost_" + reason for reason in PARENTS_LOST_REASONS)
PRODUCE_COUNTERS = (LINK_MADE, LINK_PARENTS, *MISSED_COUNTERS, *LOST_COUNTERS)
"""The linking member's counters, in the order the C memory's `counters` gives them (after
`FETCH_COUNTERS`)."""

LINK_COUNTS = (
    ("linked", LINK_MADE),
    ("parents", LINK_PARENTS),
    *((f"missed_{reason}", counter) for reason, counter in zip(MISS_REASONS, MISSED_COUNTERS,
                                                                 strict=True)),
    ("linked_batches", None),
    ("remembered", FETCH_COUNTERS[0]),
    ("evicted", FETCH_COUNTERS[1]),
    ("expired", FETCH_COUNTERS[2]),
    *((f"lost_{reason}", counter) for reason, counter in zip(PARENTS_LOST_REASONS,
                                                               LOST_COUNTERS, strict=True)),
    ("marked", None),
    ("lost_headers", None),
)
"""What the native relay counts of links for one stamped request or scanned response, in the
order of its counts' `links` tuple, each with the member counter it adds to (None: it feeds
another count): records given link headers, parent headers written, records whose parents
were missed (by reason), kept batches changed by links; for a scan, records remembered,
entries evicted and expired; parents declared lost (by reason), records given link headers
by the keeping column, lost parents headers written."""
LINK_COUNT = {name: at for at, (name, _) in enumerate(LINK_COUNTS)}
"""A link count's place in the tuple, by name."""
PRODUCE_LINK_EVENTS = tuple((at, counter) for at, (_, counter) in enumerate(LINK_COUNTS)
                            if counter in PRODUCE_COUNTERS)
"""(place, counter) of each count the linking member adds to a counter of its own."""
FETCH_LINK_EVENTS = tuple((at, counter) for at, (_, counter) in enumerate(LINK_COUNTS)
                          if counter in FETCH_COUNTERS)
"""(place, counter) of each count the remembering member adds to a counter of its own."""
