"""The JSON Patch between two documents, applied by an independent JSON Patch library."""

from __future__ import annotations

from typing import Any

import jsonpatch
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.k8s.json_patch import diff, pointer

_KEYS = st.sampled_from(["a", "b", "herald.io/injected", "x~y", "", "0", "kubectl/~1"])
_SCALARS = st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=3)
_JSON = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(_KEYS, inner, max_size=4), max_leaves=12)


@settings(max_examples=400, deadline=None)
@given(_JSON, _JSON)
def test_the_patch_turns_one_document_into_the_other(old: Any, new: Any) -> None:
    ops = diff(old, new)
    result = jsonpatch.JsonPatch(ops).apply(old)
    assert result == new and _types(result) == _types(new)
    assert (ops == []) == (_types(old) == _types(new) and old == new)


def _types(value: Any) -> Any:
    """The value with each scalar's type beside it: 1 and true are different JSON."""
    if isinstance(value, dict):
        return {k: _types(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_types(v) for v in value]
    return (type(value).__name__, value)


def test_keys_with_slashes_and_tildes_are_escaped() -> None:
    assert pointer(["metadata", "annotations", "herald.io/injected"]) == (
        "/metadata/annotations/herald.io~1injected")
    assert pointer(["a~b", 0]) == "/a~0b/0"
    assert diff({"a": {"k/1": 1}}, {"a": {"k/1": True}}) == [
        {"op": "replace", "path": "/a/k~11", "value": True}]
