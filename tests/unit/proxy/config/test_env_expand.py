"""`${NAME}` expansion in `instance.id` and `listen.advertised_host` (the expansion itself:
tests/unit/configuration/test_env_expand.py), and `reload.watch_s`."""

from __future__ import annotations

import pytest

from configuration import ConfigError
from proxy.config.proxy_yaml import parse_config

BASE = {"upstream": {"bootstrap": "k:9092"}, "listen": {"bootstrap": "127.0.0.1:19092"}}


def test_instance_id_and_advertised_host_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("POD_NAME", "web-7")
    monkeypatch.setenv("POD_NAMESPACE", "shop")
    monkeypatch.setenv("NODE_NAME", "node-a")
    monkeypatch.setenv("POD_IP", "10.1.2.3")
    config = parse_config({
        **BASE,
        "listen": {"bootstrap": "0.0.0.0:19092", "advertised_host": "${POD_IP}"},
        "instance": {"id": "${POD_NAMESPACE}/${POD_NAME}@${NODE_NAME}"},
    })
    assert config.instance_id == "shop/web-7@node-a"
    assert config.listen.advertised_host == "10.1.2.3"


def test_other_keys_are_not_expanded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOPIC", "orders")
    config = parse_config({**BASE, "interceptors": {"produce": [
        {"type": "insert_header", "header": "h", "value": "${TOPIC}"}]}})
    assert config.interceptors["produce"][0]["value"] == "${TOPIC}"


def test_defaults_random_instance_id_and_no_watching() -> None:
    config = parse_config(BASE)
    assert config.instance_id is None
    assert config.reload_watch_s == 0


@pytest.mark.parametrize("section, message", [
    ({"instance": {"id": "${NOPE_NOT_SET_X}"}},
     "instance.id: environment variable NOPE_NOT_SET_X is not set"),
    ({"instance": {"id": 7}}, "instance.id: expected a non-empty string"),
    ({"instance": {"name": "x"}}, "instance.name: unknown key"),
    ({"listen": {"bootstrap": "0.0.0.0:1", "advertised_host": "${NOPE_NOT_SET_X}"}},
     "listen.advertised_host: environment variable NOPE_NOT_SET_X is not set"),
    ({"reload": {"watch_s": -1}}, "reload.watch_s: must be >= 0"),
    ({"reload": {"watch_s": "often"}}, "reload.watch_s: expected float"),
])
def test_bad_values_name_their_path(section: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({**BASE, **section})
    assert str(err.value).startswith(message)


def test_a_reference_to_an_empty_variable_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMPTY", "")
    with pytest.raises(ConfigError, match=r"instance.id: '\$\{EMPTY\}' expands to an empty"):
        parse_config({**BASE, "instance": {"id": "${EMPTY}"}})
