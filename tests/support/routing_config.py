"""A proxy.yaml with routing rules, parsed as Herald parses it, and the error a bad one gives."""

from __future__ import annotations

import pytest

from configuration import ConfigError
from proxy.config.proxy_yaml import parse_config

BASE = {"upstream": {"bootstrap": "127.0.0.1:9092"},
        "listen": {"bootstrap": "127.0.0.1:19092"}}


def config(rules: list, clusters: dict | None = None, **routing: object) -> object:
    data = dict(BASE, clusters=clusters or {"eu": {"bootstrap": "10.0.0.1:9092"}},
                routing={"rules": rules, **routing})
    return parse_config(data)


def error(rules: list, clusters: dict | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        config(rules, clusters)
    return str(info.value)
