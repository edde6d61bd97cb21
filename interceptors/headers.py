"""The Headers API interceptors work with: KIP-82 headers of one record.

Headers are an ordered list of ``(key, value)`` pairs; a key may repeat and a value is bytes or
None. The wrapper is built for every record on the hot path, so it is cheap:

* it wraps the record's own list and copies it only on the first change (copy on write);
* it counts real changes, so an operation that leaves the list as it was (removing an absent
  key, setting a header to the value it already has) changes nothing;
* `commit_to` hands the new list to the record only when it differs from the original, so a
  record nobody changed keeps its original bytes;
* `HeaderBlock` is a run of headers checked once (say per batch) and then added to many
  records with `extend`, without checking every pair again per record.

Readers follow the Kafka client conventions: `last` is ``Headers.lastHeader``, `all` is
``Headers.headers(key)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Protocol, TypeVar, overload

Header = tuple[str, bytes | None]

_MISSING = object()

_Default = TypeVar("_Default")


class TakesHeaders(Protocol):
    """A record `Headers.commit_to` can hand a new header list to (`protocol.records.Record`,
    `interceptors.testing.FakeRecord`)."""

    def take_headers(self, headers: list[Header]) -> None: ...


def _check(key: object, value: object) -> bytes | None:
    if type(key) is not str:
        raise TypeError(f"header key must be str, not {type(key).__name__}")
    if value is None or type(value) is bytes:
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise TypeError(
        f"header value must be bytes or None, not {type(value).__name__} (encode text first)"
    )


class HeaderBlock(tuple[Header, ...]):
    """An immutable run of headers, checked once when built.

    Members that add the same headers to every record of a batch build one block per batch
    (in `on_batch`); `Headers.extend` then appends it without checking each pair again, which
    would otherwise cost more than the append itself.
    """

    __slots__ = ()

    def __new__(cls, pairs: Iterable[Header] = ()) -> HeaderBlock:
        return super().__new__(cls, [(k, _check(k, v)) for k, v in pairs])


class Headers:
    """Ordered, multi-valued record headers with change tracking.

    `mutations` counts the changes made through this wrapper, `added` the headers added and
    `removed` the headers removed; the chain engine reads them to attribute changes to chain
    members.
    """

    __slots__ = ("_orig", "_items", "_readonly", "mutations", "added", "removed")

    def __init__(self, items: list[Header] | None = None, *, readonly: bool = False) -> None:
        if items is None:
            items = []
        self._orig = items
        self._items = items
        self._readonly = readonly
        self.mutations = 0
        self.added = 0
        self.removed = 0

    # -- reading ----------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Header]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        for k, _ in self._items:
            if k == key:
                return True
        return False

    def __repr__(self) -> str:
        return f"Headers({self._items!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Headers):
            return self._items == other._items
        if isinstance(other, list):
            return self._items == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    @overload
    def last(self, key: str) -> bytes | None: ...
    @overload
    def last(self, key: str, default: _Default) -> bytes | None | _Default: ...

    def last(self, key: str, default: object = None) -> object:
        """The value of the last header named `key`, else `default`.

        A header may carry a null value, so pass a sentinel as `default` (or test ``key in
        headers``) when absence and null must be told apart.
        """
        for k, v in reversed(self._items):
            if k == key:
                return v
        return default

    @overload
    def first(self, key: str) -> bytes | None: ...
    @overload
    def first(self, key: str, default: _Default) -> bytes | None | _Default: ...

    def first(self, key: str, default: object = None) -> object:
        """The value of the first header named `key`, else `default`."""
        for k, v in self._items:
            if k == key:
                return v
        return default

    def all(self, key: str) -> list[bytes | None]:
        """Every value of `key`, in order."""
        return [v for k, v in self._items if k == key]

    def count(self, key: str) -> int:
        n = 0
        for k, _ in self._items:
            if k == key:
                n += 1
        return n

    def keys(self) -> list[str]:
        return [k for k, _ in self._items]

    def to_list(self) -> list[Header]:
        """A copy of the current headers."""
        return list(self._items)

    @property
    def changed(self) -> bool:
        return self.mutations != 0

    # -- writing ----------------------------------------------------------------------------

    def _check_writable(self) -> None:
        if self._readonly:
            raise TypeError("these headers are read-only (the member declared needs = 'read')")

    def _writable(self) -> list[Header]:
        items = self._items
        if items is self._orig:
            self._check_writable()  # read-only headers never get past this point
            items = self._items = list(items)
        return items

    def add(self, key: str, value: bytes | None) -> None:
        """Append a header (an existing one with the same key stays: keys may repeat)."""
        if type(key) is not str or (value is not None and type(value) is not bytes):
            value = _check(key, value)
        items = self._items
        if items is self._orig:
            items = self._writable()
        items.append((key, value))
        self.mutations += 1
        self.added += 1

    def extend(self, pairs: Iterable[Header]) -> None:
        """Append several headers in order (a `HeaderBlock` as it is: it was checked when
        built)."""
        if type(pairs) is not HeaderBlock:
            if not isinstance(pairs, list | tuple):
                pairs = list(pairs)
            for k, v in pairs:
                if type(k) is not str or (v is not None and type(v) is not bytes):
                    pairs = [(k, _check(k, v)) for k, v in pairs]
                    break
        if pairs:
            items = self._items
            if items is self._orig:
                items = self._writable()
            items.extend(pairs)
            self.mutations += 1
            self.added += len(pairs)

    def remove(self, key: str) -> int:
        """Remove every header named `key`; return how many there were."""
        return self.remove_if(key.__eq__)

    def remove_if(self, predicate: Callable[[str], bool]) -> int:
        """Remove the headers whose key satisfies `predicate`; return how many."""
        items = self._items
        for k, _ in items:
            if predicate(k):
                break
        else:
            return 0
        kept = [h for h in items if not predicate(h[0])]
        removed = len(items) - len(kept)
        if removed:
            self._check_writable()
            self._items = kept
            self.mutations += 1
            self.removed += removed
        return removed

    def set(self, key: str, value: bytes | None) -> None:
        """Leave exactly one header named `key`, with `value`.

        Same result as remove-then-add, except that the header keeps the position of the first
        existing one (order is visible to readers); when the key already appears exactly once
        with this value, nothing changes.
        """
        if type(key) is not str or (value is not None and type(value) is not bytes):
            value = _check(key, value)
        items = self._items
        for k, _ in items:
            if k == key:
                break
        else:  # not there yet, the usual case: append
            if items is self._orig:
                items = self._writable()
            items.append((key, value))
            self.mutations += 1
            self.added += 1
            return
        first = -1
        n = 0
        for i, (k, _) in enumerate(items):
            if k == key:
                n += 1
                if first < 0:
                    first = i
        if n == 1 and items[first][1] == value:
            return
        self._check_writable()
        new = [h for i, h in enumerate(items) if i == first or h[0] != key]
        new[first] = (key, value)
        self._items = new
        self.mutations += 1
        self.removed += n - 1

    def rename(self, old: str, new: str) -> int:
        """Give every header named `old` the key `new`, in place; return how many."""
        _check(new, None)
        if old == new or old not in self:
            return 0
        items = self._writable()
        n = 0
        for i, (k, v) in enumerate(items):
            if k == old:
                items[i] = (new, v)
                n += 1
        self.mutations += 1
        return n

    def clear(self) -> None:
        if self._items:
            self._check_writable()
            self.removed += len(self._items)
            self._items = []
            self.mutations += 1

    # -- committing ---------------------------------------------------------------------------

    def commit_to(self, record: TakesHeaders) -> bool:
        """Give the headers to `record` if they differ from what it had; return whether.

        The list changes hands without a copy (`take_headers`): it is this wrapper's own (any
        change copies the record's list first), and from now on the record's original, so a
        later change through this wrapper copies it again.
        """
        items = self._items
        if self.mutations and items != self._orig:
            record.take_headers(items)
            self._orig = items
            return True
        return False
