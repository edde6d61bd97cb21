"""What the native engine of this build can do, as it says itself (`_relay.capabilities()`).

The facts the engine acts on (the API versions it walks, what each hand-over reason means, what
it stamps and scans, the codecs it reads, whether it carries TLS) are constants of its C
sources. This module only gives them a typed shape: it states none of them, so widening what
the engine does is a change to C alone, and Python follows (`proxy/native/path_choice.py`
decides from this). Without the extension (built without a C compiler) the engine can do
nothing, and every session is Python's.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field

try:
    from proxy.native import _relay
except ImportError:  # built without a C compiler
    _relay = None  # type: ignore[assignment]  # the stub's module, or None: `load` checks


@dataclass(frozen=True, slots=True)
class Capabilities:
    """The engine's own account of itself; see `_relay.capabilities()`."""

    available: bool
    max_api: int = 0
    max_version: int = 0
    table_values: tuple[str, ...] = ()  # the names of the table's byte values, by value
    reasons: dict[str, str] = field(default_factory=dict)  # hand-over reason -> its kind
    stamp_api: int = -1
    stamp_versions: range = range(0)
    stamp_codecs: frozenset[str] = frozenset()
    columns: tuple[str, ...] = ()  # the column kinds it makes, by the number it is sent
    scan_api: int = -1
    scan_versions: range = range(0)
    scan_codecs: frozenset[str] = frozenset()
    share_api: int = -1  # ShareFetch: scanned as Fetch is, its leader hints read by the scan
    share_versions: range = range(0)
    tags: dict[int, range] = field(default_factory=dict)  # api -> versions whose responses'
    # top-level tagged fields it reads (passing them when empty)
    tls: bool = False

    def scans(self, api: int, version: int) -> bool:
        """Whether the engine scans the responses of (api, version) for a fetch plan."""
        return ((api == self.scan_api and version in self.scan_versions)
                or (api == self.share_api and version in self.share_versions))

    def value(self, name: str) -> int:
        """The table byte for `name` (0, Python's, for a value this engine does not know)."""
        values = self.table_values
        return values.index(name) if name in values else 0


def _span(first_last: tuple[int, int]) -> range:
    return range(first_last[0], first_last[1] + 1)


def load() -> Capabilities:
    """Read what the engine says; an engine that is not built can do nothing."""
    if _relay is None:
        return Capabilities(available=False)
    c = _relay.capabilities()
    stamp, scan = c["stamp"], c["scan"]
    return Capabilities(
        available=True,
        max_api=c["max_api"],
        max_version=c["max_version"],
        table_values=tuple(c["table_values"]),
        reasons=dict(c["reasons"]),
        stamp_api=stamp["api"],
        stamp_versions=_span(stamp["versions"]),
        stamp_codecs=frozenset(stamp["codecs"]),
        columns=tuple(stamp["columns"]),
        scan_api=scan["api"],
        scan_versions=_span(scan["versions"]),
        scan_codecs=frozenset(scan["codecs"]),
        share_api=scan["share_api"],
        share_versions=_span(scan["share_versions"]),
        tags={api: _span(versions) for api, versions in c["tags"].items()},
        # The engine adopts connections Python's ssl module made: only with that very
        # OpenSSL (a Python with an OpenSSL of its own would hand over another library's state).
        tls=bool(c["tls"]) and c["openssl_version"] == ssl.OPENSSL_VERSION_NUMBER,
    )


CAPABILITIES = load()
