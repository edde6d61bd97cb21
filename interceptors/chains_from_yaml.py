"""Build the produce and fetch chains from the ``interceptors`` section of the YAML config.

Input is the plain data `yaml.safe_load` gives::

    {"produce": [{"type": "trace_context"}, {"type": "audit", "forged": "reject"}],
     "fetch": [{"type": "drop_headers", "headers": ["internal.debug"]}]}

Every member takes these common keys besides its own (see docs/interceptors.md):

* ``type`` (required): a built-in or plugin interceptor name;
* ``name``: the member's name in metrics and errors (default: the type, then ``type#2``...);
* ``topics``: where it applies, a list of names and ``prefix:`` / ``glob:`` / ``regex:``
  patterns (default: every topic);
* ``client_ids``: the same, for client ids (default: every client);
* ``on_error``: ``reject`` or ``pass`` on the produce path, ``pass`` or ``drop`` on the fetch
  path (default: the interceptor's own, e.g. ``reject`` for audit and policies, else
  ``pass``);
* ``shadow``: true to evaluate and count the member without applying anything it does
  (default false; a reload without it promotes the member).

Every error is reported, each naming the path of the bad key, e.g.
``interceptors.produce[2].header: required``, in one `ConfigError`.
"""

from __future__ import annotations

from typing import Any

from configuration.errors import ConfigError, ErrorCollector, InvalidConfig
from configuration.node import Node
from configuration.schema import build_config
from interceptors.api import FETCH, ON_ERROR, PRODUCE, Interceptor, Stamps
from interceptors.chain import ChainMember, Chains, FetchChain, ProduceChain
from interceptors.context import ProxyInfo
from interceptors.patterns import NameMatcher, matcher
from interceptors.plugins import PluginError, Registry
from interceptors.services import SERVICES

__all__ = ["COMMON_KEYS", "ConfigError", "build_chains"]

COMMON_KEYS = ("type", "name", "topics", "client_ids", "on_error", "shadow")


def build_chains(
    spec: Any,
    env: ProxyInfo | None = None,
    *,
    registry: Registry | None = None,
    path: str = "interceptors",
) -> Chains:
    """Validate `spec` and build both chains; raise one `ConfigError` listing every mistake.

    Each member is checked on its own, so a bad one does not hide the mistakes of the next.
    """
    if spec is None:
        spec = {}
    if not isinstance(spec, dict):
        raise ConfigError(f"{path}: expected a mapping with 'produce' and/or 'fetch'")
    errors = ErrorCollector()
    for key in spec:
        if key not in (PRODUCE, FETCH):
            errors.add(f"{path}.{key}: unknown key (known: produce, fetch)")
    env = env if env is not None else ProxyInfo()
    registry = registry if registry is not None else Registry()
    produce = errors.attempt(_members, spec.get(PRODUCE), PRODUCE, f"{path}.{PRODUCE}", env,
                             registry)
    fetch = errors.attempt(_members, spec.get(FETCH), FETCH, f"{path}.{FETCH}", env, registry)
    errors.check()
    assert produce is not None and fetch is not None
    added = _fetch_members(produce)
    taken = {m.name for m in fetch}
    for m in added:
        if m.name in taken:
            errors.add(f"{path}.{FETCH}: the name {m.name!r} is the member "
                       f"{m.name.removesuffix('.fetched')!r} of {path}.{PRODUCE} adds to "
                       "this chain; name the fetch member otherwise")
    errors.check()
    return Chains(ProduceChain(produce), FetchChain(fetch + added))


def _fetch_members(produce: list[ChainMember]) -> list[ChainMember]:
    """The fetch-chain members produce members asked for (`Interceptor.fetch_member`), after
    the configured ones (they then see what clients really receive), each named after its
    maker (``trace_context.fetched``), for every topic and client, and live even when its
    maker is in shadow (it changes nothing a client sees)."""
    return [ChainMember(f"{m.name}.fetched", m.interceptor.fetch_member, type=m.type)
            for m in produce if m.interceptor.fetch_member is not None]


