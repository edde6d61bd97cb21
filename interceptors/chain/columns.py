"""Stamping columns: what a stamping member appends to the records it does not look at.

A stamping member gives its column values once per batch (`Interceptor.columns`); `Columns`
turns them into what the two stamping paths consume: the headers of one record (`row`, for
the append path of `RecordPath`) and the headers of all records of a batch in wire form
(`wire`, for `protocol.stamping.append` on the whole-batch path of `BatchPath`). What it
prepares is kept while the member gives the very same values object, and the wire form of
headers every record shares is kept across batches (`shared_wire`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from interceptors.api import ColumnValue, PerRecord, Stamps
from interceptors.context import RecordContext
from interceptors.headers import Header
from protocol import stamping

_Each = Callable[[RecordContext], bytes | None]
_Many = Callable[[RecordContext, int], Sequence[bytes | None]]
# A piece of the wire form: a run of shared headers encoded, or a per-record column's key and
# bulk maker (None when it has none: the columns are then not `bulk`).
_Piece = bytes | tuple[str, _Many | None]


class Columns:
    """One stamping member's columns for a batch, ready for records (`row`) and for a whole
    batch (`wire`). Kept while the member gives the same values object (`Plan.columns_for`)."""

    __slots__ = ("values", "fixed", "template", "each", "bulk", "pieces")

    def __init__(self, stamps: Stamps, values: Sequence[ColumnValue]) -> None:
        keys = stamps.appends
        if len(values) != len(keys):
            raise ValueError(f"columns() gave {len(values)} values for {len(keys)} keys")
        # A per-record column's slot holds a null header until `row` fills it.
        template: list[Header] = []
        each: list[tuple[int, str, _Each]] = []
        pieces: list[_Piece] = []  # shared runs as wire bytes, per-record columns as (key, maker)
        shared: list[Header] = []
        for pos, (key, value) in enumerate(zip(keys, values, strict=True)):
            if type(value) is PerRecord:
                template.append((key, None))
                each.append((pos, key, value.each))
                if shared:
                    pieces.append(shared_wire(tuple(shared)))
                    shared = []
                pieces.append((key, value.many))
            elif value is None or type(value) is bytes:
                template.append((key, value))
                shared.append((key, value))
            else:
                raise TypeError(f"column {key!r}: expected bytes, None or PerRecord, not "
                                f"{type(value).__name__}")
        if shared:
            pieces.append(shared_wire(tuple(shared)))
        self.values = values
        self.fixed = tuple(template) if not each else None
        self.template = template
        self.each = tuple(each)
        self.bulk = all(v.many is not None for v in values if type(v) is PerRecord)
        self.pieces = tuple(pieces)

    def row(self, ctx: RecordContext) -> Sequence[Header]:
        """The headers one record gets."""
        if self.fixed is not None:
            return self.fixed
        row = self.template[:]
        for pos, key, each in self.each:
            value = each(ctx)
            if value is not None and type(value) is not bytes:
                raise TypeError(f"column {key!r}: value must be bytes or None")
            row[pos] = (key, value)
        return row

    def wire(self, ctx: RecordContext, n: int) -> list[stamping.Column]:
        """The headers of `n` records in wire form, as columns for `stamping.append`."""
        out: list[stamping.Column] = []
        for piece in self.pieces:
            if isinstance(piece, bytes):
                out.append(piece)
                continue
            key, many = piece
            if many is None:  # only `bulk` columns are made in wire form
                raise TypeError(f"column {key!r} has no bulk maker")
            made = many(ctx, n)
            if type(made) is not list:
                made = list(made)
            if len(made) != n:
                raise ValueError(f"column {key!r}: many({n}) gave {len(made)} values")
            out.append(stamping.value_column(key, made))
        return out


_SHARED: dict[tuple[Header, ...], bytes] = {}
_SHARED_LIMIT = 4096


def shared_wire(pairs: tuple[Header, ...]) -> bytes:
    """The wire form of headers all records of a batch get; the same from batch to batch
    (audit's hop headers change once a millisecond), so it is kept."""
    wire = _SHARED.get(pairs)
    if wire is None:
        if len(_SHARED) >= _SHARED_LIMIT:
            _SHARED.clear()
        wire = _SHARED[pairs] = stamping.headers_wire(pairs)
    return wire
