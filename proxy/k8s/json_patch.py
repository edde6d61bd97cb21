"""The JSON Patch (RFC 6902) that turns one JSON document into another.

The admission webhook injects by running the injector on a copy of the pod and answering
with the difference, so there is one injection and the patch can never disagree with it.
Mappings are compared key by key; a list whose length changed is replaced whole, because
index-wise operations on a list that grew at its front (the native sidecar is the first init
container) would be longer and no clearer. The API server applies the patch to exactly the
object it sent, so a replaced list loses nothing another webhook added.
"""

from __future__ import annotations

from typing import Any


def pointer(path: list[str | int]) -> str:
    """An RFC 6901 JSON Pointer: `~` and `/` inside a key escaped (`herald.io/injected`)."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def diff(old: Any, new: Any) -> list[dict[str, Any]]:
    """The operations that make `old` equal to `new`; [] when they already are."""
    ops: list[dict[str, Any]] = []
    _diff(old, new, [], ops)
    return ops


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON: true is not 1, though Python's == says it is. Mappings and lists of the
    same length never get here: they are compared item by item."""
    return type(a) is type(b) and a == b


def _diff(old: Any, new: Any, path: list[str | int], ops: list[dict[str, Any]]) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in old:
            if key not in new:
                ops.append({"op": "remove", "path": pointer([*path, key])})
        for key, value in new.items():
            if key not in old:
                ops.append({"op": "add", "path": pointer([*path, key]), "value": value})
            else:
                _diff(old[key], value, [*path, key], ops)
        return
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            _diff(a, b, [*path, i], ops)
        return
    if not _same(old, new):
        ops.append({"op": "replace", "path": pointer(path), "value": new})
