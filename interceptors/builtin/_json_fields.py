"""Shared config and helpers of `header_from` and `header_to`."""

from __future__ import annotations

import json
from typing import Any

from configuration import InvalidConfig
from interceptors.jsonpath import split_path


def check_pairs(fields: list[str], headers: list[str]) -> list[tuple[str, ...]]:
    """Validate the parallel `fields` / `headers` lists; return the split field paths."""
    if not fields:
        raise InvalidConfig("fields", "must not be empty")
    if len(fields) != len(headers):
        raise InvalidConfig("headers", f"needs one header per field ({len(fields)}), "
                                       f"got {len(headers)}")
    paths = []
    for i, f in enumerate(fields):
        try:
            paths.append(split_path(f))
        except ValueError as exc:
            raise InvalidConfig(f"fields[{i}]", str(exc)) from None
    for i, h in enumerate(headers):
        if not h:
            raise InvalidConfig(f"headers[{i}]", "must not be empty")
    return paths


def load_object(data: bytes | None) -> dict[str, object] | None:
    """The JSON object in `data`, or None when `data` is null or not a JSON object."""
    if data is None:
        return None
    try:
        doc = json.loads(data)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def dump(doc: Any) -> bytes:
    """Compact JSON (the original spacing of a rewritten value is not kept)."""
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()
