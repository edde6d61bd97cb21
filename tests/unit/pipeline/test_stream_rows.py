"""The operator's emitted frames carry every column of the schema, a missing or all-null one as
typed nulls: Arrow keeps the schema's types, and PySpark's concatenation of a task's frames
does not check those nulls one by one (`pipeline.stream.rows.with_all_columns`)."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest

from pipeline.stream.rows import (
    EMITTED_COLUMNS,
    EMITTED_TYPES,
    HELD_COLUMNS,
    emit,
    with_all_columns,
)

ARROW = {"string": pa.string(), "long": pa.int64(), "int": pa.int32()}


def test_missing_and_all_null_columns_become_typed_nulls():
    df = pd.DataFrame({"topic": ["t", "t"], "offset": [1, 2], "consumer": [None, None],
                       "group": ["g", None]})

    out = with_all_columns(df)

    assert list(out.columns) == EMITTED_COLUMNS
    assert out["consumer"].dtype == "string" and out["consumer"].isna().all()
    assert out["held_hops"].dtype == "Int64" and out["held_hops"].isna().all()
    assert out["trace_id"].dtype == "string"
    assert out["group"].tolist() == ["g", None] and out["group"].dtype == object  # kept
    assert out["offset"].tolist() == [1, 2]


@pytest.mark.filterwarnings("ignore::FutureWarning")  # pandas on the empty frame, as in PySpark
def test_frames_concatenated_as_pyspark_does_keep_the_schema_in_arrow():
    hops = with_all_columns(pd.DataFrame({"trace_id": ["a" * 32], "topic": ["t"],
                                          "offset": [7], "timestamp_ms": [5]}))
    reads = with_all_columns(pd.DataFrame({"topic": ["t"], "offset": [8],
                                           "transit_ms": pd.array([3], dtype="Int64")}))
    empty = pd.DataFrame(dict.fromkeys(EMITTED_COLUMNS), index=[])

    merged = pd.concat([hops, reads, empty], ignore_index=True)
    arrays = {c: pa.Array.from_pandas(merged[c], type=ARROW[EMITTED_TYPES[c]])
              for c in ("trace_id", "timestamp_ms", "transit_ms", "consumer")}

    assert arrays["trace_id"].to_pylist() == ["a" * 32, None]
    assert arrays["timestamp_ms"].to_pylist() == [5, None]
    assert arrays["transit_ms"].to_pylist() == [None, 3]
    assert arrays["consumer"].to_pylist() == [None, None]


def test_emit_takes_the_held_columns_and_stamps_status_and_watermark():
    """`emit`: the held columns only (a column beyond them comes out null), the status and the
    watermark in every row; an empty frame's status is typed nulls, as any all-null text."""
    held = pd.DataFrame({c: [None] for c in HELD_COLUMNS})
    held["trace_id"], held["offset"], held["event_ms"] = ["a" * 32], [7], [5]
    held["transit_ms"] = pd.array([3], dtype="Int64")  # not a held column

    out = emit(held, "final", 123)

    assert list(out.columns) == EMITTED_COLUMNS
    assert out["status"].tolist() == ["final"] and out["watermark_ms"].tolist() == [123]
    assert out["watermark_ms"].dtype == "int64"
    assert out["trace_id"].tolist() == ["a" * 32] and out["offset"].tolist() == [7]
    assert out["transit_ms"].dtype == "Int64" and out["transit_ms"].isna().all()
    assert out["consumer"].dtype == "string"
    empty = emit(held.iloc[:0], "late", 1)
    assert list(empty.columns) == EMITTED_COLUMNS and empty["status"].dtype == "string"
