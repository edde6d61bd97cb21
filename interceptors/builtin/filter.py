"""``filter``: keep or drop records by a header test (fetch path).

The test looks at every header named ``header`` and holds when any of them passes:

* ``present: true`` / ``present: false`` – the header is there / is not;
* ``equals: text`` – its value is exactly these UTF-8 bytes;
* ``matches: regex`` – its whole value matches the regular expression (on the raw bytes).

``action: drop`` (default) removes the records the test holds for; ``action: keep`` keeps only
those. Removed records leave an offset gap that consumers step over, as after compaction;
control batches are never touched.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from configuration import InvalidConfig
from interceptors.api import DROP, FETCH, Interceptor, Verdict
from interceptors.context import ProxyInfo, RecordContext
from interceptors.headers import Headers


@dataclass
class FilterConfig:
    header: str
    present: bool | None = None
    equals: str | None = None
    matches: str | None = None
    action: Literal["drop", "keep"] = "drop"

    def __post_init__(self) -> None:
        if not self.header:
            raise InvalidConfig("header", "must not be empty")
        given = [k for k in ("present", "equals", "matches") if getattr(self, k) is not None]
        if len(given) != 1:
            raise InvalidConfig(given[1] if given else "present",
                                "give exactly one of present, equals, matches")
        if self.matches is not None:
            try:
                re.compile(self.matches.encode())
            except re.error as exc:
                raise InvalidConfig("matches", f"invalid regex: {exc}") from None


class Filter(Interceptor):
    Config = FilterConfig
    concurrent = True
    needs = "read"
    paths = frozenset({FETCH})

    def __init__(self, config: FilterConfig, env: ProxyInfo) -> None:
        super().__init__(config, env)
        self._drop_when = config.action == "drop"
        self._test = self._build_test(config)

    @staticmethod
    def _build_test(config: FilterConfig) -> Callable[[Headers], bool]:
        name = config.header
        if config.present is not None:
            if config.present:
                return lambda h: name in h
            return lambda h: name not in h
        if config.equals is not None:
            target = config.equals.encode()
            return lambda h: any(v == target for k, v in h if k == name)
        regex = re.compile(config.matches.encode())  # type: ignore[union-attr]
        full = regex.fullmatch
        return lambda h: any(v is not None and full(v) for k, v in h if k == name)

    def on_record(self, ctx: RecordContext, headers: Headers) -> Verdict | None:
        if self._test(headers) == self._drop_when:
            return DROP
        return None
