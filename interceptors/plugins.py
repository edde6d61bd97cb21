"""Third-party interceptors, found through the entry-point group ``herald.interceptors``.

A distribution declares its interceptor classes by type name::

    # pyproject.toml of the plugin
    [project.entry-points."herald.interceptors"]
    tenant_tag = "herald_tenant:TenantTag"

and the configuration uses ``type: tenant_tag`` like any built-in. Plugins are imported only
when the configuration names them, so a broken plugin that nobody uses cannot stop the proxy;
one that is used fails the configuration check with the reason. A plugin cannot replace a
built-in: on a name clash the built-in wins and a warning is logged.
"""

from __future__ import annotations

import dataclasses
import logging
from importlib.metadata import EntryPoint, entry_points

from interceptors.api import BOTH_PATHS, NEEDS, Interceptor
from interceptors.builtin import BUILTINS

ENTRY_POINT_GROUP = "herald.interceptors"

log = logging.getLogger("herald.interceptors")


class PluginError(Exception):
    """A plugin that cannot be loaded or does not implement the interceptor interface."""


def discover(group: str = ENTRY_POINT_GROUP) -> dict[str, EntryPoint]:
    """The installed plugin entry points by type name (not imported yet)."""
    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=group):
        if ep.name in BUILTINS:
            log.warning("plugin %s = %s ignored: %r is a built-in interceptor",
                        ep.name, ep.value, ep.name)
        elif ep.name in found:
            log.warning("plugin %s = %s ignored: %r is already provided by %s",
                        ep.name, ep.value, ep.name, found[ep.name].value)
        else:
            found[ep.name] = ep
    return found


def check_interceptor_class(obj: object, name: str) -> type[Interceptor]:
    """`obj` if it is a usable interceptor class, else PluginError saying why not."""
    if not (isinstance(obj, type) and issubclass(obj, Interceptor)):
        raise PluginError(f"{name}: {obj!r} is not a subclass of interceptors.Interceptor")
    if obj.on_record is Interceptor.on_record:
        raise PluginError(f"{name}: {obj.__name__} does not implement on_record")
    if not (isinstance(obj.Config, type) and dataclasses.is_dataclass(obj.Config)):
        raise PluginError(f"{name}: {obj.__name__}.Config must be a dataclass")
    if obj.needs not in NEEDS:
        raise PluginError(f"{name}: needs must be one of {', '.join(NEEDS)}")
    if not obj.paths or not set(obj.paths) <= BOTH_PATHS:
        raise PluginError(f"{name}: paths must be a non-empty subset of produce, fetch")
    if obj.default_on_error not in ("reject", "pass", "drop"):
        raise PluginError(f"{name}: default_on_error must be reject, pass or drop")
    return obj


class Registry:
    """Interceptor classes by type name: the built-ins and the discovered plugins."""

    def __init__(
        self,
        builtins: dict[str, type[Interceptor]] | None = None,
        plugins: dict[str, EntryPoint] | None = None,
    ) -> None:
        self._builtins = dict(BUILTINS if builtins is None else builtins)
        self._plugins = discover() if plugins is None else dict(plugins)
        self._loaded: dict[str, type[Interceptor]] = {}

    def names(self) -> list[str]:
        return [*self._builtins, *sorted(set(self._plugins) - set(self._builtins))]

    def get(self, name: str) -> type[Interceptor]:
        """The class for `name`; KeyError if unknown, PluginError if it fails to load."""
        cls = self._builtins.get(name) or self._loaded.get(name)
        if cls is not None:
            return cls
        ep = self._plugins[name]
        try:
            obj = ep.load()
        except Exception as exc:
            raise PluginError(
                f"plugin {name!r} ({ep.value}) failed to load: {type(exc).__name__}: {exc}"
            ) from exc
        cls = self._loaded[name] = check_interceptor_class(obj, f"plugin {name!r} ({ep.value})")
        return cls
