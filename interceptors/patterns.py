"""Name patterns for topics, client ids and header keys.

One syntax everywhere in the configuration: a list whose entries are

* ``orders`` – exactly this name;
* ``prefix:orders.`` – names starting with ``orders.``;
* ``glob:orders.*`` – shell-style wildcards (``*``, ``?``, ``[abc]``);
* ``regex:orders\\.(eu|us)`` – a Python regular expression matching the *whole* name.

Explicit markers rather than guessing from the characters, because header keys may contain
``*`` or ``.`` literally. Exact names are a set lookup and prefixes one ``startswith`` call;
only globs and regexes run regular expressions, and their answers are cached per name, since
the same few names come by again and again.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable

from configuration import InvalidConfig

_CACHE_LIMIT = 4096
_KINDS = ("prefix", "glob", "regex")


class NameMatcher:
    """Does a name match any of the patterns? Call the matcher with the name."""

    __slots__ = ("patterns", "_exact", "_prefixes", "_regexes", "_cache")

    def __init__(self, patterns: Iterable[str]) -> None:
        self.patterns = tuple(patterns)
        exact: set[str] = set()
        prefixes: list[str] = []
        regexes: list[re.Pattern[str]] = []
        for p in self.patterns:
            kind, sep, rest = p.partition(":")
            if sep and kind == "prefix":
                prefixes.append(rest)
            elif sep and kind == "glob":
                regexes.append(re.compile(fnmatch.translate(rest)))
            elif sep and kind == "regex":
                regexes.append(re.compile(rest))
            else:
                exact.add(p)
        self._exact = frozenset(exact)
        self._prefixes = tuple(prefixes)
        self._regexes = tuple(regexes)
        self._cache: dict[str, bool] = {}

    def __call__(self, name: str) -> bool:
        if name in self._exact:
            return True
        if self._prefixes and name.startswith(self._prefixes):
            return True
        if not self._regexes:
            return False
        cache = self._cache
        hit = cache.get(name)
        if hit is None:
            if len(cache) >= _CACHE_LIMIT:
                cache.clear()
            hit = cache[name] = any(r.fullmatch(name) for r in self._regexes)
        return hit

    @property
    def exact_only(self) -> bool:
        """True when every pattern is a plain name (callers may then use `names`)."""
        return not self._prefixes and not self._regexes

    @property
    def names(self) -> frozenset[str]:
        return self._exact

    @property
    def prefixes(self) -> tuple[str, ...]:
        return self._prefixes

    @property
    def plain(self) -> bool:
        """True when every pattern is a name or a prefix: `names` and `prefixes` say it all."""
        return not self._regexes

    def __repr__(self) -> str:
        return f"NameMatcher({list(self.patterns)!r})"


def matcher(patterns: list[str], field: str) -> NameMatcher:
    """Build a matcher from config, naming the offending entry (``field[i]``) on error."""
    for i, p in enumerate(patterns):
        kind, sep, rest = p.partition(":")
        if sep and kind in _KINDS and not rest:
            raise InvalidConfig(f"{field}[{i}]", "empty pattern")
        if sep and kind == "regex":
            try:
                re.compile(rest)
            except re.error as exc:
                raise InvalidConfig(f"{field}[{i}]", f"invalid regex {rest!r}: {exc}") from None
    return NameMatcher(patterns)
