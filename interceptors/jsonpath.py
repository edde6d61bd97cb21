"""Dotted paths into JSON documents (``order.customer.id``, ``items.0.sku``).

Used by `header_from` / `header_to`. A segment that is all digits indexes a list when the
value at that point is a list, and is a plain key in an object. Keys containing dots cannot be
addressed.
"""

from __future__ import annotations

from typing import Any

_ABSENT: Any = object()


def split_path(path: str) -> tuple[str, ...]:
    segments = tuple(path.split("."))
    if not path or any(not s for s in segments):
        raise ValueError(f"invalid field path {path!r}: empty segment")
    return segments


def _step(node: Any, seg: str) -> Any:
    if isinstance(node, dict):
        return node.get(seg, _ABSENT)
    if isinstance(node, list) and seg.isdigit():
        i = int(seg)
        return node[i] if i < len(node) else _ABSENT
    return _ABSENT


def get(doc: Any, path: tuple[str, ...]) -> tuple[bool, Any]:
    """(found, value) at `path`."""
    node = doc
    for seg in path:
        node = _step(node, seg)
        if node is _ABSENT:
            return False, None
    return True, node


def pop(doc: Any, path: tuple[str, ...]) -> tuple[bool, Any]:
    """Remove and return (found, value) at `path`."""
    found, parent = get(doc, path[:-1])
    last = path[-1]
    if not found:
        return False, None
    if isinstance(parent, dict) and last in parent:
        return True, parent.pop(last)
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return True, parent.pop(int(last))
    return False, None


def put(doc: Any, path: tuple[str, ...], value: Any) -> None:
    """Set `path` to `value`, creating objects on the way; ValueError if the way is blocked."""
    node = doc
    for seg in path[:-1]:
        nxt = _step(node, seg)
        if nxt is _ABSENT:
            if not isinstance(node, dict):
                raise ValueError(f"cannot create {seg!r} inside a {type(node).__name__}")
            nxt = node[seg] = {}
        node = nxt
    last = path[-1]
    if isinstance(node, dict):
        node[last] = value
    elif isinstance(node, list) and last.isdigit() and int(last) < len(node):
        node[int(last)] = value
    else:
        raise ValueError(f"cannot set {last!r} inside a {type(node).__name__}")
