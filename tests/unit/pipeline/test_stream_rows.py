"""The operator's emitted frames carry every column of the schema, a missing or all-null one as
typed nulls: Arrow keeps the schema's types, and PySpark's concatenation of a task's frames
does not check those nulls one by one (`pipeline.stream.rows.with_all_columns`)."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest

from pipeline.stream.rows import EMITTED_COLUMNS, EMITTED_TYPES, with_all_columns

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
