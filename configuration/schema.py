"""Turn plain YAML data into config dataclasses, with errors that name the YAML path.

Each interceptor declares its settings as a dataclass; this module checks a mapping against
it: unknown keys, missing required keys and wrong types are all reported, in one `ConfigError`
whose messages start with the path of the bad key (``interceptors.produce[2].header:
required``).

Supported field types: str, int, float, bool, `Any`, ``X | None``, ``Literal[...]``,
``list[X]``, ``dict[str, X]`` and nested dataclasses. A field whose Python name would clash
with a keyword is spelled with a trailing underscore (``from_`` is the YAML key ``from``), or
names its key with ``field(metadata={"key": "..."})``. Checks that involve the values go in
``__post_init__`` and raise `InvalidConfig(field, message)`.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union

import yaml

from configuration.errors import ConfigError, ErrorCollector, InvalidConfig

__all__ = ["build_config", "yaml_key"]


def yaml_key(f: dataclasses.Field[Any]) -> str:
    key: str = f.metadata.get("key", f.name.rstrip("_"))
    return key


# How an error names a YAML value's type; bool before int, since a bool is an int.
_KINDS = ((bool, "a boolean"), (int, "an integer"), (float, "a number"), (str, "a string"),
          (list, "a list"), (dict, "a mapping"))


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    for kind, name in _KINDS:
        if isinstance(value, kind):
            return name
    return type(value).__name__


def build_config(cls: type, data: Any, path: str, also_known: tuple[str, ...] = ()) -> Any:
    """An instance of dataclass `cls` from the mapping `data` found at `path`.

    Every unknown key, missing required key and wrong value of the mapping is reported (one
    `ConfigError` listing them all), not only the first. `also_known` names keys the caller
    handles itself (listed in unknown-key errors).
    """
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping, got {_kind(data)}")
    hints = typing.get_type_hints(cls)
    fields = {yaml_key(f): f for f in dataclasses.fields(cls) if f.init}
    errors = ErrorCollector()
    known = ", ".join([*also_known, *fields]) or "none"
    for key in data:
        if key not in fields:
            errors.add(f"{path}.{key}: unknown key (known: {known})")
    kwargs = {}
    for key, f in fields.items():
        if key in data:
            kwargs[f.name] = errors.attempt(_convert, hints[f.name], data[key], f"{path}.{key}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            errors.add(f"{path}.{key}: required")
    errors.check()  # checks across values (__post_init__) only see well-typed ones
    try:
        return cls(**kwargs)
    except InvalidConfig as exc:
        raise exc.at(path) from None


def _convert(hint: Any, value: Any, path: str) -> Any:
    if hint is Any or hint is object:
        return value
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is Union or origin is types.UnionType:
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        if len(options) == 1:
            return _convert(options[0], value, path)
        failures = []
        for option in options:
            try:
                return _convert(option, value, path)
            except ConfigError as exc:
                failures.append(exc)
        raise failures[0]
    if origin is Literal:
        if value not in args or isinstance(value, bool) != any(isinstance(a, bool) for a in args):
            choices = ", ".join(str(a) for a in args)
            raise ConfigError(f"{path}: expected one of {choices}, got {value!r}")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{path}: expected a list, got {_kind(value)}")
        (item,) = args or (Any,)
        errors = ErrorCollector()
        items = [errors.attempt(_convert, item, v, f"{path}[{i}]") for i, v in enumerate(value)]
        errors.check()
        return items
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected a mapping, got {_kind(value)}")
        _, item = args or (str, Any)
        errors = ErrorCollector()
        out = {}
        for k, v in value.items():
            if isinstance(k, str):
                out[k] = errors.attempt(_convert, item, v, f"{path}.{k}")
            else:
                errors.add(f"{path}: keys must be strings, got {k!r}")
        errors.check()
        return out
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return build_config(hint, value, path)
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{path}: expected true or false, got {_kind(value)}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{path}: expected an integer, got {_kind(value)}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{path}: expected a number, got {_kind(value)}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{path}: expected a string, got {_kind(value)}")
        return value
    if hint is type(None):
        if value is not None:
            raise ConfigError(f"{path}: expected null, got {_kind(value)}")
        return None
    raise TypeError(f"{path}: unsupported config field type {hint!r}")


def read_yaml(path: str | Path) -> Any:
    """A YAML file's document; errors name the file (read, then parse: both can fail)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
