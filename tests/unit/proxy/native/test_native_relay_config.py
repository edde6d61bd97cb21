"""`performance.native_relay` and the table of what the native relay may pass."""

from __future__ import annotations

import pytest
import yaml

from configuration import ConfigError
from protocol.api_keys import ApiKey
from proxy.config.proxy_yaml import parse_config
from proxy.filters.address_rewrite import AddressRewriter
from proxy.filters.api_versions import ApiVersionsNegotiator
from proxy.filters.chain import Filter, FilterChain
from proxy.native import path_choice
from proxy.native import relay as native_relay
from proxy.upstream.brokers import BrokerDirectory

BASE = {"upstream": {"bootstrap": "127.0.0.1:9092"}, "listen": {"bootstrap": "127.0.0.1:0"}}


def parse(text: str):  # noqa: ANN201
    return parse_config({**BASE, "performance": yaml.safe_load(text)})


def test_native_relay_values() -> None:
    assert parse_config(BASE).native_relay == "auto"
    assert parse("native_relay: off").native_relay == "off"  # YAML reads a bare off as false
    assert parse("native_relay: auto").native_relay == "auto"
    with pytest.raises(ConfigError, match=r"^performance\.native_relay: expected off or auto"):
        parse("native_relay: on")
    with pytest.raises(ConfigError, match=r"^performance\.relay: unknown key"):
        parse("relay: auto")


class _ProduceReader(Filter):
    name = "reader"

    def wants_request(self, api_key: int, version: int) -> bool:
        return api_key == ApiKey.PRODUCE


def _at(table: bytes, api: int, version: int) -> int:
    return table[api * native_relay.MAX_VERSION + version]


def test_passable_table_follows_the_chain() -> None:
    rewriter = AddressRewriter(BrokerDirectory(parse_config(BASE).listen))
    table = path_choice.passable_table(FilterChain([ApiVersionsNegotiator(), rewriter]))
    assert _at(table, ApiKey.API_VERSIONS, 3) == path_choice.PYTHON
    assert _at(table, ApiKey.METADATA, 12) == path_choice.PYTHON
    assert _at(table, ApiKey.PRODUCE, 9) == path_choice.PASS
    assert _at(table, ApiKey.PRODUCE, 11) == path_choice.UNLESS_TAGGED
    assert _at(table, ApiKey.FETCH, 15) == path_choice.PASS
    assert _at(table, ApiKey.FETCH, 17) == path_choice.UNLESS_TAGGED
    assert _at(table, ApiKey.FETCH, 18) == path_choice.UNLESS_TAGGED
    assert _at(table, ApiKey.PRODUCE, 14) == path_choice.PYTHON  # a layout it does not know
    assert _at(table, ApiKey.HEARTBEAT, 4) == path_choice.PASS

    table = path_choice.passable_table(FilterChain([rewriter, _ProduceReader()]))
    assert _at(table, ApiKey.PRODUCE, 9) == path_choice.PYTHON
    assert _at(table, ApiKey.PRODUCE, 11) == path_choice.PYTHON
    assert _at(table, ApiKey.FETCH, 17) == path_choice.UNLESS_TAGGED
