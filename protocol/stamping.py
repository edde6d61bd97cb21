"""Append the same headers to every record of a batch in one pass: the stamping fast path.

Interceptors that stamp records (trace context, audit metadata, an inserted header) append
headers to records they have no reason to look at. Doing that per record through `Record`
objects costs a parse, a header list and an encode each. Here a whole batch is done at once:

* `watched` walks the records and names the ones with a header the stampers watch (those go
  the per-record way); usually none.
* `append` writes every record again with more headers: the original bytes from attributes
  through the old headers are reused, behind a new length and header count, followed by the
  record's share of each *column*. A column is the wire form of headers either shared by all
  records (one `bytes`) or one per record (a list of `bytes`), or one header per record given
  as its key's wire form and the values (`value_column`).

Both are done by the optional native module `protocol._stamp` when it was built (setup.py),
else by the Python functions below, which are the reference: tests hold the two to the same
output and the same errors. Any malformed record raises `CodecError`.
"""

from __future__ import annotations

from binascii import hexlify
from collections.abc import Sequence

from protocol.errors import CodecError
from protocol.primitives import Buffer
from protocol.records import (
    _VARINT_TABLE,
    _VARINTS,
    Header,
    RecordBatch,
    _encode_header,
    _encode_key,
    _parse,
    _skip_varint,
    _zigzag_varint,
)

try:
    import protocol._stamp as _native
except ImportError:  # not built (no compiler where Herald was installed): the Python reference
    _native = None  # type: ignore[assignment]  # the checks below say `is not None`

__all__ = [
    "NATIVE",
    "Column",
    "append",
    "header_head",
    "headers_wire",
    "hex_column",
    "value_column",
    "watched",
    "wire_keys",
]

NATIVE = _native is not None

Column = bytes | list[bytes] | tuple[bytes, list[bytes | None]]


def wire_keys(keys: Sequence[str]) -> tuple[bytes, ...] | None:
    """Header keys (or prefixes) as the bytes they are on the wire, for `watched`.

    None when a key is not plain UTF-8 text (it holds a lone surrogate): byte comparison would
    then not agree with how the records' keys are read, so the caller must go record by record.
    """
    try:
        return tuple(key.encode("utf-8") for key in keys)
    except UnicodeEncodeError:
        return None


def watched(batch: RecordBatch, keys: tuple[bytes, ...], prefixes: tuple[bytes, ...]
            ) -> list[int]:
    """Indexes of the batch's records with a header whose key is one of `keys` or starts with
    one of `prefixes` (keys and prefixes as from `wire_keys`), checking every record."""
    buf, start, end = batch.records_section()
    if _native is not None:
        try:
            return _native.watched(buf, start, end, batch.record_count, keys, prefixes)
        except ValueError as exc:
            raise CodecError(str(exc)) from None
    return _py_watched(buf, start, end, batch.record_count, keys, prefixes)


def append(batch: RecordBatch, added: int, columns: Sequence[Column]) -> None:
    """Append `added` headers to every record of the batch, whose wire form is the record's
    share of each column, in order. The batch then holds the new records (`replace_records`)."""
    if added < 0:
        raise ValueError("negative count")  # the caller's mistake, not a malformed batch
    buf, start, end = batch.records_section()
    columns = tuple(columns)
    if _native is not None:
        try:
            payload = _native.append(buf, start, end, batch.record_count, added, columns)
        except ValueError as exc:
            raise CodecError(str(exc)) from None
    else:
        payload = _py_append(buf, start, end, batch.record_count, added, columns)
    batch.replace_records(payload)


def hex_column(head: bytes, raw: bytes, n: int, chunk: int,
               spec: tuple[tuple[bytes, int], ...]) -> list[bytes]:
    """A column of `n` values made from random bytes: ids, such as a traceparent or a UUID.

    `raw` holds n chunks of `chunk` bytes, the first record's chunk *last*: the big-endian
    bytes of one draw of n times as many bits, whose lowest bits a generator makes first. Each
    value is `head`, then for each ``(literal, digits)`` of `spec` the literal and that many
    lowercase hex digits of the record's chunk, in order; digits -1 writes one UUID variant
    digit (8, 9, a or b) from the next digit instead.
    """
    if _native is not None:
        return _native.hex_column(head, raw, n, chunk, spec)
    return _py_hex_column(head, raw, n, chunk, spec)


