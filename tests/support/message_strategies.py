"""Hypothesis strategies for the generated messages, derived from the same spec model.

Development-time only (tests, fuzzing, the differential test): like the rest of
``protocol.codegen`` it is never imported by the proxy, and it needs ``hypothesis``.

A strategy for ``(message, version)`` fills every field present in that version with any value
the wire can carry and leaves every other field at its default, so that
``decode(encode(m)) == m`` must hold exactly.
"""

from __future__ import annotations

import importlib
from functools import cache
from typing import Any

from hypothesis import strategies as st

from protocol.codegen.model import FieldLayout, Message, StructLayout
from proxy.devtools.codegen import load_messages

_INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
}


def module_for(msg: Message) -> Any:
    return importlib.import_module(f"protocol.messages.{msg.module_name}")


def _scalar(kind: str) -> st.SearchStrategy[Any]:
    if kind in _INT_RANGES:
        lo, hi = _INT_RANGES[kind]
        return st.one_of(st.sampled_from([lo, -1, 0, 1, hi] if lo < 0 else [0, 1, hi]),
                         st.integers(lo, hi))
    if kind == "bool":
        return st.booleans()
    if kind == "float64":
        return st.floats(allow_nan=False, allow_infinity=False)
    if kind == "uuid":
        return st.binary(min_size=16, max_size=16)
    if kind == "string":
        # mostly short; sometimes long enough to need a multi-byte length varint
        return st.text(max_size=8) | st.text(min_size=120, max_size=150)
    if kind == "bytes":
        return st.binary(max_size=16) | st.binary(min_size=127, max_size=140)
    if kind == "records":
        return st.binary(max_size=64)
    raise ValueError(kind)


def _field(f: FieldLayout, module: Any, unknown_tags: bool) -> st.SearchStrategy[Any]:
    if f.kind == "array":
        assert f.element is not None
        if f.element == "struct":
            assert f.struct is not None
            element = _struct(f.struct, module, unknown_tags)
        else:
            element = _scalar(f.element)
        value: st.SearchStrategy[Any] = st.lists(element, max_size=3)
    elif f.kind == "struct":
        assert f.struct is not None
        value = _struct(f.struct, module, unknown_tags)
        if f.tag is not None:
            # an all-default tagged struct is not written, so it decodes as None
            default = getattr(module, f.struct.name)()
            value = st.none() | value.map(lambda x: None if x == default else x)
    else:
        value = _scalar(f.kind)
    if f.nullable:
        value = st.none() | value
    return value


def _unknown_tags(layout: StructLayout) -> st.SearchStrategy[dict[int, bytes] | None]:
    known = set(layout.class_tags)
    tags = st.integers(0, 200).filter(lambda t: t not in known)
    return st.none() | st.dictionaries(tags, st.binary(max_size=6), max_size=2)


def _struct(layout: StructLayout, module: Any, unknown_tags: bool) -> st.SearchStrategy[Any]:
    cls = getattr(module, layout.name)
    kwargs = {f.cf.py_name: _field(f, module, unknown_tags) for f in layout.fields}
    if layout.flexible and unknown_tags:
        kwargs["unknown_tagged_fields"] = _unknown_tags(layout)
    return st.builds(cls, **kwargs)


@cache
def message_strategy(name: str, version: int, unknown_tags: bool = True) -> st.SearchStrategy[Any]:
    """Messages of class ``name`` (e.g. ``"MetadataResponse"``) valid in ``version``."""
    msg = load_messages()[name]
    return _struct(msg.layout(version), module_for(msg), unknown_tags)


def all_message_versions() -> list[tuple[str, int]]:
    """Every ``(message name, version)`` the generated codecs support."""
    return [(name, v) for name, msg in load_messages().items() for v in msg.versions]


_SAMPLE_SCALARS: dict[str, Any] = {
    "int8": 7,
    "int16": 300,
    "int32": 70000,
    "int64": 2**40 + 3,
    "uint16": 65000,
    "uint32": 2**31 + 5,
    "bool": True,
    "float64": 2.5,
    "uuid": bytes(range(1, 17)),
    "string": "sample",
    "bytes": b"\x00bytes",
    "records": b"records!",
}


def _sample_struct(layout: StructLayout, module: Any, unknown_tags: bool) -> Any:
    kwargs: dict[str, Any] = {}
    for f in layout.fields:
        if f.kind == "array":
            assert f.element is not None
            if f.element == "struct":
                assert f.struct is not None
                kwargs[f.cf.py_name] = [_sample_struct(f.struct, module, unknown_tags)]
            else:
                kwargs[f.cf.py_name] = [_SAMPLE_SCALARS[f.element]]
        elif f.kind == "struct":
            assert f.struct is not None
            kwargs[f.cf.py_name] = _sample_struct(f.struct, module, unknown_tags)
        else:
            kwargs[f.cf.py_name] = _SAMPLE_SCALARS[f.kind]
    if layout.flexible and unknown_tags:
        kwargs["unknown_tagged_fields"] = {max(layout.class_tags, default=0) + 10: b"unknown"}
    return getattr(module, layout.name)(**kwargs)


def sample_message(name: str, version: int, unknown_tags: bool = True) -> Any:
    """A small deterministic message with every field of ``version`` set to a non-default
    value and one element in every array: a seed for fuzzing and hostile-input tests."""
    msg = load_messages()[name]
    return _sample_struct(msg.layout(version), module_for(msg), unknown_tags)
