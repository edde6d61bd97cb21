"""`${NAME}` in the few config values that differ from pod to pod.

In Kubernetes the pod's name, namespace and node reach a container only as environment
variables (the downward API), while the config file comes from a ConfigMap shared by every
replica. Expanding `${NAME}` in a short, documented list of keys (`instance.id`,
`listen.advertised_host`) lets one file serve them all; everywhere else a `$` is just a
character, so no value can change meaning by accident. `$$` is a literal `$`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from configuration.node import Node

_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$\$|\$\{[^}]*\}?")


class UnsetVariable(ValueError):
    """A `${NAME}` names a variable that is not set, or is not a valid reference."""


def expand_env(text: str, environ: Mapping[str, str] | None = None) -> str:
    """`text` with every `${NAME}` replaced by that environment variable."""
    env = os.environ if environ is None else environ

    def replace(match: re.Match[str]) -> str:
        whole, name = match.group(0), match.group(1)
        if whole == "$$":
            return "$"
        if name is None:
            raise UnsetVariable(f"{whole!r} is not a valid reference (expected ${{NAME}})")
        value = env.get(name)
        if value is None:
            raise UnsetVariable(f"environment variable {name} is not set")
        return value

    return _REFERENCE.sub(replace, text)


def expanded(
    node: Node, key: str, default: str | None, environ: Mapping[str, str] | None
) -> Any:
    """`key` of `node`, a string in which `${NAME}` is replaced by the environment variable
    (`environ`, by default this process's); an unset variable or an empty result is recorded
    as an error naming the key, and `default` used."""
    text = node.string(key)
    if text is None:
        return default
    try:
        value = expand_env(text, environ)
    except UnsetVariable as exc:
        node.errors.add(f"{node.key_path(key)}: {exc}")
        return default
    if not value:
        node.errors.add(f"{node.key_path(key)}: {text!r} expands to an empty string")
        return default
    return value