def _members(
    entries: Any, chain: str, path: str, env: ProxyInfo, registry: Registry
) -> list[ChainMember]:
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise ConfigError(f"{path}: expected a list of interceptors")
    errors = ErrorCollector()
    members: list[ChainMember] = []
    names: dict[str, int] = {}
    for i, entry in enumerate(entries):
        member = errors.attempt(_member, entry, chain, f"{path}[{i}]", env, registry)
        if member is None:
            continue
        if member.name in names:
            if "name" in entry:
                errors.add(f"{path}[{i}].name: {member.name!r} is already used by "
                           f"{path}[{names[member.name]}]")
                continue
            n = 2
            while f"{member.name}#{n}" in names:
                n += 1
            member.name = f"{member.name}#{n}"
        names[member.name] = i
        members.append(member)
    errors.check()
    return members


def _string(node: Node, key: str) -> str:
    value = node.get(key)
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{node.key_path(key)}: expected a non-empty string")
    return value


def _patterns(node: Node, key: str) -> NameMatcher | None:
    if key not in node.data:
        return None
    value = node.data[key]  # an explicit null is refused: leave the key out to match all
    path = node.key_path(key)
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{path}: expected a list of names or patterns")
    if not value:
        raise ConfigError(f"{path}: must not be empty (leave it out to match all)")
    try:
        return matcher(value, key)
    except InvalidConfig as exc:
        raise exc.at(node.path) from None


def _member(entry: Any, chain: str, path: str, env: ProxyInfo, registry: Registry) -> ChainMember:
    if not isinstance(entry, dict):
        raise ConfigError(f"{path}: expected a mapping with a 'type' key")
    node = Node(entry, path, ErrorCollector())
    if "type" not in entry:
        raise ConfigError(f"{path}.type: required")
    type_name = _string(node, "type")
    try:
        cls = registry.get(type_name)
    except KeyError:
        known = ", ".join(registry.names())
        raise ConfigError(
            f"{path}.type: unknown interceptor {type_name!r} (known: {known})"
        ) from None
    except PluginError as exc:
        raise ConfigError(f"{path}.type: {exc}") from None
    if chain not in cls.paths:
        (only,) = cls.paths
        raise ConfigError(f"{path}.type: {type_name!r} runs on the {only} path only")
    unknown = set(cls.uses) - SERVICES
    if unknown:
        raise ConfigError(f"{path}.type: {type_name!r} uses unknown services "
                          f"{sorted(unknown)} (known: {', '.join(sorted(SERVICES))})")

    # The common keys and the member's own settings are each checked, then reported together.
    name = node.attempt(_string, node, "name") if "name" in entry else type_name
    topics = node.attempt(_patterns, node, "topics")
    client_ids = node.attempt(_patterns, node, "client_ids")
    allowed = ON_ERROR[chain]
    if "on_error" in entry:
        on_error = entry["on_error"]
        if on_error not in allowed:
            node.errors.add(f"{path}.on_error: expected one of {', '.join(allowed)} on the "
                            f"{chain} path, got {on_error!r}")
    else:
        on_error = cls.default_on_error if cls.default_on_error in allowed else "pass"
    shadow = entry.get("shadow", False)
    if not isinstance(shadow, bool):
        node.errors.add(f"{path}.shadow: expected true or false, got {shadow!r}")
    own = {k: v for k, v in entry.items() if k not in COMMON_KEYS}
    config = node.attempt(build_config, cls.Config, own, path, COMMON_KEYS)
    node.errors.check()
    assert name is not None
    interceptor = _instantiate(cls, config, env, path, type_name)
    return ChainMember(name, interceptor, topics, client_ids, on_error, type_name, shadow)


def _instantiate(
    cls: type[Interceptor], config: Any, env: ProxyInfo, path: str, type_name: str
) -> Interceptor:
    try:
        interceptor = cls(config, env)
    except InvalidConfig as exc:
        raise exc.at(path) from None
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError(
            f"{path}: interceptor {type_name!r} failed to start: {type(exc).__name__}: {exc}"
        ) from exc
    stamps = interceptor.stamps
    if stamps is not None and (not isinstance(stamps, Stamps)
                               or type(interceptor).columns is Interceptor.columns):
        raise ConfigError(f"{path}: interceptor {type_name!r} declares stamps but they are not "
                          "a Stamps, or it does not implement columns()")
    return interceptor
