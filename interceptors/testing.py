"""In-memory records and batches for unit-testing interceptors without a broker.

They follow the record model of `protocol.records` closely enough for the chain engine:
assigning `headers`, `key` or `value` marks a record modified (editing the headers list in
place does not), `remove_records` drops records, control batches refuse changes. Nothing is
encoded: tests look at the objects.

    batch = make_batch([(b"k", b"v", [("a", b"1")])])
    outcome = chain.process("orders", 0, [batch], ConnectionInfo(client_id="app"))
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

Header = tuple[str, bytes | None]


class FakeRecord:
    __slots__ = ("attributes", "timestamp_delta", "offset_delta", "_key", "_value",
                 "_headers", "assignments", "read_only")

    def __init__(
        self,
        key: bytes | None = None,
        value: bytes | None = None,
        headers: Iterable[Header] = (),
        *,
        offset_delta: int = 0,
        timestamp_delta: int = 0,
    ) -> None:
        self.attributes = 0
        self.timestamp_delta = timestamp_delta
        self.offset_delta = offset_delta
        self._key = key
        self._value = value
        self._headers = list(headers)
        self.assignments: list[str] = []  # which fields were assigned, in order
        self.read_only = False

    def _assign(self, name: str) -> None:
        if self.read_only:
            raise TypeError("records of a control batch cannot be changed")
        self.assignments.append(name)

    @property
    def key(self) -> bytes | None:
        return self._key

    @key.setter
    def key(self, key: bytes | None) -> None:
        self._assign("key")
        self._key = key

    @property
    def value(self) -> bytes | None:
        return self._value

    @value.setter
    def value(self, value: bytes | None) -> None:
        self._assign("value")
        self._value = value

    @property
    def headers(self) -> list[Header]:
        return self._headers

    @headers.setter
    def headers(self, headers: list[Header]) -> None:
        self._assign("headers")
        self._headers = list(headers)

    def current_headers(self) -> list[Header]:
        return self._headers

    def take_headers(self, headers: list[Header]) -> None:
        self._assign("headers")
        self._headers = headers

    @property
    def modified(self) -> bool:
        return bool(self.assignments)

    def __repr__(self) -> str:
        return f"FakeRecord({self._key!r}, {self._value!r}, {self._headers!r})"


class FakeBatch:
    def __init__(
        self,
        records: Iterable[FakeRecord],
        *,
        base_offset: int = 0,
        base_timestamp: int = 1_700_000_000_000,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        compression: int = 0,
        is_transactional: bool = False,
        is_control: bool = False,
    ) -> None:
        self._records = list(records)
        self.base_offset = base_offset
        self.base_timestamp = base_timestamp
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.compression = compression
        self.is_transactional = is_transactional
        self.is_control = is_control
        self.record_count = len(self._records)
        self.removed = 0
        self.records_read = False
        for r in self._records:
            r.read_only = is_control

    @property
    def records(self) -> list[FakeRecord]:
        self.records_read = True
        return self._records

    def iter_headers(self) -> Iterator[list[Header]]:
        return (r.headers for r in self._records)

    @property
    def last_offset_delta(self) -> int:
        """The largest offset delta, as a real batch's header says (-1 when empty)."""
        return max((r.offset_delta for r in self._records), default=-1)

    @property
    def modified(self) -> bool:
        return self.removed > 0 or any(r.modified for r in self._records)

    def remove_records(self, predicate: Callable[[Any], bool]) -> int:
        if self.is_control:
            raise TypeError("records of a control batch cannot be removed")
        kept = [r for r in self._records if not predicate(r)]
        dropped = len(self._records) - len(kept)
        self._records[:] = kept
        self.record_count -= dropped
        self.removed += dropped
        return dropped


def make_batch(
    records: Iterable[tuple[bytes | None, bytes | None, Iterable[Header]]], **kwargs: Any
) -> FakeBatch:
    """A batch of (key, value, headers) records with offset deltas 0, 1, 2, ..."""
    return FakeBatch(
        [FakeRecord(k, v, h, offset_delta=i) for i, (k, v, h) in enumerate(records)], **kwargs
    )
