"""Kafka record batches (magic 2) with KIP-82 headers: split, read, edit, re-encode.

Built for a proxy's hot path:

* `split_batches` only reads the 61-byte batch headers and copies nothing: batches are views
  into the records field. Nothing inside a batch is decoded until someone asks:
  `RecordBatch.iter_headers()` (read-only scan, no objects) or `RecordBatch.records`.
* A batch nobody changed goes out as its original bytes (`to_bytes` returns `raw`).
* When only headers of a record changed, the record is re-encoded by splicing: the original
  bytes from its attributes through its value are reused as one slice, followed by the new
  headers, behind a fresh length varint. When headers were only appended, the original header
  bytes are reused as well. Runs of unchanged records are copied as one slice.
* Header work never touches record count, offset deltas, producer id/epoch, base sequence or
  flags, so idempotent and transactional producers keep working.

Decoders are safe on hostile input: any malformed, truncated or oversized data raises
`CodecError`, loops are bounded by the input length, and nothing allocates in proportion to a
length field before checking that field against the bytes actually present. Decompression is
capped by `max_decompressed` (see `protocol.compression`).

Varints are decoded inline (one- and two-byte forms) rather than through shared helpers: a
function call per field would dominate the cost of scanning a record in Python.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from crc32c import crc32c

from protocol.compression import DEFAULT_MAX_DECOMPRESSED, NONE, compress, decompress
from protocol.errors import CodecError
from protocol.primitives import Buffer

__all__ = [
    "HEADER_SIZE",
    "Header",
    "ReadOnlyRecordError",
    "Record",
    "RecordBatch",
    "build_batch",
    "join_batches",
    "split_batches",
    "with_base_sequence",
]

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
# baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordCount
_HEADER = struct.Struct(">qiibIhiqqqhii")
# The part covered by the CRC: attributes .. recordCount.
_CRC_PART = struct.Struct(">hiqqqhii")
_PREFIX = struct.Struct(">qiibI")
HEADER_SIZE = _HEADER.size  # 61
_CRC_START = 21  # offset of attributes
_CRC_AT = _PREFIX.size - 4  # the CRC ends the prefix
_BASE_SEQUENCE_AT = HEADER_SIZE - 8  # baseSequence, then recordCount, end the header
_LENGTH_OVERHEAD = 12  # baseOffset + batchLength precede what batchLength counts
_MIN_BATCH_LENGTH = HEADER_SIZE - _LENGTH_OVERHEAD  # 49
_LEGACY_MIN_LENGTH = 14  # smallest magic 0 message after the offset and size fields

_CODEC_MASK = 0x07
_TIMESTAMP_TYPE = 0x08
_TRANSACTIONAL = 0x10
_CONTROL = 0x20
_DELETE_HORIZON = 0x40


class ReadOnlyRecordError(TypeError):
    """Raised when a caller tries to change the records of a control batch.

    Control records (transaction markers, leader-change records) are the broker's own
    bookkeeping; a client that saw an edited one would misread transaction state.
    """


# --- varints --------------------------------------------------------------------------------------


def _read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    """General unsigned varint decode; the callers inline the one-byte case."""
    result = 0
    shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise CodecError("varint longer than 10 bytes")


def _skip_varint(buf: bytes, pos: int) -> int:
    """Position after the varint at `pos`, rejecting overlong ones like Java does."""
    stop = pos + 10
    while buf[pos] & 0x80:
        pos += 1
        if pos >= stop:
            raise CodecError("varint longer than 10 bytes")
    return pos + 1


def _zigzag_varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


# Zigzag varints of 0 .. 8191 (every one- and two-byte encoding of a non-negative length).
_VARINT_TABLE = 8192
_VARINTS = [_zigzag_varint(n) for n in range(_VARINT_TABLE)]
_MINUS_ONE = b"\x01"


def _varint(n: int) -> bytes:
    if 0 <= n < _VARINT_TABLE:
        return _VARINTS[n]
    return _zigzag_varint(n)


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    n, pos = _read_uvarint(buf, pos)
    return (n >> 1) ^ -(n & 1), pos


_Parts = list[Any]
"""Pieces of an encoded batch, joined once: bytes and views, and None in a length varint's
slot until what follows it is known."""

# --- records --------------------------------------------------------------------------------------

Header = tuple[str, bytes | None]


class Record:
    """One record of a batch.

    A parsed record keeps only its position in the batch payload and its headers; key, value
    and the deltas are decoded on first access. `attributes`, `timestamp_delta` and
    `offset_delta` are read-only: a proxy must not renumber records. Assigning `key`, `value`
    or `headers` (or editing the `headers` list in place) makes the record, and its batch,
    modified when the content differs from the original.
    """

    # Positions in `_src`: the record's length varint, its body (attributes onwards), its
    # header count, its end.
    __slots__ = (
        "_src", "_start", "_body", "_hpos", "_end", "_hdr0", "_headers", "_fields", "_dirty"
    )
    _src: bytes  # the batch payload a parsed record lies in; empty for a record made here
    _start: int
    _body: int
    _hpos: int
    _end: int
    _hdr0: list[Header]  # the headers as parsed
    _headers: list[Header] | None  # None: still the parsed ones, uncopied
    # attributes, timestamp delta, offset delta, key, value, by index; None
    # until first read. One list rather than five slots: a record is parsed with one
    # store and its fields decoded with one, and `_encode` unpacks them at once.
    _fields: list[Any] | None
    _dirty: bool

    def __init__(
        self,
        key: bytes | None = None,
        value: bytes | None = None,
        headers: Iterable[Header] | None = None,
        *,
        timestamp_delta: int = 0,
        offset_delta: int = 0,
        attributes: int = 0,
    ) -> None:
        self._src = b""
        self._start = self._body = self._hpos = self._end = 0
        self._hdr0 = []
        self._headers = list(headers) if headers is not None else []
        self._fields = [
            attributes,
            timestamp_delta,
            offset_delta,
            _opt_bytes(key),
            _opt_bytes(value),
        ]
        self._dirty = True

    # Fields other than headers are decoded lazily: most interceptors only look at headers.
    def _load_fields(self) -> list[Any]:
        buf = self._src
        pos = self._body
        attributes = buf[pos]
        if attributes > 127:
            attributes -= 256
        timestamp_delta, pos = _read_varint(buf, pos + 1)
        offset_delta, pos = _read_varint(buf, pos)
        klen, pos = _read_varint(buf, pos)
        key = None if klen < 0 else buf[pos : pos + klen]
        pos += max(klen, 0)
        vlen, pos = _read_varint(buf, pos)
        value = None if vlen < 0 else buf[pos : pos + vlen]
        self._fields = fields = [attributes, timestamp_delta, offset_delta, key, value]
        return fields

    @property
    def attributes(self) -> int:
        attributes: int = (self._fields or self._load_fields())[0]
        return attributes

    @property
    def timestamp_delta(self) -> int:
        timestamp_delta: int = (self._fields or self._load_fields())[1]
        return timestamp_delta

    @property
    def offset_delta(self) -> int:
        offset_delta: int = (self._fields or self._load_fields())[2]
        return offset_delta

    @property
    def key(self) -> bytes | None:
        key: bytes | None = (self._fields or self._load_fields())[3]
        return key

    @key.setter
    def key(self, key: bytes | None) -> None:
        key = _opt_bytes(key)
        fields = self._fields or self._load_fields()
        if key != fields[3]:
            fields[3] = key
            self._dirty = True

    @property
    def value(self) -> bytes | None:
        value: bytes | None = (self._fields or self._load_fields())[4]
        return value

    @value.setter
    def value(self, value: bytes | None) -> None:
        value = _opt_bytes(value)
        fields = self._fields or self._load_fields()
        if value != fields[4]:
            fields[4] = value
            self._dirty = True

    @property
    def headers(self) -> list[Header]:
        """The headers in wire order; keys may repeat. Editing the list in place is allowed."""
        headers = self._headers
        if headers is None:
            self._headers = headers = list(self._hdr0)
        return headers

    @headers.setter
    def headers(self, headers: Iterable[Header]) -> None:
        self._headers = list(headers)

    def current_headers(self) -> list[Header]:
        """The header list as it stands, without the copy `headers` makes on first access.

        For callers that never change it in place, such as a copy-on-write wrapper (the
        interceptor engine wraps every record's headers this way): it may be the parsed
        original, which `modified` compares against.
        """
        headers = self._headers
        return self._hdr0 if headers is None else headers

    def take_headers(self, headers: list[Header]) -> None:
        """Make `headers` the record's header list as it is, without the setter's copy.

        The caller hands the list over: it must be a list of ``(str, bytes | None)`` pairs
        and must not be changed afterwards except through the record.
        """
        self._headers = headers

    @property
    def modified(self) -> bool:
        if self._dirty:
            return True
        headers = self._headers
        return headers is not None and headers != self._hdr0

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        return (self._fields or self._load_fields()) == (
            other._fields or other._load_fields()
        ) and self.headers == other.headers

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        a, ts, off, key, value = self._fields or self._load_fields()
        return (
            f"Record(offset_delta={off}, timestamp_delta={ts}, key={key!r}, value={value!r}, "
            f"headers={self.headers!r})"
        )

    def _encode(self) -> bytes:
        """The complete record (length varint included) from its fields."""
        attributes, ts, off, key, value = self._fields or self._load_fields()
        parts = [bytes((attributes & 0xFF,)), _zigzag_varint(ts), _zigzag_varint(off)]
        for data in (key, value):
            if data is None:
                parts.append(_MINUS_ONE)
            else:
                parts.append(_varint(len(data)))
                parts.append(data)
        _encode_headers(self.headers, parts)
        body = b"".join(parts)
        return _varint(len(body)) + body


class _ControlRecord(Record):
    """A record of a control batch: readable like any record, never writable."""

    __slots__ = ()

    def _refuse(self, _value: object) -> None:
        raise ReadOnlyRecordError("records of a control batch cannot be changed")

    # Record's own getters (read from its class dictionary: a type checker sees a property
    # with a setter as an overload), with a setter that refuses.
    key = property(Record.__dict__["key"].fget, _refuse)
    value = property(Record.__dict__["value"].fget, _refuse)
    headers = property(Record.__dict__["headers"].fget, _refuse)

    def take_headers(self, headers: list[Header]) -> None:
        self._refuse(headers)


def _opt_bytes(data: object) -> bytes | None:
    if data is None or type(data) is bytes:
        return data
    return _as_bytes(data)


def _as_bytes(data: object) -> bytes:
    """A bytes-like value as bytes; anything else (an int would make that many zero bytes)
    refused."""
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    raise TypeError(f"expected bytes or None, not {type(data).__name__}")


def _encode_headers(headers: list[Header], parts: _Parts) -> None:
    """Append the header count and headers to `parts`."""
    append = parts.append
    append(_varint(len(headers)))
    for header in headers:
        append(_encode_header(header))


def _encode_header(header: Header) -> bytes:
    """One header on the wire: varint key length, UTF-8 key, varint value length, value."""
    key, value = header
    head = _encode_key(key)
    if value is None:
        return head + _MINUS_ONE
    if type(value) is not bytes:
        value = _as_bytes(value)  # a bytearray or memoryview a member set
    n = len(value)
    return b"".join((head, _VARINTS[n] if n < _VARINT_TABLE else _zigzag_varint(n), value))


# Header keys come from a small set (interceptors add the same few to every record), so the
# wire form of short ones is kept. Bounded in count and size: keys come from clients too.
_KEYS: dict[str, bytes] = {}
_KEYS_LIMIT = 4096
_KEY_CACHED_MAX = 128


def _encode_key(key: str) -> bytes:
    """A header key on the wire: varint length and UTF-8 bytes."""
    if type(key) is not str:
        raise TypeError(f"header key must be str, not {type(key).__name__}")
    piece = _KEYS.get(key)
    if piece is not None:
        return piece
    # surrogateescape mirrors the decoder, so keys that were not valid UTF-8 round-trip.
    kb = key.encode("utf-8", "surrogateescape")
    n = len(kb)
    piece = (_VARINTS[n] if n < _VARINT_TABLE else _zigzag_varint(n)) + kb
    if n <= _KEY_CACHED_MAX:
        if len(_KEYS) >= _KEYS_LIMIT:
            _KEYS.clear()
        _KEYS[key] = piece
    return piece


def _parse(buf: bytes, pos: int, end: int, count: int, control: bool, objects: bool
           ) -> list[Any]:
    """Walk the records in buf[pos:end].

    Returns Record objects when `objects`, else just each record's header list (the read-only
    scan). Every length is checked against the record's own bounds, so a record can never
    read into its neighbour and a forged length cannot make us slice beyond the input.
    """
    out: list[Any] = []  # Records, or header lists (`objects` False)
    append = out.append
    cls = _ControlRecord if control else Record
    new = object.__new__
    try:
        while pos < end:
            rstart = pos
            # Varints below: one- and two-byte forms inline, longer ones via _read_uvarint.
            # Lengths are zigzag: even b is b >> 1, b == 1 is -1 (null), other odd b invalid.
            # record length
            b = buf[pos]
            if b < 0x80:
                pos += 1
            elif buf[pos + 1] < 0x80:
                b = (b & 0x7F) | buf[pos + 1] << 7
                pos += 2
            else:
                b, pos = _read_uvarint(buf, pos)
            rend = pos + (b >> 1)
            if b & 1 or b == 0 or rend > end:
                raise CodecError("record length out of range")
            body = pos
            # attributes, then timestampDelta and offsetDelta (skipped: decoded lazily)
            pos += 1
            if buf[pos] < 0x80:
                pos += 1
            elif buf[pos + 1] < 0x80:
                pos += 2
            else:
                pos = _skip_varint(buf, pos)
            if buf[pos] < 0x80:
                pos += 1
            elif buf[pos + 1] < 0x80:
                pos += 2
            else:
                pos = _skip_varint(buf, pos)
            # key
            b = buf[pos]
            if b < 0x80:
                pos += 1
            elif buf[pos + 1] < 0x80:
                b = (b & 0x7F) | buf[pos + 1] << 7
                pos += 2
            else:
                b, pos = _read_uvarint(buf, pos)
            if b & 1:
                if b != 1:
                    raise CodecError("negative key length")
            else:
                pos += b >> 1
            # value
            b = buf[pos]
            if b < 0x80:
                pos += 1
            elif buf[pos + 1] < 0x80:
                b = (b & 0x7F) | buf[pos + 1] << 7
                pos += 2
            else:
                b, pos = _read_uvarint(buf, pos)
            if b & 1:
                if b != 1:
                    raise CodecError("negative value length")
            else:
                pos += b >> 1
            hpos = pos
            # header count
            b = buf[pos]
            if b < 0x80:
                pos += 1
            else:
                b, pos = _read_uvarint(buf, pos)
            headers: list[Header] = []
            if b:
                # Each header takes at least two bytes, which bounds the loop by the input.
                if b & 1 or b >> 1 > (rend - pos) >> 1:
                    raise CodecError("header count out of range")
                for _ in range(b >> 1):
                    b = buf[pos]
                    if b < 0x80:
                        pos += 1
                    else:
                        b, pos = _read_uvarint(buf, pos)
                    if b & 1:
                        raise CodecError("negative header key length")
                    kend = pos + (b >> 1)
                    key = buf[pos:kend].decode("utf-8", "surrogateescape")
                    b = buf[kend]
                    if b < 0x80:
                        pos = kend + 1
                    elif buf[kend + 1] < 0x80:
                        b = (b & 0x7F) | buf[kend + 1] << 7
                        pos = kend + 2
                    else:
                        b, pos = _read_uvarint(buf, kend)
                    if b & 1:
                        if b != 1:
                            raise CodecError("negative header value length")
                        headers.append((key, None))
                    else:
                        vend = pos + (b >> 1)
                        headers.append((key, buf[pos:vend]))
                        pos = vend
            if pos != rend:
                raise CodecError("record length does not match its fields")
            if objects:
                rec = new(cls)
                rec._src = buf
                rec._start = rstart
                rec._body = body
                rec._hpos = hpos
                rec._end = rend
                rec._hdr0 = headers
                rec._headers = None
                rec._fields = None
                rec._dirty = False
                append(rec)
            else:
                append(headers)
    except IndexError:
        raise CodecError("truncated record") from None
    if len(out) != count:
        raise CodecError(f"batch declares {count} records but holds {len(out)}")
    return out


_ShapeEntry = tuple[int, int, Any, bytes, int]
"""One entry of a `_TailEncoder`'s shape: the third item is a run's headers, or a key."""


class _TailEncoder:
    """Encodes the headers appended to the records of one batch, reusing work across records.

    Interceptors append the same headers, or headers in the same places, to every record of a
    batch: an audit stamp is a block of per-batch constants, a per-record id, one more
    constant. Each distinct header is encoded once per batch (a cache keyed by the header),
    but even a cache hit costs a hash and a lookup per header and record. So once two records
    in a row had tails of the same length, this learns the tail's *shape*: runs of positions
    where both had the same header become one joined piece, checked per record with a single
    list comparison; the other positions (a per-record id) are encoded directly, their key's
    bytes kept. When nothing varies (an application id on every record), the whole tail is
    one piece and one comparison. A tail that does not fit goes header by header, and the
    shape is learnt anew.

    Equal headers always encode alike (a bytearray value encodes like the bytes it equals), so
    a piece may stand for any header equal to the one it was made from.
    """

    __slots__ = ("_parts", "_encoded", "_same", "_shape", "_size", "_prev")

    def __init__(self, parts: _Parts) -> None:
        self._parts = parts
        self._encoded: dict[Header, bytes] = {}  # for the header-by-header way
        # (headers, wire bytes, length) of the last tail when it was made of constants only
        self._same: tuple[list[Header], bytes, int] | None = None
        self._shape: list[_ShapeEntry] | None = None  # see _learn
        self._size = -1  # the tail length the shape is for
        self._prev: list[Header] | None = None  # the last tail, while there is no shape

    def encode(self, tail: list[Header]) -> int:
        """Append the wire form of the headers `tail` to the parts; return its length."""
        parts = self._parts
        same = self._same
        if same is not None and tail == same[0]:  # the same headers as the last record
            parts.append(same[1])
            return same[2]
        append = parts.append
        mark = len(parts)
        shape = self._shape
        if shape is not None:
            if len(tail) == self._size:
                n = 0
                for start, stop, expected, piece, size in shape:
                    if stop:  # a run of constant headers
                        if tail[start:stop] != expected:
                            break
                        append(piece)
                        n += size
                        continue
                    key, value = tail[start]  # a header that differs from record to record
                    if (type(key) is str and key == expected and type(value) is bytes
                            and len(value) == size):
                        append(piece)
                        append(value)
                        n += len(piece) + size
                    else:
                        piece = _encode_header(tail[start])
                        append(piece)
                        n += len(piece)
                else:
                    return n
                del parts[mark:]
            self._shape = None
        encoded = self._encoded
        n = 0
        for header in tail:
            try:
                cached = encoded.get(header)
            except TypeError:  # an unhashable value (bytearray, memoryview)
                cached = None
            if cached is not None:
                piece = cached
            else:
                piece = _encode_header(header)
                if header[1] is None or type(header[1]) is bytes:  # hashable
                    encoded[header] = piece
            append(piece)
            n += len(piece)
        prev = self._prev
        if prev is not None and len(prev) == len(tail) and shape is None:
            self._learn(prev, tail, parts[mark:])
            self._prev = None
        else:
            self._prev = tail
        return n

    def _learn(self, prev: list[Header], tail: list[Header], pieces: _Parts) -> None:
        """Learn the shape from two consecutive tails; `pieces` are the wire form of `tail`,
        header by header.

        The shape is a list of entries, in order: ``(start, stop, headers, piece, len(piece))``
        for a run of constant headers, and ``(position, 0, key, head, value length)`` for a
        header that varies, where `head` is the wire form of the key and of the value length
        (a per-record id keeps its length) and a value length of -1 stands for "not bytes".
        """
        shape: list[_ShapeEntry] = []
        size = len(tail)
        j = 0
        while j < size:
            stop = j
            while stop < size and tail[stop] == prev[stop]:
                stop += 1
            if stop > j:
                piece = b"".join(pieces[j:stop])
                shape.append((j, stop, tail[j:stop], piece, len(piece)))
                j = stop
            else:
                key, value = tail[j]
                if type(value) is bytes and len(value) < _VARINT_TABLE:
                    head = _encode_key(key) + _VARINTS[len(value)]
                    shape.append((j, 0, key, head, len(value)))
                else:
                    shape.append((j, 0, key, b"", -1))
                j += 1
        if len(shape) == 1 and shape[0][1]:  # nothing varies: one comparison per record
            self._same = (tail, shape[0][3], shape[0][4])
        elif len(shape) < size:  # some run of two or more: worth it
            self._shape = shape
            self._size = size


def _encode_parsed(records: list[Record], parts: _Parts) -> bool:
    """Append the wire form of parsed records to `parts`; return whether anything changed.

    Unchanged records are copied as runs of original bytes. A record whose headers changed is
    spliced: its bytes from attributes through the value are reused as one slice, then come
    the new header count and headers, behind a recomputed length varint. When headers were
    only appended, the original header bytes are reused too and only the new ones encoded
    (by a `_TailEncoder`, shared by the records of the batch).
    """
    changed = False
    run_src = None
    run_start = run_end = 0
    append = parts.append
    table = _VARINTS
    view = memoryview(b"")
    view_src: bytes | None = None
    encode_tail = _TailEncoder(parts).encode
    for rec in records:
        src = rec._src
        if rec._dirty:
            changed = True
            if run_src is not None:
                append(run_src[run_start:run_end])
                run_src = None
            append(rec._encode())
            continue
        headers = rec._headers
        old = rec._hdr0
        if headers is None or headers == old:
            if src is run_src and rec._start == run_end:
                run_end = rec._end
            else:
                if run_src is not None:
                    append(run_src[run_start:run_end])
                run_src = src
                run_start = rec._start
                run_end = rec._end
            continue
        changed = True
        if run_src is not None:
            append(run_src[run_start:run_end])
            run_src = None
        if src is not view_src:
            view_src = src
            view = memoryview(src)
        body = rec._body
        hpos = rec._hpos
        # The length varint comes first but depends on what follows: reserve its slot.
        slot = len(parts)
        append(None)
        append(view[body:hpos])
        count = len(headers)
        piece = table[count] if count < _VARINT_TABLE else _zigzag_varint(count)
        append(piece)
        n = hpos - body + len(piece)
        kept = len(old)
        if kept and headers[:kept] == old:
            first = hpos + 1 if src[hpos] < 0x80 else _skip_varint(src, hpos)
            append(view[first : rec._end])
            n += rec._end - first
            headers = headers[kept:]
        n += encode_tail(headers)
        parts[slot] = table[n] if n < _VARINT_TABLE else _zigzag_varint(n)
    if run_src is not None:
        append(run_src[run_start:run_end])
    return changed


# --- batches --------------------------------------------------------------------------------------


class RecordBatch:
    """A view of one magic-2 record batch inside a larger buffer (no copy is made).

    Header fields are plain attributes, read-only by convention: `to_bytes` writes them as
    they were parsed (only `record_count` moves, through `remove_records`).
    """

    __slots__ = (
        "_data",
        "_offset",
        "_size",
        "base_offset",
        "batch_length",
        "partition_leader_epoch",
        "magic",
        "crc",
        "attributes",
        "last_offset_delta",
        "base_timestamp",
        "max_timestamp",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "record_count",
        "max_decompressed",
        "_records",
        "_body",
        "_removed",
        "_replaced",
    )
    # The header's fields, as Kafka names them (unpacked in one call from the bytes).
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    def __init__(
        self,
        data: bytes,
        offset: int = 0,
        size: int | None = None,
        *,
        max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
    ) -> None:
        """The batch at data[offset:offset + size] (by default, all of `data`)."""
        if type(data) is not bytes:
            data = bytes(data)
        if size is None:
            size = len(data) - offset
        if offset < 0 or size < HEADER_SIZE or offset + size > len(data):
            raise CodecError("record batch shorter than its header")
        (
            self.base_offset,
            self.batch_length,
            self.partition_leader_epoch,
            self.magic,
            self.crc,
            self.attributes,
            self.last_offset_delta,
            self.base_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.record_count,
        ) = _HEADER.unpack_from(data, offset)
        if self.magic != 2:
            raise CodecError(f"record batch magic {self.magic}, expected 2")
        if self.batch_length + _LENGTH_OVERHEAD != size:
            raise CodecError("batch length does not match the data")
        if self.record_count < 0:
            raise CodecError("negative record count")
        self._data = data
        self._offset = offset
        self._size = size
        self.max_decompressed = max_decompressed
        self._records: list[Record] | None = None
        self._body: bytes | None = None
        self._removed = False
        self._replaced = False

    def __repr__(self) -> str:
        return (
            f"RecordBatch(base_offset={self.base_offset}, records={self.record_count}, "
            f"compression={self.compression}, size={self._size})"
        )

    @property
    def raw(self) -> bytes:
        """The batch exactly as received."""
        data = self._data
        if self._offset == 0 and self._size == len(data):
            return data
        return data[self._offset : self._offset + self._size]

    def __len__(self) -> int:
        return self._size

    @property
    def compression(self) -> int:
        return self.attributes & _CODEC_MASK

    @property
    def timestamp_type(self) -> int:
        """0 = CreateTime, 1 = LogAppendTime."""
        return (self.attributes & _TIMESTAMP_TYPE) >> 3

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & _DELETE_HORIZON)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    def crc_is_valid(self) -> bool:
        start = self._offset
        return crc32c(memoryview(self._data)[start + _CRC_START : start + self._size]) == self.crc

    def records_section(self) -> tuple[bytes, int, int]:
        """(buffer, start, end) of the uncompressed records, checking the CRC first.

        The CRC is checked before any record is read so a corrupted batch is never edited
        and re-sealed with a fresh, valid CRC.
        """
        body = self._body
        start = self._offset + HEADER_SIZE
        end = self._offset + self._size
        if body is None:
            if not self.crc_is_valid():
                raise CodecError("record batch CRC mismatch")
            if self.compression == NONE:
                self._body = body = self._data
            elif self.record_count == 0:
                # Like Java, an empty batch's payload is never decompressed (there may be none).
                self._body = body = b""
            else:
                self._body = body = decompress(
                    self.compression, memoryview(self._data)[start:end], self.max_decompressed
                )
        if body is self._data:
            return body, start, end
        return body, 0, len(body)

    def decompress(self) -> None:
        """Check the CRC and decompress the records now; later reads reuse the result.

        Reading records does this on first access anyway; calling it first lets a caller time
        decompression apart from parsing, or run it in a worker thread.
        """
        self.records_section()

    @property
    def parsed(self) -> bool:
        """Have the records been read into `Record` objects (`records`)?"""
        return self._records is not None

    def replace_records(self, payload: bytes) -> None:
        """Make `payload`, the uncompressed wire form of the same number of records, the
        batch's records (for `protocol.stamping`, which rewrites them all in one pass).

        The batch is then modified: `to_bytes` compresses and seals the new records, and
        `records` reads them.
        """
        if self._records is not None:
            raise ValueError("records were read already: edit them instead")
        if self.is_control:
            raise ReadOnlyRecordError("records of a control batch cannot be changed")
        self._body = payload
        self._replaced = True

    @property
    def records(self) -> list[Record]:
        """The records, decompressed and parsed on first access.

        Do not add to or remove from this list; use `remove_records`.
        """
        records = self._records
        if records is None:
            buf, start, end = self.records_section()
            self._records = records = _parse(
                buf, start, end, self.record_count, self.is_control, True
            )
        return records

    def iter_headers(self) -> Iterator[list[Header]]:
        """Each record's headers, in order, without building Record objects.

        The read-only fast path: a chain that only inspects headers pays for a scan, not for
        objects. Reflects edits once `records` has been used.
        """
        if self._records is not None:
            return (rec.headers for rec in self._records)
        buf, start, end = self.records_section()
        return iter(_parse(buf, start, end, self.record_count, self.is_control, False))

    @property
    def modified(self) -> bool:
        if self._removed or self._replaced:
            return True
        records = self._records
        return records is not None and any(rec.modified for rec in records)

    def remove_records(self, predicate: Callable[[Record], bool]) -> int:
        """Drop the records for which `predicate` is true; return how many were dropped.

        For the fetch path. Base offset and lastOffsetDelta stay, so the remaining offsets keep
        their meaning and consumers step over the gap, as after log compaction. A batch emptied
        this way stays as a header with no records (again as compaction leaves it). Not for the
        produce path: the broker checks an idempotent producer's sequence against the count.
        """
        if self.is_control:
            raise ReadOnlyRecordError("records of a control batch cannot be removed")
        records = self.records
        kept = [rec for rec in records if not predicate(rec)]
        dropped = len(records) - len(kept)
        if dropped:
            records[:] = kept
            self.record_count -= dropped
            self._removed = True
        return dropped

    def to_bytes(self, *, level: int | None = None, codec: int | None = None) -> bytes:
        """The batch on the wire: the original bytes when nothing changed, else re-encoded.

        Re-encoding keeps the codec (unless `codec` names another one: consumers read any,
        and no record, offset or sequence moves) and every header field, and recomputes
        batchLength and CRC.
        """
        parts = self._reencode(level, codec)
        return self.raw if parts is None else b"".join(parts)

    def _wire(self, out: _Parts) -> None:
        """Append the batch to `out` as pieces for one final join: no intermediate copies."""
        parts = self._reencode(None)
        if parts is None:
            out.append(memoryview(self._data)[self._offset : self._offset + self._size])
        else:
            out += parts

    def _reencode(self, level: int | None, codec: int | None = None) -> list[bytes] | None:
        """The re-encoded batch as pieces to join, or None when it is unchanged."""
        records = self._records
        if records is None:
            if not self._replaced:
                return None
            body = self._body
            if body is None:  # replace_records sets it with the flag
                raise AssertionError("a replaced batch without its records")
            parts = [body]
            changed = True
            count = self.record_count
        else:
            if len(records) != self.record_count:
                raise ValueError("records list was changed directly; use remove_records")
            parts = []
            changed = _encode_parsed(records, parts) or self._replaced
            if not changed and not self._removed:
                return None
            count = len(records)
        if changed and self.is_control:
            raise ReadOnlyRecordError("records of a control batch cannot be changed")
        attributes = self.attributes
        if codec is not None:
            attributes = (attributes & ~_CODEC_MASK) | codec
        codec = attributes & _CODEC_MASK
        if not count:
            # Like the log cleaner's empty batches: no payload, so no codec to apply.
            attributes &= ~_CODEC_MASK
            payload = b""
        elif codec == NONE:
            payload = b"".join(parts)
        else:
            payload = compress(codec, b"".join(parts), level)
        return _seal(
            self.base_offset,
            self.partition_leader_epoch,
            _CRC_PART.pack(
                attributes,
                self.last_offset_delta,
                self.base_timestamp,
                self.max_timestamp,
                self.producer_id,
                self.producer_epoch,
                self.base_sequence,
                count,
            ),
            payload,
        )


def _seal(base_offset: int, leader_epoch: int, crc_part: bytes, payload: bytes
          ) -> list[bytes]:
    """The pieces of a batch: prefix (with length and CRC), CRC-covered header, payload."""
    crc = crc32c(payload, crc32c(crc_part))
    length = _MIN_BATCH_LENGTH + len(payload)
    return [_PREFIX.pack(base_offset, length, leader_epoch, 2, crc), crc_part, payload]


def with_base_sequence(raw: bytes | memoryview, base_sequence: int) -> bytes:
    """The same magic 2 batch bytes under another base sequence, the CRC resealed; the records
    are as they were (a compressed batch is not recompressed)."""
    data = bytearray(raw)
    data[_BASE_SEQUENCE_AT:_BASE_SEQUENCE_AT + 4] = base_sequence.to_bytes(4, "big", signed=True)
    data[_CRC_AT:_CRC_AT + 4] = crc32c(memoryview(data)[_CRC_START:]).to_bytes(4, "big")
    return bytes(data)


# --- framing --------------------------------------------------------------------------------------


def split_batches(
    data: Buffer, *, max_decompressed: int = DEFAULT_MAX_DECOMPRESSED
) -> list[RecordBatch | bytes]:
    """Cut a Produce/Fetch `records` field into batches.

    Magic-2 batches become `RecordBatch` views. Legacy (magic 0/1) message sets and a trailing
    partial batch, which Fetch responses may end with, come back as raw bytes, untouched.
    """
    if type(data) is not bytes:
        data = bytes(data)  # one copy up front; batches are then views into it
    parts: list[RecordBatch | bytes] = []
    n = len(data)
    pos = 0
    legacy_start = -1
    while pos < n:
        if n - pos < 17:  # not even the magic byte: a partial batch
            break
        (length,) = struct.unpack_from(">i", data, pos + 8)
        if length < _LEGACY_MIN_LENGTH:
            raise CodecError("record batch length out of range")
        size = _LENGTH_OVERHEAD + length
        if size > n - pos:
            break
        magic = data[pos + 16]
        if magic == 2:
            if legacy_start >= 0:
                parts.append(data[legacy_start:pos])
                legacy_start = -1
            parts.append(RecordBatch(data, pos, size, max_decompressed=max_decompressed))
        elif magic < 2:
            if legacy_start < 0:
                legacy_start = pos
        else:
            raise CodecError(f"unknown record batch magic {magic}")
        pos += size
    if legacy_start >= 0:
        parts.append(data[legacy_start:pos])
    if pos < n:
        parts.append(data[pos:])
    return parts


def join_batches(parts: Iterable[RecordBatch | bytes]) -> bytes:
    """The `records` field for a list from `split_batches`, after any edits."""
    out: _Parts = []
    for part in parts:
        if isinstance(part, RecordBatch):
            part._wire(out)
        else:
            out.append(part)
    return b"".join(out)


# --- building -------------------------------------------------------------------------------------


def build_batch(
    records: Iterable[Record],
    *,
    compression: int = NONE,
    base_offset: int = 0,
    base_timestamp: int | None = None,
    max_timestamp: int | None = None,
    partition_leader_epoch: int = -1,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    timestamp_type: int = 0,
    assign_offsets: bool = True,
    last_offset_delta: int | None = None,
    level: int | None = None,
) -> bytes:
    """Encode a batch from scratch, as a producer would.

    With `assign_offsets` each record gets offset delta = its position; otherwise the records'
    own `offset_delta` values are kept (to build batches with gaps, as after compaction).
    `base_timestamp` defaults to now; `max_timestamp` and `last_offset_delta` default to what
    the records imply.
    """
    records = list(records)
    if base_timestamp is None:
        base_timestamp = time.time_ns() // 1_000_000
    encoded = []
    max_delta = -1
    max_ts_delta = 0
    for i, rec in enumerate(records):
        attributes, ts, off, key, value = rec._fields or rec._load_fields()
        if assign_offsets:
            off = i
        max_delta = max(max_delta, off)
        max_ts_delta = max(max_ts_delta, ts)
        copy = Record(
            key, value, rec.headers, timestamp_delta=ts, offset_delta=off, attributes=attributes
        )
        encoded.append(copy._encode())
    if last_offset_delta is None:
        last_offset_delta = max(max_delta, 0)
    if max_timestamp is None:
        max_timestamp = base_timestamp + max_ts_delta
    attributes = compression & _CODEC_MASK
    attributes |= _TIMESTAMP_TYPE if timestamp_type else 0
    attributes |= _TRANSACTIONAL if is_transactional else 0
    attributes |= _CONTROL if is_control else 0
    payload = b"".join(encoded)
    if compression != NONE:
        payload = compress(compression, payload, level)
    crc_part = _CRC_PART.pack(
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    )
    return b"".join(_seal(base_offset, partition_leader_epoch, crc_part, payload))
