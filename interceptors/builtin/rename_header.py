"""``rename_header``: give headers named `from` the key `to`, in place (either path).

Every occurrence is renamed and keeps its position and value; headers already named `to` are
left alone, so the record may then carry several (keys may repeat).
"""

from __future__ import annotations

from dataclasses import dataclass

from configuration import InvalidConfig
from interceptors.api import Interceptor
from interceptors.context import RecordContext
from interceptors.headers import Headers


@dataclass
class RenameHeaderConfig:
    from_: str
    to: str

    def __post_init__(self) -> None:
        if not self.from_:
            raise InvalidConfig("from", "must not be empty")
        if not self.to:
            raise InvalidConfig("to", "must not be empty")
        if self.to == self.from_:
            raise InvalidConfig("to", "is the same as 'from'")


class RenameHeader(Interceptor):
    Config = RenameHeaderConfig
    concurrent = True

    def on_record(self, ctx: RecordContext, headers: Headers) -> None:
        headers.rename(self.config.from_, self.config.to)
