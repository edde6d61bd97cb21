from pathlib import Path

import pytest
import yaml

from proxy.config.proxy_yaml import ConfigError, HostPort, load_config, parse_config

REPO = Path(__file__).resolve().parents[2]


def base() -> dict:
    return {
        "upstream": {"bootstrap": "127.0.0.1:9092"},
        "listen": {"bootstrap": "0.0.0.0:19092", "broker_port_base": 19100},
    }


def test_default_proxy_yaml_is_valid() -> None:
    config = load_config(REPO / "proxy.yaml")
    assert config.upstream.bootstrap == [HostPort("127.0.0.1", 9092)]
    assert config.listen.broker_port_base == 19100
    assert config.limits.max_frame_bytes == 100 * 1024 * 1024
    assert config.logging.level == "warning"


def test_bootstrap_accepts_a_list_or_comma_separated() -> None:
    doc = base()
    doc["upstream"]["bootstrap"] = "a:1,b:2"
    assert parse_config(doc).upstream.bootstrap == [HostPort("a", 1), HostPort("b", 2)]
    doc["upstream"]["bootstrap"] = ["a:1", "[::1]:3"]
    assert parse_config(doc).upstream.bootstrap == [HostPort("a", 1), HostPort("::1", 3)]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("upstream"), r"^upstream: required$"),
        (lambda d: d["upstream"].pop("bootstrap"), r"^upstream\.bootstrap: required$"),
        (lambda d: d["listen"].update(bootstrap="nohost"), r"^listen\.bootstrap: expected HOST"),
        (lambda d: d["listen"].update(broker_port_base="x"),
         r"^listen\.broker_port_base: expected int"),
        (lambda d: d["listen"].update(broker_port_base=70000),
         r"^listen\.broker_port_base: must be <= 65535"),
        (lambda d: d.update(limits={"max_frame_bytes": 10}),
         r"^limits\.max_frame_bytes: must be >= 1024"),
        (lambda d: d.update(limits={"max_in_flight": True}), r"^limits\.max_in_flight: expected"),
        (lambda d: d.update(logging={"level": "loud"}), r"^logging\.level: expected one of"),
        (lambda d: d["listen"].update(colour="blue"), r"^listen\.colour: unknown key$"),
        (lambda d: d.update(extra=1), r"^extra: unknown key$"),
        (lambda d: d.update(interceptors=[1]), r"^interceptors: expected a mapping$"),
    ],
)
def test_errors_name_the_yaml_path(mutate, message: str) -> None:  # noqa: ANN001
    doc = base()
    mutate(doc)
    with pytest.raises(ConfigError, match=message):
        parse_config(doc)


def test_unreadable_and_invalid_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("upstream: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(base()))
    assert load_config(good).source == good