# --- the reference --------------------------------------------------------------------------------

_VARIANT = bytes.maketrans(b"0123456789abcdef", b"89ab89ab89ab89ab")


def _py_hex_column(head: bytes, raw: bytes, n: int, chunk: int,
                   spec: tuple[tuple[bytes, int], ...]) -> list[bytes]:
    if n < 0 or chunk < 0 or len(raw) != n * chunk:
        raise ValueError("raw must hold n chunks")
    if any(k < -1 for _, k in spec):
        raise ValueError("digits must be -1 or more")
    if sum(1 if k < 0 else k for _, k in spec) > 2 * chunk:
        raise ValueError("spec takes more digits than a chunk holds")
    digits = hexlify(raw)
    variant = digits.translate(_VARIANT)
    out = []
    for i in range(n):
        parts = [head]
        d = 2 * chunk * (n - 1 - i)
        for literal, k in spec:
            parts.append(literal)
            if k < 0:
                parts.append(variant[d:d + 1])
                d += 1
            else:
                parts.append(digits[d:d + k])
                d += k
        out.append(b"".join(parts))
    return out



def _py_watched(buf: bytes, start: int, end: int, count: int, keys: tuple[bytes, ...],
                prefixes: tuple[bytes, ...]) -> list[int]:
    out = []
    for index, headers in enumerate(_parse(buf, start, end, count, False, False)):
        for key, _ in headers:
            raw = key.encode("utf-8", "surrogateescape")
            if raw in keys or raw.startswith(prefixes):
                out.append(index)
                break
    return out


def _column_ok(column: object, count: int) -> bool:
    if type(column) is bytes:
        return True
    if type(column) is tuple:
        return (len(column) == 2 and type(column[0]) is bytes and type(column[1]) is list
                and len(column[1]) == count
                and all(v is None or type(v) is bytes for v in column[1]))
    return (type(column) is list and len(column) == count
            and all(type(p) is bytes for p in column))


def _piece(column: Column, index: int) -> bytes:
    """Record `index`'s share of a column."""
    if isinstance(column, bytes):
        return column
    if isinstance(column, list):
        return column[index]
    key, values = column
    value = values[index]
    if value is None:
        return key + b"\x01"
    n = len(value)
    return key + (_VARINTS[n] if n < _VARINT_TABLE else _zigzag_varint(n)) + value


def _py_append(buf: bytes, start: int, end: int, count: int, added: int,
               columns: tuple[Column, ...]) -> bytes:
    for column in columns:
        if not _column_ok(column, count):
            raise TypeError("a column must be bytes, a list of bytes (one per record), or a "
                            "(key, values) tuple with one bytes or None value per record")
    if added < 0:
        raise ValueError("negative count")
    parts: list[Buffer] = []
    put = parts.append
    view = memoryview(buf)
    for index, rec in enumerate(_parse(buf, start, end, count, False, True)):
        hpos = rec._hpos
        first = hpos + 1 if buf[hpos] < 0x80 else _skip_varint(buf, hpos)
        tail = b"".join(_piece(c, index) for c in columns)
        headers = len(rec._hdr0) + added
        head = _VARINTS[headers] if headers < _VARINT_TABLE else _zigzag_varint(headers)
        size = (hpos - rec._body) + len(head) + (rec._end - first) + len(tail)
        put(_VARINTS[size] if size < _VARINT_TABLE else _zigzag_varint(size))
        put(view[rec._body:hpos])
        put(head)
        put(view[first:rec._end])
        put(tail)
    return b"".join(parts)


def header_head(key: str, size: int) -> bytes:
    """The wire form of a header up to its value, for a value of `size` bytes: a per-record
    value is then appended to this."""
    return _encode_key(key) + (_VARINTS[size] if size < _VARINT_TABLE else _zigzag_varint(size))


def value_column(key: str, values: list[bytes | None]) -> tuple[bytes, list[bytes | None]]:
    """A column of one header per record: `key` with each of `values` (bytes, or None for a
    null value), for `append`."""
    return (_encode_key(key), values)


def headers_wire(headers: Sequence[Header]) -> bytes:
    """The wire form of `headers`, one after another (a column shared by all records)."""
    return b"".join(_encode_header(h) for h in headers)
