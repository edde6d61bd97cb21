"""The stateful operator's rows: what goes in (a hop, an observation, a partition clock's tick)
and what comes out (`EMITTED_SCHEMA`), with their kinds and statuses. The sources shape them,
the hold emits them and the micro-batch reads them, so they are stated once, here."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from pipeline.hops import HOP_COLUMNS

if TYPE_CHECKING:
    import pandas as pd  # type: ignore[import-untyped]  # pandas ships no types: frames are Any

# Statuses of what a partition's clock emits: a reader's first fetch of a record (with its
# transit and lag), a later fetch of it (its consumer only), an observation without `h`.
TRANSIT, DUPLICATE, NO_RECORD_TIME = "transit", "duplicate", "no_record_time"
FETCH, CLOCK = "fetch", "clock"  # kinds of the operator's rows, besides `hop`
PARTITION_KEY = "\x00"  # starts every partition clock's key; no trace id (hex) can
HELD_COLUMNS = [c for c in HOP_COLUMNS if c != "event_time"] + [
    "kind", "consumer", "consumer_host", "group", "record_ms"]
EMITTED_SCHEMA = (
    "trace_id string, parent_span string, topic string, partition int, offset long, "
    "timestamp_ms long, timestamp_type string, herald_time_ms long, client_id string, "
    "principal string, origin string, message_id string, size long, parents string, "
    "parents_lost long, lost_reasons string, source_host string, "
    "event_ms long, kind string, consumer string, consumer_host string, `group` string, "
    "record_ms long, "
    "transit_ms long, lag_ms long, status string, watermark_ms long, "
    "bucket int, held_hops long, held_flows long, tombstones long")
EMITTED_TYPES = {c.split()[0].strip("`"): c.split()[1] for c in EMITTED_SCHEMA.split(", ")}
EMITTED_COLUMNS = list(EMITTED_TYPES)
STATE_SCHEMA = "blob binary"  # a bucket (`flow_hold.Bucket`) or a partition's clock, pickled
STATE = "state"  # one row per bucket call: the bucket's size after it

PARENTS_SCHEMA = "array<struct<topic:string,partition:int,offset:long>>"
JSON_COLUMNS = {"parents": PARENTS_SCHEMA, "lost_reasons": "array<string>"}  # arrays held as JSON


def emit(df: pd.DataFrame, status: str, watermark: int) -> pd.DataFrame:
    """Held rows `df` as emitted rows of `status`."""
    return _emitted(df, HELD_COLUMNS, {"status": status, "watermark_ms": watermark})


def _nulls(n: int, kind: str) -> pd.api.extensions.ExtensionArray:
    """`n` nulls of a schema type: a nullable integer or string array, never Python objects.
    PySpark concatenates the frames a task emits, and pandas checks an all-null object column
    of a concatenation value by value; in the stream's profile that check was the largest
    single cost of the operator's output. Typed nulls are checked once per column. Built from
    their masks and values directly: `pd.array([None] * n, dtype=...)` infers each value."""
    import numpy as np
    import pandas as pd

    if kind in ("long", "int"):
        return pd.arrays.IntegerArray(np.zeros(n, dtype=np.int64), np.ones(n, dtype=bool))
    return pd.arrays.StringArray(np.full(n, pd.NA, dtype=object))


def with_all_columns(df: pd.DataFrame) -> pd.DataFrame:
    """`df` with every column of `EMITTED_SCHEMA`, in its order; a missing or all-null one
    is typed nulls (`_nulls`: Arrow keeps the schema's type, the concatenation stays fast)."""
    return _emitted(df, df.columns, {})


def _emitted(df: pd.DataFrame, kept: Iterable[str], constants: dict[str, str | int]
             ) -> pd.DataFrame:
    """The emitted frame of `df`'s columns in `kept`, and `constants` in every row, built
    at once and sharing `df`'s arrays (every caller passes a frame of its own, or emits it
    as it is): adding the missing columns to `df` one by one cost a block insertion each,
    about 10 ms a call with the 25 a state row lacks, and the hold makes a few calls per
    bucket and micro-batch."""
    import numpy as np
    import pandas as pd

    n = len(df)
    dtypes = df.dtypes
    have = set(kept) & set(dtypes.index)
    columns = {}
    for name, kind in EMITTED_TYPES.items():
        if name in constants:  # an empty frame's text column is all null, as below
            value = constants[name]
            columns[name] = (np.full(n, value, dtype=np.int64) if isinstance(value, int)
                             else np.full(n, value, dtype=object) if n else _nulls(0, kind))
        elif name not in have:
            columns[name] = _nulls(n, kind)
        else:
            column = df[name]
            if column.dtype == object and not column.notna().any():
                columns[name] = _nulls(n, kind)
            else:
                columns[name] = column.array
    return pd.DataFrame(columns, index=df.index, copy=False)
